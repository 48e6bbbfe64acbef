"""The training loop: one custom, ``tf.distribute``-aware loop for every launcher and strategy.

It mirrors the original ``resnet_main.py``'s explicit loop (momentum SGD, a step-keyed learning
rate, ``cost = xent + decay``, periodic evaluation and checkpoints) in TF2 terms:
``strategy.distribute_datasets_from_function`` feeds each replica, ``strategy.run`` runs the step,
``tf.nn.compute_average_loss`` / ``scale_regularization_loss`` make the loss the global batch
mean whatever the number of replicas, and the Keras optimizer all-reduces the gradients. Keras 3's
``model.fit`` is not used: it fails under multi-worker MirroredStrategy (keras-team/keras#20585).

Steps run in chunks inside one ``tf.function`` (a ``tf.range`` loop), so the host only wakes up at
the next event: a progress line, an evaluation, a checkpoint, or the end.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import math
import os
import shutil
import tempfile
import time
from collections.abc import Callable

import keras
import numpy as np
import tensorflow as tf

from resnet_noBN import preemption
from resnet_noBN.distribute import is_parameter_server
from resnet_noBN.model import weight_decay_loss
from resnet_noBN.run_log import RunLog


class CheckpointError(RuntimeError):
    """No checkpoint of ``model_dir`` can be restored; one line naming them."""


class TrainingDiverged(RuntimeError):
    """The loss became NaN or infinite; the latest checkpoint is the last good one."""


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    """The recipe of arXiv:1611.04231 Section 4 (the original ``resnet_main.py``); each field is
    a flag of the launchers, its ``help`` the flag's."""

    train_steps: int = dataclasses.field(
        default=60_000, metadata={"help": "Number of updates to train for."}
    )
    batch_size: int = dataclasses.field(
        default=128,
        metadata={"help": "GLOBAL batch size, split evenly over all replicas of all workers."},
    )
    learning_rate: float = dataclasses.field(
        default=0.05, metadata={"help": "Initial learning rate."}
    )
    lr_boundaries: tuple[int, ...] = dataclasses.field(
        default=(30_000, 50_000),
        metadata={"help": "Steps at which the learning rate is multiplied by --lr_decay."},
    )
    lr_decay: float = dataclasses.field(
        default=0.1, metadata={"help": "Learning-rate factor at each boundary."}
    )
    momentum: float = dataclasses.field(default=0.9, metadata={"help": "Momentum of SGD."})
    weight_decay: float = dataclasses.field(
        default=1e-4,
        metadata={"help": "Decay rate r of the loss term r * sum ||W||^2 / 2 over conv kernels."},
    )
    eval_every: int = dataclasses.field(
        default=2_000,
        metadata={
            "help": "Evaluate on the whole test split every this many steps (and at the end)."
        },
    )
    checkpoint_every: int = dataclasses.field(
        default=1_000,
        metadata={"help": "Write a checkpoint every this many steps (and at the end)."},
    )
    log_every: int = dataclasses.field(
        default=100, metadata={"help": "Print progress every this many steps."}
    )
    max_checkpoints: int = dataclasses.field(default=5, metadata={"help": "Checkpoints kept."})
    eval_batch_size: int = dataclasses.field(
        default=500, metadata={"help": "GLOBAL batch size of the evaluation."}
    )

    def validate(self) -> None:
        """Raise ValueError (one line, naming the flag) for an impossible recipe."""
        for name in (
            "train_steps",
            "batch_size",
            "eval_every",
            "checkpoint_every",
            "log_every",
            "max_checkpoints",
            "eval_batch_size",
        ):
            if getattr(self, name) <= 0:
                raise ValueError(f"--{name} must be positive, got {getattr(self, name)}")
        if not self.learning_rate > 0:
            raise ValueError(f"--learning_rate must be positive, got {self.learning_rate}")
        if not 0 <= self.momentum < 1:
            raise ValueError(f"--momentum must be in [0, 1), got {self.momentum}")
        if self.weight_decay < 0:
            raise ValueError(f"--weight_decay must be >= 0, got {self.weight_decay}")
        if not 0 < self.lr_decay <= 1:
            raise ValueError(f"--lr_decay must be in (0, 1], got {self.lr_decay}")
        bounds = self.lr_boundaries
        if any(b <= 0 for b in bounds) or any(b >= a for b, a in zip(bounds, bounds[1:])):
            raise ValueError(
                f"--lr_boundaries must be positive and strictly increasing, got "
                f"{','.join(map(str, bounds))}"
            )


