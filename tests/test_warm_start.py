"""The tests' warm launches (tests/warm_start.py): a launch forked from a process that imported
Keras once is, to the test, the process a cold ``python launch/NAME.py`` starts: its output, exit
status, signals, session, folder, environment and arguments. A launch whose environment changes
what a library reads at import starts cold."""

import json
import os
import signal
import subprocess
import sys
import tempfile
import time

import jax_cache
import launchers
import numpy as np
import pytest
import warm_start

CIFAR = [sys.executable, str(launchers.REPO / "launch" / "cifar.py")]
PROBE = """
import json, os, sys, tempfile
from resnet_noBN.host import cpu
print(json.dumps({
    "argv": sys.argv, "path0": sys.path[0], "cwd": os.getcwd(), "session": os.getsid(0),
    "pid": os.getpid(), "x": os.environ.get("WARM_START_X"), "keras": "keras" in sys.modules,
    "onednn": cpu.default_onednn(), "tmp": tempfile.gettempdir(),
}), flush=True)
if sys.argv[1] == "raise":
    raise ValueError("probe")
if sys.argv[1] == "wait":
    import time; time.sleep(60)
sys.exit(int(sys.argv[1]))
"""


def env() -> dict:
    return dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")


def usual_path() -> str:
    """The warm process of launchers.run's usual environment, started where it was not."""
    launchers.WARM.path(CIFAR, env())
    return launchers.WARM.path(CIFAR, env())


def test_a_warm_launch_prints_and_exits_as_a_cold_one(monkeypatch):
    """launch/cifar.py's config, a flag it does not know, and launch/figures.py refusing a
    folder after its flags are read: the same output and status warm and cold
    (``RESNET_NOBN_TESTS_COLD=1``), each counted as it started."""
    launches = (
        ("launch/cifar.py", "--print_config", "--model=small"),
        ("launch/cifar.py", "--x"),
        ("launch/figures.py", "--model_dir=/nonexistent"),
    )
    assert usual_path() is not None
    before = dict(launchers.WARM.counts)
    warm = [launchers.run(*launch) for launch in launches]
    monkeypatch.setenv("RESNET_NOBN_TESTS_COLD", "1")
    cold = [launchers.run(*launch) for launch in launches]
    assert [p.returncode for p in warm] == [p.returncode for p in cold] == [0, 2, 2]
    assert [(p.stdout, p.stderr) for p in warm] == [(p.stdout, p.stderr) for p in cold]
    assert "Unknown command line flag 'x'" in cold[1].stderr
    assert cold[2].stderr.startswith("error: /nonexistent")
    assert launchers.WARM.counts == {"warm": before["warm"] + 3, "cold": before["cold"] + 3}


def test_a_warm_child_has_its_own_session_folder_environment_and_status(tmp_path):
    """A probe forked as a launch: its arguments, ``sys.path[0]``, folder, environment (its
    temporary folder found again from it) and a session of its own; Keras already imported; the
    warm process's oneDNN decision; exit statuses 0 and 3, an exception's 1 with its traceback,
    a signal's minus its number."""
    probe = tmp_path / "probe.py"
    probe.write_text(PROBE)
    path = usual_path()

    def fork(arg, out, new_session=True):
        argv = [sys.executable, str(probe), arg]
        variables = dict(env(), WARM_START_X="x", TMPDIR=str(tmp_path))
        return warm_start.fork(path, argv, variables, out.fileno(), out.fileno(), "/", new_session)

    for arg, status in (("0", 0), ("3", 3), ("raise", 1)):
        with open(tmp_path / f"{arg}.out", "w+") as out:
            proc = fork(arg, out)
            assert proc.wait(60) == status and proc.poll() == status
            out.seek(0)
            lines = out.read().splitlines()
        seen = json.loads(lines[0])
        assert seen["argv"] == [str(probe), arg] and seen["path0"] == str(tmp_path)
        assert seen["cwd"] == "/" and seen["session"] == seen["pid"] == proc.pid
        assert seen["x"] == "x" and seen["keras"] and seen["onednn"]
        assert seen["tmp"] == str(tmp_path) != tempfile.gettempdir()  # not the warm process's
        raised = (
            lines[1:2] == ["Traceback (most recent call last):"]
            and lines[-1] == "ValueError: probe"
        )
        assert raised == (arg == "raise") == (len(lines) > 1)
    with open(tmp_path / "wait.out", "w+") as out:
        proc = fork("wait", out, new_session=False)
        deadline = time.monotonic() + 60
        while not (tmp_path / "wait.out").read_text():
            assert time.monotonic() < deadline
            time.sleep(0.01)
        assert proc.poll() is None and os.getsid(proc.pid) != proc.pid
        try:
            proc.wait(0.05)
            raise AssertionError("it ended")
        except subprocess.TimeoutExpired:
            pass
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == -signal.SIGTERM


