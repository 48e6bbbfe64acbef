"""The one-line errors of bad input, which the launchers report as ``error: ...`` and exit 2,
and the exit status of a preempted run."""

PREEMPTED_EXIT = 3  # SIGTERM or SIGINT: a checkpoint of the step reached saved; rerun to resume


class DataError(ValueError):
    """Bad data input; str(e) is ONE line naming the problem and the fix."""


class InputError(ValueError):
    """Bad command-line input; its message is one line naming the problem and the fix."""


class Preempted(RuntimeError):
    """SIGTERM or SIGINT stopped training; a checkpoint of the step reached was saved first."""


class TimeBudgetReached(Preempted):
    """--time_budget_s ran out; a checkpoint of the step reached was saved first (exit 3, as a
    preemption: rerunning resumes)."""
