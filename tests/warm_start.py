"""Launches that start warm. A warm process imports what every launch on its Keras backend
imports: TensorFlow, JAX or PyTorch, Keras, matplotlib (about 4 s of CPU for TensorFlow), and
the project's modules that a training launch of ``launch/cifar.py`` imports on that backend
(:data:`LAUNCH_MODULES`, :data:`BACKEND_MODULES`). Then it forks one child per launch of
``launch/*.py`` or ``bench/*.py``. The child is the launch. It has its own pid, session, exit
status, signals, standard streams, folder and environment, as a cold ``python launch/NAME.py``
has.

Only the imports are shared. The TensorFlow warm process also lists the devices, once:
TensorFlow's probe of CUDA writes an error line where there is none. A launcher that refuses its
flags sees Keras loaded, and may list them too; the line would then stand before its own. So a
warm launch never writes that line, where a cold one that trains does.

Each set of variables read at import (:func:`reads_at_import`) has a warm process of its own. A
launch starts cold where the tests measure a process itself (its imports, its coverage), or
outside ``launch/`` and ``bench/``.

The JAX warm process lets every process of a JAX job write the session's compilation cache, not
process 0 alone, and read what another process compiled for another device of the same layout,
each entry written whole (:mod:`jax_cache`).

The warm process freezes what its imports made (``gc.freeze``, as the gc module's documentation
advises before a fork): no launch's collection walks those objects, nor does its exit.

The fork is safe here. The warm process runs no TensorFlow, JAX or PyTorch op before it forks:
no runtime, no thread pool (listing the devices starts neither). It runs no Python thread. Its
children start every runtime themselves. Keras on JAX loads SciPy, whose OpenBLAS starts a
native thread; OpenBLAS stops its threads before a fork, as NumPy's does in every warm process.
The entry points' first call, ``host.cpu.default_onednn``, runs in the warm process before
TensorFlow loads, as in a cold launch; the child keeps that decision and its reason.

Each fork holds the stop signals (SIGINT, SIGTERM, SIGHUP) until it returns
(:func:`fork_holding_stops`). The child runs Python's at-fork hooks inside ``os.fork`` (filelock
4 registers one), and a KeyboardInterrupt raised in a hook is printed as "Exception ignored"
and lost. Held, a stop reaches a launch once its fork returns, as a stop reaches a cold launch
as it starts. The zygote ignores the stops before it lets them in: a Ctrl-C to the launcher's
group while it is forked is dropped there, as every later one is.

A launcher that starts launches of its own (:data:`SPAWNERS`: Table 2's runs, a study's, a
local cluster's tasks) gets them warm too (:class:`Zygote`). Before the launcher runs, a copy
of it is forked as it stands then, still warm and clean. Each ``subprocess.Popen`` of
``[sys.executable, launch/NAME.py, ...]`` (or of a ``bench/`` script) the launcher makes is
forked from that copy, through a middle process that ends at once. So the launch becomes the
launcher's own child, as ``Popen`` made it: the launcher is its "child subreaper" (Linux). It
waits for it, signals it and reads its pipes as any child's. A ``python -c`` launch of a script
with modules blocked (:func:`blocked`, as a cold launch with TensorFlow unimportable is made) is
forked as the script's launch, the same modules blocked. A launch whose variables read at
import differ from the launcher's, or that ``Popen`` would start otherwise (a shell, other user
ids, descriptors passed), starts cold.

Run as ``python tests/warm_start.py SOCKET``. It serves that Unix socket until its owner (the
pytest worker) ends, then waits for its children.
"""

import array
import ctypes
import gc
import importlib
import inspect
import io
import json
import os
import re
import select
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import jax_cache

from resnet_noBN.studies.arm_runs import STOPS, stops_held

