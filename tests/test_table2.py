"""launch/table2.py (studies.table2_plan, studies.table2_report): Table 2's CIFAR-10 and CIFAR-100
runs from several seeds on the real slices, one after the other, the plan and its projected
time first (a dry run trains nothing), stopped and resumed without training an ended run again,
a diverged run shown at its step with its replay (on random records), every refusal one line
and exit 2 before anything is written."""

import importlib.util
import json
import os
import re
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

import launchers
import numpy as np
import pytest

from resnet_noBN.backends import registry
from resnet_noBN.configs.errors import InputError
from resnet_noBN.host import cpu
from resnet_noBN.progress import clock, finish_at
from resnet_noBN.runs import cli, folder_lock
from resnet_noBN.studies import arm_runs, study, table2_plan, table2_report
from resnet_noBN.studies.table2_plan import Measured, RunState
from resnet_noBN.trainers.answers import ANSWERS_FILE, Answers, read_answers

STEPS = 40
# the small network, 40 steps of batch 32: an evaluation and a checkpoint every 20 and 10 steps
TINY = (
    "--run_flags=--model=small,--train_steps=40,--eval_every=20,--checkpoint_every=10,"
    "--log_every=5,--batch_size=32"
)
RUNS = [
    "cifar10_paper-seed0",
    "cifar100_paper-seed0",
    "cifar10_paper-seed1",
    "cifar100_paper-seed1",
]


def data_flags(slices):
    return (
        f"--cifar10_path={slices / 'cifar-10-batches-bin'}",
        f"--cifar100_path={slices / 'cifar-100-binary'}",
    )


def table2(slices, out, *more, seeds=2, run_flags=TINY, env=None):
    args = (*data_flags(slices), f"--seeds={seeds}", f"--output_dir={out}", run_flags, *more)
    return launchers.run("launch/table2.py", *args, timeout=600, env=env)


DURATION_UNITS = {"d": 86_400, "h": 3_600, "min": 60, "s": 1}


def read_duration(text: str) -> tuple[float, float]:
    """A time as progress.duration writes it ("45 s", "12 min 05 s", "3 h 02 min", "4 d 07 h"):
    (seconds, the seconds its last unit rounds to)."""
    parts = text.split()
    values = [int(n) * DURATION_UNITS[unit] for n, unit in zip(parts[::2], parts[1::2])]
    return float(sum(values)), float(DURATION_UNITS[parts[-1]])


def check_projection(lines: list[str], configs: dict, test_images: dict) -> None:
    """The plan's projected total (its "projected:" line) against the sum of its runs, each
    run to train from step 0 recomputed from the rate and start-up its "measured:" line prints
    (studies.table2_plan.seconds; ``configs``: {experiment: recipe}, ``test_images``: {experiment:
    images}), within what their printed rounding leaves."""
    measured = next(line for line in lines if line.startswith("  measured: "))
    rate = float(re.search(r"measured: ([\d,.]+) images/s", measured).group(1).replace(",", ""))
    startup, startup_step = read_duration(re.search(r"start-up ([^)]+)\)$", measured).group(1))
    todo = [line.split()[0] for line in lines if " to train: " in line]
    projected = re.search(
        r"^  projected: (.+?) for the (\d+) runs? to train", "\n".join(lines), re.M
    )
    total, total_step = read_duration(projected.group(1))
    assert int(projected.group(2)) == len(todo)
    timing = Measured(rate, startup, 2, ("CPU",))
    expected = sum(
        table2_plan.seconds(
            RunState(e, 0, "f", "to do", 0), {"recipe": configs[e]}, test_images[e], timing
        )
        for e in todo
    )
    # each start-up and the total rounded to their last printed unit, the rate to 0.1
    slack = len(todo) * startup_step / 2 + total_step / 2 + expected * 0.05 / rate
    assert abs(total - expected) <= slack, (total, expected, slack, measured)


def mtimes(folder):
    return {p: os.stat(p).st_mtime_ns for p in sorted(map(str, folder.rglob("*")))}


@pytest.fixture(scope="module")
def tiny_table(cifar_slices, tmp_path_factory):
    """The dry run; the table started and stopped (SIGTERM) once the second run (CIFAR-100,
    seed 0) has logged a step; the same command again, to the end. Returns what each left."""
    out = tmp_path_factory.mktemp("table2") / "table"
    dry = table2(cifar_slices, out, "--dry_run")
    written_by_dry_run = out.exists()
    args = (*data_flags(cifar_slices), "--seeds=2", f"--output_dir={out}", TINY)
    errors = tempfile.TemporaryFile("w+")
    first = launchers.start(
        [sys.executable, str(launchers.REPO / "launch" / "table2.py"), *args],
        dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"),
        subprocess.PIPE,
        errors,
    )
    train_log = out / "runs" / "cifar100_paper-seed0" / "train.jsonl"
    deadline = time.monotonic() + 300
    while not (train_log.exists() and train_log.read_text().strip()):
        assert first.poll() is None and time.monotonic() < deadline, first.communicate()
        time.sleep(0.1)
    first.send_signal(signal.SIGTERM)
    first_out, _ = first.communicate(timeout=300)
    errors.seek(0)
    first_err = errors.read()
    errors.close()
    stopped = {
        "returncode": first.returncode,
        "stdout": first_out,
        "stderr": first_err,
        "summary": json.loads((out / table2_report.SUMMARY_FILE).read_text()),
        "step": table2_plan.checkpoint_step(str(out / "runs" / "cifar100_paper-seed0")),
        "ended": mtimes(out / "runs" / "cifar10_paper-seed0"),
    }
    second = table2(cifar_slices, out)
    return {
        "out": out,
        "dry": dry,
        "dry_wrote": written_by_dry_run,
        "stopped": stopped,
        "second": second,
    }


def test_the_dry_run_prints_the_plan_and_its_time_and_trains_nothing(tiny_table):
    dry = tiny_table["dry"]
    assert dry.returncode == 0, dry.stderr[-3000:]
    assert not tiny_table["dry_wrote"]
    lines = dry.stdout.splitlines()
    assert f"4 runs, 2 seeds, into {tiny_table['out']}" in lines[2]
    assert "  backend: tensorflow (the default on a CPU); precision float32 (the paper's)" in lines
    order = [line.split()[0] + "-seed" + line.split()[2] for line in lines if "to train: " in line]
    assert order == RUNS  # seed 0 of both data sets first
    assert sum(f"to train: {STEPS} steps, 2 evaluations" in line for line in lines) == 4
    measured = next(line for line in lines if line.startswith("  measured: "))
    assert " images/s training (" in measured and "of cifar10_paper, seed 0 on CPU" in measured
    assert any(line.startswith("  projected: ") and " finish " in line for line in lines)
    # the total: every run's steps, evaluations and start-up, not the first run's alone
    recipe = {"train_steps": STEPS, "eval_every": 20, "batch_size": 32}
    check_projection(
        lines,
        {"cifar10_paper": recipe, "cifar100_paper": recipe},
        {"cifar10_paper": 1_017, "cifar100_paper": 916},  # the slices' test images
    )
    assert "started" not in dry.stdout


