"""The TensorFlow training loop: :class:`trainers.loop.TrainLoop` under any ``tf.distribute``
strategy, for every launcher.

It mirrors the original ``resnet_main.py``'s explicit loop (momentum SGD, a step-keyed learning
rate, ``cost = xent + decay``, periodic evaluation and checkpoints; the recipe is
:mod:`trainers.recipe`) in TF2 terms: ``strategy.distribute_datasets_from_function`` feeds each
replica, ``strategy.run`` runs the step, the loss is the global batch mean whatever the number of
replicas (``recipe.objective``), and the Keras optimizer all-reduces the gradients. Keras 3's
``model.fit`` is not used: it fails under multi-worker MirroredStrategy (keras-team/keras#20585).

Steps run in chunks inside one ``tf.function`` (a ``tf.range`` loop), so the host only wakes up at
the next event: a progress line, an evaluation, a checkpoint, or the end.
"""

from __future__ import annotations

import glob
import hashlib
import os
import shutil
import tempfile
from collections.abc import Callable

import keras
import tensorflow as tf

from resnet_noBN.configs.recipe_config import TrainConfig
from resnet_noBN.host import peers, preemption
from resnet_noBN.models.networks import decayed_weights, weight_decay_loss
from resnet_noBN.trainers import health
from resnet_noBN.trainers.loop import TrainLoop
from resnet_noBN.trainers.recipe import make_optimizer, objective, top_classes
from resnet_noBN.trainers.run_log import RunLog


