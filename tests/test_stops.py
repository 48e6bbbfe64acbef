"""A stop at any moment (docs/reliability.md, "A stop at any moment"): a small run of
launch/cifar.py, and launch/table2.py over two such runs, stopped at each point where they
write, with SIGINT (as Ctrl-C: to the whole process group), SIGTERM and SIGKILL, then the same
command again. Each stop: its exit status and its one line, no traceback, no lock left held (a
killed one's taken over by the rerun in one note), each record once, nothing written lost or
cut short; each run's final weights those of a run never stopped. The points come from the runs'
own records (the lines they print, the files they write), not from sleeps. On random records;
the run's stops (part A) go side by side with the table's (part B)."""

import functools
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import launchers
import pytest

from resnet_noBN.configs.errors import InputError
from resnet_noBN.runs import cli, folder_lock
from resnet_noBN.studies import arm_runs, run_loop, study, table2_plan, table2_report
from resnet_noBN.trainers.answers import read_answers
from resnet_noBN.trainers.run_log import METRICS_FILE, RECORD_FILES, RunLog, read_metrics

SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGKILL)
# the small network, 40 steps of batch 8: a record and an evaluation every 5 steps, a checkpoint
# every 15 (and at the end); given to launch/table2.py with spaces between them (--run_flags).
# The plot is redrawn at every evaluation: the points between an evaluation and what follows it
# then last the redraw (about 0.1 s), which a poll every 2 ms on 2 busy cores can reach.
RUN_FLAGS = (
    "--model=small",
    "--train_steps=40",
    "--eval_every=5",
    "--checkpoint_every=15",
    "--log_every=5",
    "--redraw_every_s=0",
    "--batch_size=8",
    "--eval_batch_size=16",
)
EVERY_5 = list(range(5, 41, 5))
POLL_S = 0.002
TRIES = 4  # launches to reach a point the run can pass between two polls (stopped_at)
RESUME = "rerun the same command to resume"
RUN_DIR = ("runs", "cifar10_paper-seed0")


class Launch:
    """A launcher started as a user starts it (a session of its own, so that a Ctrl-C reaches
    it and its runs: ``os.killpg``), warm where it can be (``launchers.start``), its output in
    two files of ``logs``."""

    def __init__(self, argv: list[str], logs, env=None):
        logs.mkdir(parents=True, exist_ok=True)
        n = len(list(logs.glob("*.out")))
        self.out, self.err = logs / f"{n}.out", logs / f"{n}.err"
        variables = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", **(env or {})}
        with open(self.out, "w") as out, open(self.err, "w") as err:
            self.proc = launchers.start(argv, variables, out, err, new_session=True)

    def stdout(self) -> str:
        return self.out.read_text()

    def stderr(self) -> str:
        return self.err.read_text()

    def stop_when(self, ready, signum: int, group: bool = False, may_pass: bool = False):
        """``signum`` once ``ready()`` holds (to the process group where ``group``: Ctrl-C);
        then waits for the end. With ``may_pass``, a process that ends by itself first with exit
        0 (it went past the point between two polls, or the signal came after its last line and
        was ignored) is waited for, not failed: :attr:`passed`."""
        deadline = time.monotonic() + 300
        self.passed = False
        while not ready():
            if may_pass and self.proc.poll() == 0:
                self.passed = True
                return self
            assert self.proc.poll() is None, (
                f"ended ({self.proc.returncode}) before the point: {self.stderr()[-3000:]}"
            )
            assert time.monotonic() < deadline, "timed out waiting for the point"
            time.sleep(POLL_S)
        if group:
            os.killpg(self.proc.pid, signum)
        else:
            self.proc.send_signal(signum)
        self.wait()
        self.passed = may_pass and self.proc.returncode == 0
        return self

    def wait(self):
        self.proc.wait(timeout=600)
        return self


def steps(folder, name: str) -> list[int]:
    """The steps of a records file, line by line as written (no reader's deduplication)."""
    path = folder / name
    if not path.exists():
        return []
    return [json.loads(line)["step"] for line in path.read_text().splitlines() if line]