def test_a_stopped_table_resumes_and_trains_nothing_that_ended(tiny_table):
    out, stopped, second = tiny_table["out"], tiny_table["stopped"], tiny_table["second"]
    assert stopped["returncode"] == 3, stopped["stderr"][-3000:]
    runs = {d: s["runs"] for d, s in stopped["summary"]["datasets"].items()}
    assert [r["state"] for r in runs["cifar10"]] == ["ended", "to do"]
    assert [r["state"] for r in runs["cifar100"]] == ["stopped", "to do"]
    step = stopped["step"]
    assert stopped["stderr"].splitlines()[-1] == (
        f"stopped by SIGTERM: cifar100_paper, seed 0 saved at step {step}; rerun the same "
        "command to resume"
    )
    assert 0 < step < STEPS and runs["cifar100"][0]["step"] == step
    assert f"| CIFAR-100 | 0 | stopped at step {step}: rerun to resume |" in stopped["stdout"]
    assert second.returncode == 0, second.stderr[-3000:]
    assert f"    cifar10_paper seed 0   ended at step {STEPS}: test error " in second.stdout
    assert f"    cifar100_paper seed 0  resumes at step {step}: " in second.stdout
    started = [line for line in second.stdout.splitlines() if line.startswith("started ")]
    assert started == [
        "started cifar100_paper, seed 0",
        "started cifar10_paper, seed 1",
        "started cifar100_paper, seed 1",
    ]
    assert mtimes(out / "runs" / "cifar10_paper-seed0") == stopped["ended"]  # not touched
    resumed = out / "runs" / "cifar100_paper-seed0"
    log = (resumed / arm_runs.LOG_FILE).read_text()
    assert f"resumed from {resumed / f'ckpt-{step}'} at step {step}" in log
    steps = [
        json.loads(line)["step"] for line in (resumed / "train.jsonl").read_text().splitlines()
    ]
    assert steps[-1] == STEPS and sorted(set(steps)) == list(range(5, STEPS + 1, 5))


def test_the_table_holds_each_runs_figures_beside_the_papers(tiny_table):
    out = tiny_table["out"]
    summary = json.loads((out / table2_report.SUMMARY_FILE).read_text())["datasets"]
    table = (out / table2_report.TABLE_FILE).read_text()
    for dataset, paper in (("cifar10", 6.38), ("cifar100", 24.64)):
        entry = summary[dataset]
        assert entry["paper_error"] == paper and entry["ended"] == 2 and entry["diverged"] == []
        finals = []
        for run in entry["runs"]:
            folder = out / run["folder"]
            metrics = [
                json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()
            ]
            assert run["final_error"] == pytest.approx(100 * metrics[-1]["test_error"], abs=1e-4)
            best = min(100 * m["test_error"] for m in metrics)
            assert run["best_error"] == pytest.approx(best, abs=1e-4)
            answers = read_answers(folder / "answers.jsonl")
            assert [a.step for a in answers] == [20, 40]
            # the slices' test split is under one 5,000-image window: the 2016 figure is the best
            assert run["original_2016_error"] == pytest.approx(best, abs=1e-4)
            assert run["backend"] == "tensorflow" and run["precision"] == "float32"
            finals.append(run["final_error"])
            assert f"| {entry['title']} | {run['seed']} | {run['final_error']:.2f} | " in table
        assert entry["final_error"]["values"] == finals
        assert entry["final_error"]["mean"] == pytest.approx(statistics.fmean(finals))
        assert entry["final_error"]["sd"] == pytest.approx(statistics.stdev(finals))
        assert entry["final_minus_paper"] == pytest.approx(statistics.fmean(finals) - paper)
        mean, sd = entry["final_error"]["mean"], entry["final_error"]["sd"]
        row = (
            f"| {entry['title']} (`{entry['experiment']}`) | {paper:.2f} | {mean:.2f} ± {sd:.2f} |"
        )
        assert row in table
    for name in (table2_report.PLOT_FILE, table2_report.CURVES_FILE):
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    last = json.loads(tiny_table["second"].stdout.strip().splitlines()[-1])
    assert last["cifar10"]["final_error"] == summary["cifar10"]["final_error"]


def test_a_diverged_run_is_shown_at_its_step_with_its_replay(write_cifar, tmp_path):
    """A rate of 3 diverges both data sets' runs a few steps after their first checkpoint: each
    is diverged at the step its replay met the NaN (one after its last replayed step), no
    number, its replay linked; a second invocation trains neither again. On random records in
    each data set's official layout (no slices needed: the quick tier's test of the report)."""
    data = tmp_path / "data"
    write_cifar(data / "cifar-10-batches-bin", "cifar10", 64)
    write_cifar(data / "cifar-100-binary", "cifar100", 320)
    out = tmp_path / "table"
    flags = TINY.replace(
        "--checkpoint_every=10,--log_every=5", "--checkpoint_every=4,--log_every=2"
    )
    proc = table2(data, out, seeds=1, run_flags=f"{flags},--learning_rate=3")
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads((out / table2_report.SUMMARY_FILE).read_text())["datasets"]
    table = (out / table2_report.TABLE_FILE).read_text()
    for entry in summary.values():
        (run,) = entry["runs"]
        folder = out / run["folder"]
        replayed = [json.loads(line) for line in (folder / "divergence" / "train.jsonl").open()]
        step = replayed[-1]["step"] + 1
        assert run["state"] == "diverged" and run["step"] == step and "final_error" not in run
        result = json.loads((folder / arm_runs.RESULT_FILE).read_text())
        assert result["diverged"] and result["diverged_at"] == step
        assert entry["diverged"] == [{"seed": 0, "step": step}] and entry["final_error"] is None
        assert run["replayed_steps"] == len(replayed) and (out / run["health"]).is_file()
        cell = (
            f"diverged at step {step}: [replay of its last {len(replayed)} steps]"
            f"({run['folder']}/divergence/train.jsonl), [health]({run['folder']}/divergence/"
            "health.png)"
        )
        assert f"| {entry['title']} | 0 | {cell} |" in table
        assert f"| 0/1 | seed 0 at step {step} |" in table
    again = table2(data, out, seeds=1, run_flags=f"{flags},--learning_rate=3")
    assert again.returncode == 0 and "started" not in again.stdout
    assert "nothing to train: every run has ended" in again.stdout


