"""Faults a real run meets, on the TensorFlow, JAX and PyTorch backends where each meets them: bad
labels and a folder of checkpoints without its config.json (refused before anything is written,
exit 2), a full disk (one line, exit 4, the checkpoint before intact, a rerun resumes), a second
run into a folder in use (refused naming the holder, exit 2) and a killed run's folder (taken
again at once)."""

import contextlib
import errno
import importlib.util
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time

import launchers
import pytest
from test_tensorflow_free_backends import backend_env

from resnet_noBN.configs.errors import DataError, StorageError, TimeBudgetReached, first_line
from resnet_noBN.datasets import cifar_data
from resnet_noBN.host import storage
from resnet_noBN.runs import folder_lock, record

CIFAR_RECORDS = 8  # a file, in the cifar_bin fixture (conftest.py)
SMALL = [
    "--model=small",
    "--batch_size=8",
    "--eval_batch_size=16",
    "--log_every=2",
    "--checkpoint_every=2",
    "--eval_every=4",
    "--seed=3",
]
# PyTorch where it is installed (an extra: pip install -e '.[torch]')
HAS_TORCH = importlib.util.find_spec("torch") is not None
BACKENDS = (
    "tensorflow",
    "jax",
    pytest.param("torch", marks=pytest.mark.skipif(not HAS_TORCH, reason="torch not installed")),
)


def cifar(backend: str, *args):
    """launch/cifar.py on ``backend``: TensorFlow's in the usual environment, JAX's and
    PyTorch's in that of the other TensorFlow-free launches (``backend_env``: on the CPU), so
    that each forks from a warm process other files use too (tests/warm_start.py)."""
    env = {"KERAS_BACKEND": backend} if backend == "tensorflow" else backend_env(backend)
    return launchers.run("launch/cifar.py", *args, env=env)


def last_line(proc) -> str:
    return proc.stderr.strip().splitlines()[-1]


@pytest.fixture(scope="module")
def bad_labels(tmp_path_factory, cifar_bin):
    """A copy of ``cifar_bin`` whose data_batch_2.bin holds label 200 in its record 3."""
    folder = tmp_path_factory.mktemp("bad") / "cifar-10-batches-bin"
    folder.mkdir()
    for path in cifar_bin.iterdir():
        data = bytearray(path.read_bytes())
        if path.name == "data_batch_2.bin":
            data[3 * cifar_data.DATASETS["cifar10"].record_bytes] = 200
        (folder / path.name).write_bytes(bytes(data))
    return folder


def test_a_label_outside_the_classes_names_the_file(bad_labels):
    cifar_data.clear_cache()
    with pytest.raises(DataError) as excinfo:
        cifar_data.load_split("cifar10", "train", bad_labels)
    assert str(excinfo.value) == (
        f"{bad_labels / 'data_batch_2.bin'}: record 3 has label 200 (1 record(s) with labels "
        "outside CIFAR-10's 0-9): the file is damaged or not CIFAR-10; unpack the official "
        "archive again"
    )


@pytest.mark.parametrize("backend", BACKENDS)
def test_bad_labels_and_checkpoints_without_config_write_nothing(
    tmp_path, bad_labels, cifar_bin, backend
):
    """Bad labels: one line naming the file, exit 2, the folder not created. Checkpoints whose
    config.json is gone: refused, naming the way out, and no config.json written over them."""
    model_dir = tmp_path / "run"
    proc = cifar(backend, f"--data_path={bad_labels}", f"--model_dir={model_dir}", *SMALL)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert last_line(proc).startswith(f"error: {bad_labels / 'data_batch_2.bin'}: record 3 ")
    assert "Traceback" not in proc.stderr and not model_dir.exists()

    index = "checkpoint" if backend == "tensorflow" else "checkpoints.json"
    model_dir.mkdir()
    (model_dir / index).write_text(json.dumps({"checkpoints": ["ckpt-2.npz"]}))
    proc = cifar(backend, f"--data_path={cifar_bin}", f"--model_dir={model_dir}", *SMALL)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert last_line(proc) == (
        f"error: --model_dir {model_dir} holds checkpoints ({index}) but no config.json, so "
        "they cannot be checked against this run; put back its config.json, or move the "
        "checkpoints away to start afresh"
    )
    assert sorted(p.name for p in model_dir.iterdir()) == [index]  # as found: no claim left


