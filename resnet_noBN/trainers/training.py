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
import numpy as np
import tensorflow as tf

from resnet_noBN.models.model import decayed_weights, weight_decay_loss
from resnet_noBN.trainers import peers, preemption
from resnet_noBN.trainers.loop import TrainLoop
from resnet_noBN.trainers.recipe import TrainConfig, eval_counts, make_optimizer, objective
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
        self.log = RunLog(model_dir, title, enabled=is_chief)
        if peers.watching():  # its line names the checkpoint a rerun resumes from
            peers.watching().set_model_dir(model_dir)
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
            logits = self.model(images, training=True)
            loss, correct = objective(
                logits,
                labels,
                weight_decay_loss(self._decayed, self.cfg.weight_decay),
                self.cfg,
                self.strategy.num_replicas_in_sync,
            )
        grads = tape.gradient(loss, self.model.trainable_variables)
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
        """``recipe.eval_counts`` on this replica's share of a batch. The last, partial batch of a
        split leaves some replicas an empty share, and TF 2.21's oneDNN conv2d returns a wrong
        shape for an empty batch: such a share counts zeros."""
        return tf.cond(
            tf.size(labels) > 0,
            lambda: tf.cast(
                eval_counts(self.model(images, training=False), labels, self.top5), tf.int64
            ),
            lambda: tf.zeros([3 if self.top5 else 2], tf.int64),
        )

    def _eval_batch_fn(self, batch):
        """:meth:`_replica_eval` of one distributed batch, summed over replicas."""
        per_replica = self.strategy.run(self._replica_eval, args=batch)
        return self.strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)

    # ----------------------------------------------------------------- the backend's part
    unreadable = (tf.errors.OpError, ValueError, IndexError)

    def checkpoints(self) -> list[str]:
        state = tf.train.get_checkpoint_state(self.model_dir)
        return list(state.all_model_checkpoint_paths) if state else []

    def read_checkpoint(self, path: str) -> None:
        self.checkpoint.restore(path).assert_existing_objects_matched()

    def learning_rate(self) -> float:
        return float(self.optimizer.learning_rate.numpy())

    def eval_counts(self, dataset_fn: Callable):
        for batch in self.strategy.distribute_datasets_from_function(dataset_fn):
            yield self._eval_batch(batch).numpy()

    def start(self, train_fn: Callable, step: int):
        return self.distribute(lambda context: train_fn(context, start_step=step))

    def distribute(self, dataset_fn: Callable):
        """An iterator over the distributed dataset that ``dataset_fn(input_context)`` builds."""
        return iter(self.strategy.distribute_datasets_from_function(dataset_fn))

    def run_steps(self, iterator, num_steps: int) -> tuple[float, float, float]:
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
        self._local_eval = tf.function(self._replica_eval)

    def eval_counts(self, dataset_fn: Callable):
        for images, labels in dataset_fn(tf.distribute.InputContext()):
            yield self._local_eval(images, labels).numpy()

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

    def agreed(self, steps: int) -> int:
        return steps  # only the chief runs the loop


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