def newest_checkpoint(folder) -> int:
    """The step TensorFlow's index names latest (0: none)."""
    index = folder / "checkpoint"
    text = index.read_text() if index.exists() else ""
    return int(text.split('"ckpt-')[1].split('"')[0]) if text.startswith("model_") else 0


def assert_each_record_once(folder) -> None:
    for name in RECORD_FILES:
        found = steps(folder, name)
        assert found == sorted(set(found)), (name, found)


def assert_stopped(launch: Launch, signum: int, line: str | None = None) -> str:
    """The stop's exit status (3; a kill's -9), no traceback, and its one line (the last of
    stderr, the only one of its kind; equal to ``line`` where given). Returns that line."""
    if signum == signal.SIGKILL:
        assert launch.proc.returncode == -signal.SIGKILL
        return ""
    output = launch.stdout() + launch.stderr()
    assert launch.proc.returncode == 3, output[-3000:]
    assert "Traceback" not in output, output[-3000:]
    said = [s for s in launch.stderr().splitlines() if s.startswith(("preempted", "stopped"))]
    assert len(said) == 1 and launch.stderr().splitlines()[-1] == said[0], output[-3000:]
    assert line is None or said[0] == line, (said[0], line)
    return said[0]


def taken_over(launch: Launch, flag: str, folder, killed: Launch) -> bool:
    """Whether ``launch`` took over, in its one note, the lock ``killed`` left on ``folder``."""
    note = f"note: {flag} {folder} was locked by host "
    return any(
        s.startswith(note) and f", process {killed.proc.pid}, " in s and s.endswith("over")
        for s in launch.stderr().splitlines()
    )


@pytest.fixture(scope="module")
def data(tmp_path_factory, write_cifar):
    root = tmp_path_factory.mktemp("data")
    write_cifar(root / "cifar-10-batches-bin", "cifar10", 16)  # 80 training, 16 test images
    write_cifar(root / "cifar-100-binary", "cifar100", 80)
    return root


def plan(out, data) -> table2_plan.Plan:
    """The plan launch/table2.py makes of these runs: its commands are the runs' commands."""
    paths = {
        "cifar10": str(data / "cifar-10-batches-bin"),
        "cifar100": str(data / "cifar-100-binary"),
    }
    return table2_plan.Plan(str(out), 1, paths, {}, [], "tensorflow", "", None, "", list(RUN_FLAGS))


# ------------------------------------------------------------------ the pieces, in this process
# a run as run_loop starts it: SIGTERM ends it with exit 3 (launch/cifar.py's stop), no checkpoint
STOPPABLE = """
import signal, sys, time
signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(3))
print("training", flush=True)
time.sleep(60)
"""


def test_the_loop_stops_its_runs_and_names_what_each_kept(tmp_path):
    """A SIGTERM to the launcher while its first of two runs trains: that run is sent SIGTERM
    and waited for, reported, the tables written, the second never started; the launcher's
    one line names what the run kept; the handlers before the loop are put back."""
    jobs = [
        run_loop.Job(name, str(tmp_path / name), (sys.executable, "-c", STOPPABLE))
        for name in ("a", "b")
    ]
    log = tmp_path / "a" / arm_runs.LOG_FILE

    def stop_once_a_trains():
        wait_until(lambda: log.exists() and "training" in log.read_text(), "run a")
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=stop_once_a_trains, daemon=True).start()
    before, lines, tables = signal.getsignal(signal.SIGTERM), [], []
    ended = run_loop.run_all(jobs, lambda: tables.append(len(lines)), print_fn=lines.append)
    assert ended == run_loop.Ended(signal.SIGTERM, (("a", 0),), ())
    assert ended.stop_line() == (
        "stopped by SIGTERM: a stopped before its first checkpoint; rerun the same command to "
        "resume"
    )
    assert lines[0] == "started a" and len(lines) == 2 and tables == [2]
    assert lines[1].startswith(
        "[1/2] a: stopped before its first checkpoint; rerun to start it again; elapsed "
    )
    assert signal.getsignal(signal.SIGTERM) is before and not (tmp_path / "b").exists()