def learning_rate_schedule(cfg: TrainConfig) -> keras.optimizers.schedules.LearningRateSchedule:
    """lr(step) = learning_rate * lr_decay^(number of boundaries <= step).

    As the original ``_LearningRateSetterHook`` (``if train_step < 40000: 0.1 ...``): the update
    made at step 30,000 already uses the decayed rate. Keras' ``PiecewiseConstantDecay`` switches
    after ``step > boundary``, hence the boundaries minus one. The optimizer evaluates it at its
    ``iterations`` counter, which the checkpoint saves, so a resumed run continues the schedule.
    """
    values = [cfg.learning_rate * cfg.lr_decay**i for i in range(len(cfg.lr_boundaries) + 1)]
    return keras.optimizers.schedules.PiecewiseConstantDecay(
        [b - 1 for b in cfg.lr_boundaries], values
    )


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


# Steps per compiled call are chosen so that a call lasts about this long: a preemption signal is
# acted on between calls (after the current call and one more), well inside SLURM's and
# Kubernetes' default 30 s between SIGTERM and SIGKILL, while a fast accelerator still runs up
# to a whole progress interval per call.
SECONDS_PER_CALL = 5.0


class Trainer:
    """Model, optimizer, checkpoints and the compiled train/eval steps under one strategy.

    ``build_model`` is called inside ``strategy.scope()``. ``schedule`` replaces the CIFAR
    step schedule (ImageNet decays exponentially); ``top5`` adds the top-5 error to evaluations.
    ``jit_compile`` compiles each replica's step with XLA (the all-reduce stays outside: XLA
    cannot compile collectives on a CPU). ``model_dir`` receives checkpoints; when ``is_chief``
    is False (a non-chief worker of a multi-worker job) checkpoints go to a scratch folder, as
    TF's multi-worker guide prescribes, and no run log is written. The scratch folder is named
    for the model_dir and the task, so a killed worker's is reused (emptied) by its next run
    rather than left to accumulate, and :meth:`close` removes it. :func:`trainer_for` picks
    :class:`ParameterServerTrainer` under parameter servers.
    """

    def __init__(
        self,
        strategy: tf.distribute.Strategy,
        build_model: Callable[[], keras.Model],
        cfg: TrainConfig,
        model_dir: str,
        is_chief: bool = True,
        title: str = "",
        schedule: keras.optimizers.schedules.LearningRateSchedule | None = None,
        top5: bool = False,
        jit_compile: bool = False,
    ):
        self.strategy, self.cfg, self.model_dir, self.is_chief = strategy, cfg, model_dir, is_chief
        self.top5 = top5
        self.restored_from = None  # the checkpoint restore() resumed from
        self._saved_step = None  # the step of the checkpoint save() wrote last
        with strategy.scope():
            self.model = build_model()
            self.optimizer = keras.optimizers.SGD(
                learning_rate=schedule or learning_rate_schedule(cfg), momentum=cfg.momentum
            )
            self.optimizer.build(self.model.trainable_variables)
        self.checkpoint = tf.train.Checkpoint(model=self.model, optimizer=self.optimizer)
        self._checkpoint_dir = model_dir if is_chief else _scratch_dir(model_dir, strategy)
        self.manager = tf.train.CheckpointManager(
            self.checkpoint, self._checkpoint_dir, max_to_keep=cfg.max_checkpoints
        )
        self.log = RunLog(model_dir, title, enabled=is_chief)
        self._loss_and_grads = (
            tf.function(self._loss_and_grads_fn, jit_compile=True)
            if jit_compile
            else self._loss_and_grads_fn
        )
        self._run_steps = tf.function(self._run_steps_fn)
        self._eval_batch = tf.function(self._eval_batch_fn)
        self._mean_over_replicas = tf.function(
            lambda value: strategy.reduce(
                tf.distribute.ReduceOp.MEAN, strategy.run(tf.identity, args=(value,)), axis=None
            )
        )

    # ----------------------------------------------------------------- compiled steps
    @property
    def step(self) -> int:
        """The global step: the number of updates applied (the optimizer's counter)."""
        return int(self.optimizer.iterations.numpy())

    def _loss_and_grads_fn(self, images, labels):
        """Forward and backward pass on this replica's share of the global batch."""
        with tf.GradientTape() as tape:
            logits = tf.cast(self.model(images, training=True), tf.float32)
            per_example = keras.losses.sparse_categorical_crossentropy(
                labels, logits, from_logits=True
            )
            xent = tf.nn.compute_average_loss(per_example, global_batch_size=self.cfg.batch_size)
            decay = tf.nn.scale_regularization_loss(
                weight_decay_loss(self.model, self.cfg.weight_decay)
            )
            loss = xent + decay
        grads = tape.gradient(loss, self.model.trainable_variables)
        correct = tf.reduce_sum(
            tf.cast(tf.equal(tf.argmax(logits, axis=-1, output_type=tf.int32), labels), tf.float32)
        )
        return tf.stack([loss, correct, tf.cast(tf.size(labels), tf.float32)]), grads

    def _replica_step(self, images, labels):
        """One update: gradients (XLA-compiled if asked), then the all-reducing optimizer."""
        totals, grads = self._loss_and_grads(images, labels)
        self.optimizer.apply_gradients(zip(grads, self.model.trainable_variables))
        return totals

    def _run_steps_fn(self, iterator, num_steps):
        """``num_steps`` updates in a graph loop: [sum of step losses, correct, examples]."""
        totals = tf.zeros([3])
        for _ in tf.range(num_steps):
            per_replica = self.strategy.run(self._replica_step, args=next(iterator))
            totals += self.strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)
        return totals

    def _replica_eval(self, images, labels):
        """[top-1 correct, (top-5 correct,) examples] on this replica's share of a batch.

        A prediction is the arg max of the logits, ties going to the lower class index (as the
        original's ``tf.argmax``); ``tf.math.in_top_k`` would count every tied class as
        predicted, so a network whose logits are all equal (a plain chain whose signal vanished)
        would score 100%. The last, partial batch of a split leaves some replicas an empty share,
        and TF 2.21's oneDNN conv2d returns a wrong shape for an empty batch: such a share counts
        zeros.
        """

        def count():
            logits = tf.cast(self.model(images, training=False), tf.float32)
            ks = (1, 5) if self.top5 else (1,)
            top = tf.math.top_k(logits, k=ks[-1]).indices  # equal values: lower index first
            hits = [tf.reduce_any(tf.equal(top[:, :k], labels[:, None]), axis=1) for k in ks]
            return tf.stack(
                [tf.reduce_sum(tf.cast(h, tf.int64)) for h in hits]
                + [tf.size(labels, out_type=tf.int64)]
            )

        return tf.cond(
            tf.size(labels) > 0, count, lambda: tf.zeros([3 if self.top5 else 2], tf.int64)
        )

    def _eval_batch_fn(self, batch):
        """:meth:`_replica_eval` of one distributed batch, summed over replicas."""
        per_replica = self.strategy.run(self._replica_eval, args=batch)
        return self.strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)

    # ----------------------------------------------------------------- public API
    def restore(self, print_fn=print) -> int:
        """Resume from the newest checkpoint in ``model_dir`` that can be restored; returns the
        step (0: none). A checkpoint that cannot be read (a truncated or half-written file) is
        named in one line and the one before it is tried; ``restored_from`` says which one.
        CheckpointError when there are checkpoints and none of them can be restored."""
        state = tf.train.get_checkpoint_state(self.model_dir)
        paths = list(state.all_model_checkpoint_paths) if state else []
        for path in reversed(paths):
            try:
                self.checkpoint.restore(path).assert_existing_objects_matched()
            except (tf.errors.OpError, ValueError, IndexError) as e:
                print_fn(
                    f"warning: checkpoint {path} cannot be restored ("
                    f"{type(e).__name__}: {str(e).strip().splitlines()[0][:200]}); "
                    "trying the one before it"
                )
                continue
            self.restored_from = path
            return self.step
        if paths:
            raise CheckpointError(
                f"no checkpoint in {self.model_dir} can be restored (tried "
                f"{', '.join(paths)}); move them away to start afresh"
            )
        return self.step

    def evaluate(self, dataset_fn: Callable) -> dict:
        """Top-1 (and top-5) error on the whole split ``dataset_fn`` yields, in one pass."""
        totals = np.zeros(3 if self.top5 else 2, np.int64)
        for batch in self.strategy.distribute_datasets_from_function(dataset_fn):
            totals += self._eval_batch(batch).numpy()
        return _errors(totals, self.top5)

    def distribute(self, dataset_fn: Callable):
        """An iterator over the distributed dataset that ``dataset_fn(input_context)`` builds."""
        return iter(self.strategy.distribute_datasets_from_function(dataset_fn))

    def run_steps(self, iterator, num_steps: int) -> tuple[float, float, float]:
        """``num_steps`` updates in one compiled call: (sum of losses, correct, examples)."""
        loss_sum, correct, count = (
            float(v) for v in self._run_steps(iterator, tf.constant(num_steps)).numpy()
        )
        return loss_sum, correct, count

    def save(self) -> None:
        """Write a checkpoint at the current step (every worker must call it: it is collective).

        The data files are written under a temporary name and renamed, and the ``checkpoint``
        index is replaced atomically after them, so a kill during a save leaves the previous
        checkpoint as the latest."""
        self.manager.save(checkpoint_number=self.step)
        self._saved_step = self.step

    def train(self, train_fn: Callable, eval_fn: Callable, print_fn=print) -> dict:
        """Train to ``cfg.train_steps`` from wherever the checkpoint left off; returns a summary.

        ``train_fn(input_context, start_step=s)`` builds the training batches from the batch of
        step s on (the CIFAR pipeline's order is a function of (seed, step), so a resumed run
        sees what the uninterrupted run saw). ``eval_fn(input_context)``: the test split.
        Events (progress line, evaluation, checkpoint) fire when the step is a multiple of their
        interval, and at the end. Raises TrainingDiverged when the loss is not finite (nothing
        is saved after that: the latest checkpoint is the last good one), and Preempted after
        saving a checkpoint when SIGTERM or SIGINT arrives (:func:`preemption.guard`).
        """
        cfg = self.cfg
        step = self.restore(print_fn)
        if step:
            print_fn(f"resumed from {self.restored_from} at step {step}")
        iterator = self.distribute(functools.partial(train_fn, start_step=step))
        run_start = time.perf_counter()
        throughput = _Throughput()
        last_eval = None
        steps_per_call = 1  # the first call also traces and compiles
        with preemption.guard(
            self.strategy,
            self._checkpoint_dir,
            self._save_if_new,
            self._preempted_message,
            print_fn,
        ) as handler:
            while step < cfg.train_steps:
                num_steps = (
                    min(
                        cfg.train_steps,
                        step + steps_per_call,
                        *(
                            _next_multiple(step, every)
                            for every in (cfg.log_every, cfg.eval_every, cfg.checkpoint_every)
                        ),
                    )
                    - step
                )
                t0 = time.perf_counter()
                loss_sum, correct, count = handler.run(self.run_steps, iterator, num_steps)
                seconds = time.perf_counter() - t0
                step = self.step
                scalars = self._scalars(step, num_steps, loss_sum, correct, count, seconds)
                throughput.add(num_steps * cfg.batch_size, seconds)
                steps_per_call = self._steps_per_call(num_steps, seconds)
                done = step >= cfg.train_steps
                if step % cfg.log_every == 0 or done:
                    print_fn(
                        f"step {step:>7d}  loss {scalars['loss']:.4f}  precision "
                        f"{scalars['precision']:.4f}  lr {scalars['learning_rate']:.4g}  "
                        f"{scalars['images_per_sec']:.1f} images/s"
                    )
                    self.log.train(step, scalars)
                if step % cfg.checkpoint_every == 0 or done:
                    self.save()
                if step % cfg.eval_every == 0 or done:
                    last_eval = self._evaluate_and_log(eval_fn, step, scalars, print_fn)
        if last_eval is None:  # nothing left to train: report the restored model
            last_eval = self._evaluate_and_log(eval_fn, step, {}, print_fn)
        return self._summary(last_eval, time.perf_counter() - run_start, throughput)

    def _scalars(self, step, num_steps, loss_sum, correct, count, seconds) -> dict:
        """The progress scalars of one call; TrainingDiverged when the loss is not finite."""
        loss = loss_sum / num_steps
        if not math.isfinite(loss):
            raise TrainingDiverged(
                f"loss is {loss} at step {step}: training diverged; the latest checkpoint "
                f"({tf.train.latest_checkpoint(self.model_dir) or 'none yet'}) is the last "
                "good one; lower --learning_rate or check the input data"
            )
        return {
            "loss": loss,
            "precision": correct / count,
            "learning_rate": float(self.optimizer.learning_rate.numpy()),
            "images_per_sec": num_steps * self.cfg.batch_size / seconds,
        }

    def _steps_per_call(self, num_steps: int, seconds: float) -> int:
        """The next call's length in steps, about :data:`SECONDS_PER_CALL` at the last call's
        speed, as every worker agrees (:meth:`_agreed`)."""
        return self._agreed(max(1, math.floor(SECONDS_PER_CALL * num_steps / seconds)))

    def _agreed(self, steps: int) -> int:
        """The mean of every worker's ``steps``, so all workers of a synchronous job run the
        same calls."""
        return max(1, round(float(self._mean_over_replicas(tf.constant(float(steps))))))

    def _preempted_message(self) -> str:
        return (
            f"preempted at step {self.step}: a checkpoint of that step is in "
            f"{self.model_dir}; rerun the same command to resume"
        )

    def _save_if_new(self) -> None:
        """:meth:`save`, unless the latest checkpoint is already of this step."""
        if self._saved_step != self.step:
            self.save()

    def _evaluate_and_log(self, eval_fn, step, scalars, print_fn) -> dict:
        result = self.evaluate(eval_fn)
        record = {
            "step": step,
            **result,
            **{f"train_{k}" if k in ("loss", "precision") else k: v for k, v in scalars.items()},
        }
        print_fn(
            f"step {step:>7d}  test error {result['test_error']:.4f} "
            f"({result['test_examples']} images)"
        )
        self.log.evaluation(record)
        return record

    def _summary(self, last_eval: dict, wall_seconds: float, throughput: _Throughput) -> dict:
        """What :meth:`train` returns (the launchers' one line of JSON)."""
        best = self.log.best_test_error()
        return {
            "final_step": self.step,
            **{k: v for k, v in last_eval.items() if k.startswith("test_")},
            "best_test_error_over_evaluations": last_eval["test_error"] if best is None else best,
            "weights_sha256": self.weights_digest(),
            "wall_time_s": round(wall_seconds, 3),
            "images_per_sec": throughput.rate(),
        }

    def weights_digest(self) -> str:
        """SHA-256 of every weight's bytes: equal on all workers of a synchronous job."""
        digest = hashlib.sha256()
        for weight in self.model.weights:
            digest.update(np.ascontiguousarray(weight.numpy()).tobytes())
        return digest.hexdigest()[:16]

    def close(self) -> None:
        """Remove a non-chief worker's scratch checkpoints."""
        if not self.is_chief:
            shutil.rmtree(self._checkpoint_dir, ignore_errors=True)