def test_the_sessions_temporary_folder_is_one_in_pytests_own(
    session_temporary_folder, tmp_path_factory
):
    """TMPDIR, in this process and so in every launch's environment, is a folder in pytest's
    own for the session (conftest): what killed launches leave goes there, not into the
    machine's. The probe above checks that a launch finds it from its environment."""
    assert tempfile.gettempdir() == os.environ["TMPDIR"] == str(session_temporary_folder)
    assert session_temporary_folder.parent == tmp_path_factory.getbasetemp()
    assert session_temporary_folder.is_dir()


def test_a_launch_that_cannot_share_the_imports_starts_cold(monkeypatch):
    """Always cold: where the tests measure imports or coverage per process, a Keras backend
    the launchers do not take, a script outside launch/. A new set of variables read at import:
    cold the first time, then warm from a warm process of its own; past MOST of them, the one
    used longest ago ends. A launcher that starts launches of its own: warm at its first.
    TF_CONFIG (read when a strategy starts) differing: the same warm process."""
    started, ended = [], []

    class Started:
        """A warm process as WarmProcesses holds it: ended by closing its standard input."""

        def __init__(self, n):
            self.stdin = self
            self.n = n

        def close(self):
            ended.append(self.n)

    def start_warm(env):
        started.append(env)
        return Started(len(started)), len(started)

    monkeypatch.setattr(warm_start, "start_warm", start_warm)
    warm = warm_start.WarmProcesses()
    for cold in ({"PYTHONPROFILEIMPORTTIME": "1"}, {"COVERAGE_PROCESS_START": "x"}):
        assert [warm.path(CIFAR, {**env(), **cold}) for _ in "ab"] == [None, None]
    assert [warm.path(CIFAR, dict(env(), KERAS_BACKEND="numpy")) for _ in "ab"] == [None, None]
    probe = [sys.executable, str(launchers.REPO / "tests" / "block_probe.py")]
    assert [warm.path(probe, env()) for _ in "ab"] == [None, None]
    assert started == [] and warm.counts == {"warm": 0, "cold": 8}
    assert [warm.path(CIFAR, dict(env(), TF_CONFIG=str(i))) for i in range(3)] == [None, 1, 1]
    assert started == [dict(env(), TF_CONFIG="1")]
    for level in "0134":  # a warm process for each log level; the fifth ends the first
        levels = [warm.path(CIFAR, dict(env(), TF_CPP_MIN_LOG_LEVEL=level)) for _ in "ab"]
        assert levels == [None, len(started)] and ended == ([1] if level == "4" else [])
    assert warm.path(CIFAR, dict(env(), TF_CPP_MIN_LOG_LEVEL="0")) == 2  # used: kept
    assert warm.counts == {"warm": 7, "cold": 13} and warm.MOST == 4
    # a launcher that starts launches of its own (SPAWNERS), on a new set: warm at once
    spawner = dict(env(), TF_CPP_MIN_LOG_LEVEL="5")
    table2 = [sys.executable, str(launchers.REPO / "launch" / "table2.py")]
    assert warm.path(table2, spawner) == len(started) == 6 and started[-1] == spawner
    assert warm.counts == {"warm": 8, "cold": 13}
    assert warm_start.reads_at_import("XLA_FLAGS") and not warm_start.reads_at_import("PATH")
    assert warm_start.reads_at_import("XLA_FLAGS", "torch")