# ------------------------------------------------------------------------------ a full disk
def no_space(*args, **kwargs):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def test_a_failed_write_leaves_the_file_as_it_was(tmp_path, monkeypatch):
    """atomic_write: the old file whole, no temporary left; append_line: a line cut short by a
    full disk is taken back; config.json's write: StorageError, one line naming the folder."""
    path = tmp_path / "config.json"
    path.write_text("old")
    with pytest.raises(OSError):
        storage.atomic_write(str(path), lambda f: (f.write(b"new, in part"), no_space()))
    assert path.read_text() == "old" and sorted(os.listdir(tmp_path)) == ["config.json"]

    log = tmp_path / "train.jsonl"
    storage.append_line(str(log), '{"step": 1}')
    real_write, calls = os.write, []

    def short_then_full(fd, data):  # a full disk: a short write, then ENOSPC
        calls.append(len(data))
        return real_write(fd, data[:5]) if len(calls) == 1 else no_space()

    monkeypatch.setattr(os, "write", short_then_full)
    with pytest.raises(OSError):
        storage.append_line(str(log), '{"step": 2}')
    monkeypatch.undo()
    assert log.read_text() == '{"step": 1}\n'

    monkeypatch.setattr(storage.os, "fsync", no_space)
    with pytest.raises(StorageError) as excinfo:
        record.record_config(str(tmp_path), {"seed": 1})
    assert str(excinfo.value) == (
        f"cannot write config.json into {tmp_path} (No space left on device): free space there "
        "or move the run to a larger disk, then rerun the same command to resume from the "
        "latest checkpoint"
    )
    assert path.read_text() == "old" and sorted(os.listdir(tmp_path)) == [
        "config.json",
        "train.jsonl",
    ]


def test_an_error_without_a_message_is_still_named_in_one_line():
    """What a one-line error quotes of another (``configs.errors.first_line``): its first line,
    at most 200 characters; an error with no message, its type (a failed write and an
    unreadable checkpoint quoting ``OSError()`` raised IndexError before)."""
    assert first_line(ValueError("lost a peer\n  at graph op ...")) == "lost a peer"
    assert first_line("x" * 300) == "x" * 200 and first_line("x" * 300, limit=None) == "x" * 300
    assert first_line(OSError()) == "OSError" and first_line("  ") == "no message"
    assert storage.reason(OSError()) == "OSError"
    assert storage.reason(RuntimeError("/a/long/path ... No space left on device")) == (
        "No space left on device"
    )
    from resnet_noBN.trainers.loop import unreadable_checkpoint_line  # Keras

    assert unreadable_checkpoint_line("/run/ckpt-2", OSError()) == (
        "warning: checkpoint /run/ckpt-2 cannot be restored (OSError); trying the one before it"
    )
    assert unreadable_checkpoint_line("/run/ckpt-2", ValueError("bad shape\nat ...")) == (
        "warning: checkpoint /run/ckpt-2 cannot be restored (ValueError: bad shape); trying the "
        "one before it"
    )


@contextlib.contextmanager
def small_disk(folder, size: str):
    """A tmpfs of ``size`` mounted on ``folder`` (skips where mounting is not permitted)."""
    folder.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)], capture_output=True
    )
    if mounted.returncode:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        yield folder
    finally:
        subprocess.run(["umount", str(folder)], check=True)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_full_disk_is_one_line_and_exit_4_and_the_rerun_resumes(tmp_path, cifar_bin, backend):
    """A 1 MiB tmpfs holds the small network's first checkpoint (588 KiB) and not the second:
    the save of step 4 fails in one line naming the folder, exit 4, no traceback, no temporary
    left; with space, the same command resumes from ckpt-2."""
    with small_disk(tmp_path / "disk", "1m") as disk:
        model_dir = disk / "run"
        args = (f"--data_path={cifar_bin}", f"--model_dir={model_dir}", "--train_steps=6", *SMALL)
        full = cifar(backend, *args)
        assert full.returncode == 4, full.stderr[-3000:]
        assert "Traceback" not in full.stderr
        latest = model_dir / ("ckpt-2" if backend == "tensorflow" else "ckpt-2.npz")
        assert last_line(full) == (
            f"error: cannot write the checkpoint of step 4 into {model_dir} (No space left on "
            "device): free space there or move the run to a larger disk, then rerun the same "
            f"command to resume from {latest}"
        )
        names = sorted(os.listdir(model_dir))
        assert not [n for n in names if n.endswith(("_temp", ".tmp")) or "ckpt-4" in n], names
        subprocess.run(["mount", "-o", "remount,size=8m", str(disk)], check=True)
        again = cifar(backend, *args)
        assert again.returncode == 0, again.stderr[-3000:]
        assert f"resumed from {latest} at step 2" in again.stdout
        assert json.loads(again.stdout.strip().splitlines()[-1])["final_step"] == 6
        steps = [json.loads(line)["step"] for line in (model_dir / "train.jsonl").open()]
        assert steps == [2, 4, 6]  # step 4 logged before its save failed, dropped, logged again


