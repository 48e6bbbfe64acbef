"""The JAX training loop: :class:`trainers.loop.TrainLoop` on one host's accelerators or on every
device of a JAX job of several processes, with Keras 3's JAX backend and no TensorFlow.

The same network (:mod:`models.networks`), recipe (:mod:`trainers.recipe`) and training
stream (:mod:`resnet_noBN.datasets.stream`) as the TensorFlow loop; what differs is how they run:

* **Stateless, compiled steps.** ``model.stateless_call`` and ``optimizer.stateless_apply`` in
  one ``jax.jit`` step, the weights and optimizer state donated and updated in place; a call
  dispatches its steps back to back and the host waits once, for the call's totals (on several
  CPU devices also every ``CPU_STEPS_IN_FLIGHT`` steps: see ``JaxTrainer.run_steps``).
* **Batches made on the device.** The uint8 training split (CIFAR: 150 MB) is copied to the
  accelerator once; each step gathers, crops, flips and standardises its batch there
  (``stream.training_batch``), so the host sends nothing but the step number and the input cannot
  bound the accelerator.
* **Devices.** ``devices`` (default: the first local device) share each batch along its first
  axis (``jax.sharding``: the weights replicated, the batch split; the gradients gathered and
  summed in device order), the ``MirroredStrategy`` of one host; in a job
  (``backends.jax_job``) the devices of every process, the ``MultiWorkerMirroredStrategy``.
  There every process runs this loop on the same steps: process 0 restores the checkpoint and
  sends its values to the others, writes the checkpoints and the run log (the others write
  nothing), and decides the steps of each call and the time budget (``trainers.jax_agreed``); a
  signal to any process stops all after the same call. A NaN needs no agreeing: the loss is
  the summed one, the same on every process.
* **Checkpoints and preemption**: :class:`trainers.one_process.OneProcessTrainer`'s
  (``ckpt-<step>.npz`` and ``checkpoints.json``, from the compiled steps' values: ``_sync``;
  SIGTERM/SIGINT: the call ends, a checkpoint, ``Preempted``; in a job, on every process).
"""

from __future__ import annotations

import functools

import jax
import keras
import numpy as np

from resnet_noBN.datasets import stream
from resnet_noBN.host import preemption
from resnet_noBN.models.networks import decayed_weights, weight_decay_loss
from resnet_noBN.trainers import health, jax_agreed
from resnet_noBN.trainers.one_process import OneProcessTrainer
from resnet_noBN.trainers.recipe import objective, top_classes

# Steps dispatched ahead of the host on a multi-device CPU mesh: half of the 32 computations per
# device that XLA's CPU client admits before a launch blocks one of its threads (see run_steps).
# A wait per 16 steps costs the host's dispatch of one step (~1 ms) against >= 10 ms of compute.
CPU_STEPS_IN_FLIGHT = 16