def test_a_module_made_unimportable_fails_to_import_warm_and_cold(tmp_path, monkeypatch):
    """``launchers.start(..., unimportable=("tensorflow",))``, as the TensorFlow-free backends'
    tests launch: warm (the JAX warm process, which never imported it) and cold alike, an
    import of TensorFlow fails. The probe stands in a folder taken for launch/."""
    monkeypatch.setattr(warm_start, "LAUNCHERS", tmp_path)
    script = tmp_path / "probe.py"
    script.write_text("try:\n    import tensorflow\nexcept ImportError as e:\n    print(e)\n")
    jax = dict(env(), KERAS_BACKEND="jax", JAX_WARM_START_PROBE="1")  # a set of its own
    outputs = []
    for cold in ("0", "1", "0"):  # cold first (a new set of variables), cold, then warm
        monkeypatch.setenv("RESNET_NOBN_TESTS_COLD", cold)
        proc = launchers.start(
            [sys.executable, str(script)],
            jax,
            subprocess.PIPE,
            subprocess.STDOUT,
            unimportable=("tensorflow",),
        )
        outputs.append((proc.stdout.read(), proc.wait(60), type(proc).__name__))
    blocked = "import of tensorflow halted; None in sys.modules\n"
    assert outputs == [(blocked, 0, "Popen"), (blocked, 0, "Popen"), (blocked, 0, "WarmProcess")]


def test_jax_launches_that_force_other_cpu_devices_share_a_warm_process(tmp_path, monkeypatch):
    """XLA_FLAGS is read as JAX makes its client, not at import (``RUNTIME_ONLY_ON``): JAX
    launches that force 1, 2 and 3 CPU devices share one set of variables, so the second and
    third fork from one warm process, and each has the devices it forced. The set is the one
    the test above uses: after it, all three are warm."""
    monkeypatch.setattr(warm_start, "LAUNCHERS", tmp_path)
    monkeypatch.delenv("RESNET_NOBN_TESTS_COLD", raising=False)
    script = tmp_path / "devices.py"
    script.write_text("import jax\nprint(jax.device_count())\n")
    found = []
    for count in (1, 2, 3):
        variables = dict(
            env(),
            KERAS_BACKEND="jax",
            JAX_WARM_START_PROBE="1",
            XLA_FLAGS=f"--xla_force_host_platform_device_count={count}",
        )
        launch = [sys.executable, str(script)]
        proc = launchers.start(launch, variables, subprocess.PIPE, subprocess.DEVNULL)
        found.append((proc.stdout.read(), proc.wait(60), type(proc).__name__))
    assert [f[:2] for f in found] == [("1\n", 0), ("2\n", 0), ("3\n", 0)]
    assert [f[2] for f in found[1:]] == ["WarmProcess", "WarmProcess"]
    assert not warm_start.reads_at_import("XLA_FLAGS", "jax")


def test_tests_cold_jax_on_the_path_forks_from_the_same_warm_process():
    """tests/cold_jax on ``PYTHONPATH`` gives a cold process the warm JAX process's hooks, so
    it is no import variable of its own: a launch with it (every launch a test starts) has the
    key of one without; another folder there still makes a key of its own."""
    cold, root = str(jax_cache.COLD), str(launchers.REPO)
    for backend in ("jax", "tensorflow"):
        plain = warm_start.import_variables({"KERAS_BACKEND": backend, "PYTHONPATH": root})
        with_cold = {"KERAS_BACKEND": backend, "PYTHONPATH": os.pathsep.join([cold, root])}
        assert warm_start.import_variables(with_cold) == plain
        assert warm_start.import_variables({"KERAS_BACKEND": backend, "PYTHONPATH": cold}) == {
            "KERAS_BACKEND": backend
        }
        other = {"KERAS_BACKEND": backend, "PYTHONPATH": os.pathsep.join([cold, "/elsewhere"])}
        assert warm_start.import_variables(other)["PYTHONPATH"] == "/elsewhere"


