"""The paper's recipe, for every Keras backend (arXiv:1611.04231, Section 4; the original
``resnet_main.py``): momentum SGD, a step-keyed learning rate, and the objective

    cost = softmax cross-entropy averaged over the GLOBAL batch + r · Σ‖W‖²/2 over conv kernels.

Every training loop (``training`` on TensorFlow, ``jax_training`` on JAX, ``torch_training``
on PyTorch) takes these, so the recipe is written once. No TensorFlow here: only Keras and
``keras.ops``.

The recipe's config, :class:`~resnet_noBN.configs.recipe_config.TrainConfig`, is declared
apart, without Keras (``configs.recipe_config``). The loss and the optimizer are chosen by name
(``--loss``, ``--optimizer``), defaulting to the paper's; another one is a function, an entry in
``LOSSES`` or ``OPTIMIZERS`` and its name in ``recipe_config``'s: the flag's choices, its check
and every loop follow. An update Keras lacks is an optimizer class written with ``keras.ops``
(:class:`Momentum2016`, the 2016 code's form of momentum), so it too runs on every backend.
"""

from __future__ import annotations

import keras
from keras import ops

from resnet_noBN.configs.recipe_config import TrainConfig


def softmax_cross_entropy(logits, labels, cfg: TrainConfig):
    """Per-example softmax cross-entropy (the paper's), against labels smoothed by
    ``cfg.label_smoothing`` (0: none; s: 1 - s on the label, s spread over all classes)."""
    if not cfg.label_smoothing:
        return keras.losses.sparse_categorical_crossentropy(labels, logits, from_logits=True)
    targets = ops.one_hot(ops.cast(labels, "int32"), ops.shape(logits)[-1])
    return keras.losses.categorical_crossentropy(
        targets, logits, from_logits=True, label_smoothing=cfg.label_smoothing
    )


def sigmoid_cross_entropy(logits, labels, cfg: TrainConfig):
    """Per-example sum over the classes of the binary cross-entropy of each logit against the
    (smoothed) one-hot label: every class its own yes/no (big_vision's ``sigmoid_xent``)."""
    targets = ops.one_hot(ops.cast(labels, "int32"), ops.shape(logits)[-1])
    targets = targets * (1 - cfg.label_smoothing) + cfg.label_smoothing / 2
    return ops.sum(
        keras.losses.binary_crossentropy(targets[..., None], logits[..., None], from_logits=True),
        axis=-1,
    )


@keras.saving.register_keras_serializable(package="resnet_noBN")
class Momentum2016(keras.optimizers.Optimizer):
    """SGD with momentum in the form of the 2016 tensorflow/models ``resnet_main.py`` that the
    paper forked (arXiv:1611.04231, Section 4: momentum 0.9): its ``tf.train.MomentumOptimizer``,
    whose accumulator holds gradients and takes the learning rate when it is used::

        a = momentum * a + g
        w = w - learning_rate * a

    At a constant rate this is Keras' ``SGD(momentum=m)`` (v = m v - lr g, w += v: v = -lr a),
    to rounding. Where the rate drops the two part: here the whole step shrinks with the rate at
    once, while Keras' velocity, in the old rate's units, decays by m a step (a constant
    gradient at its steady state, m = 0.9: the update after a tenfold drop is 0.1 of the one
    before it here, 0.91 of it in Keras' form).

    Written with ``keras.ops`` once, for every backend (TensorFlow's ``apply_gradients`` under a
    strategy, JAX's ``stateless_apply``, PyTorch's ``apply``); mirrors Keras' ``SGD``
    (``keras/src/optimizers/sgd.py``): one accumulator per variable, zero at the start, made by
    :meth:`build` (a momentum of 0 keeps them too: a = g, plain SGD), so checkpoints hold them.

    Args:
        learning_rate: a float, a ``LearningRateSchedule`` or a callable, as Keras' optimizers.
        momentum: the accumulator's decay m, a float in [0, 1].
        **kwargs: the keyword arguments of ``keras.optimizers.Optimizer`` (name, clipnorm, ...).
    """

    def __init__(self, learning_rate=0.01, momentum=0.9, name=None, **kwargs):
        super().__init__(learning_rate=learning_rate, name=name, **kwargs)
        if not isinstance(momentum, float) or momentum < 0 or momentum > 1:
            raise ValueError("`momentum` must be a float between [0, 1].")
        self.momentum = momentum

    def build(self, variables):
        """One accumulator ``<variable>_accumulator`` per variable, zeros of its shape and dtype."""
        if self.built:
            return
        super().build(variables)
        self.accumulators = self.add_optimizer_variables(variables, "accumulator")

    def update_step(self, gradient, variable, learning_rate):
        """a = m a + g; w -= lr a (``tf.train.MomentumOptimizer``'s ApplyMomentum)."""
        learning_rate = ops.cast(learning_rate, variable.dtype)
        gradient = ops.cast(gradient, variable.dtype)
        momentum = ops.cast(self.momentum, variable.dtype)
        accumulator = self.accumulators[self._get_variable_index(variable)]
        accumulated = ops.add(ops.multiply(accumulator, momentum), gradient)
        self.assign(accumulator, accumulated)
        self.assign_sub(variable, ops.multiply(accumulated, learning_rate))

    def get_config(self):
        config = super().get_config()
        config.update({"momentum": self.momentum})
        return config