REFUSALS = [
    (
        ["--cifar10_path={tmp}/none"],
        "error: --cifar10_path {tmp}/none is not a folder: point it at the CIFAR-10 binary files "
        "(the official archive unpacked: cifar-10-batches-bin/) or at their parent",
    ),
    (
        ["--cifar100_path={slices}/cifar-10-batches-bin"],
        "error: --cifar100_path={slices}/cifar-10-batches-bin holds CIFAR-10's files, not "
        "CIFAR-100's: point --cifar100_path at the CIFAR-100 binary files (cifar-100-binary/) or "
        "their parent, and --cifar10_path at these",
    ),
    (
        ["--cifar10_path={slices}/cifar-100-binary"],
        "error: --cifar10_path={slices}/cifar-100-binary holds CIFAR-100's files, not "
        "CIFAR-10's: point --cifar10_path at the CIFAR-10 binary files (cifar-10-batches-bin/) or "
        "their parent, and --cifar100_path at these",
    ),
    (["--seeds=0"], "error: --seeds must be 1 to 100, got 0"),
    (["--seeds=100000"], "error: --seeds must be 1 to 100, got 100,000"),
    (
        ["--output_dir={slices}/cifar-10-batches-bin/test_batch.bin"],
        "error: --output_dir {slices}/cifar-10-batches-bin/test_batch.bin is a file, not a "
        "folder; pick a folder",
    ),
    (
        ["--run_flags=--model=small,--data_path=/data"],
        "error: --run_flags: --data_path=/data is set for every run by launch/table2.py (from "
        "--cifar10_path and --cifar100_path); drop it",
    ),
    (
        ["--run_flags=--nope=1"],
        "error: cifar10_paper with --run_flags=--nope=1: Unknown command line flag 'nope'",
    ),
]


@pytest.mark.parametrize("args, line", REFUSALS, ids=lambda v: str(v)[:40])
def test_bad_input_is_one_line_exit_2_and_nothing_written(cifar_slices, tmp_path, args, line):
    out = tmp_path / "table"
    subs = {"tmp": tmp_path, "slices": cifar_slices}
    args = [a.format(**subs) for a in args]
    paths = dict(a.split("=", 1) for a in data_flags(cifar_slices))
    paths.update(a.split("=", 1) for a in args if a.startswith("--cifar"))
    rest = [a for a in args if not a.startswith("--cifar")]
    proc = launchers.run(
        "launch/table2.py",
        *(f"{k}={v}" for k, v in paths.items()),
        f"--output_dir={out}",
        *(rest if any(a.startswith("--run_flags") for a in rest) else [*rest, TINY]),
        env=launchers.IMPORT_TIMES,
    )
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert proc.stderr.strip().splitlines()[-1] == line.format(**subs)
    assert not out.exists()
    assert not launchers.imported(proc) & launchers.BACKEND_MODULES  # the runs load theirs


def test_a_folder_in_use_is_refused_at_once(tmp_path):
    """Another invocation holding --output_dir: refused before the checks (the data paths are
    not even read) and the timing run (no backend loaded), its lock file as it was."""
    out = tmp_path / "table"
    held = folder_lock.lock(str(out), "--output_dir")
    before = (out / folder_lock.LOCK_FILE).read_bytes()
    try:
        proc = launchers.run(
            "launch/table2.py",
            *data_flags(tmp_path / "no-data"),
            f"--output_dir={out}",
            TINY,
            env=launchers.IMPORT_TIMES,
        )
        assert sorted(p.name for p in out.iterdir()) == [folder_lock.LOCK_FILE]
        assert (out / folder_lock.LOCK_FILE).read_bytes() == before  # as its holder wrote it
    finally:
        held.release()
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert proc.stderr.strip().splitlines()[-1] == (
        f"error: --output_dir {out} is in use by another run (host {socket.gethostname()}, "
        f"process {os.getpid()}, started {json.loads(before)['started']}); wait for it to end "
        "or stop it, or use another --output_dir"
    )
    assert "checking" not in proc.stdout
    assert not launchers.imported(proc) & launchers.BACKEND_MODULES


# a run as arm_runs.start starts it: SIGTERM saves and exits 3 (launch/cifar.py's stop)
STOPPABLE_RUN = """
import signal, sys, time
def stop(signum, frame):
    print("stopped by SIGTERM", flush=True)
    sys.exit(3)
signal.signal(signal.SIGTERM, stop)
print("training", flush=True)
time.sleep(120)
"""
# the launcher: starts the run, names its process, and waits
LAUNCHER = """
import sys, time
from resnet_noBN.studies import arm_runs
proc = arm_runs.start(sys.argv[1], [sys.executable, "-c", sys.argv[2]])
print(proc.pid, flush=True)
time.sleep(120)
"""