def test_the_loop_advises_once_when_its_last_run_trains_alone(tmp_path):
    """Two runs side by side, the first ending at once: once it is reported and none waits, the
    launcher's advice is asked for the one run left, said once, and not asked again."""
    quick, slow = "print('done')", "import time; time.sleep(3)"
    jobs = [
        run_loop.Job(name, str(tmp_path / name), (sys.executable, "-c", code))
        for name, code in (("a", quick), ("b", slow))
    ]
    asked, lines = [], []

    def alone(left):
        asked.append(left)
        return f"{left} left alone"

    ended = run_loop.run_all(jobs, lambda: None, parallel=2, print_fn=lines.append, alone=alone)
    assert ended == run_loop.Ended(None, (), ())
    assert asked == [1] and lines[:2] == ["started a", "started b"] and len(lines) == 5
    assert lines[2].startswith("[1/2] a: ") and lines[3] == "1 left alone"
    assert lines[4].startswith("[2/2] b: ")


def test_the_advice_names_the_threads_a_rerun_gives(monkeypatch):
    """A study's advice (studies.study.advice_when_alone) on 4 cores: a run started with 2 threads
    of them, left alone, is told a rerun gives it 4; none where a rerun gains no thread, or
    where the backend takes no thread count."""
    monkeypatch.setattr(study.os, "sched_getaffinity", lambda pid: {0, 1, 2, 3})
    assert study.advice_when_alone(2)(1) == (
        "the run left trains on 2 intra-op thread(s) each with cores free: stop the study "
        "(Ctrl-C) and rerun the same command to resume from the checkpoints with 4 each"
    )
    assert study.advice_when_alone(1)(2).startswith("the 2 runs left train on 1 intra-op")
    assert study.advice_when_alone(2)(2) is None and study.advice_when_alone(1)(3) is None
    assert study.advice_when_alone(None)(1) is None


def test_a_run_is_reported_by_how_it_ended(tmp_path):
    """A run's end in the launcher's words: stopped at its checkpoint, killed by a signal (its
    name, not a negative status), failed with its last error line."""
    (tmp_path / arm_runs.LOG_FILE).write_text("step 5 loss 2.3\nerror: no space left\n")
    assert arm_runs.outcome(str(tmp_path), 3) == (
        "stopped before its first checkpoint; rerun to start it again"
    )
    (tmp_path / "ckpt-15.index").touch()
    assert arm_runs.outcome(str(tmp_path), 3) == (
        "stopped at step 15 (its checkpoint); rerun to resume it at step 15"
    )
    assert arm_runs.outcome(str(tmp_path), -signal.SIGKILL) == (
        "ended by SIGKILL (see its launch.log); rerun to resume it at step 15"
    )
    assert arm_runs.outcome(str(tmp_path), 4) == (
        "ended by exit 4: no space left (see its launch.log); rerun to resume it at step 15"
    )


