"""Launches that start warm. A warm process imports what every launch on its Keras backend
imports: TensorFlow, JAX or PyTorch, and matplotlib (about 4 s of CPU for TensorFlow). Then it
forks one child per launch of ``launch/*.py``. The child is the launch. It has its own pid,
session, exit status, signals, standard streams, folder and environment, as a cold
``python launch/NAME.py`` has.

Only the imports are shared. TensorFlow imports Keras with it; JAX and PyTorch do not, and
their warm processes leave Keras to the launch. The TensorFlow warm process also lists the
devices, once: TensorFlow's probe of CUDA writes an error line where there is none. A launcher
that refuses its flags sees Keras loaded, and may list them too; the line would then stand
before its own. So a warm launch never writes that line, where a cold one that trains does.

Each set of variables read at import (:func:`reads_at_import`) has a warm process of its own. A
launch starts cold where the tests measure a process itself (its imports, its coverage), or
outside ``launch/``.

The fork is safe here. The warm process runs no TensorFlow or JAX op before it forks: no
runtime, no thread pool (listing the devices starts neither). It runs no Python thread. Its
children start every runtime themselves.
The entry points' first call, ``host.cpu.default_onednn``, runs in the warm process before
TensorFlow loads, as in a cold launch; the child keeps that decision and its reason.

Run as ``python tests/warm_start.py SOCKET``. It serves that Unix socket until its owner (the
pytest worker) ends, then waits for its children.
"""

import array
import importlib
import json
import os
import select
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
LAUNCHERS = REPO / "launch"
BACKENDS = ("tensorflow", "jax", "torch")  # KERAS_BACKEND names, each the module it imports
# the variables read at import: the prefixes and names below, Python's start-up among them (its
# locale, its time zone, the temporary folder that ``tempfile`` finds once)
IMPORT_PREFIXES = (
    "PYTHON",
    "KERAS_",
    "JAX_",
    "XLA_",
    "TF_",
    "OMP_",
    "MKL",
    "OPENBLAS_",
    "LD_",
    "LC_",
)
IMPORT_NAMES = (
    "MPLBACKEND",
    "MPLCONFIGDIR",
    "CUDA_VISIBLE_DEVICES",
    "HOME",
    "LANG",
    "LANGUAGE",
    "TZ",
    "TMPDIR",
    "TEMP",
    "TMP",
)
RUNTIME_ONLY = ("TF_CONFIG",)  # read when a strategy starts, not at import
# where the tests measure each process itself: what it imports, the lines it runs
ALWAYS_COLD = ("PYTHONPROFILEIMPORTTIME", "COVERAGE_PROCESS_START")
STARTED: list[subprocess.Popen] = []  # the warm processes, kept while this process lives
ONEDNN = "TF_ENABLE_ONEDNN_OPTS"


def reads_at_import(name: str) -> bool:
    """Whether a library the launchers import reads the variable ``name`` as it is imported."""
    if name in RUNTIME_ONLY:
        return False
    return name.startswith(IMPORT_PREFIXES) or name in IMPORT_NAMES


def import_variables(env: dict) -> dict:
    return {k: v for k, v in env.items() if reads_at_import(k)}


# ------------------------------------------------------------------------- the warm process
def serve(path: str) -> dict | None:
    """Imports what every launch on the backend imports (its library, matplotlib), then serves
    ``path``'s requests. In the warm process it returns None once its owner has gone; in each
    forked child it returns that child's request."""
    from resnet_noBN.host import cpu

    cpu.default_onednn()
    backend = importlib.import_module(os.environ.get("KERAS_BACKEND", "tensorflow"))
    if backend.__name__ == "tensorflow":  # its probe of CUDA, an error line where none is
        backend.config.list_physical_devices()
    import resnet_noBN.plotting  # noqa: F401  (matplotlib, its backend chosen)

    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(16)
    print("ready", flush=True)
    children: dict[int, socket.socket] = {}  # a child's pid: the connection that asked for it
    owner_gone = False
    while not owner_gone or children:
        # once its owner has gone, only its children are waited for (stdin at its end would be
        # readable at every call, a loop that spins)
        watched = [] if owner_gone else [listener, sys.stdin]
        readable, _, _ = select.select(watched, [], [], 0.01)
        if sys.stdin in readable and not sys.stdin.buffer.read1(1):
            owner_gone = True  # its pipe closed: serve no more (a launch then starts cold)
            listener.close()
            os.unlink(path)
            os.rmdir(os.path.dirname(path))
            continue
        if listener in readable:
            connection, _ = listener.accept()
            request, fds = receive(connection)
            sys.stdout.flush()
            sys.stderr.flush()
            pid = os.fork()
            if pid == 0:
                listener.close()
                connection.close()
                for child in children.values():
                    child.close()
                return {**request, "fds": fds}
            for fd in fds:
                os.close(fd)
            connection.sendall(f"{pid}\n".encode())
            children[pid] = connection
        while children:
            pid, status = os.waitpid(-1, os.WNOHANG)
            if pid == 0:
                break
            connection = children.pop(pid)
            try:
                connection.sendall(f"{os.waitstatus_to_exitcode(status)}\n".encode())
            except OSError:
                pass  # its asker gone
            connection.close()
    return None