def test_a_run_is_stopped_when_its_launcher_is_killed(tmp_path):
    """kill -9 of launch/table2.py (or launch/study.py) stops its run the way SIGTERM does (a
    checkpoint, exit 3), instead of leaving it training unwatched in the folder the rerun
    would resume."""
    launcher = subprocess.Popen(
        [sys.executable, "-c", LAUNCHER, str(tmp_path), STOPPABLE_RUN],
        stdout=subprocess.PIPE,
        text=True,
    )
    run_pid = int(launcher.stdout.readline())
    log = tmp_path / arm_runs.LOG_FILE
    try:
        deadline = time.monotonic() + 60
        # each line whole: with PYTHONUNBUFFERED set, print writes its newline apart, and a
        # stop between the two writes loses the newline (the run's exit is in the handler)
        while "training\n" not in log.read_text():
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.05)
        assert "stopped" not in log.read_text()
        launcher.kill()
        launcher.wait()
        while "stopped by SIGTERM\n" not in log.read_text():
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.05)
    finally:
        launcher.kill()
        try:
            os.kill(run_pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    assert log.read_text() == "training\nstopped by SIGTERM\n"


# a launcher whose Ctrl-C (or hang-up) reaches a run as Python's at-fork hooks run in it; the
# run prints its SIGHUP handler; then this launcher's handler calls and the signals whose block
# changed (this process may inherit some blocked: a profiler's, say)
HOOKED_START = """
import os, signal, subprocess, sys
from resnet_noBN.studies import arm_runs
blocked = signal.pthread_sigmask(signal.SIG_BLOCK, [])
handled = []
signal.signal(signal.SIGINT, lambda *_: handled.append(os.getpid()))
sent = []
os.register_at_fork(after_in_child=lambda: os.kill(os.getpid(), sent[-1]))
run = [sys.executable, "-c", "import signal; print(signal.getsignal(signal.SIGHUP))"]
for signum in (signal.SIGINT, signal.SIGHUP):
    sent.append(signum)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)  # nohup's
    proc = arm_runs.popen(run, stdout=subprocess.PIPE, text=True)
    print(proc.communicate()[0].strip() or "-", proc.returncode)
print(handled, sorted(signal.pthread_sigmask(signal.SIG_BLOCK, []) ^ blocked))
"""


def test_a_stop_that_reaches_a_run_as_it_is_forked_ends_it_there():
    """A Ctrl-C that reaches a run between its fork and its program (Python runs at-fork hooks
    there, filelock 4's among them, and the ``preexec_fn``): held through the fork, then let in
    at its default, it ends the run there. It never runs the launcher's handler in the run,
    nor is it printed as "Exception ignored" and lost. A stop the launcher ignores stays ignored
    in the run; the launcher's blocked signals are as before."""
    proc = subprocess.run(
        [sys.executable, "-c", HOOKED_START], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    assert proc.stdout == "- -2\n1 0\n[] []\n"  # 1: SIG_IGN


def test_a_killed_launchers_timing_folder_is_removed_by_the_next_timing_run(tmp_path, monkeypatch):
    """The timing run's folder is named by its launcher's process id: the folders of launchers
    that ended (a ``kill -9`` skips the ``finally`` that removes them) go at the next timing
    run; those of a launcher still running, and anything else, stay."""
    monkeypatch.setattr(table2_plan.tempfile, "tempdir", str(tmp_path))
    ended = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    dead, alive = int(ended.stdout), os.getpid()
    for name in (
        f"table2-timing-{dead}-ab12",
        f"table2-timing-{alive}-cd34",
        "table2-timing-x",
        "other",
    ):
        (tmp_path / name / "run").mkdir(parents=True)
    # a folder listed, then removed by another command before this one: no error
    listed = lambda path, real=os.listdir: [*real(path), f"table2-timing-{dead}-gone"]  # noqa: E731
    with monkeypatch.context() as patched:
        patched.setattr(os, "listdir", listed)
        assert table2_plan.remove_left_timing_folders() == [
            str(tmp_path / f"table2-timing-{dead}-ab12"),
            str(tmp_path / f"table2-timing-{dead}-gone"),
        ]
    assert sorted(os.listdir(tmp_path)) == sorted(
        [f"table2-timing-{alive}-cd34", "other", "table2-timing-x"]
    )


def test_a_folder_holding_runs_of_another_recipe_is_refused(tiny_table, cifar_slices):
    out = tiny_table["out"]
    before = mtimes(out)
    proc = table2(cifar_slices, out, run_flags=f"{TINY},--learning_rate=0.1")
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1] == (
        f"error: --output_dir holds a run of another recipe in {out}/runs/cifar10_paper-seed0 "
        "(learning_rate=0.05 there, 0.1 now): use a new --output_dir, or the --run_flags it was "
        "started with"
    )
    longer = table2(cifar_slices, out, run_flags=TINY.replace("=40", "=80"))
    assert longer.returncode == 2
    assert "(train_steps=40 there, 80 now; lr_boundaries=[20, 33] there, [40, 66] now)" in (
        longer.stderr
    )
    assert mtimes(out) == before


def test_a_gpu_takes_jax_in_bfloat16_and_a_cpu_the_default_backend(tmp_path, monkeypatch):
    """The device read from nvidia-smi (no backend loaded): on a GPU, JAX and mixed_bfloat16
    unless told otherwise, and where JAX is not installed one line naming its GPU build; every
    CIFAR-10 run replays a divergence as CIFAR-100's do."""
    tool = tmp_path / "nvidia-smi"
    tool.write_text("#!/bin/sh\necho 'GPU 0: NVIDIA H200 (UUID: GPU-0123)'\n")
    tool.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.delenv("KERAS_BACKEND", raising=False)
    assert table2_plan.gpus() == ["NVIDIA H200"]
    backend, _, precision, _ = table2_plan.choose(None, None, ["NVIDIA H200"])
    assert (backend, precision) == ("jax", "mixed_bfloat16")
    assert table2_plan.choose("tensorflow", "float32", ["NVIDIA H200"])[::2] == (
        "tensorflow",
        "float32",
    )
    assert table2_plan.choose(None, None, [])[::2] == ("tensorflow", None)
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name: None if name == "jax" else real_find_spec(name)
    )
    with pytest.raises(InputError) as refused:
        table2_plan.choose(None, None, ["NVIDIA H200"])
    assert str(refused.value) == (
        "nvidia-smi lists NVIDIA H200, where the runs take JAX (the only backend measured on a "
        "GPU here), and JAX is not installed: pip install -e '.[cuda13]' (or '.[cuda12]' where "
        "the NVIDIA driver predates CUDA 13); or pass --backend=tensorflow"
    )
    assert table2_plan.choose("tensorflow", None, ["NVIDIA H200"])[0] == "tensorflow"
    plan = table2_plan.Plan(
        "out",
        1,
        {"cifar10": "/c10", "cifar100": "/c100"},
        {},
        ["NVIDIA H200"],
        "jax",
        "",
        "mixed_bfloat16",
        "",
        ["--model=small"],
    )
    cifar10, cifar100 = plan.command("cifar10_paper", 1), plan.command("cifar100_paper", 1)
    assert cifar10[2:] == [
        "--experiment=cifar10_paper",
        "--seed=1",
        "--data_path=/c10",
        "--model_dir=out/runs/cifar10_paper-seed1",
        "--replay_divergence=300",
        "--precision=mixed_bfloat16",
        "--model=small",
    ]
    assert "--replay_divergence=300" not in cifar100  # the experiment's own
    assert plan.env()["KERAS_BACKEND"] == "jax"