class ParameterServerTrainer(Trainer):
    """Asynchronous training under ``ParameterServerStrategy``: the chief schedules one-step
    closures on whichever worker is free (each advances the shared step counter), and evaluates
    the parameter servers' variables itself. Only the chief runs this loop."""

    def __init__(self, strategy, *args, **kwargs):
        super().__init__(strategy, *args, **kwargs)
        self.coordinator = tf.distribute.experimental.coordinator.ClusterCoordinator(strategy)
        self._local_eval = tf.function(self._replica_eval)

    def evaluate(self, dataset_fn: Callable) -> dict:
        totals = np.zeros(3 if self.top5 else 2, np.int64)
        for images, labels in dataset_fn(tf.distribute.InputContext()):
            totals += self._local_eval(images, labels).numpy()
        return _errors(totals, self.top5)

    def distribute(self, dataset_fn: Callable):
        """One input pipeline per worker."""
        return iter(
            self.coordinator.create_per_worker_dataset(
                self.strategy.distribute_datasets_from_function(dataset_fn)
            )
        )

    def run_steps(self, iterator, num_steps: int) -> tuple[float, float, float]:
        results = [
            self.coordinator.schedule(self._run_steps, args=(iterator, tf.constant(1)))
            for _ in range(num_steps)
        ]
        self.coordinator.join()
        loss_sum, correct, count = (float(v) for v in np.sum([r.fetch() for r in results], 0))
        return loss_sum, correct, count

    def _agreed(self, steps: int) -> int:
        return steps  # only the chief runs the loop