def test_a_lock_left_by_a_killed_run_is_taken_over_in_one_note(tmp_path):
    """A process killed -9 leaves its lock file, which the next takes over in one note naming
    it; one that ends by itself leaves none; a file where the folder goes is named."""
    held = "import sys; from resnet_noBN.runs import folder_lock; folder_lock.lock(sys.argv[1])"
    killed = subprocess.Popen(
        [sys.executable, "-c", held + "; print('held', flush=True); input()", str(tmp_path)],
        stdout=subprocess.PIPE,
        stdin=subprocess.PIPE,
        text=True,
    )
    assert killed.stdout.readline() == "held\n"
    started = json.loads((tmp_path / folder_lock.LOCK_FILE).read_text())["started"]
    killed.kill()
    killed.wait()
    notes = []
    lock = folder_lock.lock(str(tmp_path), print_fn=notes.append)
    assert notes == [
        f"note: --model_dir {tmp_path} was locked by host {socket.gethostname()}, process "
        f"{killed.pid}, started {started}, which has ended without releasing it: taking it over"
    ]
    lock.release()
    assert not (tmp_path / folder_lock.LOCK_FILE).exists()
    subprocess.run([sys.executable, "-c", held, str(tmp_path)], check=True)  # it ends by itself
    assert not (tmp_path / folder_lock.LOCK_FILE).exists()
    (tmp_path / "file").touch()
    with pytest.raises(InputError) as refused:
        folder_lock.lock(str(tmp_path / "file"), "--output_dir")
    assert (
        str(refused.value) == f"--output_dir {tmp_path}/file is a file, not a folder; pick a folder"
    )
    with pytest.raises(InputError) as refused:
        folder_lock.lock(str(tmp_path / "file" / "run"))
    assert str(refused.value) == (
        f"--model_dir {tmp_path}/file/run cannot be made: {tmp_path}/file is a file, not a "
        "folder; pick a folder"
    )


def test_the_records_past_the_checkpoint_are_dropped_and_older_ones_read_as_they_are(tmp_path):
    """A resume at step 10 drops the records past it from each file (a line cut short by a kill
    too), leaving an older version's repeated records of earlier steps as they are (its readers
    keep the last); one at step 0 (no checkpoint) drops them all; a file with nothing past the
    step is not rewritten."""

    def write(name, lines):
        (tmp_path / name).write_text("".join(f"{line}\n" for line in lines))

    write(
        METRICS_FILE, [json.dumps({"step": s, "test_error": s / 100}) for s in (5, 10, 5, 10, 15)]
    )
    write("train.jsonl", [*(json.dumps({"step": s}) for s in (5, 10, 15)), '{"step": 2'])
    write("answers.jsonl", [json.dumps({"step": 5})])
    os.utime(tmp_path / "answers.jsonl", ns=(1, 1))
    log = RunLog(str(tmp_path), "t")
    log.resume_at(10)
    assert steps(tmp_path, METRICS_FILE) == [5, 10, 5, 10]
    assert [r["test_error"] for r in read_metrics(str(tmp_path))] == [0.05, 0.10]
    assert steps(tmp_path, "train.jsonl") == [5, 10]
    assert (tmp_path / "answers.jsonl").stat().st_mtime_ns == 1  # nothing past step 10
    assert (tmp_path / "test_error.png").read_bytes()[:4] == b"\x89PNG"  # redrawn
    assert log.evaluation_at(10)["test_error"] == 0.10 and log.evaluation_at(15) is None
    log.resume_at(0)
    assert [steps(tmp_path, name) for name in RECORD_FILES] == [[], [], []]
    assert not (tmp_path / "test_error.png").exists()


SWALLOWED = """
import gc, os, signal, time
from resnet_noBN.host import stops
stops.install("while testing")
fired = []
def callback(phase, info):  # as JAX's: a callback at each collection
    if not fired:
        fired.append(True)
        os.kill(os.getpid(), signal.SIGTERM)  # its handler runs here, in the callback
gc.callbacks.append(callback)
try:
    gc.collect()
    time.sleep(5)
    print("not stopped")
finally:
    print("its finally ran")
"""


def test_a_stop_that_lands_in_a_garbage_collectors_callback_still_stops():
    """A SIGTERM handled inside a garbage collector's callback (JAX's, in a launcher that
    imported it), where Python prints the SystemExit raised and goes on: the stop is delivered
    again once the callback has returned. One line, exit 3, the finally blocks run (before:
    the stop lost, the launcher ran to its end with exit 0)."""
    proc = subprocess.run(
        [sys.executable, "-c", SWALLOWED], capture_output=True, text=True, timeout=60
    )
    assert (proc.returncode, proc.stdout) == (3, "its finally ran\n"), proc.stderr
    assert proc.stderr == "stopped by SIGTERM while testing; rerun the same command to resume\n"


