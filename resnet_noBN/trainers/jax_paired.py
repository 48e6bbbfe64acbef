"""Two runs in one program on JAX (``launch/cifar.py --pair_seed=K``): two seeds of one run
(arXiv:1611.04231, Section 4's recipe, Table 1's network or another), each with its own
weights, batches and folder, trained by one compiled step that ``jax.vmap`` maps over both, so
that each convolution of the step computes both runs' (XLA makes the two runs' convolutions one
of two groups: twice the work per kernel where one run leaves the GPU's convolution kernels
part idle).

Each run is a :class:`trainers.jax_training.JaxTrainer` of its own (``members``): its model,
optimizer, run log (``train.jsonl``, ``metrics.jsonl``, ``answers.jsonl``, TensorBoard, the
plot), checkpoints (``ckpt-<step>.npz``), weights digest and summary, all in its own
``model_dir``, as the run alone would write them. :class:`PairedJaxTrainer` is the loop
(:class:`trainers.loop.TrainLoop`'s schedule, unchanged) over the two: the compiled step makes
each run's batch from its own seed's stream (``stream.training_batch``, the lone run's batch
bit for bit), stacks the two runs' weights, optimizer states and batches on a leading axis and
maps ``JaxTrainer.update`` over it; after each call each member gets its slice of the state
back, and every event (progress record, evaluation, checkpoint, divergence check, summary) is
its own. So each run's folder is a run's folder: it resumes alone (the same command without
``--pair_seed``) or in a pair.

What the pair does not do: several devices (one device, ``--strategy=default``), and the
replay of a divergence (``--replay_divergence``; ``runs.setup.start_pair`` refuses both). A run
that diverges ends the pair (exit 1), the other's checkpoint saved at that step, to resume alone.
"""

from __future__ import annotations

import os

import jax
import numpy as np

from resnet_noBN.configs.errors import CheckpointError, TrainingDiverged
from resnet_noBN.datasets import stream
from resnet_noBN.host import preemption
from resnet_noBN.trainers import health
from resnet_noBN.trainers.jax_training import JaxTrainer
from resnet_noBN.trainers.loop import TrainLoop