SPAWNER = """
import json, os, subprocess, sys
from resnet_noBN.studies import arm_runs
plain = [sys.executable, sys.argv[1], "--x"]
blocked = [sys.executable, "-c", sys.argv[2], "--x"]  # the same launch, a module blocked
jax = dict(os.environ, KERAS_BACKEND="jax")
found = []
# the launcher's imports; others; the launcher's, as python -c with a module blocked
for launch, env in ((plain, None), (plain, jax), (blocked, None)):
    proc = arm_runs.popen(
        launch, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env
    )
    with open(f"/proc/{proc.pid}/stat") as f:  # not yet waited for: its parent's
        parent = int(f.read().rsplit(") ", 1)[1].split()[1])
    out, _ = proc.communicate()
    found.append({"parent": parent, "status": proc.returncode, "out": out})
print(json.dumps({"pid": os.getpid(), "launches": found}))
"""


def test_a_launch_a_launcher_starts_is_forked_warm_as_its_own_child(tmp_path):
    """A launcher that starts launches of its own (as launch/table2.py, study.py and
    local_cluster.py do) forked warm: the launch it starts with its own imports is forked warm
    too, and so is that launch made ``python -c`` with a module blocked; each is its own child,
    with the output and status of a cold one. One with other imports (another Keras backend)
    starts cold."""
    spawner = tmp_path / "spawner.py"
    spawner.write_text(SPAWNER)
    blocked = warm_start.blocked(CIFAR[1], ("torch",))
    assert warm_start.unblocked([sys.executable, "-c", blocked, "--x"]) == (
        [sys.executable, CIFAR[1], "--x"],
        ["torch"],
    )
    assert warm_start.unblocked([sys.executable, "-c", blocked + ";", "--x"]) is None
    argv = [sys.executable, str(spawner), CIFAR[1], blocked]
    before = warm_start.forked_by_launchers()
    with open(tmp_path / "out", "w+") as out:
        proc = warm_start.fork(
            usual_path(), argv, env(), out.fileno(), out.fileno(), "/", True, spawner=True
        )
        assert proc.wait(120) == 0
        out.seek(0)
        seen = json.loads(out.read().splitlines()[-1])
    assert warm_start.forked_by_launchers() == before + 2
    cold = subprocess.run([*CIFAR, "--x"], capture_output=True, text=True, env=env())
    assert len(seen["launches"]) == 3
    for launch in seen["launches"]:
        assert launch["parent"] == seen["pid"] == proc.pid
        assert (launch["status"], launch["out"]) == (2, cold.stdout + cold.stderr)


HOOKED_FORK = """
import os, signal, sys
sys.path.insert(0, sys.argv[1])
import warm_start
# Python's own handlers, whatever this process inherited (a shell's background job starts with
# SIGINT ignored, and Python keeps it so)
signal.signal(signal.SIGINT, signal.default_int_handler)
signal.signal(signal.SIGTERM, signal.SIG_DFL)
blocked = signal.pthread_sigmask(signal.SIG_BLOCK, [])  # inherited (a profiler blocks some)
sent = []
os.register_at_fork(after_in_child=lambda: os.kill(os.getpid(), sent[-1]))

def status(signum, handlers):
    sent.append(signum)
    try:
        pid = warm_start.fork_holding_stops(handlers)
    except KeyboardInterrupt:
        os._exit(10)  # the child's SIGINT, raised once its fork returned
    if pid == 0:
        os._exit(20)  # the child went on: the stop was dropped
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])

ignored, launch = dict.fromkeys(warm_start.STOPS, signal.SIG_IGN), warm_start.LAUNCH_HANDLERS
cases = [(signal.SIGINT, None), (signal.SIGTERM, None), (signal.SIGINT, ignored),
         (signal.SIGTERM, ignored), (signal.SIGINT, launch), (signal.SIGHUP, launch)]
changed = signal.pthread_sigmask(signal.SIG_BLOCK, []) ^ blocked
print(*[status(*case) for case in cases], sorted(changed))
"""


