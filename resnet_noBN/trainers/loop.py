"""The training loop's schedule of events, for every Keras backend: the original
``resnet_main.py``'s explicit loop (train, a progress line every ``log_every`` steps, a whole-test
evaluation every ``eval_every``, a checkpoint every ``checkpoint_every``, resume from the latest
checkpoint), with several steps per compiled call so the host wakes only at the next event.

:class:`TrainLoop` holds what both backends share: that schedule, the calls' length (about
:data:`SECONDS_PER_CALL`), the progress scalars, divergence (:class:`TrainingDiverged`, and with
``--replay_divergence`` its last steps replayed one at a time: :meth:`TrainLoop.replay`), the run
log and the one-line summary, the restore of the newest readable checkpoint and the totals of an
evaluation. A backend supplies the compiled steps, how to list, read and write one checkpoint,
how to count one evaluation batch, and the preemption guard: ``tensorflow_training.Trainer``
(TensorFlow, any ``tf.distribute`` strategy) and ``jax_training.JaxTrainer`` (JAX, one host's
devices or a job's). No TensorFlow here.
"""

from __future__ import annotations

import contextlib
import hashlib
import math
import time

import numpy as np
from keras import ops

from resnet_noBN.configs.errors import (
    CheckpointError,
    Preempted,
    TimeBudgetReached,
    TrainingDiverged,
    first_line,
)
from resnet_noBN.host import stops, storage
from resnet_noBN.progress import DAY_S, Progress, clock, duration, finish_at
from resnet_noBN.trainers import health
from resnet_noBN.trainers.answers import Answers

# Steps per compiled call are chosen so that a call lasts about this long: a preemption signal is
# acted on between calls, well inside SLURM's and Kubernetes' default 30 s between SIGTERM and
# SIGKILL, while a fast accelerator still runs up to a whole progress interval per call.
SECONDS_PER_CALL = 5.0
# what a stop after training interrupts (``host.stops``): the run's report alone
AFTER_THE_END = "after the run's last step: its checkpoint and evaluation are written"