REPO = Path(__file__).resolve().parents[1]
LAUNCHERS = REPO / "launch"
BENCH = REPO / "bench"  # its scripts start as launchers do, and fork warm too
BACKENDS = ("tensorflow", "jax", "torch")  # KERAS_BACKEND names, each the module it imports
# the variables read at import: the prefixes and names below, Python's start-up among them (its
# locale, its time zone). The temporary folder (TMPDIR, TEMP, TMP) is not: ``tempfile`` finds it
# once, and a forked launch has it find it again (become)
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
)
RUNTIME_ONLY = ("TF_CONFIG",)  # read when a strategy starts, not at import
# read on one backend when its runtime starts, not at import: JAX reads XLA_FLAGS (the CPU
# devices it forces among them) as it makes its client, at a launch's first device use, which
# its warm process never makes. TensorFlow's warm process lists its devices, so not there
RUNTIME_ONLY_ON = {"jax": ("XLA_FLAGS",)}
# where the tests measure each process itself: what it imports, the lines it runs
ALWAYS_COLD = ("PYTHONPROFILEIMPORTTIME", "COVERAGE_PROCESS_START")
STARTED: list[subprocess.Popen] = []  # the warm processes, kept while this process lives
# a byte for each launch a launcher of this pytest worker started warm (Zygote)
COUNTS = os.path.join(tempfile.gettempdir(), f"resnet_noBN-warm-forks-{os.getpid()}")
ONEDNN = "TF_ENABLE_ONEDNN_OPTS"
# the launchers that start launches of their own: Table 2's runs, a study's, a cluster's tasks
SPAWNERS = frozenset({"table2.py", "study.py", "local_cluster.py"})
# read at start-up, as the standard streams are made: a fork makes them again (_streams)
UNBUFFERED = "PYTHONUNBUFFERED"
PR_SET_CHILD_SUBREAPER = 36
# a launch's, as Python starts: KeyboardInterrupt at SIGINT, the others' defaults
LAUNCH_HANDLERS = {
    signal.SIGINT: signal.default_int_handler,
    signal.SIGTERM: signal.SIG_DFL,
    signal.SIGHUP: signal.SIG_DFL,
}
# what a training launch of launch/cifar.py imports beyond its backend's library and matplotlib,
# on every backend, then on each (tensorflow_datasets with TensorFlow's): 0.2 to 0.4 s of CPU a
# TensorFlow launch, measured; Keras is 0.9 s on JAX and 2.7 s on PyTorch. None reads a variable
# outside the warm process's key or starts a Python thread at import
LAUNCH_MODULES = (
    "keras",
    "resnet_noBN.runs.cli",
    "resnet_noBN.runs.preflight",
    "resnet_noBN.runs.setup",
    "resnet_noBN.models.networks",
)
BACKEND_MODULES = {
    "tensorflow": (
        "resnet_noBN.backends.tensorflow_backend",
        "resnet_noBN.trainers.tensorflow_training",
        "resnet_noBN.datasets.cifar_input",
    ),
    "jax": ("resnet_noBN.backends.jax_backend", "resnet_noBN.trainers.jax_training"),
    "torch": ("resnet_noBN.backends.torch_backend", "resnet_noBN.trainers.torch_training"),
}
# blocked()'s code, read back (unblocked)
BLOCKED = re.compile(
    r'import runpy, sys; (?P<names>.*); sys\.argv\[0\] = "(?P<script>[^"]+)"; '
    r'runpy\.run_path\("(?P=script)", run_name="__main__"\)'
)
BLOCKED_MODULE = re.compile(r'sys\.modules\["([\w.]+)"\] = None')
# Popen._execute_child's descriptors that its parent closes once the child has them
PIPE_FDS = ("p2cread", "p2cwrite", "c2pread", "c2pwrite", "errread", "errwrite")
CLONE_NEWNET = 0x40000000


def warm_script(script: Path) -> bool:
    """Whether ``script`` (a resolved path) is one a warm process may fork: a launcher of
    ``launch/`` or a script of ``bench/``, started as the launchers are."""
    return script.parent in (LAUNCHERS, BENCH)


def spawns(script: str) -> bool:
    """Whether the launcher ``script`` starts launches of its own (:data:`SPAWNERS`)."""
    return os.path.basename(script) in SPAWNERS


def blocked(script: str, modules) -> str:
    """``python -c`` code that runs ``script`` as ``python script`` would, in a process where
    any import of ``modules`` fails: a cold launch so made."""
    names = "; ".join(f'sys.modules["{name}"] = None' for name in modules)
    return (
        f'import runpy, sys; {names}; sys.argv[0] = "{script}"; '
        f'runpy.run_path("{script}", run_name="__main__")'
    )