# ------------------------------------------------------------------------------ one run per folder
def test_a_folder_lock_is_exclusive_and_dies_with_its_process(tmp_path):
    """A second lock is refused naming the holder (host, process, start); released, the folder
    is locked again; a lock whose process was killed (-9) blocks nothing."""
    first = folder_lock.lock(str(tmp_path))
    with pytest.raises(folder_lock.FolderBusy) as excinfo:
        folder_lock.lock(str(tmp_path))
    holder = json.loads((tmp_path / folder_lock.LOCK_FILE).read_text())
    assert holder["host"] == socket.gethostname() and holder["pid"] == os.getpid()
    assert str(excinfo.value) == (
        f"--model_dir {tmp_path} is in use by another run (host {holder['host']}, process "
        f"{os.getpid()}, started {holder['started']}); wait for it to end or stop it, or use "
        "another --model_dir"
    )
    first.release()
    folder_lock.lock(str(tmp_path)).release()

    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from resnet_noBN.runs import folder_lock; "
            "folder_lock.lock(sys.argv[1]); print('held', flush=True); time.sleep(600)",
            str(tmp_path),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert child.stdout.readline() == "held\n"
    with pytest.raises(folder_lock.FolderBusy, match=f"process {child.pid}, started"):
        folder_lock.lock(str(tmp_path))
    child.kill()
    child.wait()
    assert folder_lock.lock(str(tmp_path)).locked


def test_a_withdrawn_lock_leaves_the_file_system_as_it_found_it(tmp_path):
    """A run refused before it writes withdraws its lock: every folder taking it created
    (parents too) goes, deepest first; a folder that was there stays, its lock file's last
    holder and its times put back."""
    deep = tmp_path / "a" / "b" / "run"
    assert folder_lock.missing_folders(str(deep)) == [
        str(tmp_path / "a"),
        str(tmp_path / "a" / "b"),
        str(deep),
    ]
    folder_lock.lock(str(deep)).withdraw()
    assert sorted(os.listdir(tmp_path)) == []
    lock_file = tmp_path / folder_lock.LOCK_FILE
    lock_file.write_text(json.dumps(folder_lock.holder()))  # left by a run killed -9
    os.utime(lock_file, ns=(1_000_000_000, 2_000_000_000))
    before = lock_file.read_bytes()
    folder_lock.lock(str(tmp_path), print_fn=lambda line: None).withdraw()
    assert lock_file.stat().st_mtime_ns == 2_000_000_000
    assert lock_file.read_bytes() == before