def test_a_stop_during_the_forks_at_fork_hooks_is_held_not_lost():
    """A stop sent while a fork's child runs Python's at-fork hooks (filelock 4's among them):
    raised once the fork returns, not in the hook, where Python prints "Exception ignored" and
    drops it (a Ctrl-C of `launch/table2.py` reached its zygote so: 1 failure in a whole run,
    2026-12-05). The zygote's handlers drop it; a launch's raise it or end; the parent's mask is
    as it was."""
    proc = subprocess.run(
        [sys.executable, "-c", HOOKED_FORK, str(launchers.REPO / "tests")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    assert proc.stdout == "10 -15 20 20 10 -1 []\n"  # SIGHUP ends a launch: -1


def test_every_process_of_a_jax_job_writes_its_compiles(tmp_path, monkeypatch):
    """tests/jax_cache.py, which the JAX warm process applies: a process of index 1 writes its
    compiles to the compilation cache, where JAX leaves the writing to process 0."""
    jax = pytest.importorskip("jax")
    from jax._src import compilation_cache, compiler, distributed

    # the CPU client made first, as process 0 of 1: one made while the index is faked would
    # keep it, and every later JAX test of this worker would see a job of 2 processes
    assert jax.process_count() == 1
    monkeypatch.setattr(compiler, "_cache_write", compiler._cache_write)  # put back after
    monkeypatch.setattr(distributed.global_state, "process_id", 1)
    settings = {  # this process's cache: tmp_path, every compile written
        "jax_compilation_cache_dir": str(tmp_path),
        "jax_persistent_cache_min_compile_time_secs": 0,
        "jax_persistent_cache_min_entry_size_bytes": 0,
    }
    before = {name: getattr(jax.config, name) for name in settings}
    for name, value in settings.items():
        jax.config.update(name, value)
    compilation_cache.reset_cache()
    try:
        jax.jit(lambda x: x * 3.0 + 1.0)(np.arange(5.0)).block_until_ready()
        assert list(tmp_path.iterdir()) == []  # JAX's rule
        jax_cache.write_every_process()
        jax.jit(lambda x: x * 5.0 + 2.0)(np.arange(5.0)).block_until_ready()
        assert [p.name.startswith("jit__lambda") for p in tmp_path.iterdir()] == [True]
    finally:
        for name, value in before.items():
            jax.config.update(name, value)
        compilation_cache.reset_cache()


def test_a_jax_compiles_key_names_its_devices_layout_not_their_ids(monkeypatch):
    """tests/jax_cache.py, which the JAX warm process applies: two device assignments of one
    shape hash alike (JAX's own key tells them apart); one device hashes alike on any process;
    4 devices on 1, 2 or 4 processes hash apart."""
    pytest.importorskip("jax")
    import hashlib
    from collections import namedtuple

    from jax._src import cache_key
    from jax._src.lib import xla_client

    for name in ("_hash_serialized_compile_options", "_hash_accelerator_config"):
        monkeypatch.setattr(cache_key, name, getattr(cache_key, name))  # put back after

    def options(*ids):
        made = xla_client.CompileOptions()
        made.device_assignment = xla_client.DeviceAssignment.create(np.array([[i] for i in ids]))
        return made

    def digest(hash_part, value) -> str:
        hash_obj = hashlib.sha256()
        hash_part(hash_obj, value)
        return hash_obj.hexdigest()

    def options_digests():
        hash_part = cache_key._hash_serialized_compile_options
        return digest(hash_part, options(0, 1)), digest(hash_part, options(2, 3))

    first, second = options_digests()
    assert first != second  # JAX's rule on the CPU
    jax_cache.keys_free_of_device_ids()
    first, second = options_digests()
    assert first == second

    Device = namedtuple("Device", "platform process_index")

    def layout(*processes) -> str:
        devices = np.empty(len(processes), dtype=object)  # as JAX holds them: no tuples
        devices[:] = [Device("cpu", p) for p in processes]
        return digest(cache_key._hash_accelerator_config, devices)

    assert layout(0) == layout(3)
    assert len({layout(0), layout(0, 0, 0, 0), layout(0, 0, 1, 1), layout(0, 1, 2, 3)}) == 4
    assert layout(0, 0, 1, 1) == layout(2, 2, 3, 3)


def test_a_jax_cache_entry_is_read_whole_or_not_at_all(tmp_path, monkeypatch):
    """tests/jax_cache.py, which the JAX warm process applies: an entry whose write fails half
    way is not there to read (JAX's own writing leaves the half); one written is read whole, and
    kept when written again."""
    pytest.importorskip("jax")
    from jax._src import lru_cache

    from resnet_noBN.host import storage

    def full_disk(*args):
        raise OSError(28, "No space left on device")

    def half_then_a_full_disk(path, data):
        with open(path, "wb") as f:
            f.write(data[: len(data) // 2])
        full_disk()

    monkeypatch.setattr(lru_cache.LRUCache, "put", lru_cache.LRUCache.put)  # put back after
    cache = lru_cache.LRUCache(str(tmp_path), max_size=-1)
    with monkeypatch.context() as failing:
        # JAX's write (etils' or pathlib's write_bytes); the hook's, once its data is written
        failing.setattr(type(cache.path), "write_bytes", half_then_a_full_disk)
        failing.setattr(storage.os, "fsync", full_disk)
        with pytest.raises(OSError):
            cache.put("jax", b"executable")
        assert cache.get("jax") == b"execu"  # JAX's rule: the half is read
        jax_cache.whole_entries_only()
        with pytest.raises(OSError):
            cache.put("kept", b"executable")
    assert cache.get("kept") is None
    assert sorted(p.name for p in tmp_path.iterdir()) == ["jax-cache"]  # no part left
    cache.put("kept", b"executable")
    cache.put("kept", b"another")
    assert cache.get("kept") == b"executable"


def test_every_process_a_test_starts_has_tests_cold_jax_and_this_worker_has_not(
    tmp_path, monkeypatch
):
    """tests/conftest.py's ``cold_processes_share_the_jax_cache``: a process a test starts runs
    tests/cold_jax's ``sitecustomize``, last on its path, so that a folder before it with its
    own (ops/mutation's mutants) wins; this pytest process, whose in-process JAX keeps JAX's
    rules, does not run it."""
    cold = str(jax_cache.COLD)
    path = [p for p in os.environ["PYTHONPATH"].split(os.pathsep) if p]
    assert path[-1] == cold and path.count(cold) == 1
    assert not getattr(sys.modules.get("sitecustomize"), "__file__", "").startswith(cold)

    def sitecustomize() -> str:
        which = "import sitecustomize; print(sitecustomize.__file__)"
        done = subprocess.run(
            [sys.executable, "-c", which], capture_output=True, text=True, timeout=60
        )
        return done.stdout.strip()

    assert sitecustomize() == str(jax_cache.COLD / "sitecustomize.py")
    (tmp_path / "sitecustomize.py").write_text("")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tmp_path), *path]))
    assert sitecustomize() == str(tmp_path / "sitecustomize.py")