class Trainer(TrainLoop):
    """Model, optimizer, checkpoints and the compiled train/eval steps under one strategy.

    ``build_model`` is called inside ``strategy.scope()``. ``schedule`` replaces the CIFAR
    step schedule (ImageNet decays exponentially); ``top5`` adds the top-5 error to evaluations.
    ``jit_compile`` compiles each replica's step with XLA (the all-reduce stays outside: XLA
    cannot compile collectives on a CPU). ``model_dir`` receives checkpoints; when ``is_chief``
    is False (a non-chief worker of a multi-worker job) checkpoints go to a scratch folder, as
    TF's multi-worker guide prescribes, and no run log is written. The scratch folder is named
    for the model_dir and the task, so a killed worker's is reused (emptied) by its next run
    rather than left to accumulate, and :meth:`close` removes it. The TensorFlow backend picks
    :class:`ParameterServerTrainer` under parameter servers.

    The sources of :meth:`train`: ``train_fn(input_context, start_step=s)`` builds the training
    batches from the batch of step s on; ``eval_fn(input_context)`` the test split.
    """

    parameter_server = False  # the asynchronous trainer's guard runs on the chief alone

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
        time_budget_s: float | None = None,
    ):
        self.strategy, self.cfg, self.model_dir, self.is_chief = strategy, cfg, model_dir, is_chief
        self.top5, self.time_budget_s = top5, time_budget_s
        with strategy.scope():
            self.model = build_model()
            self.optimizer = make_optimizer(cfg, schedule)
            self.optimizer.build(self.model.trainable_variables)
        self._decayed = decayed_weights(self.model)
        self.checkpoint = tf.train.Checkpoint(model=self.model, optimizer=self.optimizer)
        self._checkpoint_dir = model_dir if is_chief else _scratch_dir(model_dir, strategy)
        self.manager = tf.train.CheckpointManager(
            self.checkpoint, self._checkpoint_dir, max_to_keep=cfg.max_checkpoints
        )
        self.log = RunLog(model_dir, title, enabled=is_chief, redraw_every_s=cfg.redraw_every_s)
        if peers.watching():  # its line names the checkpoint a rerun resumes from
            peers.watching().set_model_dir(model_dir)
        self._loss_and_grads = (
            tf.function(self._loss_and_grads_fn, jit_compile=True, autograph=False)
            if jit_compile
            else self._loss_and_grads_fn
        )
        # AutoGraph turns the steps' tf.range loop into a graph loop. Nothing else needs it, and
        # converting the model, the optimizer and their callees cost a tiny launch an eighth of
        # its CPU time (docs/suite-time.md): each step is traced as written.
        self._run_steps = tf.function(self._run_steps_fn)
        self._one_step = tf.autograph.experimental.do_not_convert(self._one_step_fn)
        self._eval_batch = tf.function(self._eval_batch_fn, autograph=False)
        self._mean_over_replicas = tf.function(
            lambda value: strategy.reduce(
                tf.distribute.ReduceOp.MEAN, strategy.run(tf.identity, args=(value,)), axis=None
            ),
            autograph=False,
        )

    # ----------------------------------------------------------------- compiled steps
    @property
    def step(self) -> int:
        """The global step: the number of updates applied (the optimizer's counter)."""
        return int(self.optimizer.iterations.numpy())

    def _loss_and_grads_fn(self, images, labels):
        """Forward and backward pass on this replica's share of the global batch: (loss,
        ``recipe.objective``'s parts, examples), gradients."""
        with tf.GradientTape() as tape:
            logits = self.model(images, training=True)
            loss, parts = objective(
                logits,
                labels,
                weight_decay_loss(self._decayed, self.cfg.weight_decay),
                self.cfg,
                self.strategy.num_replicas_in_sync,
            )
        grads = tape.gradient(loss, self.model.trainable_variables)
        return (loss, parts, tf.cast(tf.size(labels), tf.float32)), grads

    def _grad_norm_sq(self, grads):
        """||g||^2 of the global batch's gradient: of the gradients summed over the replicas
        (an all-reduce of its own where there are several; the optimizer sums them again for
        its update, as it always does)."""
        if self.strategy.num_replicas_in_sync > 1:
            grads = tf.distribute.get_replica_context().all_reduce(
                tf.distribute.ReduceOp.SUM, [g for g in grads if g is not None]
            )
        return health.grad_norm_sq(grads)

    def _replica_step(self, images, labels):
        """One update: gradients (XLA-compiled if asked), then the all-reducing optimizer; this
        replica's ``health.step_metrics``, each of shape [1] (gathered across the replicas)."""
        (loss, parts, count), grads = self._loss_and_grads(images, labels)
        norm_sq = self._grad_norm_sq(grads)
        self.optimizer.apply_gradients(zip(grads, self.model.trainable_variables))
        metrics = health.step_metrics(loss, parts, count, norm_sq)
        return {name: tf.reshape(value, [1]) for name, value in metrics.items()}

    def _across_replicas(self, per_replica: dict) -> dict:
        """A step's metrics over the replicas, each by its rule (``health.METRICS``): a sum
        summed, a last (the same on each replica) their mean, a max their largest (gathered:
        tf.distribute reduces by sums and means)."""
        step = {}
        for name, rule in health.METRICS.items():
            value = per_replica[name]
            if rule == "max":
                step[name] = tf.reduce_max(self.strategy.gather(value, axis=0))
            else:
                op = tf.distribute.ReduceOp.SUM if rule == "sum" else tf.distribute.ReduceOp.MEAN
                step[name] = self.strategy.reduce(op, value, axis=None)[0]
        return step

    def _run_steps_fn(self, iterator, num_steps):
        """``num_steps`` updates in a graph loop: their metrics (``health.METRICS``), each step's
        combined over the replicas (:meth:`_across_replicas`)."""
        totals = health.zeros()
        for _ in tf.range(num_steps):
            totals = self._one_step(next(iterator), totals)
        return totals

    def _one_step_fn(self, batch, totals):
        """One update of every replica on ``batch``, its metrics added to ``totals``."""
        per_replica = self.strategy.run(self._replica_step, args=batch)
        return health.add_step(totals, self._across_replicas(per_replica))

    def _replica_eval(self, images, labels, index=None):
        """(labels, ``recipe.top_classes``, the images' indices in the split; -1 where the
        source does not number them) of this replica's share of a batch. The last, partial
        batch of a split leaves some replicas an empty share, and TF 2.21's oneDNN conv2d returns
        a wrong shape for an empty batch: such a share predicts nothing."""
        k = 5 if self.top5 else 1
        top = tf.cond(
            tf.size(labels) > 0,
            lambda: top_classes(self.model(images, training=False), self.top5),
            lambda: tf.zeros([0, k], tf.int32),
        )
        if index is None:
            index = -tf.ones_like(labels, tf.int64)
        return tf.cast(labels, tf.int32), top, tf.cast(index, tf.int64)

    def _eval_batch_fn(self, batch):
        """:meth:`_replica_eval` of one distributed batch, every replica's gathered."""
        per_replica = self.strategy.run(self._replica_eval, args=batch)
        return tuple(self.strategy.gather(part, axis=0) for part in per_replica)

    # ----------------------------------------------------------------- the backend's part
    unreadable = (tf.errors.OpError, ValueError, IndexError)

    def checkpoints(self) -> list[str]:
        state = tf.train.get_checkpoint_state(self.model_dir)
        return list(state.all_model_checkpoint_paths) if state else []

    def read_checkpoint(self, path: str) -> None:
        self.checkpoint.restore(path).assert_existing_objects_matched()

    def learning_rate(self) -> float:
        return float(self.optimizer.learning_rate.numpy())

    def eval_batches(self, dataset_fn: Callable):
        for batch in self.strategy.distribute_datasets_from_function(dataset_fn):
            yield numbered(*self._eval_batch(batch))

    def start(self, train_fn: Callable, step: int):
        return self.distribute(lambda context: train_fn(context, start_step=step))

    def distribute(self, dataset_fn: Callable):
        """An iterator over the distributed dataset that ``dataset_fn(input_context)`` builds."""
        return iter(self.strategy.distribute_datasets_from_function(dataset_fn))

    def run_steps(self, iterator, num_steps: int) -> dict:
        return health.to_numpy(self._run_steps(iterator, tf.constant(num_steps)))

    def save(self) -> None:
        """Write a checkpoint at the current step (every worker must call it: it is collective).

        The data files are written under a temporary name and renamed, and the ``checkpoint``
        index is replaced atomically after them, so a kill during a save leaves the previous
        checkpoint as the latest."""
        self.manager.save(checkpoint_number=self.step)
        self._saved_step = self.step

    # a full disk: ResourceExhaustedError ([Op:SaveV2] ... No space left on device)
    unwritable = (OSError, tf.errors.ResourceExhaustedError, tf.errors.PermissionDeniedError)

    def remove_partial(self) -> None:
        """Remove the ``ckpt-<step>_temp/`` folders of saves cut short (TensorFlow writes a
        checkpoint's data there, then renames it)."""
        for path in glob.glob(os.path.join(glob.escape(self._checkpoint_dir), "ckpt-*_temp")):
            shutil.rmtree(path, ignore_errors=True)

    def guard(self, print_fn):
        return preemption.guard(
            self.strategy,
            self.parameter_server,
            self._checkpoint_dir,
            self.save_if_new,
            self.preempted_message,
            print_fn,
        )

    def agreed(self, steps: int) -> int:
        """The mean of every worker's ``steps``, so all workers of a synchronous job run the
        same calls."""
        return max(1, round(float(self._mean_over_replicas(tf.constant(float(steps))))))

    def close(self) -> None:
        """Stop watching the job's peers (they end in their own time now); remove a non-chief
        worker's scratch checkpoints."""
        if peers.watching():
            peers.watching().stop()
        if not self.is_chief:
            shutil.rmtree(self._checkpoint_dir, ignore_errors=True)