def test_a_second_run_is_refused_and_a_killed_runs_folder_resumes(tmp_path, cifar_bin):
    """Run A trains into a folder; run B into the same one is refused in one line naming A
    (exit 2) and writes nothing; A killed with -9 after its checkpoint of step 2 leaves no
    claim: the same command resumes there."""
    model_dir = tmp_path / "run"
    args = [f"--data_path={cifar_bin}", f"--model_dir={model_dir}", *SMALL]
    a = launchers.start(
        [sys.executable, str(launchers.REPO / "launch/cifar.py"), *args, "--train_steps=100000"],
        {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONUNBUFFERED": "1"},
        subprocess.PIPE,
        subprocess.STDOUT,
    )
    try:
        for _ in a.stdout:  # until its checkpoint of step 2 is written
            if (model_dir / "ckpt-2.index").exists():
                break
        before = {p.name: p.stat().st_mtime_ns for p in model_dir.iterdir()}
        b = cifar("tensorflow", *args, "--train_steps=4")
        assert b.returncode == 2, b.stderr[-2000:]
        started = json.loads((model_dir / folder_lock.LOCK_FILE).read_text())["started"]
        assert last_line(b) == (
            f"error: --model_dir {model_dir} is in use by another run (host "
            f"{socket.gethostname()}, process {a.pid}, started {started}); wait for it to end or "
            "stop it, or use another --model_dir"
        )
        for name in ("config.json", folder_lock.LOCK_FILE):  # B wrote neither
            assert (model_dir / name).stat().st_mtime_ns == before[name], name
    finally:
        a.send_signal(signal.SIGKILL)
        a.wait()
    text = (model_dir / "checkpoint").read_text()
    steps = int(re.search(r'^model_checkpoint_path: "ckpt-(\d+)"', text, re.M).group(1))
    again = cifar("tensorflow", *args, f"--train_steps={steps + 2}")
    assert again.returncode == 0, again.stderr[-2000:]
    assert f"resumed from {model_dir}/ckpt-{steps} at step {steps}" in again.stdout


def test_a_kill_between_checkpoints_leaves_each_steps_record_once(tmp_path, cifar_bin):
    """Records at every step (--log_every=1), checkpoints every 3 and evaluations every 5: the
    run killed (-9) after its record of step 7 or 8, its last checkpoint step 6's, then resumed
    by the same command to step 12. Its records hold each step 1 to 12 once (the killed run's
    steps after 6 dropped, trained again), its evaluations 5, 10 and 12 once, and its answers
    the same steps. A kill that came after the next checkpoint is tried again (the poll missed
    the window on a loaded machine), up to 3 launches."""
    model_dir = tmp_path / "run"
    args = [
        f"--data_path={cifar_bin}",
        f"--model_dir={model_dir}",
        *SMALL,
        "--num_residual_units=3",  # slow enough a step for the poll to land between checkpoints
        "--batch_size=32",
        "--log_every=1",
        "--checkpoint_every=3",
        "--eval_every=5",
        "--max_checkpoints=5",
    ]
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    for _ in range(3):
        shutil.rmtree(model_dir, ignore_errors=True)
        run = launchers.start(
            [sys.executable, str(launchers.REPO / "launch/cifar.py"), *args, "--train_steps=12"],
            env,
            subprocess.DEVNULL,
            subprocess.DEVNULL,
        )
        steps = []
        while run.poll() is None and not (steps and steps[-1] >= 7):
            time.sleep(0.01)
            steps = _record_steps(model_dir / "train.jsonl")
        run.send_signal(signal.SIGKILL)
        run.wait()
        if steps and steps[-1] in (7, 8) and not (model_dir / "ckpt-9.index").exists():
            break
    else:
        pytest.fail("the kill never landed between the checkpoints of steps 6 and 9")
    killed = _record_steps(model_dir / "train.jsonl")
    assert killed[:7] == list(range(1, 8))  # the records after step 6 are there, unsaved
    again = cifar("tensorflow", *args, "--train_steps=12")
    assert again.returncode == 0, again.stderr[-2000:]
    assert f"resumed from {model_dir}/ckpt-6 at step 6" in again.stdout
    assert _record_steps(model_dir / "train.jsonl") == list(range(1, 13))
    assert _record_steps(model_dir / "metrics.jsonl") == [5, 10, 12]
    assert _record_steps(model_dir / "answers.jsonl") == [5, 10, 12]


def _record_steps(path) -> list[int]:
    """The step of each whole line of a run's JSON-lines file, in order."""
    if not path.exists():
        return []
    lines = path.read_text().split("\n")[:-1]  # a line cut short by the kill is not whole
    return [json.loads(line)["step"] for line in lines if line.strip()]


# ------------------------------------------------------------------------------ the loop's faults
def fake_trainer(tmp_path, monkeypatch, **recipe):
    """test_progress's SlowFakeTrainer (10 s a step on a fake clock, no model)."""
    from test_progress import FakeClock, SlowFakeTrainer

    fake = FakeClock(wall=time.time())
    monkeypatch.setattr(time, "perf_counter", fake.monotonic)
    monkeypatch.setattr(time, "monotonic", fake.monotonic)
    return SlowFakeTrainer(tmp_path, fake, step_s=10.0, compile_s=0.0, **recipe)


def test_a_failed_save_and_the_time_budget_in_the_loop(tmp_path, monkeypatch):
    """An injected ENOSPC in a save: StorageError naming the step, the folder and where a rerun
    resumes; the time budget: a checkpoint of the step reached, then TimeBudgetReached (exit
    3, like a preemption)."""
    recipe = {"train_steps": 100, "log_every": 1000, "eval_every": 1000}
    trainer = fake_trainer(tmp_path, monkeypatch, checkpoint_every=2, **recipe)
    monkeypatch.setattr(trainer, "save", no_space)
    with pytest.raises(StorageError) as excinfo:
        trainer.train(None, None, print_fn=lambda line: None)
    assert str(excinfo.value) == (
        f"cannot write the checkpoint of step 2 into {tmp_path} (No space left on device): free "
        "space there or move the run to a larger disk, then rerun the same command to resume "
        "from the start"
    )
    trainer = fake_trainer(tmp_path, monkeypatch, checkpoint_every=1000, **recipe)
    trainer.time_budget_s = 35.0  # 10 s a step, one step a call: out of time after step 4
    with pytest.raises(TimeBudgetReached) as excinfo:
        trainer.train(None, None, print_fn=lambda line: None)
    assert str(excinfo.value) == (
        f"time budget of 35 s reached at step 4: a checkpoint of that step is in {tmp_path}; "
        "rerun the same command to resume"
    )
    assert trainer._saved_step == 4