def trainer_for(strategy: tf.distribute.Strategy, *args, **kwargs) -> Trainer:
    """The :class:`Trainer` for ``strategy`` (same arguments)."""
    cls = ParameterServerTrainer if is_parameter_server(strategy) else Trainer
    return cls(strategy, *args, **kwargs)


class _Throughput:
    """Images trained and seconds spent in training calls (evaluations and saves excluded)."""

    def __init__(self):
        self.images, self.seconds = 0, 0.0

    def add(self, images: int, seconds: float) -> None:
        self.images += images
        self.seconds += seconds

    def rate(self) -> float | None:
        return round(self.images / self.seconds, 2) if self.seconds else None


def _errors(totals: np.ndarray, top5: bool) -> dict:
    """Evaluation counts [top-1 correct, (top-5 correct,) examples] as error rates."""
    correct, count = int(totals[0]), int(totals[-1])
    result = {
        "test_error": 1.0 - correct / count,
        "test_precision": correct / count,
        "test_examples": count,
    }
    if top5:
        result["test_top5_error"] = 1.0 - int(totals[1]) / count
    return result


def scratch_dir_name(model_dir: str, task: str) -> str:
    """The name of task ``task``'s (e.g. "worker1") scratch checkpoint folder in $TMPDIR: one
    per (model_dir, task), so a killed worker's is the one its next run reuses."""
    key = hashlib.sha256(os.path.abspath(model_dir).encode()).hexdigest()[:12]
    return f"resnet_noBN-{task}-{key}"


def _scratch_dir(model_dir: str, strategy: tf.distribute.Strategy) -> str:
    """A non-chief worker's checkpoint folder (:func:`scratch_dir_name`), emptied now."""
    resolver = strategy.cluster_resolver
    task = f"{resolver.task_type}{resolver.task_id}" if resolver else "worker"
    path = os.path.join(tempfile.gettempdir(), scratch_dir_name(model_dir, task))
    shutil.rmtree(path, ignore_errors=True)
    return path


def _next_multiple(step: int, interval: int) -> int:
    return (step // interval + 1) * interval