class TrainLoop:
    """The event schedule of one run; subclasses supply the backend.

    A subclass sets ``model``, ``cfg``, ``model_dir``, ``is_chief``, ``top5``, ``log`` and
    :attr:`unreadable` and implements ``step``, :meth:`checkpoints`, :meth:`read_checkpoint`,
    :meth:`save`, :meth:`learning_rate`, :meth:`start`, :meth:`run_steps`,
    :meth:`eval_batches` and :meth:`guard`; :meth:`weight_norm` where the Keras variables are not
    the weights trained; :meth:`agreed`, :meth:`agreed_flag` and
    :meth:`close` where a job has several workers; :attr:`unwritable` and
    :meth:`remove_partial` where its writes fail otherwise than with an OSError or leave
    temporary files.
    """

    model = cfg = model_dir = log = None
    is_chief, top5 = True, False
    time_budget_s: float | None = None  # stop (checkpoint, TimeBudgetReached) after this long
    _saved_step = None  # the step of the checkpoint save() wrote last
    _last_scalars = None  # the last call's health, named where the next one diverges
    restored_from = None  # the checkpoint restore() resumed from

    # ------------------------------------------------------------ what a backend supplies
    @property
    def step(self) -> int:
        """The global step: the number of updates applied."""
        raise NotImplementedError

    # what reading a damaged or foreign checkpoint raises (read_checkpoint)
    unreadable: tuple[type[Exception], ...] = ()

    def checkpoints(self) -> list[str]:
        """The checkpoints of ``model_dir``, oldest first."""
        raise NotImplementedError

    def read_checkpoint(self, path: str) -> None:
        """Load the checkpoint ``path`` into the model and optimizer, or raise one of
        :attr:`unreadable` having changed nothing."""
        raise NotImplementedError

    def save(self) -> None:
        """Write a checkpoint of the current step, atomically; a failed write raises one of
        :attr:`unwritable`."""
        raise NotImplementedError

    # what a write that failed (a full disk, any OSError) raises (save)
    unwritable: tuple[type[Exception], ...] = (OSError,)

    def remove_partial(self) -> None:
        """Remove what a save cut short (a failed write, a kill) left in the checkpoint folder."""

    def learning_rate(self) -> float:
        """The learning rate of the next update."""
        raise NotImplementedError

    def start(self, train_source, step: int):
        """What :meth:`run_steps` draws the batches of ``step`` on from."""
        raise NotImplementedError

    def run_steps(self, iterator, num_steps: int) -> dict:
        """``num_steps`` updates in one compiled call: its metrics by name (``health.METRICS``:
        the sums of the losses, hits and examples and of the two terms, the last gradient norm,
        the largest |logit|), floats on the host."""
        raise NotImplementedError

    def eval_batches(self, eval_source):
        """For each batch of the split, in turn: (int labels [B], the predicted classes [B, 1],
        or the 5 highest [B, 5] with ``top5``, and each image's index in the split [B], or None
        where the source does not number its images)."""
        raise NotImplementedError

    def weight_norm(self) -> float:
        """||W|| over the trainable weights (here: the Keras variables)."""
        weights = self.model.trainable_weights
        return float(ops.sqrt(sum(ops.sum(ops.square(ops.cast(w, "float32"))) for w in weights)))

    def guard(self, print_fn):
        """A context manager giving a handler whose ``run(fn, *args)`` runs one call and, after
        SIGTERM/SIGINT, saves (:meth:`save_if_new`) and raises ``errors.Preempted``, and whose
        ``signalled`` says whether a signal came (``host.preemption``)."""
        raise NotImplementedError

    def agreed(self, steps: int) -> int:
        """The number of steps every worker of a synchronous job runs next (one worker: as is)."""
        return steps

    def agreed_flag(self, flag: bool) -> bool:
        """The one value of a yes-or-no decision that depends on this worker's own clock (the
        time budget), held by every worker of a job (one worker: as is)."""
        return flag

    def close(self) -> None:
        """Release what the run holds (a non-chief worker's scratch folder)."""

    # ------------------------------------------------------------ the shared loop
    def restore(self, print_fn=print) -> int:
        """Resume from the newest readable checkpoint (one line for each unreadable one, the one
        before it tried next); returns the step (0: none). CheckpointError when none of several
        can be read."""
        self.remove_partial()  # a save killed part way
        paths = self.checkpoints()
        for path in reversed(paths):
            try:
                self.read_checkpoint(path)
            except self.unreadable as e:
                print_fn(unreadable_checkpoint_line(path, e))
                continue
            self.restored_from = path
            return self.step
        if paths:
            raise CheckpointError(no_checkpoint_message(self.model_dir, paths))
        return self.step

    def latest_checkpoint(self) -> str | None:
        paths = self.checkpoints()
        return paths[-1] if paths else None

    def evaluate(self, eval_source, progress: Progress | None = None, print_fn=print) -> dict:
        """Top-1 (and top-5) error on the whole split, in one pass, and ``"answers"``: which
        images were right and what each was predicted (``answers.Answers``; None where the
        source does not number its images). ``progress``: the split's batches as the job (an
        evaluation on its own, ``launch/evaluate.py``): a line when one is owed, with the
        batches done and the time left (the first batch, which also compiles, not in the
        rate)."""
        totals = np.zeros(3 if self.top5 else 2, np.int64)
        numbered, t0 = [], time.perf_counter()
        for labels, top, index in self.eval_batches(eval_source):
            labels = np.asarray(labels).reshape(-1, 1)
            hits = np.asarray(top) == labels
            top5 = [hits.any(axis=1).sum()] if self.top5 else []
            totals += np.array([hits[:, 0].sum(), *top5, len(labels)])
            numbered.append(None if index is None else (np.asarray(index), hits[:, 0], top[:, 0]))
            if progress is not None:
                now = time.perf_counter()
                progress.add(1, now - t0 if progress.done else None)
                t0 = now
                if progress.due():
                    print_fn(
                        f"evaluated {progress.done} of {progress.total} batches "
                        f"({int(totals[-1])} images), {progress.text()}"
                    )
        complete = numbered and all(part is not None for part in numbered)
        answers = Answers.gathered(numbered) if complete else None
        return {**errors(totals, self.top5), "answers": answers}

    def train(self, train_source, eval_source, print_fn=print, faster: str = "") -> dict:
        """Train to ``cfg.train_steps`` from wherever the checkpoint left off; returns a summary.

        ``train_source``: what :meth:`start` makes the batches from, from the batch of the
        restored step on (the CIFAR stream is a function of (seed, step), so a resumed run sees
        what the uninterrupted run saw); ``eval_source``: the test split. Events (progress line,
        evaluation, checkpoint) fire when the step is a multiple of their interval, and at the
        end, in that order: a step is logged and evaluated before its checkpoint is written, so a
        run lost right after a checkpoint resumes with its whole curve up to it. As it resumes,
        the records past its checkpoint (or all, where it has none) are dropped
        (``RunLog.resume_at``): the steps trained again are recorded once. A run that resumes
        at its last step with that step's evaluation recorded has ended: it is neither trained
        nor evaluated again, and its summary is that evaluation's. Raises TrainingDiverged when
        the loss is not finite (nothing is saved after that: the latest checkpoint is the last
        good one); ``Preempted`` after saving a checkpoint when SIGTERM or SIGINT arrives;
        TimeBudgetReached after saving one when ``time_budget_s`` has passed. ``faster``: the
        faster paths a run projected to take over a day is told of (:func:`slow_run_warning`).
        """
        cfg = self.cfg
        step = self.restore(print_fn)
        if step:
            print_fn(f"resumed from {self.restored_from} at step {step}")
        self._resume_records(step)
        ended = self._recorded_end(step)
        if ended is not None:
            stops.doing(AFTER_THE_END)
            print_fn(
                f"the run ended at step {step}: its checkpoint and evaluation are written; "
                "nothing to train or evaluate"
            )
            return self._summary(ended, 0.0, _Throughput())
        iterator = self.start(train_source, step)
        run_start = time.perf_counter()
        progress = Progress(cfg.train_steps, step, cfg.log_every, cfg.log_every_s or None)
        throughput = _Throughput()
        last_eval, calls = None, 0
        steps_per_call = 1  # the first call also traces and compiles
        with self.guard(print_fn) as handler, self._plot_drawn_as_it_stops():
            while step < cfg.train_steps:
                num_steps = self._call_length(step, steps_per_call)
                t0 = time.perf_counter()
                totals = handler.run(self.run_steps, iterator, num_steps)
                seconds = time.perf_counter() - t0
                step, calls = self.step, calls + 1
                progress.add(num_steps, seconds if calls > 1 else None)  # the 1st also compiled
                throughput.add(num_steps * cfg.batch_size, seconds)
                steps_per_s = progress.rate() or num_steps / seconds  # recent, else this call's
                try:
                    scalars = self._scalars(step, num_steps, totals, steps_per_s)
                except TrainingDiverged as e:
                    if not cfg.replay_divergence:
                        raise
                    found = self.replay(
                        train_source, step - num_steps, step, handler, print_fn, run_start
                    )
                    raise TrainingDiverged(f"{e}; {found}") from None
                steps_per_call = self.agreed(
                    max(1, math.floor(SECONDS_PER_CALL * num_steps / seconds))
                )
                done = step >= cfg.train_steps
                self._report_progress(step, scalars, progress, print_fn)
                if calls == 1:
                    first_call_s = seconds
                elif calls == 2:
                    self._announce(progress, first_call_s, print_fn, faster)
                if step % cfg.eval_every == 0 or done:  # then the checkpoint (docstring)
                    last_eval = self._evaluate_and_log(
                        eval_source, step, scalars, print_fn, final=done
                    )
                if step % cfg.checkpoint_every == 0 or done:
                    self.save_if_new()
                if not done and self._out_of_time(run_start):
                    self.save_if_new()
                    raise TimeBudgetReached(
                        f"time budget of {self.time_budget_s:g} s reached at step {step}: a "
                        f"checkpoint of that step is in {self.model_dir}; rerun the same "
                        "command to resume"
                    )
            if handler.signalled:  # after the last call: the run is whole, and stopped all the same
                self.save_if_new()
                raise Preempted(self.preempted_message())
            # said before the guard gives the signals back: a stop as it does is told so
            stops.doing(AFTER_THE_END)
        if last_eval is None:  # nothing left to train: report the restored model
            last_eval = self._evaluate_and_log(eval_source, step, {}, print_fn, final=True)
        return self._summary(last_eval, time.perf_counter() - run_start, throughput)

    @contextlib.contextmanager
    def _plot_drawn_as_it_stops(self):
        """The plot's owed redraw (``RunLog.draw``) made as the run stops, runs out of time or
        diverges: its PNG then shows every evaluation written."""
        try:
            yield
        except (Preempted, TrainingDiverged):  # TimeBudgetReached is a Preempted
            self.log.draw()
            raise

    def _resume_records(self, step: int) -> None:
        """The run log's records past ``step`` dropped (``RunLog.resume_at``): the steps
        trained again are recorded once. In a job, by the chief (the others write none)."""
        self.log.resume_at(step)

    def _recorded_end(self, step: int):
        """The evaluation of the last step where the run resumes there with it recorded (it
        ended: a stop came after its last checkpoint), else None. In a job the chief's answer
        holds for every worker (``agreed_flag``)."""
        record = self.log.evaluation_at(step) if step >= self.cfg.train_steps else None
        if not self.agreed_flag(record is not None):
            return None
        return record or {"test_error": None}  # a worker that cannot read the chief's folder

    def _call_length(self, step: int, steps_per_call: int) -> int:
        """The steps of the next call: ``steps_per_call``, cut at the next event (progress
        record, evaluation, checkpoint) and at the last step."""
        cfg = self.cfg
        events = (cfg.log_every, cfg.eval_every, cfg.checkpoint_every)
        return (
            min(cfg.train_steps, step + steps_per_call, *(next_multiple(step, e) for e in events))
            - step
        )

    def _report_progress(self, step: int, scalars: dict, progress: Progress, print_fn) -> None:
        """The progress line when one is owed (every ``log_every`` steps or ``log_every_s``
        seconds, whichever first), with the time spent, the time left and the finish; the record
        of ``train.jsonl`` and TensorBoard at every ``log_every`` steps and the last (a curve
        sampled at fixed steps, whatever the machine's speed)."""
        if progress.due():
            print_fn(
                f"step {step:>7d}  loss {scalars['loss']:.4f}  precision "
                f"{scalars['precision']:.4f}  lr {scalars['learning_rate']:.4g}  "
                f"{scalars['images_per_sec']:.1f} images/s  {progress.text()}"
            )
        if step % self.cfg.log_every == 0 or step >= self.cfg.train_steps:
            self.log.train(step, scalars, progress.fields())

    def _announce(self, progress: Progress, first_call_s: float, print_fn, faster: str) -> None:
        """After the first timed call: what the whole run takes at that rate (the first call,
        which also traced and compiled the step, shown apart), and a warning naming the faster
        paths where that is over a day."""
        left, now = progress.seconds_left(), time.time()
        images_per_s, steps = progress.rate() * self.cfg.batch_size, progress.total - progress.done
        print_fn(
            f"the first call took {first_call_s:.1f} s (tracing and compiling the step); at "
            f"{images_per_s:.1f} images/s the {steps:,} steps left take {duration(left)} "
            f"(finish {clock(finish_at(left, now), now)}; evaluations not counted)"
        )
        if left > DAY_S:
            print_fn(slow_run_warning(left, faster))

    def _out_of_time(self, run_start: float) -> bool:
        return self.time_budget_s is not None and self.agreed_flag(
            time.perf_counter() - run_start >= self.time_budget_s
        )

    def save_if_new(self) -> None:
        """:meth:`save`, unless the latest checkpoint is already of this step. A write that
        fails (:attr:`unwritable`) leaves nothing half-written (:meth:`remove_partial`) and
        raises StorageError, one line: the latest checkpoint is still the one before."""
        if self._saved_step == self.step:
            return
        try:
            self.save()
        except self.unwritable as e:
            self.remove_partial()
            raise storage.storage_error(
                f"the checkpoint of step {self.step}",
                self.model_dir,
                e,
                self.latest_checkpoint() or "the start",
            ) from None

    def preempted_message(self) -> str:
        return (
            f"preempted at step {self.step}: a checkpoint of that step is in "
            f"{self.model_dir}; rerun the same command to resume"
        )

    def _scalars(self, step, num_steps, totals, steps_per_s) -> dict:
        """The progress scalars of one call (``health.scalars`` of its totals, the weight norm,
        the learning rate and images/s at ``steps_per_s``); TrainingDiverged, naming them and
        the last healthy record's, when the loss is not finite."""
        scalars = self._health(totals, num_steps)
        if not math.isfinite(scalars["loss"]):
            raise TrainingDiverged(
                f"loss is {scalars['loss']} at step {step}: training diverged ("
                f"{self._health_before(scalars)}); the latest checkpoint "
                f"({self.latest_checkpoint() or 'none yet'}) is the last good one; lower "
                "--learning_rate or check the input data"
            )
        self._last_scalars = {"step": step, **scalars}
        return self._record(scalars, steps_per_s * self.cfg.batch_size)

    def _record(self, scalars: dict, images_per_s: float) -> dict:
        """A record of ``train.jsonl`` from a call's health (:meth:`_scalars`): the loss, the
        precision, the rate of the next update, images/s, then the health."""
        rest = {k: v for k, v in scalars.items() if k not in ("loss", "precision")}
        return {
            "loss": scalars["loss"],
            "precision": scalars["precision"],
            "learning_rate": self.learning_rate(),
            "images_per_sec": images_per_s,
            **rest,
        }

    def _evaluate_and_log(self, eval_source, step, scalars, print_fn, final=False) -> dict:
        """Evaluate, print the test error, and log the evaluation (with its answers; the
        predicted classes too where ``final``)."""
        result = self.evaluate(eval_source)
        answers = result.pop("answers")
        kept = ("loss", "precision", "learning_rate", "images_per_sec")
        record = {
            "step": step,
            **result,
            **{
                f"train_{k}" if k in ("loss", "precision") else k: scalars[k]
                for k in kept
                if k in scalars
            },
        }
        print_fn(
            f"step {step:>7d}  test error {result['test_error']:.4f} "
            f"({result['test_examples']} images)"
        )
        self.log.evaluation(record, answers, final)
        return record

    def _health(self, totals: dict, num_steps: int) -> dict:
        """A call's logged values (``health.scalars``) and the weight norm after it."""
        return {**health.scalars(totals, num_steps), "weight_norm": self.weight_norm()}

    def _health_before(self, scalars: dict) -> str:
        """The health of a non-finite step and of the last record before it, in words."""
        before = self._last_scalars
        return health.text(scalars) + (
            f"; at step {before['step']}: {health.text(before)}" if before else ""
        )

    def replay(
        self, train_source, call_start: int, diverged_at: int, handler, print_fn, run_start
    ) -> str:
        """The divergence found at the end of the call from ``call_start`` to ``diverged_at``,
        replayed from the last good checkpoint: the steps before ``call_start -
        cfg.replay_divergence`` in calls as long as that one, then one step a call, each step's
        record (the loss, precision, rate and health of ``train.jsonl``) in
        ``<model_dir>/divergence/train.jsonl`` (``RunLog.divergence``), until the loss is
        non-finite again or step ``diverged_at`` is reached. The step-by-step health before a
        NaN that a record every ``log_every`` steps cannot show (arXiv:1611.04231's CIFAR-100
        rate, Section 4, diverges within tens of steps). Returns what it found, in words, for
        the divergence's line. The batches are the run's (the stream is a function of the step);
        on a CPU the replay is the run's own steps, bit for bit (tested); where a device's steps
        are not reproducible it may stay finite, and says so. It writes no checkpoint, and stops
        where the run's time budget (``time_budget_s``, from ``run_start``) is spent."""
        if not self.agreed_flag(self.latest_checkpoint() is not None):
            return "nothing replayed: no checkpoint before the divergence"
        start = self.restore(print_fn)
        source, first = self.restored_from, max(start, call_start - self.cfg.replay_divergence)
        log = self.log.divergence()
        print_fn(
            f"replaying the divergence from {source} (step {start}), steps {first + 1} to "
            f"{diverged_at} one at a time; each step's health in {log.model_dir}"
        )
        iterator, chunk = self.start(train_source, start), max(1, diverged_at - call_start)
        while self.step < first:
            if self._out_of_time(run_start):
                return f"the replay stopped at step {self.step}: the time budget was spent"
            totals = handler.run(self.run_steps, iterator, min(chunk, first - self.step))
            if not math.isfinite(totals["loss"]):
                return f"the replay from {source} diverged again by step {self.step}"
        self._last_scalars = None
        while self.step < diverged_at:
            if self._out_of_time(run_start):
                return (
                    f"the replay stopped at step {self.step}: the time budget was spent; the "
                    f"steps before it in {log.model_dir}"
                )
            t0 = time.perf_counter()
            totals = handler.run(self.run_steps, iterator, 1)
            seconds = time.perf_counter() - t0
            values = self._health(totals, 1)
            if not math.isfinite(values["loss"]):
                return (
                    f"replayed from {source} one step at a time from step {first + 1}: loss "
                    f"{values['loss']} at step {self.step} ({self._health_before(values)}), "
                    f"every step before it in {log.model_dir}"
                )
            self._last_scalars = {"step": self.step, **values}
            log.train(self.step, self._record(values, self.cfg.batch_size / seconds))
        return (
            f"replayed from {source} one step at a time from step {first + 1}: finite to step "
            f"{diverged_at} (this device's steps are not reproducible bit for bit), every step in "
            f"{log.model_dir}"
        )

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
        """SHA-256 of every weight's bytes (:func:`weights_digest`): equal on all workers of a
        synchronous job."""
        return weights_digest(self.model.weights)