def unblocked(argv: list[str]) -> tuple[list[str], list[str]] | None:
    """``[python, "-c", blocked(script, modules), *args]`` as the launch ``[python, script,
    *args]`` and ``modules``; None for any other command."""
    if len(argv) < 3 or argv[1] != "-c":
        return None
    found = BLOCKED.fullmatch(argv[2])
    if found is None:
        return None
    modules = BLOCKED_MODULE.findall(found["names"])
    if argv[2] != blocked(found["script"], modules):
        return None
    return [argv[0], found["script"], *argv[3:]], modules


def reads_at_import(name: str, backend: str = "tensorflow") -> bool:
    """Whether a library a launch on Keras ``backend`` imports reads the variable ``name`` as
    it is imported."""
    if name in RUNTIME_ONLY or name in RUNTIME_ONLY_ON.get(backend, ()):
        return False
    return name.startswith(IMPORT_PREFIXES) or name in IMPORT_NAMES


def import_variables(env: dict) -> dict:
    """The variables of ``env`` read at import, ``KERAS_BACKEND`` given where it is not: a
    launch without it imports TensorFlow, as one with it set to ``tensorflow``. ``PYTHONPATH``
    is read without tests/cold_jax (``jax_cache.COLD``): it gives a cold process what every
    warm JAX process has (``jax_cache.share``), so a launch with it forks from the same warm
    process as one without; the processes it starts cold keep it."""
    backend = env.get("KERAS_BACKEND", "tensorflow")
    found = {k: v for k, v in env.items() if reads_at_import(k, backend)}
    if "PYTHONPATH" in found:
        path = [p for p in found.pop("PYTHONPATH").split(os.pathsep) if p != str(jax_cache.COLD)]
        found.update({"PYTHONPATH": os.pathsep.join(path)} if path else {})
    return {"KERAS_BACKEND": "tensorflow", **found}


def fork_key(env: dict) -> dict:
    """The variables read at import that a forked launch must share with its warm process:
    all but :data:`UNBUFFERED`, whose streams the launch makes again."""
    return {k: v for k, v in import_variables(env).items() if k != UNBUFFERED}


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
    for name in (*LAUNCH_MODULES, *BACKEND_MODULES[backend.__name__]):
        importlib.import_module(name)
    import resnet_noBN.plotting  # noqa: F401  (matplotlib, its backend chosen)

    if backend.__name__ == "jax":
        jax_cache.share()

    # What the imports made lives as long as the process: frozen, out of every later
    # collection, as the gc module's documentation advises before fork(). No launch's
    # collection then walks, and copies page by page, the 387,000 objects of TensorFlow,
    # Keras and matplotlib; nor does its exit (0.1 CPU-s against 0.8 with them loaded).
    gc.freeze()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(16)
    print("ready", flush=True)
    # a child's pid: the connection that asked for it, and the child's pidfd, readable once it
    # has ended. The loop sleeps until a request, its owner's end or a child's: it never polls
    # (a 10 ms poll cost each warm process 1.2% of a core, idle)
    children: dict[int, tuple[socket.socket, int]] = {}
    owner_gone = False
    while not owner_gone or children:
        # once its owner has gone, only its children are waited for (stdin at its end would be
        # readable at every call, a loop that spins)
        watched = [pidfd for _, pidfd in children.values()]
        if not owner_gone:
            watched += [listener, sys.stdin]
        readable, _, _ = select.select(watched, [], [])
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
            pid = fork_holding_stops()
            if pid == 0:
                listener.close()
                connection.close()
                for child, pidfd in children.values():
                    child.close()
                    os.close(pidfd)
                return {**request, "fds": fds}
            for fd in fds:
                os.close(fd)
            connection.sendall(f"{pid}\n".encode())
            children[pid] = (connection, os.pidfd_open(pid))
        while children:
            pid, status = os.waitpid(-1, os.WNOHANG)
            if pid == 0:
                break
            connection, pidfd = children.pop(pid)
            os.close(pidfd)
            try:
                connection.sendall(f"{os.waitstatus_to_exitcode(status)}\n".encode())
            except OSError:
                pass  # its asker gone
            connection.close()
    return None