class ParameterServerTrainer(Trainer):
    """Asynchronous training under ``ParameterServerStrategy``: the chief schedules one-step
    closures on whichever worker is free (each advances the shared step counter), and evaluates
    the parameter servers' variables itself. Only the chief runs this loop."""

    parameter_server = True

    def __init__(self, strategy, *args, **kwargs):
        super().__init__(strategy, *args, **kwargs)
        self.coordinator = tf.distribute.experimental.coordinator.ClusterCoordinator(strategy)
        self._local_eval = tf.function(self._replica_eval, autograph=False)

    def eval_batches(self, dataset_fn: Callable):
        for batch in dataset_fn(tf.distribute.InputContext()):
            yield numbered(*self._local_eval(*batch))

    def distribute(self, dataset_fn: Callable):
        """One input pipeline per worker."""
        return iter(
            self.coordinator.create_per_worker_dataset(
                self.strategy.distribute_datasets_from_function(dataset_fn)
            )
        )

    def run_steps(self, iterator, num_steps: int) -> dict:
        results = [
            self.coordinator.schedule(self._run_steps, args=(iterator, tf.constant(1)))
            for _ in range(num_steps)
        ]
        self.coordinator.join()
        return health.combine_calls([r.fetch() for r in results])

    def agreed(self, steps: int) -> int:
        return steps  # only the chief runs the loop


def numbered(labels, top, index):
    """An evaluated batch as ``TrainLoop.eval_batches`` yields it: numpy, the index None where
    the source did not number its images."""
    index = index.numpy()
    return labels.numpy(), top.numpy(), None if (index < 0).any() else index


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