@pytest.mark.parametrize("warm", [False, True])
def test_a_cold_jax_launch_on_the_cold_path_shares_the_cache_as_a_warm_one(warm):
    """tests/cold_jax (every process a test starts has it on PYTHONPATH, tests/conftest.py):
    a look-up of JAX imports nothing; once the process imports JAX, the three hooks
    of tests/jax_cache.py are in place, as in the JAX warm process. A warm process started on
    that path (``warm``: it imports jax_cache first) calls ``share`` again: the hooks stay."""
    pytest.importorskip("jax")
    tests = str(launchers.REPO / "tests")
    as_warm_start = f"sys.path.insert(0, {tests!r}); import jax_cache\n" if warm else ""
    probe = (
        "import importlib.util, json, sys\n"
        + as_warm_start
        + "importlib.util.find_spec('jax')  # the backend registry's check, before Keras\n"
        "looked = 'jax' in sys.modules\n"
        "import jax\n"
        "from jax._src import cache_key, compiler, lru_cache\n"
        "hooks = lambda: [compiler._cache_write, cache_key._hash_accelerator_config,\n"
        "                 lru_cache.LRUCache.put]\n"
        "first = hooks()\n"
        + ("" if warm else "import jax_cache\n")  # the module the sitecustomize registered
        + "jax_cache.share()  # as tests/warm_start.py's serve does\n"
        "print(json.dumps([looked, *(f.__name__ for f in first), hooks() == first]))\n"
    )
    env = dict(os.environ, PYTHONPATH=str(jax_cache.COLD))
    done = subprocess.run(
        [sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout) == [False, "write", "layout", "put_whole", True]