def test_run_flags_take_spaces_and_commas():
    """--run_flags as its help shows it ("--model=small --train_steps=400") or split by absl at
    commas: the same flags; a quote left open is one line."""
    assert cli.each_flag(["--model=small --train_steps=400", "--eval_every=10"]) == [
        "--model=small",
        "--train_steps=400",
        "--eval_every=10",
    ]
    with pytest.raises(InputError) as refused:
        cli.each_flag(["--label='a b"])
    assert str(refused.value) == (
        "--run_flags: --label='a b cannot be split (No closing quotation); close its quote"
    )


def stopped(start, ready, signum: int, tries: int = 1, undo=None) -> list[Launch]:
    """Launches of ``start()``, each stopped with ``signum`` once ``ready(launch)`` (SIGINT to
    the process group: Ctrl-C). With ``tries`` over 1, a launch that ended by itself first, with
    exit 0 (a loaded machine polled past a point that lasts milliseconds), is checked as ended
    whole (no stop line, no traceback), ``undo(launch)`` puts back what it wrote, and the point
    is tried again, ``tries`` launches in all. Returns the launches, the last one stopped."""
    launches, may_pass = [], tries > 1
    for _ in range(tries):
        launches.append(launch := start())
        launch.stop_when(
            lambda: ready(launch), signum, group=signum == signal.SIGINT, may_pass=may_pass
        )
        if not launch.passed:
            return launches
        assert "stopped by" not in launch.stderr() and "Traceback" not in launch.stderr()
        if undo:
            undo(launch)
    raise AssertionError(f"each of {tries} launches ended before the point: {launch.stdout()}")


# ------------------------------------------------------------------------ part A: the run alone
RUN_POINTS = (
    # the evaluations of steps 5 and 10 written, its first checkpoint (15) not yet
    ("before its first checkpoint", lambda folder: 10 in steps(folder, METRICS_FILE)),
    # step 30 evaluated, its checkpoint not yet written
    (
        "between an evaluation and its checkpoint",
        lambda folder: (
            30 in steps(folder, METRICS_FILE) and not (folder / "ckpt-30.index").exists()
        ),
    ),
    # the checkpoint of the last step written whole (the index names it), the run not ended
    ("after its last checkpoint, before its end", lambda folder: newest_checkpoint(folder) == 40),
)


def stopped_at(command: list[str], logs, folder, ready, signum: int) -> Launch:
    """``command`` launched and stopped with ``signum`` once ``ready()``, tried again where the
    run passed the point (:func:`stopped`: it writes its last checkpoint, then ends within
    milliseconds): a launch that did is checked as ended whole (its result its last line) and
    the folder put back as it was before it."""
    before = folder.with_name(f"{folder.name}-before")
    shutil.rmtree(before, ignore_errors=True)
    if folder.exists():
        shutil.copytree(folder, before)

    def undo(launch: Launch) -> None:
        assert json.loads(launch.stdout().splitlines()[-1])["final_step"] == 40
        shutil.rmtree(folder)
        if before.exists():
            shutil.copytree(before, folder)

    start = functools.partial(Launch, command, logs)
    return stopped(start, lambda launch: ready(), signum, TRIES, undo)[-1]