def momentum_sgd(cfg: TrainConfig, schedule) -> keras.optimizers.Optimizer:
    """SGD with momentum ``cfg.momentum`` in Keras' form: v = m v - lr g, w += v (the velocity
    in the rate's units: after a learning-rate drop it shrinks by m a step). The paper's
    optimizer (arXiv:1611.04231, Section 4), the same as the 2016 code's at a constant rate; at
    a drop, see :func:`momentum_2016`."""
    return keras.optimizers.SGD(learning_rate=schedule, momentum=cfg.momentum, name="sgd")


def momentum_2016(cfg: TrainConfig, schedule) -> keras.optimizers.Optimizer:
    """SGD with momentum ``cfg.momentum`` as the 2016 ``resnet_main.py``'s
    ``tf.train.MomentumOptimizer`` (arXiv:1611.04231, Section 4): a = m a + g, w -= lr a, the
    accumulator in gradient units, so a learning-rate drop shrinks the whole step at once
    (:class:`Momentum2016`)."""
    return Momentum2016(learning_rate=schedule, momentum=float(cfg.momentum), name="momentum2016")


def nesterov_sgd(cfg: TrainConfig, schedule) -> keras.optimizers.Optimizer:
    """SGD with Nesterov momentum ``cfg.momentum``."""
    return keras.optimizers.SGD(
        learning_rate=schedule, momentum=cfg.momentum, nesterov=True, name="sgd"
    )


def adam(cfg: TrainConfig, schedule) -> keras.optimizers.Optimizer:
    """Adam (first-moment decay ``cfg.momentum``) on the schedule; the weight decay stays the
    objective's L2 term, as in the paper's recipe."""
    return keras.optimizers.Adam(learning_rate=schedule, beta_1=cfg.momentum, name="adam")


# name (recipe_config.LOSSES) -> fn(logits, labels, cfg): float32 per-example losses [B]
LOSSES = {
    "softmax_cross_entropy": softmax_cross_entropy,
    "sigmoid_cross_entropy": sigmoid_cross_entropy,
}
# name (recipe_config.OPTIMIZERS) -> fn(cfg, schedule): a Keras optimizer, named as Keras names the
# first of its class in a process (a second would be "sgd_1"), so that its variables' paths in a
# checkpoint are the same whatever the process built before it
OPTIMIZERS = {
    "momentum": momentum_sgd,
    "momentum_2016": momentum_2016,
    "nesterov": nesterov_sgd,
    "adam": adam,
}