def fork_holding_stops(handlers: dict | None = None) -> int:
    """``os.fork()`` with :data:`STOPS` held until it returns (``arm_runs.stops_held``), in
    parent and child: a stop that comes while the child runs Python's at-fork hooks waits, and
    is not raised in a hook, where Python prints it as "Exception ignored" and drops it. The
    child sets ``handlers`` (a signal: its handler) before it lets the stops in: one ignored
    there is dropped."""
    with stops_held():
        pid = os.fork()
        if pid == 0:
            for signum, handler in (handlers or {}).items():
                signal.signal(signum, handler)
    return pid


def receive(connection: socket.socket) -> tuple[dict, list[int]]:
    """A request: its JSON (argv, env, cwd, new_session) and its three standard streams' fds."""
    data, fds = _received(connection)
    return json.loads(data), fds


def _received(connection: socket.socket) -> tuple[bytes, list[int]]:
    """A request's bytes (none: its sender has ended) and the descriptors sent with them (the
    three standard streams; a network namespace's after them)."""
    fds = array.array("i")
    data, ancillary, _, _ = connection.recvmsg(1 << 20, socket.CMSG_SPACE(4 * fds.itemsize))
    for level, kind, payload in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(payload[: len(payload) - len(payload) % fds.itemsize])
    return data, list(fds)


def become(request: dict) -> None:
    """The forked child made the launch it was asked for: its session, streams, folder,
    environment, arguments, then the launcher run as ``__main__``. Python's own exit follows.
    A launcher of :data:`SPAWNERS` first forks its :class:`Zygote`."""
    if request["new_session"]:
        os.setsid()
    elif request.get("process_group", -1) >= 0:
        os.setpgid(0, request["process_group"])
    for target, fd in enumerate(request["fds"]):
        os.dup2(fd, target)
        os.close(fd)
    os.chdir(request["cwd"])
    from resnet_noBN.host import cpu

    decided = os.environ.get(ONEDNN)
    reason = cpu.ONEDNN_REASON
    unbuffered = bool(os.environ.get(UNBUFFERED))
    os.environ.clear()
    os.environ.update(request["env"])
    if decided is not None:
        os.environ[ONEDNN] = decided
    tempfile.tempdir = None  # found again, from this launch's TMPDIR
    if bool(os.environ.get(UNBUFFERED)) != unbuffered:
        _streams(not unbuffered)
    cpu.default_onednn = lambda: reason  # decided in the warm process, before TensorFlow loaded
    if request.get("dies_with"):
        _dies_with(*request["dies_with"])
    script = request["argv"][1]
    if request.get("counts") and (request.get("spawner") or spawns(script)):
        asked = Zygote.fork(request)
        if asked is not None:  # a launch the launcher started, forked from the zygote
            become(asked)
            return
    for name in request["unimportable"]:
        assert sys.modules.get(name) is None, f"the warm process imported {name}"
        sys.modules[name] = None  # any import of it fails, as in a cold launch made so
    sys.argv = request["argv"][1:]
    sys.path[0] = os.path.dirname(os.path.abspath(script))
    import runpy

    runpy.run_path(script, run_name="__main__")


def _streams(unbuffered: bool) -> None:
    """``sys.stdout`` and ``sys.stderr`` made again, as Python makes them at start-up with
    :data:`UNBUFFERED` set or not: text written through at once, or buffered."""
    for name, fd in (("stdout", 1), ("stderr", 2)):
        old = getattr(sys, name)
        old.flush()
        raw = io.FileIO(fd, "w", closefd=False)
        stream = io.TextIOWrapper(
            raw if unbuffered else io.BufferedWriter(raw),
            encoding=old.encoding,
            errors=old.errors,
            line_buffering=name == "stderr" and not unbuffered,
            write_through=unbuffered,
        )
        setattr(sys, name, stream)


def namespaces() -> dict:
    """This process's Linux namespaces, each by its name and inode."""
    folder = "/proc/self/ns"
    return {name: os.readlink(os.path.join(folder, name)) for name in sorted(os.listdir(folder))}


def _dies_with(parent: int, signum: int) -> None:
    """What ``arm_runs.popen``'s ``preexec_fn`` (``arm_runs._stop_with``) sets, run here once
    the middle process has ended and this one is ``parent``'s: set before, its signal would
    come as the middle process ends. The stops were let in as the launch was forked."""
    from resnet_noBN.studies import arm_runs

    for _ in range(10_000):
        if os.getppid() == parent:
            break
        time.sleep(0.0005)
    arm_runs._signalled_at_parents_end(parent, ctypes.CDLL(None).prctl, signum)


