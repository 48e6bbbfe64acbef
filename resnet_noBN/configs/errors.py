"""The one-line errors of bad input, which the launchers report as ``error: ...`` and exit 2,
of a failed write into the run's folder, of a run that diverged or cannot be restored, and the
exit statuses of a preempted run and of that write, and :func:`say`, which writes such a line
(:func:`first_line`: what one quotes of another error).
No Keras: a launcher catches them before any backend loads.

Exit status: 0 trained; 1 the loss diverged; 2 bad input, before anything is written;
:data:`PREEMPTED_EXIT` preempted; :data:`STORAGE_EXIT` a write into the run's folder failed;
:data:`PEER_LOST_EXIT` a peer of a multi-process job died or stopped answering.
"""

import sys

PREEMPTED_EXIT = 3  # SIGTERM or SIGINT: a checkpoint of the step reached saved; rerun to resume
# A checkpoint, log or config.json write failed (no space left, any OSError): the latest whole
# checkpoint stays the latest and restorable; free space (or move the run) and rerun to resume
STORAGE_EXIT = 4
# Another task of a multi-worker, parameter-server or multi-process job died or stopped answering
# within the bounded wait: nothing of this task's was damaged; rerun the job to resume from its
# latest checkpoint
PEER_LOST_EXIT = 5


class DataError(ValueError):
    """Bad data input; str(e) is ONE line naming the problem and the fix."""


class InputError(ValueError):
    """Bad command-line input; its message is one line naming the problem and the fix."""


class Preempted(RuntimeError):
    """SIGTERM or SIGINT stopped training; a checkpoint of the step reached was saved first."""


class TimeBudgetReached(Preempted):
    """--time_budget_s ran out; a checkpoint of the step reached was saved first (exit 3, as a
    preemption: rerunning resumes)."""


class StorageError(RuntimeError):
    """A write into the run's folder failed (a full disk, any OSError); str(e) is ONE line naming
    the folder and the fix. What the write left half-done is removed; the checkpoints before it
    stay restorable."""


class CheckpointError(RuntimeError):
    """No checkpoint of ``model_dir`` can be restored; one line naming them (exit 2)."""


class TrainingDiverged(RuntimeError):
    """The loss became NaN or infinite; the latest checkpoint is the last good one (exit 1)."""


def say(line: str) -> None:
    """Write ``line`` and its newline to stderr in one write, flushed. ``print`` writes the text
    and the newline apart, and a thread of TensorFlow's or JAX's logging to the same stream in
    between (gRPC's "failed to connect" as a peer dies) would end the line with its own text."""
    sys.stderr.write(f"{line}\n")
    sys.stderr.flush()


def first_line(error: object, limit: int | None = 200) -> str:
    """The first line of an error's message (or of a text), at most ``limit`` characters: what
    a one-line error quotes of another (TensorFlow's messages go on with the graph's call
    stack). An error with no message gives its type's name, an empty text "no message"."""
    lines = str(error).strip().splitlines()
    if lines:
        return lines[0][:limit]
    return type(error).__name__ if isinstance(error, BaseException) else "no message"