def learning_rate_schedule(cfg: TrainConfig) -> keras.optimizers.schedules.LearningRateSchedule:
    """lr(step) = learning_rate * lr_decay^(number of boundaries <= step).

    As the original ``_LearningRateSetterHook`` (``if train_step < 40000: 0.1 ...``): the update
    made at step 30,000 already uses the decayed rate. Keras' ``PiecewiseConstantDecay`` switches
    after ``step > boundary``, hence the boundaries minus one. The optimizer evaluates it at its
    ``iterations`` counter, which the checkpoint saves, so a resumed run continues the schedule.
    """
    boundaries = cfg.boundary_steps()
    values = [cfg.learning_rate * cfg.lr_decay**i for i in range(len(boundaries) + 1)]
    if not boundaries:  # a constant rate: PiecewiseConstantDecay needs a boundary, one past any
        # step a run reaches that an int32 holds (JAX counts the steps in int32)
        return keras.optimizers.schedules.PiecewiseConstantDecay([2**31 - 1], values * 2)
    return keras.optimizers.schedules.PiecewiseConstantDecay([b - 1 for b in boundaries], values)


def exponential_learning_rate_schedule(
    batch_size: int,
    train_examples: int,
    learning_rate: float = 0.1,
    decay: float = 0.94,
    epochs_per_decay: float = 2.0,
) -> keras.optimizers.schedules.ExponentialDecay:
    """lr(step) = learning_rate * decay^floor(step / decay_steps): 0.1 x 0.94 every 2 epochs,
    the ImageNet recipe (arXiv:1611.04231, Section 4).

    An epoch is ``train_examples / batch_size`` steps (ImageNet: 1,281,167 / 256 = 5,004.6);
    decay_steps = int(epochs_per_decay * that) as TF-slim's ``train_image_classifier.py``
    (10,009 at 256).
    """
    decay_steps = max(1, int(epochs_per_decay * train_examples / batch_size))
    return keras.optimizers.schedules.ExponentialDecay(
        learning_rate, decay_steps, decay, staircase=True
    )


def make_optimizer(cfg: TrainConfig, schedule=None) -> keras.optimizers.Optimizer:
    """The optimizer ``cfg.optimizer`` names (``OPTIMIZERS``) on ``schedule`` (default:
    :func:`learning_rate_schedule`)."""
    return OPTIMIZERS[cfg.optimizer](cfg, schedule or learning_rate_schedule(cfg))


def objective(logits, labels, decay, cfg: TrainConfig, replicas: int = 1):
    """(loss, parts) of one replica's share of a batch.

    loss = Σ per-example ``cfg.loss`` (``LOSSES``) / the global batch ``cfg.batch_size`` +
    ``decay`` / ``replicas``: summed over the replicas (the all-reduce of the gradients), that is
    the mean loss over the global batch plus the decay once, whatever the number of replicas
    (what TF's ``compute_average_loss`` and ``scale_regularization_loss`` do). ``parts``
    (float32 scalars by name, for the run's health, ``health.METRICS``): ``correct`` (arg max
    hits), ``cross_entropy`` and ``weight_decay`` (each this replica's share: they sum over the
    replicas), ``max_abs_logit`` (the largest |logit|). ``logits`` are cast to float32.
    """
    logits = ops.cast(logits, "float32")
    per_example = LOSSES[cfg.loss](logits, labels, cfg)
    cross_entropy = ops.sum(per_example) / cfg.batch_size
    decay_share = ops.cast(decay, "float32") / replicas
    hits = ops.equal(ops.cast(ops.argmax(logits, axis=-1), "int32"), ops.cast(labels, "int32"))
    parts = {
        "correct": ops.sum(ops.cast(hits, "float32")),
        "cross_entropy": cross_entropy,
        "weight_decay": decay_share,
        "max_abs_logit": ops.max(ops.abs(logits)),
    }
    return cross_entropy + decay_share, parts


def top_classes(logits, top5: bool = False):
    """The predicted class of each example, [B, 1] (int32), or its 5 highest, [B, 5].

    A prediction is the arg max of the logits, ties going to the lower class index (as the
    original's ``tf.argmax``; ``top_k`` puts equal values' lower index first on TensorFlow, JAX
    and PyTorch alike). ``in_top_k`` would count every tied class as predicted, so a network whose
    logits are all equal (a plain chain whose signal vanished) would score 100%.
    """
    _, top = ops.top_k(ops.cast(logits, "float32"), k=5 if top5 else 1)
    return ops.cast(top, "int32")
