"""The repository's launchers run as a user runs them: `python launch/NAME.py ...` in a
subprocess, its output captured, TensorFlow's C++ log quiet. Shared by the tests that drive a
launcher end to end."""

import os
import subprocess
import sys
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def run(script: str, *args, env=None, timeout: float = 300, cwd=None, log_level: str = "2"):
    """The finished `python REPO/script args...`; env's entries are added to this process's
    variables (a None value removes that variable)."""
    variables = dict(os.environ, TF_CPP_MIN_LOG_LEVEL=log_level)
    for name, value in (env or {}).items():
        if value is None:
            variables.pop(name, None)
        else:
            variables[name] = value
    return subprocess.run(
        [sys.executable, str(REPO / script), *map(str, args)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=variables,
        cwd=cwd,
    )


# what a launcher that refuses its flags must not have loaded: a backend (seconds of CPU each)
BACKEND_MODULES = frozenset({"keras", "tensorflow", "jax", "torch"})
# set in a launch's env: Python names every module it imports on stderr (``-X importtime``)
IMPORT_TIMES = {"PYTHONPROFILEIMPORTTIME": "1"}


def imported(proc: subprocess.CompletedProcess) -> set[str]:
    """The modules a process launched with ``env=IMPORT_TIMES`` imported."""
    prefix = "import time:"
    return {
        line.rsplit("|", 1)[-1].strip()
        for line in proc.stderr.splitlines()
        if line.startswith(prefix) and "|" in line
    }


def run_many(launches: list[Callable[[], subprocess.CompletedProcess]], at_once: int = 2) -> list:
    """Each of ``launches`` called, ``at_once`` at a time: their finished processes, in order.
    For launches refused before training (a bad flag, broken data, a bad TF_CONFIG): their time
    is TensorFlow's import, on one core, so two overlap on a 2-core machine."""
    with ThreadPoolExecutor(at_once) as pool:
        return list(pool.map(lambda launch: launch(), launches))
