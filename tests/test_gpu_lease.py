"""bench/gpu_lease.sh as a lent GPU machine runs it: from a copy of the tracked tree, with
TensorFlow and the installed project unimportable, $OUT empty, the plan detached from the call.

The smoke plan (LEASE_SMOKE=1, shrunk further by its knobs) runs to the end on this CPU on tiny
JPEG folders the test writes; then the machine is lost (its disk wiped) and a call on the bare
machine says so and starts over, where the runs no longer fit and the lease goes to a speed try.
"""

import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import uuid
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from resnet_noBN.datasets.cifar_data import DATASETS

pytest.importorskip("jax")
ROOT = Path(__file__).resolve().parents[1]
FOLDERS = {"cifar10": ("cifar-10-jpeg", 13), "cifar100": ("cifar-100-jpeg", 2)}  # train/class
STEPS = 4

# Imported first by every Python of the call (PYTHONPATH): no TensorFlow (as on the GPU machine),
# no editable install of the project (only the copied tree on PYTHONPATH has it); each process
# that imported the project writes down where from.
SITECUSTOMIZE = """
import atexit, os, sys
sys.modules["tensorflow"] = None
def _editable(x):
    return getattr(x, "__module__", "").startswith("__editable__")
sys.meta_path[:] = [f for f in sys.meta_path if not _editable(f)]
sys.path_hooks[:] = [h for h in sys.path_hooks if not _editable(h)]
sys.path[:] = [p for p in sys.path if os.path.realpath(p or ".") != {root!r}]
@atexit.register
def _where():
    if sys.modules.get("resnet_noBN"):
        with open({record!r}, "a") as f:
            f.write(sys.modules["resnet_noBN"].__file__ + "\\n")
"""


def write_tarball(carry: Path, dataset: str, per_class: int) -> None:
    """carry/<folder>.tar.gz: <folder>/{train,test}/<class>/NNNN.jpg, random 32x32 JPEGs."""
    folder = FOLDERS[dataset][0]
    rng = np.random.default_rng(0)
    tree = carry / "tree"
    for split, n in (("train", per_class), ("test", 1)):
        for name in DATASETS[dataset].class_names:
            (tree / folder / split / name).mkdir(parents=True)
            for i in range(n):
                pixels = rng.integers(0, 256, (32, 32, 3), dtype=np.uint8)
                Image.fromarray(pixels).save(tree / folder / split / name / f"{i:04d}.jpg")
    with tarfile.open(carry / f"{folder}.tar.gz", "w:gz") as tar:
        tar.add(tree / folder, arcname=folder)
    shutil.rmtree(tree)


@pytest.fixture
def machine(tmp_path):
    """(repo, call): a copy of the tracked tree with .carry/ holding the two tarballs, and
    call(n, **env) running `bash bench/gpu_lease.sh` there with $OUT = tmp/out<n>. Every process
    the calls leave (the detached supervisor and its runs) is killed at the end."""
    repo = tmp_path / "repo"
    files = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True
    ).stdout.split(b"\0")
    for name in filter(None, files):
        src = ROOT / name.decode()
        if src.is_file():
            (repo / name.decode()).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, repo / name.decode())
    for dataset, (_, per_class) in FOLDERS.items():
        write_tarball(repo / ".carry", dataset, per_class)
    blocker, record = tmp_path / "blocker", tmp_path / "imported_from.txt"
    blocker.mkdir()
    (blocker / "sitecustomize.py").write_text(
        SITECUSTOMIZE.format(root=os.path.realpath(ROOT), record=str(record))
    )
    marker = uuid.uuid4().hex
    base = {
        "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin",
        "HOME": str(tmp_path),
        "PYTHONPATH": str(blocker),
        "PYTHON": sys.executable,
        "JAX_PLATFORMS": "cpu",
        "LEASE_SMOKE": "1",
        "LEASE_TRAIN_STEPS": str(STEPS),
        "LEASE_EVAL_EVERY": "2",
        "LEASE_PROBE": "bf16",
        "LEASE_WAIT_S": "400",
        "LEASE_TEST_MACHINE": marker,
    }

    def call(n: int, **env):
        out = tmp_path / f"out{n}"
        out.mkdir()
        proc = subprocess.run(
            ["bash", "bench/gpu_lease.sh"],
            cwd=repo,
            env={**base, "OUT": str(out), **env},
            capture_output=True,
            text=True,
            timeout=540,
        )
        back = sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file())
        return proc, out, back

    yield repo, call, record
    for environ in Path("/proc").glob("[0-9]*/environ"):
        try:
            if f"LEASE_TEST_MACHINE={marker}".encode() in environ.read_bytes().split(b"\0"):
                os.kill(int(environ.parent.name), signal.SIGKILL)
        except OSError:
            pass