def run_stopped_at_each_point(data, root, signum: int, tried: list) -> str:
    """launch/cifar.py stopped at each of :data:`RUN_POINTS` with ``signum``, each stop's rerun
    the next launch, then a last launch to the end; returns the weights digest it ends with."""
    folder, logs = root / signum.name, root / f"{signum.name}-logs"
    command = [
        f"--model_dir={folder}" if a.startswith("--model_dir=") else a
        for a in plan(root, data).command("cifar10_paper", 0)
    ]
    killed, kept = None, 0
    for point, ready in RUN_POINTS:
        launch = stopped_at(command, logs, folder, lambda ready=ready: ready(folder), signum)
        if kept:
            assert f"resumed from {folder}/ckpt-{kept} at step {kept}" in launch.stdout()
        assert killed is None or taken_over(launch, "--model_dir", folder, killed)
        said, kept = assert_stopped(launch, signum), newest_checkpoint(folder)
        if signum == signal.SIGKILL:  # the kill's moment: the checkpoints there were then
            assert kept == {RUN_POINTS[0][0]: 0, RUN_POINTS[1][0]: 15}.get(point, 40), point
            assert (folder / folder_lock.LOCK_FILE).exists()  # its holder gone
        else:
            at = {RUN_POINTS[0][0]: (10, 15), RUN_POINTS[1][0]: (30, 35)}.get(point, (40,))
            preempted = (
                f"preempted at step {kept}: a checkpoint of that step is in {folder}; rerun the "
                "same command to resume"
            )
            after_the_end = (
                f"stopped by {signum.name} after the run's last step: its checkpoint and "
                "evaluation are written; rerun the same command to resume"
            )
            assert kept in at and said in (preempted, after_the_end), (point, said)
            assert not (folder / folder_lock.LOCK_FILE).exists()
            assert not any(s.startswith("{") for s in launch.stdout().splitlines())
        assert_each_record_once(folder)
        tried.append(("launch/cifar.py", point, signum.name))
        killed = launch if signum == signal.SIGKILL else None
    final = Launch(command, logs).wait()
    assert final.proc.returncode == 0, final.stderr()[-3000:]
    assert killed is None or taken_over(final, "--model_dir", folder, killed)
    assert (
        "the run ended at step 40: its checkpoint and evaluation are written; nothing to train "
        "or evaluate"
    ) in final.stdout()
    return finished(folder, final)


def finished(folder, launch: Launch) -> str:
    """The weights digest of the run in ``folder`` that ``launch`` ended, its every record
    checked: once a step, every 5 steps, the last evaluation's predicted classes, no lock."""
    for name in RECORD_FILES:
        assert steps(folder, name) == EVERY_5, name
    assert read_answers(folder / "answers.jsonl")[-1].predicted is not None
    assert not (folder / folder_lock.LOCK_FILE).exists()
    result = json.loads(launch.stdout().strip().splitlines()[-1])
    assert result["final_step"] == 40
    return result["weights_sha256"]


# ------------------------------------------------------------- part B: launch/table2.py's points
def snapshot(folder) -> dict | None:
    """Every path under ``folder``: its bytes (a file's) and modification time; None: no folder."""
    if not folder.exists():
        return None
    return {
        str(p.relative_to(folder)): (p.read_bytes() if p.is_file() else b"", p.stat().st_mtime_ns)
        for p in sorted(folder.rglob("*"))
    }


