"""What a training run leaves beside its checkpoints, for people to read and to look at.

* TensorBoard summaries: ``<model_dir>/train`` (loss, learning rate, train precision, images/s)
  and ``<model_dir>/eval`` (test error and precision), as the original ``resnet_main.py`` wrote.
* ``<model_dir>/metrics.jsonl``: one JSON object per evaluation on the whole test split.
* ``<model_dir>/train.jsonl``: one JSON object per progress record (step, loss, precision,
  learning rate, images/s, and the run's health: the cross-entropy and weight-decay terms, the
  gradient and weight norms, the largest |logit|; ``trainers.health``): the training curves.
* ``<model_dir>/answers.jsonl``: which test images each evaluation got right, and the final
  evaluation's predicted classes (``trainers.answers``).
* ``<model_dir>/test_error.png``: test (and train) error against step, like the paper's Figure 1,
  redrawn from ``metrics.jsonl``: after an evaluation at most every ``redraw_every_s`` seconds
  (``--redraw_every_s``, default 10: a redraw costs about 0.1 s of CPU, so drawing stays under
  1% of a run whose evaluations come fast), after the last one, and as a run stops, so it
  shows every evaluation written; a resumed run's shows its whole curve.
* ``<model_dir>/divergence/``, where a run diverged with ``--replay_divergence``: its last steps
  replayed one at a time (``trainers.loop.TrainLoop.replay``), ``train.jsonl`` a record per step
  (TensorBoard's ``train/`` beside it) and ``health.png`` drawn from it (``runs.cli``).

(``<model_dir>/config.json``, the run's record, is ``runs.record``'s.)

Only the chief of a multi-worker job writes them (``enabled=False`` elsewhere). No TensorFlow:
the summaries are written by the tensorboard package's own writer, on every backend.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import shutil
import threading
import time

from tensorboard.summary import Writer

from resnet_noBN.configs.recipe_config import TrainConfig
from resnet_noBN.host import storage
from resnet_noBN.trainers.answers import ANSWERS_FILE, Answers

METRICS_FILE = "metrics.jsonl"
TRAIN_FILE = "train.jsonl"
PLOT_FILE = "test_error.png"
DIVERGENCE_DIR = "divergence"  # a divergence replayed step by step
HEALTH_PLOT = "health.png"
RECORD_FILES = (METRICS_FILE, TRAIN_FILE, ANSWERS_FILE)  # a record a step each, appended
TRAIN_DIR, EVAL_DIR = "train", "eval"  # TensorBoard's, a writer each
EVENTS_MARK = "tfevents"  # in the name of every file TensorBoard reads as an event file
RECORD_FRAMING = 16  # bytes around each event in its file: length 8, its CRC 4, the data's CRC 4
# an event file rewritten on resume, before its rename (a name TensorBoard does not read)
RESUME_TEMPORARY = ".resume" + storage.TEMPORARY_SUFFIX


def read_metrics(model_dir: str, name: str = METRICS_FILE) -> list[dict]:
    """The records of ``name`` (the evaluations, or ``TRAIN_FILE``: the progress lines), oldest
    first; a later one at the same step wins (a run resumed by an older version repeated the
    steps after its checkpoint: :meth:`RunLog.resume_at` drops them now)."""
    path = os.path.join(model_dir, name)
    if not os.path.exists(path):
        return []
    by_step = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.strip():
                record = json.loads(line)
                by_step[record["step"]] = record
    return [by_step[step] for step in sorted(by_step)]


def _drop_after(model_dir: str, name: str, step: int) -> bool:
    """Rewrite the records file ``name`` without its records past ``step``, and a line cut
    short (a kill as it was appended); whether anything was dropped."""
    path = os.path.join(model_dir, name)
    if not os.path.exists(path):
        return False
    with open(path, encoding="utf-8") as f:
        lines = f.readlines()
    steps = [_step_of(line) for line in lines]
    kept = [line for line, at in zip(lines, steps) if at is not None and at <= step]
    if len(kept) == len(lines):
        return False
    storage.atomic_write(path, lambda f: f.write("".join(kept).encode()))
    return True


def _drop_events_after(folder: str, step: int) -> None:
    """Rewrite each TensorBoard event file in ``folder`` without its events past ``step`` (its
    version event, at step 0, kept) and a record cut short (a kill as it was written: the loader
    stops there). Each file is written first under a name without "tfevents", which TensorBoard
    would read as one more file of the run."""
    from tensorboard.backend.event_processing.event_file_loader import RawEventFileLoader
    from tensorboard.compat.proto.event_pb2 import Event
    from tensorboard.summary.writer.record_writer import RecordWriter

    names = sorted(os.listdir(folder)) if os.path.isdir(folder) else []
    for path in [os.path.join(folder, name) for name in names if EVENTS_MARK in name]:
        kept = [r for r in RawEventFileLoader(path).Load() if Event.FromString(r).step <= step]
        if sum(len(r) + RECORD_FRAMING for r in kept) == os.path.getsize(path):
            continue

        def write(f, kept=kept):
            writer = RecordWriter(f)
            for record in kept:
                writer.write(record)

        storage.atomic_write(path, write, os.path.join(folder, RESUME_TEMPORARY))


def _step_of(line: str) -> int | None:
    """The step of a records line (None: a line cut short, or no record)."""
    try:
        return json.loads(line)["step"] if line.endswith("\n") else None
    except (ValueError, KeyError, TypeError):
        return None


def plot_error_curve(records: list[dict], path: str, title: str) -> None:
    """Test error (and train error at the same steps) in % against step, as a PNG."""
    plot_error_curves({"": records}, path, title)


def plot_error_curves(runs: dict[str, list[dict]], path: str, title: str) -> None:
    """Several runs' evaluations (``read_metrics``) in one PNG, by name, a colour each: test
    error in % against step (solid), and the train error of the recent batches at the same steps
    (dashed) where recorded."""
    from resnet_noBN import plotting  # matplotlib only where a curve is drawn

    many = len(runs) > 3  # a legend that would hide the curves goes beside them
    fig, (ax,) = plotting.figure(width=11.0 if many else 6.0, height=4.5 if many else 4.0)
    for i, (name, records) in enumerate(runs.items()):
        prefix, colour = f"{name}: " if name else "", plotting.colour(i)
        steps = [r["step"] for r in records]
        test = [100 * r["test_error"] for r in records]
        ax.plot(steps, test, "o-", color=colour, label=f"{prefix}test error")
        if all("train_precision" in r for r in records):
            train = [100 * (1 - r["train_precision"]) for r in records]
            ax.plot(
                steps, train, "s--", color=colour, label=f"{prefix}train error (recent batches)"
            )
    ax.set_xlabel("step (one gradient update)")
    ax.set_ylabel("top-1 error (%)")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    if many:
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    else:
        ax.legend(fontsize=8)
    plotting.save(fig, path)


def _write_errors() -> tuple[type[Exception], ...]:
    """What a failed write raises here: an OSError, or TensorBoard's writer's error
    (TensorFlow's file-system errors, or tensorboard's stand-ins for them without TensorFlow)."""
    from tensorboard.compat import tf  # resolved where the writer has already resolved it

    return (OSError, tf.errors.OpError)


def _quiet_writer_thread(args, previous=threading.excepthook) -> None:
    """``threading.excepthook`` that leaves out the TensorBoard writer thread's failures: the
    writer raises them again in the training thread, where they become one line."""
    if type(args.thread).__name__ != "_AsyncWriterThread":
        previous(args)


class RunLog:
    """Summaries, metrics file and plot of one run in ``model_dir``. A write that fails (a full
    disk, any OSError) raises StorageError, one line naming the folder; a line of the .jsonl
    files is written whole or not at all (``storage.append_line``)."""

    def __init__(
        self,
        model_dir: str,
        title: str,
        enabled: bool = True,
        redraw_every_s: float = TrainConfig.redraw_every_s,  # --redraw_every_s's default
    ):
        self.model_dir, self.title, self.enabled = model_dir, title, enabled
        self.redraw_every_s = redraw_every_s
        self._drawn_at, self._owed = time.monotonic(), False  # the plot's last redraw; one owed

    # opened at the first scalar: a trainer that only restores and evaluates writes nothing
    @functools.cached_property
    def _train_writer(self) -> Writer:
        return self._writer(TRAIN_DIR)

    @functools.cached_property
    def _eval_writer(self) -> Writer:
        return self._writer(EVAL_DIR)

    def _writer(self, name: str) -> Writer:
        threading.excepthook = _quiet_writer_thread
        return Writer(os.path.join(self.model_dir, name))

    @contextlib.contextmanager
    def _writing(self, what: str):
        """A failed write of ``what`` inside as StorageError."""
        try:
            yield
        except Exception as e:
            if not isinstance(e, _write_errors()):
                raise
            raise storage.storage_error(what, self.model_dir, e, "the latest checkpoint") from None

    def resume_at(self, step: int) -> None:
        """Drop the records past ``step`` (the checkpoint a run resumes from; 0: none, the run
        starts clean) from ``metrics.jsonl``, ``train.jsonl``, ``answers.jsonl`` and the event
        files of TensorBoard's ``train/`` and ``eval/``, each file replaced whole
        (``storage.atomic_write``), and redraw the plot where an evaluation went: the steps
        trained again after a stop are then recorded once. A file with nothing past ``step`` is
        left as it is (an older version's repeated records among them: the readers keep the last
        of each step)."""
        if not self.enabled:
            return
        with self._writing(f"the records past step {step} ({METRICS_FILE}, {TRAIN_FILE})"):
            dropped = [name for name in RECORD_FILES if _drop_after(self.model_dir, name, step)]
            for name in (TRAIN_DIR, EVAL_DIR):
                _drop_events_after(os.path.join(self.model_dir, name), step)
            if METRICS_FILE in dropped:
                records, path = (
                    read_metrics(self.model_dir),
                    os.path.join(self.model_dir, PLOT_FILE),
                )
                if records:
                    plot_error_curve(records, path, self.title)
                elif os.path.exists(path):
                    os.remove(path)

    def evaluation_at(self, step: int) -> dict | None:
        """The record of ``metrics.jsonl`` at ``step`` (None: not evaluated there)."""
        return next((r for r in read_metrics(self.model_dir) if r["step"] == step), None)

    def divergence(self) -> RunLog:
        """The log of a divergence replayed (``<model_dir>/divergence/``), emptied of an
        earlier replay's records."""
        folder = os.path.join(self.model_dir, DIVERGENCE_DIR)
        if self.enabled:
            with self._writing(f"the replay's folder {folder}"):
                shutil.rmtree(folder, ignore_errors=True)
                os.makedirs(folder)
        return RunLog(folder, self.title, self.enabled)  # its records, no evaluation

    def train(self, step: int, scalars: dict[str, float], more: dict | None = None) -> None:
        """TensorBoard scalars of the training run at ``step``, and a line of ``train.jsonl``
        (the scalars and ``more``: the progress, elapsed_s, time_left_s, finish)."""
        if not self.enabled:
            return
        with self._writing(f"the training log ({TRAIN_FILE}, train/) of step {step}"):
            self._write(self._train_writer, step, scalars)
            storage.append_line(
                os.path.join(self.model_dir, TRAIN_FILE),
                json.dumps({"step": step, **scalars, **(more or {})}),
            )

    def evaluation(self, record: dict, answers: Answers | None = None, final: bool = False) -> None:
        """One evaluation: TensorBoard, a line of ``metrics.jsonl`` and of ``answers.jsonl``
        (where the evaluation numbered its images; the predicted classes too where ``final``),
        and the PNG redrawn where ``final`` or ``redraw_every_s`` have passed since the last
        redraw (or since the log was opened); else the redraw is owed (:meth:`draw`)."""
        if not self.enabled:
            return
        with self._writing(f"the evaluation of step {record['step']} ({METRICS_FILE}, eval/)"):
            self._write(
                self._eval_writer,
                record["step"],
                {k: v for k, v in record.items() if k in ("test_error", "test_precision")},
            )
            if answers is not None:
                storage.append_line(
                    os.path.join(self.model_dir, ANSWERS_FILE), answers.line(record["step"], final)
                )
            storage.append_line(os.path.join(self.model_dir, METRICS_FILE), json.dumps(record))
        self._owed = True
        if final or time.monotonic() - self._drawn_at >= self.redraw_every_s:
            self.draw()

    def draw(self) -> None:
        """Redraw the PNG from ``metrics.jsonl`` where an evaluation since the last redraw owes
        it (a run stopping calls it: its plot then shows every evaluation written)."""
        if not (self.enabled and self._owed):
            return
        with self._writing(f"the plot {PLOT_FILE}"):
            plot_error_curve(
                read_metrics(self.model_dir), os.path.join(self.model_dir, PLOT_FILE), self.title
            )
        self._drawn_at, self._owed = time.monotonic(), False

    def best_test_error(self) -> float | None:
        """The lowest test error over the evaluations in ``metrics.jsonl`` (None if none).

        Labelled as such wherever printed: the original code logged this optimistic figure.
        """
        records = read_metrics(self.model_dir) if self.enabled else []
        return min(r["test_error"] for r in records) if records else None

    @staticmethod
    def _write(writer, step: int, scalars: dict[str, float]) -> None:
        for name, value in scalars.items():
            writer.add_scalar(name, value, step)
        writer.flush()