def test_smoke_plan_runs_detached_to_the_end_and_starts_over_on_a_lost_machine(machine):
    """First call: starts the plan and returns (exit 3). Second: waits until done (exit 0):
    both runs at their last step, their metrics.jsonl and test_error.png, status.json and
    plan.log among at most 8 files, every decision with its projection in plan.log, the project
    imported from the copy only. Then the machine's disk is wiped: the next call says the
    machine was lost, starts over; the 100,000-step runs no longer fit, a speed try runs."""
    repo, call, record = machine
    first, out1, back1 = call(1, LEASE_FLAGS="--relu_leakiness=0.1")
    assert first.returncode == 3, first.stdout + first.stderr
    assert "the lease's first call; starting the plan" in first.stdout
    assert not json.loads((out1 / "status.json").read_text())["done"]

    second, out2, back2 = call(2)
    assert second.returncode == 0, second.stdout + second.stderr
    runs = ("cifar10", "cifar100")
    assert back2 == sorted(
        ["status.json", "plan.log", "lease.tar.gz"]
        + [f"{r}/{f}" for r in runs for f in ("metrics.jsonl", "test_error.png")]
    )
    status = json.loads((out2 / "status.json").read_text())
    assert status["done"] and status["phase"] == "done" and not status["started_over"]
    assert status["probe"]["bf16"]["images_per_s"] > 0
    for name in runs:
        run = status["runs"][name]
        assert (run["state"], run["step"], run["exit"]) == ("done", STEPS, 0), run
        assert run["final"]["final_step"] == STEPS and 0 <= run["test_error"] <= 1
        assert "--seed=0" in run["command"] and "--jit_compile" not in run["command"]
        assert (
            f"--train_steps={STEPS} --eval_every=2 --checkpoint_every=2 --lr_boundaries=2,3"
            in (run["command"])
        )  # the paper's shape over the plan's steps, whatever LEASE_TRAIN_STEPS
        assert run["command"].endswith("--model=small --relu_leakiness=0.1")  # LEASE_FLAGS last
        steps = [json.loads(line)["step"] for line in (out2 / name / "metrics.jsonl").open()]
        assert steps == [2, 4]
        assert (out2 / name / "test_error.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    log = (out2 / "plan.log").read_text()
    assert "with --relu_leakiness=0.1" in log.splitlines()[0]
    assert "cifar10 alone: projected" in log and "cifar100: done (exit 0)" in log
    assert second.stdout.splitlines()[-1].split()[:2] == ["cifar100", "done"]
    imported = set(record.read_text().split())
    assert imported and all(p.startswith(str(repo)) for p in imported), imported

    # the machine is lost: its disk wiped; the caller carries the last status.json
    shutil.rmtree(repo / "runs")
    shutil.copy(out2 / "status.json", repo / ".carry" / "status.json")
    lost, _, _ = call(3, LEASE_TRAIN_STEPS="100000", LEASE_SPEED_TRIES="1")
    assert lost.returncode == 3, lost.stdout + lost.stderr
    assert "the machine was lost" in lost.stdout and "starting the plan over" in lost.stdout
    last, out4, _ = call(4, LEASE_TRAIN_STEPS="100000", LEASE_SPEED_TRIES="1")
    assert last.returncode == 0, last.stdout + last.stderr
    status = json.loads((out4 / "status.json").read_text())
    assert status["done"] and status["started_over"]
    assert status["start_s"] == 360  # the lost machine's start and this one's
    assert [r["state"] for r in status["runs"].values()] == ["skipped", "skipped"]
    assert "projected" in status["runs"]["cifar10"]["why"]
    (speed,) = status["speed"]
    assert speed["try"] == "profile" and speed["images_per_s"] > 0, speed


def test_a_later_lease_runs_the_claims_and_the_2016_reader_with_its_leak_probe(machine):
    """LEASE_RUNS=claims,cifar100_2016 without a probe: the claims (the paper's network, the
    trained head, batch norm; STEPS // 3 steps each, at least 2) on the CIFAR-10 folder, then
    CIFAR-100 read as the 2016 reader did at lr 0.02 over 0.8 of the steps, then its leak probe;
    their files among the 8 brought back, the claims' tables in lease.tar.gz."""
    _, call, _ = machine
    env = {"LEASE_RUNS": "claims,cifar100_2016", "LEASE_PROBE": ""}
    first, _, _ = call(1, **env)
    assert first.returncode == 3, first.stdout + first.stderr
    second, out, back = call(2, **env)
    assert second.returncode == 0, second.stdout + second.stderr
    assert back == sorted(
        ["status.json", "plan.log", "lease.tar.gz", "claims/claims_curves.png"]
        + [f"cifar100_2016/{f}" for f in ("metrics.jsonl", "test_error.png")]
    )
    status = json.loads((out / "status.json").read_text())
    assert status["probe"] == {"pair_pays": False}
    claims, c2016 = status["runs"]["claims"], status["runs"]["cifar100_2016"]
    assert (claims["state"], claims["step"], claims["train_steps"]) == ("done", 6, 6), claims
    assert "launch/claims.py" in claims["command"] and "--model=small" in claims["command"]
    assert (
        "--train_steps=2 --eval_every=2 --seeds=1 --arms=trainable_head,batch_norm"
        in (claims["command"])
    )
    assert (claims["final"]["runs"], claims["final"]["ran"]) == (3, 3)
    assert set(claims["final"]["arms"]) == {"hardt_ma", "trainable_head", "batch_norm"}
    assert (c2016["state"], c2016["step"], c2016["exit"]) == ("done", 3, 0), c2016
    assert "--cifar100_layout=original_2016 --learning_rate=0.02" in c2016["command"]
    assert (
        "--train_steps=3 --eval_every=2 --checkpoint_every=2 --lr_boundaries=1,2"
        in (c2016["command"])
    )
    steps = [json.loads(line)["step"] for line in (out / "cifar100_2016/metrics.jsonl").open()]
    assert steps == [2, 3]
    leak = c2016["leak_probe"]
    assert (leak["first_red_pixel"], leak["layout"], leak["step"]) == (
        "wrong_label",
        "original_2016",
        3,
    )
    assert 0 <= leak["test_error"] <= 1
    log = (out / "plan.log").read_text()
    assert "no measured rate" in log and "cifar100_2016 leak probe: {" in log
    assert "cifar100_2016: leak probe (the first red pixel a wrong label)" in second.stdout
    with tarfile.open(out / "lease.tar.gz") as tar:
        names = set(tar.getnames())
    assert {"claims/claims.md", "claims/runs/batch_norm-seed0/metrics.jsonl"} <= names
    assert "cifar100_2016/leak_probe.log" in names


@pytest.fixture
def plan(monkeypatch):
    """bench/lease_plan.py, imported as a module."""
    spec = importlib.util.spec_from_file_location("lease_plan", ROOT / "bench" / "lease_plan.py")
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "lease_plan", module)  # its dataclasses look it up there
    spec.loader.exec_module(module)
    return module