class Zygote:
    """In a launcher of :data:`SPAWNERS`: its copy forked before it runs, warm and clean, from
    which the launches it starts are forked (``subprocess.Popen._execute_child`` patched in the
    launcher). The launcher is made a child subreaper, so each launch, forked through a middle
    process that ends at once, becomes the launcher's child. The zygote ignores the signals a
    Ctrl-C or a stop sends the launcher's group, and ends with the launcher."""

    _socket: socket.socket | None = None
    _lock = threading.Lock()
    _key: dict = {}
    _counts = ""
    _namespaces: dict = {}

    @classmethod
    def fork(cls, request: dict) -> dict | None:
        """Forks the zygote and patches ``Popen`` in the launcher (None returned there). In a
        launch forked from the zygote, returns its request."""
        sys.stdout.flush()
        sys.stderr.flush()
        ours, its = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        if fork_holding_stops(dict.fromkeys(STOPS, signal.SIG_IGN)) == 0:
            ours.close()
            return cls._serve(its, request["counts"])
        its.close()
        ctypes.CDLL(None).prctl(PR_SET_CHILD_SUBREAPER, 1)
        cls._socket, cls._key, cls._counts = ours, fork_key(os.environ), request["counts"]
        cls._namespaces = namespaces()
        cold = subprocess.Popen._execute_child

        def execute_child(popen, *args):
            given = inspect.signature(cold).bind(popen, *args).arguments
            asked = cls._request(**{k: v for k, v in given.items() if k != "self"})
            pid = cls._forked(asked) if asked is not None else None
            if pid is None:
                return cold(popen, *args)
            popen.pid, popen._child_created = pid, True
            popen._close_pipe_fds(*(given[k] for k in PIPE_FDS))
            return None

        subprocess.Popen._execute_child = execute_child
        return None

    @classmethod
    def _request(cls, args, executable, preexec_fn, close_fds, pass_fds, cwd, env, shell, **rest):
        """The zygote's request for ``Popen._execute_child``'s arguments, with the three
        standard streams' descriptors; None where the launch starts cold."""
        if isinstance(args, (str, bytes, os.PathLike)) or len(args) < 2:
            return None
        argv, unimportable = [os.fsdecode(a) for a in args], []
        if (launch := unblocked(argv)) is not None:  # its modules blocked, as cold
            argv, unimportable = launch
            if any(sys.modules.get(name) is not None for name in unimportable):
                return None
        variables = dict(os.environ if env is None else env)
        folder = os.fsdecode(cwd) if cwd is not None else os.getcwd()
        script = Path(folder, argv[1]).resolve()
        dies_with = None
        if preexec_fn is not None:
            from resnet_noBN.studies import arm_runs  # imported already: it made preexec_fn

            if getattr(preexec_fn, "func", None) is not arm_runs._stop_with:
                return None
            parent, _, signum, _ = preexec_fn.args  # arm_runs.popen's
            dies_with = [parent, int(signum)]
        moved = {name for name, ns in namespaces().items() if cls._namespaces.get(name) != ns}
        if (
            shell
            or moved - {"net"}  # local_cluster.py's network namespace: joined (_serve)
            or not close_fds
            or executable is not None
            or pass_fds
            or (rest["gid"], rest["gids"], rest["uid"]) != (None, None, None)
            or rest["umask"] >= 0
            or argv[0] != sys.executable
            or not warm_script(script)
            or fork_key(variables) != cls._key
            or any(name in variables for name in ALWAYS_COLD)
        ):
            return None
        streams = [rest[k] for k in ("p2cread", "c2pwrite", "errwrite")]
        return {
            "argv": argv,
            "env": variables,
            "cwd": folder,
            "new_session": bool(rest["start_new_session"]),
            "process_group": rest["process_group"],
            "unimportable": unimportable,
            "dies_with": dies_with,
            "counts": cls._counts,
            "fds": [fd if fd != -1 else i for i, fd in enumerate(streams)]  # -1: inherited
            + ([os.open("/proc/self/ns/net", os.O_RDONLY)] if moved else []),
        }

    @classmethod
    def _forked(cls, request: dict) -> int | None:
        """The pid of the launch the zygote forked for ``request``; None where it has ended."""
        fds = request.pop("fds")
        with cls._lock:
            try:
                cls._socket.sendmsg(
                    [json.dumps(request).encode()],
                    [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))],
                )
                for fd in fds[3:]:  # the network namespace's, opened for the request
                    os.close(fd)
                reply = b""
                while not reply.endswith(b"\n"):
                    chunk = cls._socket.recv(64)
                    if not chunk:
                        return None
                    reply += chunk
            except OSError:
                return None
        return int(reply) if reply.strip().isdigit() else None

    @staticmethod
    def _serve(connection: socket.socket, counts: str) -> dict:
        """The zygote: forks a launch for each request, through a middle process that ends at
        once (the launch becomes the launcher's child); ends with the launcher. In the launch,
        returns its request. It ignores the stops (:func:`fork_holding_stops`)."""
        with open(os.devnull, "r+b") as devnull:
            for fd in (0, 1, 2):
                os.dup2(devnull.fileno(), fd)
        while True:
            data, fds = _received(connection)
            if not data:
                os._exit(0)  # the launcher ended
            read, write = os.pipe()
            middle = os.fork()
            if middle == 0:
                if len(fds) > 3 and ctypes.CDLL(None).setns(fds[3], CLONE_NEWNET) != 0:
                    os._exit(1)  # the launch starts cold
                launch = fork_holding_stops(LAUNCH_HANDLERS)
                if launch == 0:
                    os.close(read)
                    os.close(write)
                    connection.close()
                    for fd in fds[3:]:
                        os.close(fd)
                    fds = fds[:3]
                    return {**json.loads(data), "fds": fds}
                os.write(write, f"{launch}\n".encode())
                os._exit(0)
            os.close(write)
            os.waitpid(middle, 0)
            pid = os.read(read, 64)
            os.close(read)
            for fd in fds:
                os.close(fd)
            if pid:
                with open(counts, "a") as f:
                    f.write("1")
            connection.sendall(pid or b"\n")  # an empty line: the launch starts cold


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
        """Its output to the end and its exit, as ``Popen.communicate``: TimeoutExpired where
        it has not ended within ``timeout``."""
        out = []
        if self.stdout is not None:
            reader = threading.Thread(target=lambda: out.append(self.stdout.read()), daemon=True)
            reader.start()
            reader.join(timeout)
            if reader.is_alive():
                raise subprocess.TimeoutExpired(self.args, timeout)
        self.wait(timeout)
        return (out[0] if out else None), None

    def send_signal(self, signum: int) -> None:
        """As ``Popen.send_signal``: nothing where it has ended."""
        if self.poll() is None:
            try:
                os.kill(self.pid, signum)
            except ProcessLookupError:
                pass  # ended since the poll

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