def processes_naming(text: str) -> list[int]:
    """The processes whose command line holds ``text``."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if text.encode() in f.read():
                    found.append(int(pid))
        except OSError:
            continue
    return found


def wait_until(predicate, what: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def held_locks(folder) -> list[str]:
    """The lock files under ``folder`` that a living process holds."""
    import fcntl

    held = []
    for path in folder.rglob(folder_lock.LOCK_FILE) if folder.exists() else ():
        with open(path) as f:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                held.append(str(path))
    return held


def timing_recorded(tmp) -> bool:
    """Whether the timing run (in its throwaway folder under ``tmp``) has written a record."""
    return any(
        (d / "run" / "train.jsonl").is_file() and (d / "run" / "train.jsonl").stat().st_size
        for d in tmp.glob("table2-timing-*")
    )


def table_stopped_at_each_point(data, root, tried: list) -> str:
    """launch/table2.py (one seed: CIFAR-10's run, then CIFAR-100's) stopped during its checks,
    its timing run, its CIFAR-10 run's training and the writing of its table, with each signal
    (SIGINT to the process group, as Ctrl-C; SIGTERM and SIGKILL to the launcher), each stop's
    rerun the next invocation; returns the weights digest its CIFAR-10 run ends with."""
    out, tmp, logs = root / "table", root / "tmp", root / "table-logs"
    tmp.mkdir()
    run = out.joinpath(*RUN_DIR)
    argv = [
        sys.executable,
        str(launchers.REPO / "launch" / "table2.py"),
        f"--cifar10_path={data / 'cifar-10-batches-bin'}",
        f"--cifar100_path={data / 'cifar-100-binary'}",
        "--seeds=1",
        f"--output_dir={out}",
        f"--run_flags={' '.join(RUN_FLAGS)}",  # the help's form: spaces between the flags
    ]
    killed = []  # the invocation killed last, whose lock the next takes over
    left = []  # the timing folder of an invocation killed as it timed, until the next one's

    def invocation(point: str, signum: int | None = None, ready=None, may_pass=False) -> Launch:
        """One invocation, stopped with ``signum`` once ``ready(launch)`` (None: to its end).
        With ``may_pass``, one that ended by itself first is launched again (:func:`stopped`),
        :data:`TRIES` in all."""
        start = functools.partial(Launch, argv, logs, env={"TMPDIR": str(tmp)})
        if ready is None:
            launches = [start().wait()]
        else:
            launches = stopped(start, ready, signum, TRIES if may_pass else 1)
            tried.append(("launch/table2.py", point, signum.name))
        launch = launches[-1]
        if killed:
            assert taken_over(launches[0], "--output_dir", out, killed.pop()), point
        if left and "timing cifar10_paper" in launch.stdout():
            assert not [folder for folder in left if folder.exists()], point
            left.clear()
        if signum == signal.SIGKILL:
            killed.append(launch)
            assert (out / folder_lock.LOCK_FILE).exists()  # its holder gone
        else:
            assert not held_locks(out), point
        return launch

    def plan_said(text: str):
        return lambda launch: text in launch.stdout()

    # before any run: the folder as it was found (a killed invocation's lock file aside)
    for point, ready, when in (
        (
            "its checks",
            plan_said("checking the data"),
            "while checking the data, the flags and every run",
        ),
        (
            "its timing run",
            lambda launch: timing_recorded(tmp),
            "while timing a few steps in a throwaway folder",
        ),
    ):
        for signum in SIGNALS:
            before = snapshot(out)
            launch = invocation(point, signum, ready)
            line = f"stopped by {signum.name} {when}: nothing written; {RESUME}"
            assert_stopped(launch, signum, line)
            if signum == signal.SIGKILL:  # its lock file left; the timing run killed with it
                assert sorted(snapshot(out)) == sorted({folder_lock.LOCK_FILE, *(before or {})})
                for folder in tmp.glob("table2-timing-*"):
                    gone = lambda folder=folder: not processes_naming(str(folder))  # noqa: E731
                    wait_until(gone, "the timing run's end")
                    left.append(folder)  # the next timing run removes it
            else:
                assert snapshot(out) == before, point
                assert not list(tmp.glob("table2-timing-*")), point

    # the CIFAR-10 run training: it saves the step it reached, and the table shows it stopped
    for signum in SIGNALS:
        start = newest_checkpoint(run)
        launch = invocation(
            "a run training",
            signum,
            lambda launch, start=start: max(steps(run, "train.jsonl"), default=0) > start,
        )
        if signum == signal.SIGKILL:  # its run gets SIGTERM as the launcher ends, and saves
            wait_until(lambda: not (run / folder_lock.LOCK_FILE).exists(), "the run's end")
        kept = newest_checkpoint(run)
        assert kept > start
        log = (run / arm_runs.LOG_FILE).read_text().splitlines()
        assert log[-1].startswith(f"preempted at step {kept}: "), log[-3:]
        if signum != signal.SIGKILL:
            assert_stopped(
                launch,
                signum,
                f"stopped by {signum.name}: cifar10_paper, seed 0 saved at step {kept}; rerun "
                "the same command to resume",
            )
            assert (
                f"[1/2] cifar10_paper, seed 0: stopped at step {kept} (its checkpoint); rerun to "
                f"resume it at step {kept}; elapsed "
            ) in launch.stdout()
            table = (out / table2_report.TABLE_FILE).read_text()
            assert f"| CIFAR-10 | 0 | stopped at step {kept}: rerun to resume |" in table
        assert_each_record_once(run)
        assert list(out.rglob(folder_lock.LOCK_FILE)) == (
            [out / folder_lock.LOCK_FILE] if signum == signal.SIGKILL else []
        )

    # the table written after the CIFAR-10 run ended, the CIFAR-100 run not started or stopped
    launch = invocation(
        "the writing of table2.md",
        signal.SIGTERM,
        plan_said("[1/2] cifar10_paper, seed 0: test error "),
    )
    assert assert_stopped(launch, signal.SIGTERM).startswith("stopped by SIGTERM: ")
    summary = json.loads((out / table2_report.SUMMARY_FILE).read_text())["datasets"]
    assert summary["cifar10"]["runs"][0]["state"] == "ended"
    assert f"resumes at step {kept}: " in launch.stdout()

    # to the end: the CIFAR-10 run, ended, not started again
    launch = invocation("to the end")
    assert launch.proc.returncode == 0, launch.stderr()[-3000:]
    assert "started cifar10_paper" not in launch.stdout()
    assert "    cifar10_paper seed 0   ended at step 40: test error " in launch.stdout()
    for folder in (run, out / "runs" / "cifar100_paper-seed0"):
        for name in RECORD_FILES:
            assert steps(folder, name) == EVERY_5, (folder, name)

    # the table written again, every run ended: each file whole, as it was
    files = (table2_report.TABLE_FILE, table2_report.SUMMARY_FILE)
    written = {name: (out / name).read_bytes() for name in files}
    for signum in SIGNALS:
        launch = invocation(
            "the writing of table2.md",
            signum,
            plan_said("nothing to train: every run has ended"),
            may_pass=True,  # the table is written within milliseconds, then the end
        )
        assert_stopped(
            launch,
            signum,
            f"stopped by {signum.name} while writing the table: each file is replaced whole; "
            "rerun the same command to resume",
        )
        assert {name: (out / name).read_bytes() for name in files} == written
    assert invocation("to the end").proc.returncode == 0
    assert not left  # the killed timing run's folder removed by the next timing run
    assert not list(tmp.glob("table2-timing-*"))
    return json.loads((run / arm_runs.RESULT_FILE).read_text())["weights_sha256"]


def test_every_stop_at_every_point_ends_in_one_line_and_loses_nothing(data, tmp_path):
    """Part A (launch/cifar.py alone, one chain of launches per signal) beside part B
    (launch/table2.py), then the figure: each stop tried, each survived, and every run's final
    weights those of the run never stopped."""
    tried = []
    whole = tmp_path / "whole"
    command = [
        f"--model_dir={whole}" if a.startswith("--model_dir=") else a
        for a in plan(tmp_path, data).command("cifar10_paper", 0)
    ]
    began = time.monotonic()
    with ThreadPoolExecutor(2) as pool:
        reference = pool.submit(lambda: finished(whole, Launch(command, tmp_path / "w").wait()))
        chains = [
            pool.submit(run_stopped_at_each_point, data, tmp_path, signum, tried)
            for signum in SIGNALS
        ]
        table = table_stopped_at_each_point(data, tmp_path, tried)
        table_s = time.monotonic() - began
        digests = [chain.result() for chain in chains]
    assert digests == [reference.result()] * 3 and table == reference.result()
    points = sorted({(launcher, point) for launcher, point, _ in tried})
    print(
        f"\n{len(tried)} stops at {len(points)} points, {len(tried)} survived, in "
        f"{time.monotonic() - began:.0f} s (launch/table2.py's {table_s:.0f} s)"
    )
    assert len(points) == 7 and len(tried) == 22
    for launcher, point in points:
        assert {s for la, p, s in tried if (la, p) == (launcher, point)} == {
            s.name for s in SIGNALS
        }, point