def test_the_runs_at_the_papers_60000_steps(plan):
    """The runs' recipes at full size and the data each lease carries."""
    flags = {name: run.recipe_flags(60_000, 2_000) for name, run in plan.RUNS.items()}
    assert flags["cifar10"] == flags["cifar100"] == flags["cifar100_leaky"]
    assert flags["cifar100"] == [
        "--train_steps=60000",
        "--eval_every=2000",
        "--checkpoint_every=2000",
        "--lr_boundaries=30000,50000",
    ]
    assert flags["cifar100_2016"] == [
        "--train_steps=48000",
        "--eval_every=2000",
        "--checkpoint_every=2000",
        "--lr_boundaries=24000,40000",
    ]
    assert flags["claims"] == [
        "--train_steps=20000",
        "--eval_every=2000",
        "--seeds=1",
        "--arms=trainable_head,batch_norm",
    ]
    assert plan.RUNS["claims"].trainings() * plan.RUNS["claims"].steps(60_000) == 60_000
    folders = plan.data_folders(["cifar100_leaky", "claims", "cifar100_2016", "cifar10"])
    assert folders == ["cifar-100-jpeg", "cifar-10-jpeg"]

    def tarballs(runs: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "bench/lease_plan.py", "tarballs"],
            cwd=ROOT,
            env={**os.environ, "LEASE_RUNS": runs},
            capture_output=True,
            text=True,
        )

    listed = tarballs("claims,cifar100_2016")
    assert listed.stdout.split() == ["cifar-10-jpeg.tar.gz", "cifar-100-jpeg.tar.gz"]
    bad = tarballs("cifar10,imagenet")
    assert bad.returncode == 2 and bad.stderr.strip() == (
        "error: LEASE_RUNS names ['imagenet']; the runs are "
        "['cifar10', 'cifar100', 'cifar100_leaky', 'cifar100_2016', 'claims']"
    )


def test_a_failed_run_says_why_in_the_table(capsys, plan):
    """The launcher's last error line (here a diverged loss) becomes the run's ``why``, printed
    under the table; without one, the last line of its output."""
    diverged = (
        "step    7400  loss 2.1071\n"
        "error: loss is nan at step 7500: training diverged; the latest checkpoint "
        "(runs/lease/cifar100/ckpt-6000.npz) is the last good one\n"
        "W1124 a warning after it\n"
    )
    assert plan.failure_line(diverged).startswith("error: loss is nan at step 7500")
    assert plan.failure_line("Traceback\n  KeyError: 'x'\n\n") == "KeyError: 'x'"
    assert plan.failure_line("") == "no output"
    run = {"train_steps": 60000, "step": 7400, "images_per_s": 19063.0, "test_error": 0.5219}
    status = {
        "done": True,
        "phase": "done",
        "started_at": 0.0,
        "start_s": 180.0,
        "lease_s": 1800.0,
        "probe": {},
        "speed": [],
        "runs": {"cifar100": {**run, "state": "failed", "why": plan.failure_line(diverged)}},
    }
    plan.print_table(status)
    lines = capsys.readouterr().out.splitlines()
    assert lines[-2].split() == ["cifar100", "failed", "7,400/60,000", "19,063", "0.5219", "failed"]
    assert lines[-1].startswith("cifar100: error: loss is nan at step 7500: training diverged")