def receive(connection: socket.socket) -> tuple[dict, list[int]]:
    """A request: its JSON (argv, env, cwd, new_session) and its three standard streams' fds."""
    fds = array.array("i")
    data, ancillary, _, _ = connection.recvmsg(1 << 20, socket.CMSG_SPACE(3 * fds.itemsize))
    for level, kind, payload in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(payload[: len(payload) - len(payload) % fds.itemsize])
    return json.loads(data), list(fds)


def become(request: dict) -> None:
    """The forked child made the launch it was asked for: its session, streams, folder,
    environment, arguments, then the launcher run as ``__main__``. Python's own exit follows."""
    if request["new_session"]:
        os.setsid()
    for target, fd in enumerate(request["fds"]):
        os.dup2(fd, target)
        os.close(fd)
    os.chdir(request["cwd"])
    from resnet_noBN.host import cpu

    decided = os.environ.get(ONEDNN)
    reason = cpu.ONEDNN_REASON
    os.environ.clear()
    os.environ.update(request["env"])
    if decided is not None:
        os.environ[ONEDNN] = decided
    cpu.default_onednn = lambda: reason  # decided in the warm process, before TensorFlow loaded
    for name in request["unimportable"]:
        assert sys.modules.get(name) is None, f"the warm process imported {name}"
        sys.modules[name] = None  # any import of it fails, as in a cold launch made so
    script = request["argv"][1]
    sys.argv = request["argv"][1:]
    sys.path[0] = os.path.dirname(os.path.abspath(script))
    import runpy

    runpy.run_path(script, run_name="__main__")


# --------------------------------------------------------------------- the pytest worker's side
class Gone(Exception):
    """The warm process ended before it forked the launch: start it cold."""


class WarmProcess:
    """A warm launch, as ``subprocess.Popen`` shows a process: ``pid``, ``poll``, ``wait``,
    ``returncode`` (minus the signal that ended it), ``communicate``, ``send_signal``, ``kill``,
    ``terminate``.
    Its exit status comes from the warm process, whose child it is."""

    def __init__(self, connection: socket.socket, args: list[str]):
        self.args = args
        self.stdout = None  # a file to read where it was asked for as subprocess.PIPE
        self._connection = connection
        self._reply = b""
        self.pid = int(self._line(None))
        self.returncode = None

    def _line(self, timeout: float | None) -> str | None:
        while b"\n" not in self._reply:
            self._connection.settimeout(timeout)
            try:
                chunk = self._connection.recv(64)
            except (TimeoutError, BlockingIOError):
                return None
            if not chunk:
                raise Gone(f"the warm process ended during {self.args}")
            self._reply += chunk
        line, self._reply = self._reply.split(b"\n", 1)
        return line.decode()

    def poll(self) -> int | None:
        if self.returncode is None:
            line = self._line(0)
            if line is not None:
                self.returncode = int(line)
                self._connection.close()
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            line = self._line(timeout)
            if line is None:
                raise subprocess.TimeoutExpired(self.args, timeout)
            self.returncode = int(line)
            self._connection.close()
        return self.returncode

    def communicate(self, timeout: float | None = None) -> tuple[str | None, None]:
        out = self.stdout.read() if self.stdout is not None else None
        self.wait(timeout)
        return out, None

    def send_signal(self, signum: int) -> None:
        if self.returncode is None:
            os.kill(self.pid, signum)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


