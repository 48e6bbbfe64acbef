"""Whether a process still runs, by its id: the GPU lease's call watches its supervisor
(``ops/lease/call.py``), and the Table 2 planner sweeps the throwaway folders of timing runs
whose launcher was killed (``studies.table2_plan``)."""

from __future__ import annotations

import os


def running(pid: int) -> bool:
    """Whether process ``pid`` runs: one of another user's counts (``os.kill`` refused), a
    zombie (ended, its parent yet to read its exit status) does not."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:  # bytes: a process's name need not be UTF-8
            return f.read().rsplit(b") ", 1)[1][:1] != b"Z"
    except FileNotFoundError:  # ended since os.kill, or no /proc (not Linux): os.kill's answer
        return not os.path.isdir("/proc")