def test_a_gpu_users_path_runs_end_to_end_and_names_a_cpu_build(write_cifar, tmp_path):
    """What a GPU machine gets, on this CPU: nvidia-smi (a stand-in) lists an H200, so the runs
    take JAX and mixed_bfloat16; JAX here has no CUDA, so its timing run, stopped where its
    config.json names the CPU, times the CPU's few steps, not a GPU's 300, and the plan says so
    in one line; both runs end, recorded in that backend and precision."""
    tool = tmp_path / "bin" / "nvidia-smi"
    tool.parent.mkdir()
    tool.write_text("#!/bin/sh\necho 'GPU 0: NVIDIA H200 (UUID: GPU-0123)'\n")
    tool.chmod(0o755)
    data = tmp_path / "data"
    write_cifar(data / "cifar-10-batches-bin", "cifar10", 64)
    write_cifar(data / "cifar-100-binary", "cifar100", 320)
    out = tmp_path / "table"
    env = {"PATH": f"{tool.parent}{os.pathsep}{os.environ['PATH']}", "KERAS_BACKEND": None}
    flags = TINY.replace("--train_steps=40,--eval_every=20", "--train_steps=20,--eval_every=20")
    proc = table2(data, out, seeds=1, run_flags=flags, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    assert "2 runs, 1 seed, into" in lines[2] and "  device: NVIDIA H200" in lines
    assert (
        "  backend: jax (the only backend measured on a GPU here (H100, H200)); precision "
        "mixed_bfloat16 (bfloat16 convolutions: the default on a GPU)"
    ) in lines
    # a record every step (the CPU's), read every 0.2 s: 2 timed steps or a few more
    timed = re.search(r"\((\d+) timed steps of cifar10_paper, seed 0 on cpu,", proc.stdout)
    assert timed and 2 <= int(timed[1]) < table2_plan.PROBE_LOG_EVERY["gpu"]
    assert (
        "  warning: nvidia-smi lists NVIDIA H200, but the jax backend computes on the CPU: "
        "install its GPU build (pip install -e '.[cuda13]' (or '.[cuda12]' where the NVIDIA "
        "driver predates CUDA 13)), or pass --backend"
    ) in lines
    for run in ("cifar10_paper-seed0", "cifar100_paper-seed0"):
        config = json.loads((out / "runs" / run / "config.json").read_text())
        assert (config["backend"], config["runtime"]["precision"]) == ("jax", "mixed_bfloat16")
        assert (
            json.loads((out / "runs" / run / arm_runs.RESULT_FILE).read_text())["final_step"] == 20
        )
    assert "| 0 | " in (out / table2_report.TABLE_FILE).read_text()
    assert "jax, mixed_bfloat16, cpu |" in (out / table2_report.TABLE_FILE).read_text()


# a launch/cifar.py stand-in for the timing run. It notes its flags, Keras backend and
# parent-death signal, writes config.json (its devices: $FAKE_DEVICE, comma-separated), and
# after 0.4 s three records of 100 images/s times k at steps k x log_every, the first 1 s
# before the others; then it trains on until it is killed. Where it computes on the CPU with
# a GPU's log_every, it writes no record for 30 s (a GPU's steps on a CPU). $FAKE_MODE ends it
# otherwise: "refuse" (three lines, the last its error on stderr, exit 2), "crash" (one record,
# three lines, the last on stdout, exit 1), "killed" (no record, no line, SIGKILL).
FAKE_LAUNCHER = """
import ctypes, json, os, signal, sys, time
death = ctypes.c_int()
ctypes.CDLL(None).prctl(2, ctypes.byref(death))  # PR_GET_PDEATHSIG
call = {"argv": sys.argv[1:], "backend": os.environ["KERAS_BACKEND"], "death": death.value}
with open(os.environ["FAKE_CALLS"], "a") as f:
    f.write(json.dumps(call) + "\\n")
flags = dict(a[2:].split("=", 1) for a in sys.argv[1:] if a.startswith("--") and "=" in a)
model_dir, every, mode = flags["model_dir"], int(flags["log_every"]), os.environ["FAKE_MODE"]
if mode == "refuse":
    print("checking the data", flush=True)
    print("checking the flags", flush=True)
    print("error: --data_path holds no CIFAR-10", file=sys.stderr, flush=True)
    sys.exit(2)
if mode == "killed":
    os.kill(os.getpid(), signal.SIGKILL)
os.makedirs(model_dir)
with open(os.path.join(model_dir, "config.tmp"), "w") as f:
    json.dump({"runtime": {"devices": os.environ["FAKE_DEVICE"].split(",")}}, f)
os.replace(os.path.join(model_dir, "config.tmp"), os.path.join(model_dir, "config.json"))
if every > 1 and os.environ["FAKE_DEVICE"] == "cpu":
    time.sleep(30)
time.sleep(0.4)
with open(os.path.join(model_dir, "train.jsonl"), "w") as f:
    for k in (1,) if mode == "crash" else (1, 2, 3):
        f.write(json.dumps({"step": k * every, "images_per_sec": 100.0 * k}) + "\\n")
        f.flush()
        time.sleep(1.0 if k == 1 and mode == "train" else 0)
if mode == "crash":
    print("warning: the loss is large", file=sys.stderr, flush=True)
    print("step 1: loss nan", flush=True)
    print("diverged at step 1: the loss is NaN", flush=True)
    sys.exit(1)
time.sleep(30)
"""


@pytest.fixture
def fake_launcher(tmp_path, monkeypatch):
    """The timing run's launcher stood in (:data:`FAKE_LAUNCHER`), its temporary folder and
    working folder ``tmp_path``'s; gives (a plan on ``gpus``, the calls made so far)."""
    launcher = tmp_path / "cifar.py"
    launcher.write_text(FAKE_LAUNCHER)
    monkeypatch.setattr(study, "LAUNCHER", str(launcher))
    monkeypatch.setattr(table2_plan.tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("FAKE_CALLS", str(tmp_path / "calls"))
    monkeypatch.setenv("FAKE_MODE", "train")
    monkeypatch.setenv("KERAS_BACKEND", "tensorflow")  # the plan's backend is jax

    def calls():
        path = tmp_path / "calls"
        return [json.loads(line) for line in path.read_text().splitlines()]

    return lambda gpus: plan_of(tmp_path / "out", gpus=gpus, backend="jax"), calls


@pytest.mark.parametrize(
    "gpus, device, log_everys, steps",
    [
        (["NVIDIA H200"], "cpu", [100, 1], 2),  # stopped at its config.json, timed again
        (["NVIDIA H200"], "NVIDIA H200,NVIDIA H200", [100], 299),
        ([], "CPU", [1], 2),
    ],
)
def test_the_timing_run_takes_the_devices_steps_and_restarts_where_a_gpus_run_is_on_the_cpu(
    fake_launcher, tmp_path, monkeypatch, gpus, device, log_everys, steps
):
    """The timing run logs every 100 steps where nvidia-smi lists a GPU, every step on a CPU.
    Where a GPU's timing run names the CPU in its config.json (JAX without CUDA), it is killed
    there, before any step, and run again every step: at Table 1's width a GPU's 300 steps on
    a CPU take over an hour. Its rate, devices, start-up and line are the last run's. Each run
    is the run's command, seeded, in a throwaway folder, never evaluating or checkpointing, on
    the plan's backend, killed with its launcher; no folder is left."""
    monkeypatch.setenv("FAKE_DEVICE", device)
    plan_on, calls = fake_launcher
    began = time.monotonic()
    measured, line = table2_plan.measure(plan_on(gpus), RunState("cifar10_paper", 1, "f", "", 0))
    took = time.monotonic() - began
    assert took < 20  # never the 30 s a GPU's steps on the CPU stand for
    assert [int(c["argv"][-2].removeprefix("--log_every=")) for c in calls()] == log_everys
    for call in calls():
        assert call["argv"][:2] == ["--experiment=cifar10_paper", "--seed=1"]
        assert re.fullmatch(
            rf"--model_dir={tmp_path}/tmp/table2-timing-{os.getpid()}-\w+/run", call["argv"][-6]
        )
        assert call["argv"][-5:-2] == [
            "--train_steps=1000000",
            "--eval_every=1000000",
            "--checkpoint_every=1000000",
        ]
        assert call["argv"][-1] == "--replay_divergence=0"
        assert (call["backend"], call["death"]) == ("jax", signal.SIGKILL)
    devices = tuple(device.split(","))
    assert (measured.images_per_s, measured.timed_steps, measured.devices) == (
        300.0,
        steps,
        devices,
    )
    # to the first record (after the launcher's 0.4 s), not to the third (1 s later)
    assert measured.startup_s >= 0.4 and took - measured.startup_s > 0.5
    assert line.startswith(
        f"300.0 images/s training ({steps} timed steps of cifar10_paper, seed 1 on "
        f"{' + '.join(devices)}, in a throwaway folder; start-up "
    )
    assert os.listdir(tmp_path / "tmp") == []


@pytest.mark.parametrize(
    "mode, said",
    [
        ("crash", "exit 1 at step 1: diverged at step 1: the loss is NaN"),
        ("killed", "SIGKILL at step 0: SIGKILL"),
    ],
)
def test_a_timing_run_that_ends_first_is_said_with_its_step_and_last_line(
    fake_launcher, tmp_path, monkeypatch, mode, said
):
    """A timing run that ends before its timed steps: no rate, and why in one line (how it
    ended, its last record's step, its last line of output, else how it ended)."""
    monkeypatch.setenv("FAKE_MODE", mode)
    monkeypatch.setenv("FAKE_DEVICE", "CPU")
    plan_on, _ = fake_launcher
    run = RunState("cifar10_paper", 1, "f", "", 0)
    assert table2_plan.measure(plan_on([]), run) == (
        None,
        f"the timing run of cifar10_paper, seed 1 ended before a timed step ({said})",
    )
    assert os.listdir(tmp_path / "tmp") == []


def test_a_timing_run_that_refuses_its_input_is_one_line(fake_launcher, tmp_path, monkeypatch):
    """A timing run that refuses its input (exit 2) is the plan's refusal: its error line,
    named by the run."""
    monkeypatch.setenv("FAKE_MODE", "refuse")
    plan_on, _ = fake_launcher
    with pytest.raises(InputError) as refused:
        table2_plan.measure(plan_on([]), RunState("cifar10_paper", 1, "f", "", 0))
    assert str(refused.value) == "cifar10_paper, seed 1: --data_path holds no CIFAR-10"
    assert os.listdir(tmp_path / "tmp") == []


def test_the_projection_counts_the_steps_left_evaluations_and_start_up():
    """One run of the paper's recipe at the H200's training rate (results/gpu_h200: 20,029
    images/s), 13.2 s to its first step: 60,000 steps of 128 and 30 evaluations of 10,000
    images at three times the rate; a run resumed at step 15 of 40 has 25 left and 2
    evaluations (20, 40)."""
    config = {"recipe": {"train_steps": 60000, "eval_every": 2000, "batch_size": 128}}
    h200 = Measured(20029.0, 13.2, 298, ("NVIDIA H200",))
    fresh = RunState("cifar10_paper", 0, "f", "to do", 0)
    expected = 13.2 + 60000 * 128 / 20029 + 30 * 10000 / (3 * 20029)
    assert table2_plan.seconds(fresh, config, 10000, h200) == pytest.approx(expected)
    assert table2_plan.evaluations(15, 40, 20) == 2 and table2_plan.evaluations(0, 45, 20) == 3
    tiny = {"recipe": {"train_steps": 40, "eval_every": 20, "batch_size": 32}}
    resumed = RunState("cifar100_paper", 0, "f", "stopped", 15)
    cpu = Measured(100.0, 5.0, 2, ("CPU",))
    assert table2_plan.seconds(resumed, tiny, 900, cpu) == pytest.approx(5 + 8 + 2 * 3)


def plan_of(out, every=20, test_images=(1_017, 916), **chosen) -> table2_plan.Plan:
    """A plan of 2 seeds of the tiny recipe (40 steps of 32, an evaluation every ``every``) on
    the slices' test images, in ``out``, on this CPU (``chosen``: the GPUs, backend, precision,
    flags)."""
    recipe = {"train_steps": STEPS, "eval_every": every, "batch_size": 32}
    settings = {
        "run_flags": ["--model=small", "--log_every=5"],
        "gpus": [],
        "backend": "tensorflow",
        "backend_why": "the default on a CPU",
        "precision": None,
        "precision_why": "the paper's",
        **chosen,
    }
    return table2_plan.Plan(
        output_dir=str(out),
        seeds=2,
        data={"cifar10": "/c10", "cifar100": "/c100"},
        test_images=dict(zip(("cifar10", "cifar100"), test_images)),
        configs={e: {"recipe": recipe} for e in table2_plan.EXPERIMENTS.values()},
        **settings,
    )


def test_the_plan_in_words_names_each_run_and_projects_the_runs_to_train(tmp_path):
    """Seed 0 of CIFAR-10 ended, of CIFAR-100 diverged at step 12; seed 1 of CIFAR-10 stopped
    with a checkpoint of step 30, of CIFAR-100 not started. At 100 images/s and 5 s to the
    first step the two to train take 5 + 10 x 32 / 100 + 1,017 / 300 (the stopped one: 10
    steps, 1 evaluation) and 5 + 40 x 32 / 100 + 2 x 916 / 300 (40 steps, 2 evaluations):
    35.5 s. At 0.01 images/s, over a day: the faster paths. No rate: unknown; every run ended:
    nothing to train. On a GPU whose backend computed on the CPU: the warning, naming its GPU
    build. A diverged run without the replay's step is at its last; without that, step 0."""
    out = tmp_path / "table"
    for run, result in (
        ("cifar10_paper-seed0", {"final_step": 40, "test_error": 0.1234}),
        ("cifar100_paper-seed0", {"final_step": 10, "diverged": True, "diverged_at": 12}),
    ):
        (out / "runs" / run).mkdir(parents=True)
        (out / "runs" / run / arm_runs.RESULT_FILE).write_text(json.dumps(result))
    (out / "runs" / "cifar10_paper-seed1").mkdir()
    for name in ("ckpt-20.index", "ckpt-30.index", "ckpt-30.data-00000-of-00001"):
        (out / "runs" / "cifar10_paper-seed1" / name).write_text("")
    plan, now = plan_of(out), 1_800_000_000.0
    folders = [
        str(out / "runs" / f"{e}_paper-seed{k}") for k in (0, 1) for e in ("cifar10", "cifar100")
    ]
    assert plan.states() == [
        RunState("cifar10_paper", 0, folders[0], "ended", 40),
        RunState("cifar100_paper", 0, folders[1], "diverged", 12),
        RunState("cifar10_paper", 1, folders[2], "stopped", 30),
        RunState("cifar100_paper", 1, folders[3], "to do", 0),
    ]
    assert plan.command("cifar100_paper", 1) == [
        sys.executable,
        study.LAUNCHER,
        "--experiment=cifar100_paper",
        "--seed=1",
        "--data_path=/c100",
        f"--model_dir={folders[3]}",
        "--model=small",
        "--log_every=5",
    ]
    measured = Measured(100.0, 5.0, 2, ("CPU",))
    lines = table2_plan.describe(plan, measured, "THE RATE", now).splitlines()
    total = 5 + 10 * 32 / 100 + 1_017 / 300 + 5 + 40 * 32 / 100 + 2 * 916 / 300
    assert lines[0] == (
        f"Table 2 of arXiv:1611.04231 (CIFAR-10 6.38%, CIFAR-100 24.64%): 4 runs, 2 seeds, into "
        f"{out}"
    )
    assert (
        lines[1] == "  data: CIFAR-10 /c10 (1,017 test images); CIFAR-100 /c100 (916 test images)"
    )
    assert lines[2].startswith("  device: CPU: ") and lines[2].endswith(
        " cores (no GPU: nvidia-smi lists none)"
    )
    assert lines[3:] == [
        "  backend: tensorflow (the default on a CPU); precision float32 (the paper's)",
        "  flags of every run: --model=small --log_every=5",
        f"  runs, in order (each launch/cifar.py --experiment=E --seed=K in {out}/runs/E-seedK):",
        "    cifar10_paper seed 0   ended at step 40: test error 12.34%",
        "    cifar100_paper seed 0  diverged at step 12",
        "    cifar10_paper seed 1   resumes at step 30: 10 steps to train",
        "    cifar100_paper seed 1  to train: 40 steps, 2 evaluations",
        "  measured: THE RATE",
        f"  projected: 35 s for the 2 runs to train (each run's steps at that rate, its "
        f"evaluations at 3x it, its start-up), finish {clock(finish_at(total, now), now)}",
    ]
    slow = Measured(0.01, 5.0, 2, ("CPU",))
    faster = table2_plan.describe(plan, slow, "", now).splitlines()[-1]
    bf16 = (
        f"; --precision=mixed_bfloat16 ({cli.CPU_BF16_SPEEDUP:.2f}x on a Zen 4 CPU with "
        "AVX512_BF16)"
        if cpu.has_native_bf16()
        else ""
    )
    assert faster == f"  faster: a GPU, where this command runs {cli.MEASURED_GPU_PATH}{bf16}"
    bf16_run = plan_of(out, precision="mixed_bfloat16", precision_why="--precision")
    assert table2_plan.describe(bf16_run, slow, "", now).splitlines()[-1] == (
        f"  faster: a GPU, where this command runs {cli.MEASURED_GPU_PATH}"
    )
    # exactly a day (2 start-ups of 43,167.5 s, 50 steps of 32 at 32/s, 3 evaluations of 480
    # at 96/s) is not over one
    day = plan_of(out, test_images=(480, 480), run_flags=[])
    lines = table2_plan.describe(day, Measured(32.0, 43_167.5, 2, ("CPU",)), "", now).splitlines()
    assert "  flags of every run: none" in lines
    assert lines[-1].startswith("  projected: 1 d 00 h for the 2 runs to train (")
    unknown = table2_plan.describe(plan, None, "none: why", now).splitlines()
    assert unknown[-2:] == ["  measured: none: why", "  projected: unknown (no rate measured)"]
    h200s = ["NVIDIA H200", "NVIDIA H200"]
    gpu = plan_of(out, gpus=h200s, backend="jax", backend_why="b", precision="float32")
    warned = table2_plan.describe(gpu, Measured(0.01, 5.0, 2, ("cpu",)), "", now).splitlines()
    assert warned[2] == "  device: NVIDIA H200, NVIDIA H200"
    assert warned[-3] == (
        "  warning: nvidia-smi lists NVIDIA H200, NVIDIA H200, but the jax backend computes on "
        f"the CPU: install its GPU build ({registry.GPU_INSTALL}), or pass --backend"
    )
    assert warned[-1] == f"  faster: a GPU, where this command runs {cli.MEASURED_GPU_PATH}"
    tf_gpu = plan_of(out, gpus=h200s[:1], backend="tensorflow", backend_why="--backend")
    assert table2_plan.describe(tf_gpu, measured, "", now).splitlines()[-2] == (
        "  warning: nvidia-smi lists NVIDIA H200, but the tensorflow backend computes on the "
        f"CPU: install its GPU build ({registry.INSTALL['tensorflow']} with CUDA), or pass "
        "--backend"
    )
    assert table2_plan.describe(plan_of(out, every=1), None, "", now).splitlines()[-3] == (
        "    cifar100_paper seed 1  to train: 40 steps, 40 evaluations"
    )
    result = out / "runs" / "cifar100_paper-seed0" / arm_runs.RESULT_FILE
    result.write_text('{"final_step": 7, "diverged": true}')
    assert table2_plan.state(str(out), "cifar100_paper", 0).step == 7
    result.write_text('{"diverged": true}')
    assert table2_plan.state(str(out), "cifar100_paper", 0).step == 0
    result.write_text('{"final_step": 10, "diverged": true, "diverged_at": 12}')
    for run in ("cifar10_paper-seed1", "cifar100_paper-seed1"):
        (out / "runs" / run).mkdir(exist_ok=True)
        (out / "runs" / run / arm_runs.RESULT_FILE).write_text(
            '{"final_step": 40, "test_error": 0}'
        )
    done = table2_plan.describe(plan, None, "", now).splitlines()
    assert done[-1] == "  nothing to train: every run has ended"
    assert done[-4:-1] == [
        "    cifar100_paper seed 0  diverged at step 12",
        "    cifar10_paper seed 1   ended at step 40: test error 0.00%",
        "    cifar100_paper seed 1  ended at step 40: test error 0.00%",
    ]


def halves_right(first: int, second: int) -> np.ndarray:
    """10,000 answers: ``first`` of images 0..4,999 right, ``second`` of the rest."""
    bits = np.zeros(10_000, bool)
    bits[:first] = True
    bits[5_000 : 5_000 + second] = True
    return bits


def a_run(folder, answers=(), result=None, computed=None, dataset="cifar10"):
    """A run's folder: its config.json (a committed quarter run's, ``computed``: the backend,
    precision and devices it records; a CIFAR-100 one without its data section, as records
    from before it were), its answers (step -> right, the last final), its result.json."""
    folder.mkdir(parents=True)
    config = json.loads((COMMITTED_RUN / "config.json").read_text())
    config["experiment"] = f"{dataset}_paper"
    if dataset == "cifar100":
        del config["data"]
    if computed:
        config["backend"], config["runtime"]["precision"], devices = computed
        config["runtime"]["devices"] = devices
        if devices is None:
            del config["runtime"]["devices"]
    (folder / "config.json").write_text(json.dumps(config))
    lines = [
        Answers(right, np.zeros(10_000, int)).line(step, final=step == max(dict(answers)))
        for step, right in answers
    ]
    (folder / ANSWERS_FILE).write_text("".join(line + "\n" for line in lines))
    if result is not None:
        (folder / arm_runs.RESULT_FILE).write_text(json.dumps(result))


COMMITTED_RUN = launchers.REPO / "results" / "table2_quarter" / "runs" / "cifar10_paper-seed0"


def test_the_summary_and_tables_of_runs_whose_figures_are_known(tmp_path):
    """Three seeds. CIFAR-10: seed 0 ended at 25% (its best 15% at step 20, the 2016 figure
    10%: 90% on the first half at step 20), seed 1 at 10% (best 10% at step 40; 2016 12%),
    seed 2 to do: mean 17.5 ± 10.61, 11.12 points over the paper's 6.38. CIFAR-100: seed 0
    diverged at step 33 (the replay's, 3 steps replayed, its health drawn; then not drawn),
    seed 1 stopped at step 20, seed 2 diverged at its last step 5 without a replay: no figure."""
    out = tmp_path / "table"
    runs = out / "runs"
    a_run(
        runs / "cifar10_paper-seed0",
        [(20, halves_right(4_500, 4_000)), (40, halves_right(4_000, 3_500))],
        {"final_step": 40},
        ("jax", "mixed_bfloat16", ["NVIDIA H200", "NVIDIA H200"]),
    )
    a_run(
        runs / "cifar10_paper-seed1",
        [(20, halves_right(3_000, 3_000)), (40, halves_right(4_600, 4_400))],
        {"final_step": 40},
    )
    diverged = {"final_step": 30, "diverged": True, "diverged_at": 33}
    a_run(runs / "cifar100_paper-seed0", (), diverged, ("jax", "float32", None), "cifar100")
    replay = runs / "cifar100_paper-seed0" / "divergence"
    replay.mkdir()
    (replay / "train.jsonl").write_text("".join(f'{{"step": {s}}}\n' for s in (31, 32, 33)))
    (replay / "health.png").write_bytes(b"")
    (runs / "cifar100_paper-seed1").mkdir()
    (runs / "cifar100_paper-seed1" / "ckpt-20.index").write_text("")
    (runs / "cifar100_paper-seed2").mkdir()
    (runs / "cifar100_paper-seed2" / arm_runs.RESULT_FILE).write_text(
        '{"final_step": 5, "diverged": true}'
    )
    summary = table2_report.summarize(str(out), 3)
    c10, c100 = summary["cifar10"], summary["cifar100"]
    keys = ("seed", "folder", "state", "step", "backend", "precision", "devices")
    assert [{k: r[k] for k in keys} for r in c10["runs"]] == [
        {
            "seed": 0,
            "folder": "runs/cifar10_paper-seed0",
            "state": "ended",
            "step": 40,
            "backend": "jax",
            "precision": "mixed_bfloat16",
            "devices": ["NVIDIA H200", "NVIDIA H200"],
        },
        {
            "seed": 1,
            "folder": "runs/cifar10_paper-seed1",
            "state": "ended",
            "step": 40,
            "backend": "tensorflow",
            "precision": "float32",
            "devices": ["CPU"],
        },
        dict.fromkeys(keys[1:]) | {"seed": 2, "state": "to do", "step": 0},
    ]
    # what ran, from each config.json (the committed quarter run's): none where there is none
    quarter = "the quarter network (9 blocks a stage, widths 16/32/64)"
    for run, experiment, images in (
        (c10["runs"][0], "cifar10_paper", 10_000),
        (c100["runs"][0], "cifar100_paper", None),
    ):
        config = json.loads((out / run["folder"] / "config.json").read_text())
        assert (run["network"], run["train_steps"], run["test_images"]) == (quarter, 8_000, images)
        assert run["departures"] == table2_report.departures(config, experiment)
    with_config = [True, True, False, True, False, False]
    assert [("network" in r) for r in c10["runs"] + c100["runs"]] == with_config
    figures = ("final_error", "best_error", "best_step", "original_2016_error", "test_examples")
    assert [[r[k] for k in figures] for r in c10["runs"][:2]] == [
        [25.0, 15.0, 20, 10.0, 10_000],
        [10.0, 10.0, 40, 12.0, 10_000],
    ]
    assert (c10["experiment"], c10["title"], c10["paper_error"]) == (
        "cifar10_paper",
        "CIFAR-10",
        6.38,
    )
    assert (c10["seeds"], c10["ended"], c10["diverged"]) == (3, 2, [])
    assert c10["final_error"] == {
        "mean": 17.5,
        "sd": statistics.stdev([25.0, 10.0]),
        "values": [25.0, 10.0],
    }
    assert c10["best_error"]["values"] == [15.0, 10.0]
    assert c10["original_2016_error"]["values"] == [10.0, 12.0]
    assert c10["final_minus_paper"] == 17.5 - 6.38
    assert (c100["ended"], c100["final_error"], c100["final_minus_paper"]) == (0, None, None)
    assert c100["best_error"] is None and c100["original_2016_error"] is None
    assert c100["diverged"] == [{"seed": 0, "step": 33}, {"seed": 2, "step": 5}]
    first = c100["runs"][0]
    assert (first["replay"], first["replayed_steps"], first["health"]) == (
        "runs/cifar100_paper-seed0/divergence/train.jsonl",
        3,
        "runs/cifar100_paper-seed0/divergence/health.png",
    )
    assert [r["state"] for r in c100["runs"]] == ["diverged", "stopped", "diverged"]
    assert "replay" not in c100["runs"][2] and c100["runs"][1]["step"] == 20
    folder = "[runs/{0}](runs/{0})".format
    assert table2_report.markdown_tables(summary).splitlines() == [
        "| data set | paper (Table 2) | final error, mean ± sd | final − paper (pp) | 2016 code's "
        "figure, mean ± sd | seeds ended | diverged |",
        "| --- | --- | --- | --- | --- | --- | --- |",
        "| CIFAR-10 (`cifar10_paper`) | 6.38 | 17.50 ± 10.61 | +11.12 | 11.00 ± 1.41 | 2/3 | "
        "none |",
        "| CIFAR-100 (`cifar100_paper`) | 24.64 | - | - | - | 0/3 | seed 0 at step 33, seed 2 at "
        "step 5 |",
        "",
        "| data set | seed | final error (%) | 2016 code's figure (%) | best over evaluations "
        "(%) | computed | run |",
        "| --- | --- | --- | --- | --- | --- | --- |",
        "| CIFAR-10 | 0 | 25.00 | 10.00 | 15.00 (step 20) | jax, mixed_bfloat16, NVIDIA H200 + "
        f"NVIDIA H200 | {folder('cifar10_paper-seed0')} |",
        "| CIFAR-10 | 1 | 10.00 | 12.00 | 10.00 (step 40) | tensorflow, float32, CPU | "
        f"{folder('cifar10_paper-seed1')} |",
        "| CIFAR-10 | 2 | to do |  |  |  | - |",
        "| CIFAR-100 | 0 | diverged at step 33: [replay of its last 3 steps](runs/"
        "cifar100_paper-seed0/divergence/train.jsonl), [health](runs/cifar100_paper-seed0/"
        f"divergence/health.png) |  |  | jax, float32, ? | {folder('cifar100_paper-seed0')} |",
        f"| CIFAR-100 | 1 | stopped at step 20: rerun to resume |  |  |  | "
        f"{folder('cifar100_paper-seed1')} |",
        "| CIFAR-100 | 2 | diverged at step 5 (no replay: no checkpoint before it) |  |  |  | "
        f"{folder('cifar100_paper-seed2')} |",
    ]
    (replay / "health.png").unlink()  # a replay not drawn: its replay linked alone
    summary = table2_report.summarize(str(out), 3)
    assert summary["cifar100"]["runs"][0]["health"] is None
    assert table2_report.markdown_tables(summary).splitlines()[-3] == (
        "| CIFAR-100 | 0 | diverged at step 33: [replay of its last 3 steps](runs/"
        "cifar100_paper-seed0/divergence/train.jsonl) |  |  | jax, float32, ? | "
        f"{folder('cifar100_paper-seed0')} |"
    )