class WarmProcesses:
    """This pytest worker's warm processes, one for each set of variables read at import (the
    Keras backend among them). Each starts at the second launch that needs it: the first
    starts cold, so a set used once costs nothing more. At most :attr:`MOST` run; a new one
    ends the one used longest ago. All end with the worker. ``RESNET_NOBN_TESTS_COLD=1`` in the
    tests' environment starts every launch cold."""

    MOST = 4  # a TensorFlow one holds about 0.7 GB, shared with its children

    def __init__(self):
        self._started: dict[tuple, tuple[subprocess.Popen, str]] = {}  # by last use, oldest first
        self._seen: set[tuple] = set()
        self._lock = threading.Lock()
        self.counts = {"warm": 0, "cold": 0}

    def path(self, argv: list, env: dict, cwd=None) -> str | None:
        """The socket of the warm process to fork ``argv`` (``[sys.executable, launch/NAME.py,
        ...]``, from ``cwd``) from, with ``env``; None where it starts cold."""
        found = None
        if self.may_be_warm(argv, env, cwd):
            key = tuple(sorted(import_variables(env).items()))
            with self._lock:
                if key in self._started:
                    self._started[key] = self._started.pop(key)  # the newest used
                elif key in self._seen:
                    if len(self._started) == self.MOST:
                        oldest = next(iter(self._started))
                        self._started.pop(oldest)[0].stdin.close()  # it ends (serve)
                    self._started[key] = start_warm(env)
                self._seen.add(key)
                found = self._started.get(key, (None, None))[1]
        self.counts["cold" if found is None else "warm"] += 1
        return found

    @staticmethod
    def may_be_warm(argv: list, env: dict, cwd=None) -> bool:
        """Whether ``argv`` is a launcher whose imports a warm process can hold for it: not
        where the tests measure imports (``PYTHONPROFILEIMPORTTIME``) or coverage per process,
        not on a backend it does not know, not where they ask for every launch cold."""
        script = Path(cwd or os.getcwd(), argv[1]).resolve() if len(argv) > 1 else None
        return (
            os.environ.get("RESNET_NOBN_TESTS_COLD") != "1"
            and not any(name in env for name in ALWAYS_COLD)
            and argv[0] == sys.executable
            and script is not None
            and script.parent == LAUNCHERS
            and env.get("KERAS_BACKEND", "tensorflow") in BACKENDS
        )


def start_warm(env: dict) -> tuple[subprocess.Popen, str]:
    """A warm process started with ``env``, ready, and the path of its socket. It ends once its
    standard input is closed (by its owner, or as its owner ends) and its children have."""
    path = os.path.join(tempfile.mkdtemp(prefix="resnet_noBN-warm-"), "socket")
    log = tempfile.TemporaryFile()
    proc = subprocess.Popen(
        [sys.executable, __file__, path],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=log,
        env=env,
        text=True,
    )
    if proc.stdout.readline() != "ready\n":
        log.seek(0)
        raise RuntimeError(f"the warm process failed: {log.read().decode()[-3000:]}")
    STARTED.append(proc)
    return proc, path


def fork(
    path: str,
    argv: list,
    env: dict,
    stdout: int,
    stderr: int,
    cwd,
    new_session: bool,
    unimportable: tuple = (),
):
    """A :class:`WarmProcess`: ``argv`` forked from the warm process at ``path``, its standard
    streams /dev/null and the file descriptors ``stdout`` and ``stderr``, the modules named in
    ``unimportable`` made so."""
    connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        connection.connect(path)
    except OSError as e:  # it was ended since (WarmProcesses.MOST)
        connection.close()
        raise Gone(path) from e
    request = {
        "argv": [str(a) for a in argv],
        "env": dict(env),
        "cwd": str(cwd or os.getcwd()),
        "new_session": new_session,
        "unimportable": list(unimportable),
    }
    with open(os.devnull) as stdin:
        connection.sendmsg(
            [json.dumps(request).encode()],
            [
                (
                    socket.SOL_SOCKET,
                    socket.SCM_RIGHTS,
                    array.array("i", [stdin.fileno(), stdout, stderr]),
                )
            ],
        )
    return WarmProcess(connection, request["argv"])


if __name__ == "__main__":
    asked = serve(sys.argv[1])
    if asked is not None:
        become(asked)