class WarmProcesses:
    """This pytest worker's warm processes, one for each set of variables read at import (the
    Keras backend among them). Each starts at the second launch that needs it: the first
    starts cold, so a set used once costs nothing more. A launcher of :data:`SPAWNERS` uses its
    set for each of its own launches, so its first launch starts the warm process. At most
    :attr:`MOST` run; a new one ends the one used longest ago. All end with the worker.
    ``RESNET_NOBN_TESTS_COLD=1`` in the tests' environment starts every launch cold."""

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
                elif key in self._seen or spawns(argv[1]):
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
            and warm_script(script)
            and env.get("KERAS_BACKEND", "tensorflow") in BACKENDS
        )


def forked_by_launchers() -> int:
    """How many launches the launchers this pytest worker started forked warm (:class:`Zygote`)."""
    try:
        return os.path.getsize(COUNTS)
    except OSError:
        return 0


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
    spawner: bool = False,
):
    """A :class:`WarmProcess`: ``argv`` forked from the warm process at ``path``, its standard
    streams /dev/null and the file descriptors ``stdout`` and ``stderr``, the modules named in
    ``unimportable`` made so; with ``spawner``, its own launches forked warm as those of
    :data:`SPAWNERS` are."""
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
        "counts": COUNTS,
        "spawner": spawner,
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