class PairedJaxTrainer(TrainLoop):
    """The schedule of ``TrainLoop.train`` over two runs (``members``, ``JaxTrainer``s of the
    same recipe and network on one device, with the ``seeds`` of their streams), one compiled
    step for both. ``train(sources, eval_source)``: ``sources`` the two runs' ``TrainSplit``s
    (the same images, each its run's seed), ``eval_source`` the test split."""

    def __init__(self, members: list[JaxTrainer], seeds: list[int]):
        lead = members[0]
        self.members, self.seeds = members, seeds
        self.cfg, self.top5, self.time_budget_s = lead.cfg, lead.top5, lead.time_budget_s
        self.model_dir = " and ".join(m.model_dir for m in members)  # what the messages name
        self._state = None  # the runs' (trainable, non-trainable, optimizer) values, stacked
        self._step = 0
        self._step_jit = jax.jit(self._step_fn, static_argnums=(6, 7), donate_argnums=(0, 1))

    @property
    def step(self) -> int:
        return self._step

    def learning_rate(self) -> float:
        return self.members[0].learning_rate()

    # ----------------------------------------------------------------- the compiled step
    def _step_fn(self, state, totals, images, labels, seeds, step, batch, pad):
        """One update of each run on its batch of ``step`` (its own seed's stream): the batches
        made apart, then one ``JaxTrainer.update`` mapped over the stacked states and batches;
        (new state, ``totals`` with this step's metrics added, each metric a pair)."""
        made = [stream.training_batch(images, labels, seed, step, batch, pad) for seed in seeds]
        x = jax.numpy.stack([x for x, _ in made])
        y = jax.numpy.stack([y for _, y in made])
        state, metrics = jax.vmap(self.members[0].update)(state, x, y)
        return state, health.add_step(totals, metrics)

    def start(self, sources, step: int) -> dict:
        """The training split on the device once (the lead's ``start``: the batch checked), the
        runs' states stacked beside it, and their seeds."""
        lead = self.members[0]
        data = lead.start(sources[0], step)
        values = [m._values() for m in self.members]
        stacked = jax.tree.map(lambda *v: np.stack(v), *values)
        # placed as the step's outputs are (the split's placement), so it compiles once
        self._state = jax.device_put(stacked, lead._replicated)
        return {**data, "seeds": tuple(np.uint32(s.seed % 2**32) for s in sources)}

    def run_steps(self, data: dict, num_steps: int) -> list[dict]:
        """``num_steps`` paired steps dispatched back to back (``JaxTrainer.run_steps``); each
        run's metrics of the call, and each member its state and step."""
        pairs = {name: np.zeros([len(self.members)], np.float32) for name in health.METRICS}
        totals = jax.device_put(pairs, self.members[0]._replicated)
        for i in range(num_steps):
            self._state, totals = self._step_jit(
                self._state,
                totals,
                data["images"],
                data["labels"],
                data["seeds"],
                np.int32(self._step + i),
                self.cfg.batch_size,
                data["pad"],
            )
        self._step += num_steps
        self._hand_out()
        totals = {name: np.asarray(value) for name, value in totals.items()}
        return [
            {name: float(value[i]) for name, value in totals.items()}
            for i in range(len(self.members))
        ]

    def _hand_out(self) -> None:
        """Each member its slice of the stacked state, and the step."""
        for i, member in enumerate(self.members):
            member._state = jax.tree.map(lambda v, i=i: v[i], self._state)
            member._step = self._step

    # ----------------------------------------------------------------- each run's events
    def _labelled(self, print_fn, i: int):
        return lambda line: print_fn(f"seed {self.seeds[i]}: {line}")

    def _scalars(self, step, num_steps, totals, steps_per_s) -> list[dict]:
        """Each run's progress scalars (``TrainLoop._scalars``). Where a run's loss is not
        finite: the others' checkpoints of this step saved, and TrainingDiverged naming it."""
        scalars, diverged = [], []
        for member, run_totals in zip(self.members, totals):
            try:
                scalars.append(member._scalars(step, num_steps, run_totals, steps_per_s))
            except TrainingDiverged as e:
                diverged.append((member, e))
        if not diverged:
            return scalars
        healthy = [m for m in self.members if m not in [d for d, _ in diverged]]
        for member in healthy:
            member.save_if_new()
        kept = "".join(
            f"; {m.model_dir} did not diverge: its checkpoint of step {step} is saved, and it "
            "resumes alone (the same command without --pair_seed, with its --model_dir and "
            "--seed)"
            for m in healthy
        )
        raise TrainingDiverged(
            "; ".join(f"{m.model_dir}: {e}" for m, e in diverged) + kept
        ) from None

    def _report_progress(self, step, scalars, progress, print_fn) -> None:
        """Each run's progress line (the two at once, when one is owed) and record."""
        due = progress.due()
        for i, (member, run_scalars) in enumerate(zip(self.members, scalars)):
            member._report_progress(
                step, run_scalars, _Decided(progress, due), self._labelled(print_fn, i)
            )

    def _evaluate_and_log(self, eval_source, step, scalars, print_fn, final=False) -> list[dict]:
        """Each run evaluated on the whole test split and logged in its folder."""
        scalars = scalars or [{}] * len(self.members)
        return [
            member._evaluate_and_log(
                eval_source, step, scalars[i], self._labelled(print_fn, i), final
            )
            for i, member in enumerate(self.members)
        ]

    def save_if_new(self) -> None:
        """Each run's checkpoint of this step (``TrainLoop.save_if_new``, in its folder)."""
        for member in self.members:
            member.save_if_new()
        self._saved_step = self._step

    def guard(self, print_fn):
        return preemption.local_guard(self.save_if_new, self.preempted_message, print_fn)

    def restore(self, print_fn=print) -> int:
        """Each run resumed from its newest readable checkpoint (``TrainLoop.restore``); where
        one is ahead (a pair stopped between the two runs' saves), it is taken back to its
        checkpoint of the other's step. CheckpointError where it has none readable."""
        steps = [member.restore(print_fn) for member in self.members]
        step = min(steps)
        for member, ahead in zip(self.members, steps):
            if ahead != step:
                self._restore_at(member, ahead, step)
        self._step = step
        if step:
            self.restored_from = " and ".join(m.restored_from for m in self.members)
        return step

    def _resume_records(self, step: int) -> None:
        """Each run's records past ``step`` dropped, in its folder."""
        for member in self.members:
            member._resume_records(step)

    def _recorded_end(self, step: int) -> list[dict] | None:
        """Each run's evaluation of the last step, where both are recorded (the pair ended)."""
        ended = [member._recorded_end(step) for member in self.members]
        return None if None in ended else ended

    def _restore_at(self, member: JaxTrainer, ahead: int, step: int) -> None:
        path = os.path.join(member.model_dir, f"ckpt-{step}.npz")
        try:
            if not step or path not in member.checkpoints():
                raise FileNotFoundError(path)
            member.read_checkpoint(path)
        except (FileNotFoundError, *member.unreadable):
            others = " and ".join(m.model_dir for m in self.members if m is not member)
            raise CheckpointError(
                f"{member.model_dir} resumes at step {ahead}, {others} at step {step}"
                + (f", and {member.model_dir} has no readable checkpoint of it" if step else "")
                + ": a pair trains both runs from one step; resume them apart (each alone, "
                "without --pair_seed), or pair two new folders"
            ) from None
        member.restored_from = path

    def _summary(self, last_eval: list[dict], wall_seconds: float, throughput) -> dict:
        """The pair's line of JSON: the step, the time, both runs' images/s together, and each
        run's own summary (``TrainLoop._summary``: its test error, weights digest, ...)."""
        runs = [
            {"model_dir": m.model_dir, "seed": seed, **m._summary(e, wall_seconds, throughput)}
            for m, seed, e in zip(self.members, self.seeds, last_eval)
        ]
        rate = throughput.rate()
        return {
            "final_step": self.step,
            "wall_time_s": round(wall_seconds, 3),
            "images_per_sec": rate and round(rate * len(self.members), 2),
            "runs": runs,
        }


class _Decided:
    """A ``progress.Progress`` whose ``due`` is decided once for all the runs of a pair (it
    resets its clock when it says yes)."""

    def __init__(self, progress, due: bool):
        self._progress, self._due = progress, due

    def due(self) -> bool:
        return self._due

    def __getattr__(self, name):
        return getattr(self._progress, name)