class _Throughput:
    """Images trained and seconds spent in training calls (evaluations and saves excluded)."""

    def __init__(self):
        self.images, self.seconds = 0, 0.0

    def add(self, images: int, seconds: float) -> None:
        self.images += images
        self.seconds += seconds

    def rate(self) -> float | None:
        return round(self.images / self.seconds, 2) if self.seconds else None


def weights_digest(weights) -> str:
    """The first 16 hex digits of the SHA-256 of ``weights``' bytes, in order (a model's
    ``weights``: what a run's ``weights_sha256`` is, and an exported model's)."""
    digest = hashlib.sha256()
    for weight in weights:
        digest.update(np.ascontiguousarray(ops.convert_to_numpy(weight)).tobytes())
    return digest.hexdigest()[:16]


def errors(totals: np.ndarray, top5: bool) -> dict:
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


def slow_run_warning(seconds_left: float, faster: str = "") -> str:
    """One line for a run projected to take over a day: how long, and the faster paths."""
    return (
        f"warning: at this rate the run takes {duration(seconds_left)} more on this machine; "
        f"faster: {faster or 'a GPU, or fewer --train_steps (the time is proportional to them)'}"
    )


def next_multiple(step: int, interval: int) -> int:
    return (step // interval + 1) * interval


def unreadable_checkpoint_line(
    path: str, error: Exception, then: str = "trying the one before it"
) -> str:
    """The warning printed for a checkpoint that cannot be restored (``then``: what happens
    instead; a resume tries the one before): the error's type and the first line of its
    message, where it has one."""
    kind, said = type(error).__name__, first_line(error)
    why = kind if said == kind else f"{kind}: {said}"
    return f"warning: checkpoint {path} cannot be restored ({why}); {then}"


def no_checkpoint_message(model_dir: str, paths: list[str]) -> str:
    return (
        f"no checkpoint in {model_dir} can be restored (tried "
        f"{', '.join(paths)}); move them away to start afresh"
    )
