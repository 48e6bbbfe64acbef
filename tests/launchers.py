"""The repository's launchers run as a user runs them: `python launch/NAME.py ...` in a
process of its own, its output captured, TensorFlow's C++ log quiet. The process forks from a
warm one where it can (tests/warm_start.py). Shared by the tests that drive a launcher end to
end."""

import io
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import warm_start

REPO = Path(__file__).resolve().parents[1]


WARM = warm_start.WarmProcesses()


def start(
    argv: list,
    env: dict,
    stdout,
    stderr,
    cwd=None,
    new_session: bool = False,
    unimportable: tuple = (),
):
    """``argv`` started as ``subprocess.Popen(..., text=True)`` starts it, forked from a warm
    process where it can be (tests/warm_start.py: the backend's library imported once): the
    process, or an object that answers as one (pid, poll, wait, returncode, send_signal, kill;
    ``stdout`` to read where it is ``subprocess.PIPE``). ``stderr`` a file or ``STDOUT``. Each
    module of ``unimportable`` fails to import in it (``argv[1]`` run by ``python -c`` cold)."""
    path = WARM.path(argv, env, cwd)
    if path is not None:
        try:
            return forked(path, argv, env, stdout, stderr, cwd, new_session, unimportable)
        except warm_start.Gone:
            pass  # ended since it was found (WarmProcesses.MOST): cold
    if unimportable:
        argv = [argv[0], "-c", warm_start.blocked(argv[1], unimportable), *argv[2:]]
    return subprocess.Popen(
        argv,
        env=env,
        stdout=stdout,
        stderr=stderr,
        cwd=cwd,
        start_new_session=new_session,
        text=True,
    )


def forked(path, argv, env, stdout, stderr, cwd, new_session, unimportable):
    """:func:`start`'s warm launch: ``subprocess``'s stream arguments made file descriptors."""
    read = None
    with open(os.devnull, "w") as devnull:
        if stdout is subprocess.PIPE:
            read, stdout = os.pipe()
        streams = [stdout, stderr]
        for i, stream in enumerate(streams):
            if stream is subprocess.DEVNULL:
                streams[i] = devnull.fileno()
            elif stream is subprocess.STDOUT:
                streams[i] = streams[0]
            elif not isinstance(stream, int):
                streams[i] = stream.fileno()
        try:
            proc = warm_start.fork(path, argv, env, *streams, cwd, new_session, unimportable)
        except warm_start.Gone:
            if read is not None:
                os.close(read)
            raise
        finally:
            if read is not None:
                os.close(stdout)
    if read is not None:
        proc.stdout = open(read)
    return proc


def run(
    script: str,
    *args,
    env=None,
    timeout: float = 300,
    cwd=None,
    log_level: str = "2",
    unimportable: tuple = (),
):
    """The finished `python REPO/script args...` (:func:`start`), its output captured as text;
    env's entries are added to this process's variables (a None value removes that variable)."""
    variables = dict(os.environ, TF_CPP_MIN_LOG_LEVEL=log_level)
    for name, value in (env or {}).items():
        if value is None:
            variables.pop(name, None)
        else:
            variables[name] = value
    argv = [sys.executable, str(REPO / script), *map(str, args)]
    return finished(argv, variables, timeout, cwd, unimportable)


def finished(argv: list, env: dict, timeout: float = 300, cwd=None, unimportable: tuple = ()):
    """``subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout)``, the
    process started by :func:`start`."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = start(argv, env, out, err, cwd=cwd, unimportable=unimportable)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            raise
        texts = []
        for stream in (out, err):  # read as subprocess.run(text=True) reads: universal newlines
            stream.seek(0)
            texts.append(io.TextIOWrapper(io.BytesIO(stream.read())).read())
        return subprocess.CompletedProcess(argv, proc.returncode, *texts)


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