class JaxTrainer(OneProcessTrainer):
    """:class:`OneProcessTrainer` with compiled steps on ``devices`` (default: this host's first
    device; in a job, every process's devices, process 0 the chief)."""

    def __init__(self, build_model, cfg, model_dir: str, devices: list | None = None, **kwargs):
        self.job = jax_agreed.is_job()
        super().__init__(build_model, cfg, model_dir, chief=jax.process_index() == 0, **kwargs)
        # the batch splits evenly over them: the backend checked it (base.Backend.start)
        self.devices = devices or jax.local_devices()[:1]
        decayed = {id(w) for w in decayed_weights(self.model)}
        self._decayed = [
            i for i, v in enumerate(self.model.trainable_variables) if id(v) in decayed
        ]
        self._mesh = jax.sharding.Mesh(np.array(self.devices), ("batch",))
        self._replicated = jax.sharding.NamedSharding(self._mesh, jax.sharding.PartitionSpec())
        self._split = jax.sharding.NamedSharding(self._mesh, jax.sharding.PartitionSpec("batch"))
        self._state = None  # (trainable, non-trainable, optimizer) values between calls
        self._step_jit = jax.jit(self._step_fn, static_argnums=(6, 7), donate_argnums=(0, 1))
        self._eval_batch = jax.jit(self._eval_batch_fn)

    # ----------------------------------------------------------------- compiled steps
    def _values(self):
        """The Keras variables' values, grouped as the compiled step's state."""
        return tuple([v.value for v in group] for group in self._variables())

    def _loss(self, trainable, non_trainable, images, labels, replicas=1):
        logits, non_trainable = self.model.stateless_call(
            trainable, non_trainable, images, training=True
        )
        decay = weight_decay_loss([trainable[i] for i in self._decayed], self.cfg.weight_decay)
        loss, parts = objective(logits, labels, decay, self.cfg, replicas)
        return loss, (parts, non_trainable)

    def _summed_over_devices(self, trainable, non_trainable, images, labels):
        """((loss, ``recipe.objective``'s parts, non-trainable values), gradients) of a batch
        split over the devices: each device's share computed on it, then gathered (exact) and
        summed in device order (the largest |logit|: the devices' largest).
        XLA's all-reduce sums in the order its implementation picks (in one process, Gloo
        between processes on CPUs, NCCL on GPUs), so the bits would depend on how the devices
        are spread over processes; gathered, the sum has one order (2 processes x 2 devices and
        4 x 1 give the same weights). Gathering moves the devices times the gradients' bytes,
        little beside the step's convolutions."""
        replicas = len(self.devices)

        def share(trainable, non_trainable, images, labels):
            (loss, (parts, non_trainable)), grads = jax.value_and_grad(self._loss, has_aux=True)(
                trainable, non_trainable, images, labels, replicas
            )
            total = functools.partial(_sum_in_order, axis_name="batch")
            parts = {
                name: jax.numpy.max(jax.lax.all_gather(value, "batch"))
                if health.METRICS[name] == "max"
                else total(value)
                for name, value in parts.items()
            }
            return (total(loss), parts, non_trainable), jax.tree.map(total, grads)

        replicated, split = jax.sharding.PartitionSpec(), jax.sharding.PartitionSpec("batch")
        return jax.shard_map(
            share,
            mesh=self._mesh,
            in_specs=(replicated, replicated, split, split),
            out_specs=replicated,
            check_vma=False,
        )(trainable, non_trainable, images, labels)

    def _step_fn(self, state, totals, images, labels, seed, step, batch, pad):
        """One update on the batch of ``step`` (made here, from the uint8 split on the device):
        (new state, the call's metrics ``totals`` with this step's added: ``health.add_step``)."""
        x, y = stream.training_batch(images, labels, seed, step, batch, pad)
        state, metrics = self.update(state, x, y)
        return state, health.add_step(totals, metrics)

    def update(self, state, x, y):
        """One update of ``state`` (trainable, non-trainable and optimizer values) on the batch
        ``x``, ``y``: (new state, the step's ``health.step_metrics``). Pure: :meth:`_step_fn`
        makes the batch and calls it."""
        trainable, non_trainable, optimizer = state
        batch = x.shape[0]
        if len(self.devices) > 1:
            x = jax.lax.with_sharding_constraint(x, self._split)
            y = jax.lax.with_sharding_constraint(y, self._split)
            (loss, parts, non_trainable), grads = self._summed_over_devices(
                trainable, non_trainable, x, y
            )
        else:
            (loss, (parts, non_trainable)), grads = jax.value_and_grad(self._loss, has_aux=True)(
                trainable, non_trainable, x, y
            )
        norm_sq = health.grad_norm_sq(grads)
        trainable, optimizer = self.optimizer.stateless_apply(optimizer, grads, trainable)
        metrics = health.step_metrics(loss, parts, batch, norm_sq)
        return (trainable, non_trainable, optimizer), metrics

    def _eval_batch_fn(self, trainable, non_trainable, images):
        logits, _ = self.model.stateless_call(
            trainable, non_trainable, stream.standardize(images), training=False
        )
        return top_classes(logits, self.top5)

    # ----------------------------------------------------------------- the backend's part
    def place(self, source) -> dict:
        self._state = jax.device_put(self._values(), self._replicated)
        return {
            "images": jax.device_put(source.images, self._replicated),
            "labels": jax.device_put(source.labels, self._replicated),
            "seed": source.seed,
            "pad": source.pad,
        }

    def run_steps(self, data: dict, num_steps: int) -> dict:
        """``num_steps`` compiled steps dispatched back to back (JAX runs them asynchronously:
        the host waits once, for the call's metrics). One compiled step rather than a
        ``fori_loop`` of them: XLA's CPU backend runs a loop body's convolutions tens of times
        slower than the same step on its own.

        On several CPU devices the host also waits every :data:`CPU_STEPS_IN_FLIGHT` steps.
        XLA's CPU client runs each device's share of a step on a pool of max(cores, devices)
        threads and admits at most 32 unfinished computations per device
        (``max_inflight_computations_per_device``); the 33rd launch blocks a pool thread until
        one finishes. Hundreds of steps dispatched unwaited fill that window, and then the pool
        can hold only blocked threads: a launch waiting for the window and a device's share
        waiting in the step's collective for the other device's share, which is queued behind
        them. XLA aborts the process after 40 s in the collective ("Termination timeout
        for collective permute ... Expected 2 threads to join the rendezvous, but only 1 of
        them arrived on time", rc 134)."""
        seed = np.uint32(data["seed"] % 2**32)
        # placed as the step's own output is, so the step compiles once, not again for its
        # second call in a chunk
        totals = jax.device_put(health.zeros(), self._replicated)
        cpu_mesh = len(self.devices) > 1 and self.devices[0].platform == "cpu"
        for i in range(num_steps):
            if cpu_mesh and i and i % CPU_STEPS_IN_FLIGHT == 0:
                jax.block_until_ready(totals)
            self._state, totals = self._step_jit(
                self._state,
                totals,
                data["images"],
                data["labels"],
                seed,
                np.int32(self._step + i),
                self.cfg.batch_size,
                data["pad"],
            )
        self._step += num_steps
        return health.to_numpy(totals)

    def eval_batches(self, eval_source):
        images, labels = eval_source
        trainable, non_trainable, _ = self._values() if self._state is None else self._state
        size = self.cfg.eval_batch_size
        for begin in range(0, len(images), size):
            top = self._eval_batch(trainable, non_trainable, images[begin : begin + size])
            end = min(begin + size, len(images))
            yield labels[begin:end], np.asarray(top), np.arange(begin, end)

    def weight_norm(self) -> float:
        """||W|| over the trainable weights, from the compiled steps' values."""
        if self._state is None:
            return super().weight_norm()
        return float(np.sqrt(health.grad_norm_sq(self._state[0])))

    def guard(self, print_fn):
        return preemption.local_guard(
            self.save_if_new,
            self.preempted_message,
            print_fn,
            agree=jax_agreed.any_process if self.job else None,
        )

    def agreed(self, steps: int) -> int:
        """Process 0's ``steps`` on every process of a job: each times its own calls, and a
        process running more steps than another would wait for it forever."""
        return int(jax_agreed.from_process_0(np.int64(steps))) if self.job else steps

    def agreed_flag(self, flag: bool) -> bool:
        return bool(jax_agreed.from_process_0(np.bool_(flag))) if self.job else flag

    def restore(self, print_fn=print) -> int:
        """:meth:`TrainLoop.restore`; in a job by process 0 alone (the others may not see its
        folder), which then sends every variable's value to the others."""
        step = super().restore(print_fn) if self.is_chief else 0
        if not self.job:
            return step
        values = jax_agreed.from_process_0(
            [keras.ops.convert_to_numpy(v) for v in self._named_variables().values()]
        )
        for variable, value in zip(self._named_variables().values(), values):
            variable.assign(value)
        self._step = int(keras.ops.convert_to_numpy(self.optimizer.iterations))
        if not self.is_chief and self._step:
            self.restored_from = "process 0's checkpoint"
        return self._step

    def _sync(self) -> None:
        """Copy the values of the compiled steps into the Keras variables."""
        if self._state is None:
            return
        for group, values in zip(self._variables(), self._state):
            for variable, value in zip(group, values):
                variable.assign(value)


def _sum_in_order(value, axis_name: str):
    """The sum over the devices of ``axis_name`` of each one's ``value``, the same bits on every
    device however the devices are spread over processes: gathered, then summed in order."""
    return jax.numpy.sum(jax.lax.all_gather(value, axis_name), axis=0)
