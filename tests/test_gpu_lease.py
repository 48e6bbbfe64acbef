"""The GPU lease (ops/lease, launch/gpu_lease.sh) as a lent machine runs it, without a
GPU: what each call carries against the 64 MiB a call may carry, the plan's runs and order, and
a whole lease in calls on this CPU (LEASE_SMOKE=1: the small network, 4 steps) from a copy of
what travels, with TensorFlow and the installed project unimportable, on tiny exact data sets
the test writes (a lossless pack of CIFAR-10, a tarball of CIFAR-100) carried in parts: a damaged
part dropped and carried again, a run started while later parts travel, the machine lost between
two parts and again while a run trains, finished runs not redone, every part and the final
weights checked by SHA-256, and the weights evaluated again here.
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import time
import uuid
from pathlib import Path

import jax_cache
import numpy as np
import pytest

from ops.lease import carry, collect, plan
from resnet_noBN.datasets import cifar_data

ROOT = Path(__file__).resolve().parents[1]
STEPS = 4

# Imported first by every Python of a call (PYTHONPATH): no TensorFlow (as on the GPU machine),
# no editable install of the project (only the copied tree on PYTHONPATH has it); each process
# that imported the project writes down where from. A process of another session than the test's
# (the supervisor, and all it starts) writes down every file of .carry it opens.
SITECUSTOMIZE = """
import atexit, os, sys
sys.modules["tensorflow"] = None
def _editable(x):
    return getattr(x, "__module__", "").startswith("__editable__")
sys.meta_path[:] = [f for f in sys.meta_path if not _editable(f)]
sys.path_hooks[:] = [h for h in sys.path_hooks if not _editable(h)]
sys.path[:] = [p for p in sys.path if os.path.realpath(p or ".") != {root!r}]
if os.getsid(0) != {sid}:  # the supervisor's session: never .carry, which every call replaces
    def _carry(event, args):
        if event == "open" and isinstance(args[0], str) and "/.carry/" in os.path.abspath(args[0]):
            with open({reads!r}, "a") as f:
                f.write(os.path.abspath(args[0]) + "\\n")
    sys.addaudithook(_carry)
@atexit.register
def _where():
    if sys.modules.get("resnet_noBN"):
        with open({record!r}, "a") as f:
            f.write(sys.modules["resnet_noBN"].__file__ + "\\n")
"""
# The unpack tool of the test's lossless pack: its "pack" holds the official files as they are
# (the lease runs whatever tool the pack comes with and checks what it restores).
UNPACK_TOOL = """import pathlib, shutil, sys
src, out = map(pathlib.Path, sys.argv[1:])
for f in src.glob("*.bin"):
    shutil.copy(f, out / f.name)
shutil.copy(src / "batches.meta.txt", out)
"""


# ---------------------------------------------------------------- what travels, the runs


def test_each_call_of_the_default_lease_carries_under_64_mib():
    """The budget: the tree as it is now (tracked and untracked-not-ignored files) within its
    room, and each call of the default lease (the exact CIFAR-10 pack and CIFAR-100 tarball in
    parts, the wheels and manifest, the tree) under 64 MiB; the figures printed."""
    tree = carry.tree_bytes(ROOT)
    assert tree <= carry.TREE_ROOM, f"the tree is {tree / carry.MiB:.2f} MiB: trim what it holds"
    assert carry.TREE_ROOM + carry.BASE_ROOM + carry.PART_BYTES == carry.CALL_LIMIT
    # the default order's data sets, CIFAR-100 first (its first run needs it)
    calls = carry.calls(tree, carry.BASE_ROOM, carry.default_parts(["cifar100", "cifar10"]))
    for i, call in enumerate(calls, 1):
        print(f"call {i}: {call.line()}")
        assert call.total <= carry.CALL_LIMIT
    assert [c.part for c in calls] == [
        "cifar100-1",
        "cifar100-2",
        "cifar100-3",
        "cifar10-1",
        "cifar10-2",
    ]
    sizes = carry.split_sizes(137_647_064, carry.PART_BYTES)
    assert len(sizes) == 3 and sum(sizes) == 137_647_064 and max(sizes) - min(sizes) <= 1
    budget = subprocess.run(
        ["bash", "launch/gpu_lease.sh", "budget"], cwd=ROOT, capture_output=True, text=True
    )
    assert budget.returncode == 0, budget.stderr
    assert budget.stdout.count(" MiB of 64") == 5


def test_the_runs_their_order_flags_and_what_fits_in_15_minutes():
    """The default order (the paper's CIFAR-100, the 2016 network's, the paper's CIFAR-10, the
    held rate, the 2016 code's CIFAR-10; seeds 1 and 2 of those; true float32), less the runs
    finished.txt names; each run's launcher flags at the paper's 60,000 steps (seeds, the
    true-float32 run stopped past its first decay with the drops where the whole run has them),
    and the projection: in 900 s of GPU time the first run fits and the second does not, the
    held CIFAR-100 run (12,000 steps) and its seed 1 in what the first leaves; in 1,100 s the
    first two and nothing after them."""
    assert plan.DEFAULT_RUNS == (
        "cifar100_paper",
        "cifar100_original_2016",
        "cifar10_paper",
        "cifar100_held_lr_wd_2016",
        "cifar10_original_2016_wd",
        "cifar100_paper-s1",
        "cifar100_original_2016-s1",
        "cifar10_paper-s1",
        "cifar100_held_lr_wd_2016-s1",
        "cifar10_original_2016_wd-s1",
        "cifar100_paper-s2",
        "cifar100_original_2016-s2",
        "cifar10_paper-s2",
        "cifar100_held_lr_wd_2016-s2",
        "cifar10_original_2016_wd-s2",
        "cifar100_true_float32",
    )
    default = plan.Knobs.from_env({})
    assert [r.name for r in default.runs] == list(plan.default_runs(plan.finished()))
    assert default.lease_s == 900
    knobs = plan.Knobs.from_env({"LEASE_RUNS": ",".join(plan.DEFAULT_RUNS)})
    assert knobs.datasets() == ["cifar100", "cifar10"]
    paper, c100 = knobs.run("cifar10_paper-s2"), knobs.run("cifar100_true_float32")
    assert paper.flags(smoke=False) == [
        "--experiment=cifar10_paper",
        "--seed=2",
        "--precision=mixed_bfloat16",
    ]
    assert c100.flags(smoke=False) == [
        "--experiment=cifar100_true_float32",
        "--seed=0",
        "--precision=true_float32",
        "--train_steps=32000",
        "--schedule_steps=60000",
    ]

    def estimate(run):
        rate = plan.PRIOR[run.precision]
        return plan.projection(run, rate, plan.PRIOR["eval"], plan.PRIOR["first_step_s"], knobs)

    assert 420 < estimate(knobs.runs[0]) < 480  # 60,000 steps at 18,861 images/s and the rest
    left = 900 - 30 - 60  # the start, the first carry calls
    fits, why = plan.schedule(knobs.runs, left, estimate, knobs.margin_s)
    assert fits == [
        "cifar100_paper",
        "cifar100_held_lr_wd_2016",
        "cifar100_held_lr_wd_2016-s1",
    ]
    assert {"cifar100_original_2016", "cifar10_paper", "cifar10_original_2016_wd"} <= set(why)
    longer = plan.Knobs.from_env({"LEASE_RUNS": ",".join(plan.DEFAULT_RUNS), "LEASE_S": "1100"})
    assert longer.lease_s == 1100 and "LEASE_S=1100 " in plan.next_command(
        {"LEASE_S": "1100"}, plan.Back(since=1.0)
    )  # the next call's command passes it on
    fits, _ = plan.schedule(longer.runs, longer.lease_s - 30 - 60, estimate, knobs.margin_s)
    assert fits == ["cifar100_paper", "cifar100_original_2016"]  # LEASE_S=1100 holds both
    held = knobs.run("cifar100_held_lr_wd_2016")
    assert held.flags(smoke=False)[-2:] == ["--train_steps=12000", "--schedule_steps=60000"]
    assert 100 < estimate(held) < 160
    assert 1_500 < estimate(c100) < 1_800  # true float32 at the rate one H200 measured
    assert knobs.speed == ("baseline",) and knobs.probes == ()
    bad = subprocess.run(
        [sys.executable, "-m", "ops.lease", "budget"],
        cwd=ROOT,
        env={**os.environ, "LEASE_RUNS": "cifar10_paper,imagenet_paper"},
        capture_output=True,
        text=True,
    )
    assert bad.returncode == 2 and bad.stderr.startswith("error: LEASE_RUNS names 'imagenet")
    assert len(bad.stderr.strip().splitlines()) == 1


def bench_json(rate: float, loss: float, **more) -> dict:
    """What bench/throughput.py answers a speed try, in the fields the supervisor reads."""
    return {"chunk_images_per_s": rate, "loss_step": 50, "loss_at_step": loss, **more}


def test_a_speed_try_trains_the_runs_where_its_loss_matches_and_it_is_2_percent_faster(tmp_path):
    """A speed try (its prediction written first) is timed against the baseline: the runs train
    with it where its loss at step 50 is the baseline's within 2% and its images/s at least
    x1.02 the baseline's (not at x1.01, nor with a loss 3% off), else with the baseline;
    LEASE_BACK carries the choice to a machine started again. A run's end: its final JSON, its
    weights cut from its last checkpoint, its log line."""
    from ops.lease import call, supervisor

    knobs = plan.Knobs.from_env({"LEASE_RUNS": ",".join(plan.DEFAULT_RUNS)})
    manifest = {"datasets": {d: {"label": d, "parts": []} for d in ("cifar10", "cifar100")}}
    seen = {"device": "a GPU", "versions": "JAX"}
    sups = []
    for gain, loss, chosen in (
        (1.03, 2.3021, "latency_hiding"),
        (1.01, 2.3021, "baseline"),
        (1.3, 2.38, "baseline"),
    ):
        sups.append(sup := supervisor.Supervisor(knobs, tmp_path / str(gain)))
        sup.work.mkdir(parents=True, exist_ok=True)
        sup.status = call.first_status(knobs, plan.Back(), manifest, seen)
        sup.status["since"] = time.time() - 90  # 780 s left, a start of 30 s counted
        for name, result in (
            ("baseline", bench_json(20_000.0, 2.302078, first_step_s=17.0)),
            ("latency_hiding", bench_json(gain * 20_000, loss, first_step_s=20.0)),
        ):
            entry = {"name": name}
            sup.status["speed"]["tries"].append(entry)
            sup.speed_result(entry, result)
        sup.choose_speed([])
        assert sup.status["speed"]["chosen"] == chosen, (gain, loss)
        tried = sup.status["speed"]["tries"][1]
        assert tried["passed"] is (loss == 2.3021), (gain, loss)
        said = (sup.work / "plan.log").read_text().splitlines()
        assert said[-1].endswith(
            f"speed: the runs train with {chosen} (baseline 20000.0 images/s; latency_hiding "
            f"{gain * 20_000:.1f} images/s)"
        ), said[-1]
    assert sups[0].status["speed"]["tries"][1]["result"] == (
        "20,600 images/s (x1.030 the baseline's); loss at step 50 2.3021 against 2.302078 "
        "(0.00%: passes the 2% check)"
    )
    assert "(3.38%: FAILS the 2% check)" in sups[2].status["speed"]["tries"][1]["result"]
    back = plan.Back.parse(plan.Back(since=1.0, starts=1, speed="latency_hiding").text())
    assert call.first_status(knobs, back, manifest, seen)["speed"]["chosen"] == "latency_hiding"
    sup = sups[0]
    sup.status["runs"]["cifar100_paper"]["state"] = "done earlier"  # came back from a machine lost
    rates, fits, _, _ = sup.plan_runs()  # 780 s left, at the try's rate
    assert rates["mixed_bfloat16"] == (20_600.0, "speed try latency_hiding")
    assert fits == [
        "cifar100_original_2016",
        "cifar100_held_lr_wd_2016",
        "cifar100_held_lr_wd_2016-s1",
    ]

    folder = sup.work / "cifar10_paper"
    folder.mkdir()
    arrays = {"model/w": np.full(3, 7, np.float32), "optimizer/sgd/iteration": np.int64(4)}
    np.savez(folder / "ckpt-4.npz", **arrays)
    (folder / "checkpoints.json").write_text(json.dumps({"checkpoints": ["ckpt-4.npz"]}))
    sup.status["runs"]["cifar10_paper"].update(state="running", started_at=time.time())

    class Ended:  # the run's launcher, ended
        name = "cifar10_paper"
        log = folder / "launch.log"

    final = {"dataset": "cifar10", "final_step": 4, "model_dir": str(folder), "seed": 0}
    final.update(weights_sha256="d7", test_error=0.1, images_per_sec=50.0)
    Ended.log.write_text("a line\n" + json.dumps(final) + "\n")
    sup.finish_run(Ended, 0, Ended.log.read_text())
    run = sup.status["runs"]["cifar10_paper"]
    assert run["state"] == "done" and run["final"] == final, run
    assert run["weights"]["run_weights_sha256"] == "d7" and run["weights"]["step"] == 4
    with np.load(folder / "weights-4.npz") as weights:
        assert "optimizer/sgd/iteration" not in weights.files
        assert weights["model/w"].tolist() == [7] * 3
    said = (sup.work / "plan.log").read_text().splitlines()[-1]
    assert said.split("] ", 1)[1].startswith(
        f"cifar10_paper: done (exit 0) after 0 s: {json.dumps(final)}"
    )


def test_a_run_that_ends_early_leaves_its_time_to_the_runs_after_it(tmp_path):
    """The supervisor projects again each time the GPU is free (``next_task``: ``plan_runs``):
    at 810 s left the paper's CIFAR-100 run fits and the 2016 network's does not; once the first
    has diverged at step 7,400, 120 s later, the 2016 network's fits in the 690 s left, at the
    rate the diverged run measured, and the held run after it."""
    from ops.lease import call, supervisor

    knobs = plan.Knobs.from_env({"LEASE_RUNS": ",".join(plan.DEFAULT_RUNS), "LEASE_SPEED": ""})
    manifest = {"datasets": {d: {"label": d, "parts": []} for d in ("cifar10", "cifar100")}}
    sup = supervisor.Supervisor(knobs, tmp_path)
    sup.work.mkdir(parents=True)
    sup.status = call.first_status(knobs, plan.Back(), manifest, {"device": "-", "versions": "-"})
    sup.status["since"] = time.time() - 60  # 810 s left, a start of 30 s counted
    runs = sup.status["runs"]
    assert sup.next_task() is None  # the data still travels: nothing starts
    assert runs["cifar100_paper"]["fits"] == "projected 464 s"
    assert runs["cifar100_original_2016"]["fits"].startswith("projected 464 s + margin 60 s >")
    assert runs["cifar100_held_lr_wd_2016-s1"]["fits"] == "projected 135 s"
    assert sup.status["wanted"] == ["cifar100"]  # no CIFAR-10 run fits: its parts stay here
    runs["cifar100_paper"].update(state="failed", step=7_400, images_per_s=20_000.0)
    sup.status["since"] -= 120  # it diverged: 690 s left
    assert sup.next_task() is None
    rates, fits, _, _ = sup.plan_runs()
    assert rates["mixed_bfloat16"] == (20_000.0, "run cifar100_paper")
    assert fits == ["cifar100_original_2016", "cifar100_held_lr_wd_2016"]
    assert runs["cifar100_original_2016"]["fits"] == "projected 441 s"
    assert runs["cifar100_held_lr_wd_2016-s1"]["fits"].startswith("projected 130 s + margin")
    assert not sup.status["done"]


def test_a_failed_runs_results_wait_for_the_next_return_while_a_run_trains():
    """Every return risks the machine (it goes back 30 s after a call returns): the lease of
    2026-12-04 lost the run under way so. A failed run's results alone do not end a call while
    the next run trains; weights do, and so does a failed run once nothing trains."""
    from ops.lease import call

    def status(*states, weights=False, done=False):
        runs = {f"r{i}": {"state": s} for i, s in enumerate(states)}
        if weights:
            runs["r0"]["weights"] = {"parts": [{"name": "w1"}, {"name": "w2"}]}
        return {"runs": runs, "done": done}

    nothing = plan.Back.parse("")
    assert not call.news(status("failed", "running"), nothing)
    assert call.news(status("failed", "pending"), nothing)
    assert call.news(status("failed", "skipped", done=True), nothing)
    assert call.news(status("done", "running", weights=True), nothing)
    half = plan.Back.parse("since:1,starts:1,back:r0+r0.w1")
    assert call.news(status("done", "running", weights=True), half)
    whole = plan.Back.parse("since:1,starts:1,back:r0+r0.w1+r0.w2")
    assert not call.news(status("done", "running", weights=True), whole)
    assert not call.news(status("failed", "running"), plan.Back.parse("since:1,starts:1,back:r0"))


def test_a_later_lease_leaves_out_the_runs_the_repository_keeps(tmp_path, monkeypatch, capsys):
    """finished.txt names the runs an earlier lease finished, each with its committed folder:
    the default order leaves them out (LEASE_RUNS runs what it names), and a line that is not
    RUN FOLDER, or names no run, is refused in one line (exit 2). The committed file's folders
    are tracked under results/."""
    tracked = subprocess.run(
        ["git", "ls-files", "results"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    for folder in plan.finished().values():
        assert any(f.startswith(folder.rstrip("/") + "/") for f in tracked), folder
    listed = tmp_path / "finished.txt"
    listed.write_text(
        "# a comment\n\ncifar100_paper results/gpu_x/cifar100_paper  # diverged at step 7,400\n"
        "cifar10_paper-s1 results/gpu_x/cifar10_paper_s1\n"
    )
    monkeypatch.setattr(plan, "FINISHED", str(listed))
    knobs = plan.Knobs.from_env({})
    assert knobs.finished == ("cifar100_paper", "cifar10_paper-s1")
    names = [r.name for r in knobs.runs]
    assert names == [n for n in plan.DEFAULT_RUNS if n not in knobs.finished]
    assert names[:3] == ["cifar100_original_2016", "cifar10_paper", "cifar100_held_lr_wd_2016"]
    named = plan.Knobs.from_env({"LEASE_RUNS": "cifar100_paper"})
    assert [r.name for r in named.runs] == ["cifar100_paper"] and named.finished == ()
    for bad, says in (
        ("cifar100_paper\n", ":1: 'cifar100_paper' is not RUN FOLDER"),
        ("# x\nimagenet_paper results/y\n", ":2: 'imagenet_paper' is no lease run"),
    ):
        listed.write_text(bad)
        with pytest.raises(SystemExit) as stop:
            plan.Knobs.from_env({})
        err = capsys.readouterr().err
        assert stop.value.code == 2 and says in err and len(err.strip().splitlines()) == 1, err


def test_what_comes_back_stays_small(tmp_path):
    """A launcher's progress lines leave its log (train.jsonl holds them) and a warning repeated
    at every step is kept once; train.jsonl keeps at most about 200 records, a divergence's
    replay every one; every committed run log is as a lease brings it back; the caller's
    LEASE_BACK says what came back and round-trips."""
    log = (
        "python3 launch/cifar.py ...\n"
        + "W1124 23:52:59.1 6932 cuda_timer.cc:88] Delay kernel timed out\n" * 3
        + "".join(
            f"step   {s:5d}  loss 2.1  precision 0.2  lr 0.05\n" for s in range(100, 501, 100)
        )
        + "step     500  test error 0.8000 (10000 images)\n"
        + '{"final_step": 500}\n'
    )
    assert collect.trim_launch_log(log).splitlines() == [
        "python3 launch/cifar.py ...",
        "W1124 23:52:59.1 6932 cuda_timer.cc:88] Delay kernel timed out",
        "(the line above 2 more times)",
        "step     500  test error 0.8000 (10000 images)",
        '{"final_step": 500}',
    ]
    train = "".join(json.dumps({"step": s, "loss": 1.0}) + "\n" for s in range(100, 60_001, 100))
    steps = [json.loads(x)["step"] for x in collect.thin_train_log(train).splitlines()]
    assert steps == list(range(300, 60_001, 300))  # 200 of the 600 records
    short = train[: train.index('{"step": 3100')]
    assert collect.thin_train_log(short) == short  # 30 records: a curve needs them all
    committed = subprocess.run(
        ["git", "ls-files", "results"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    for name in committed:
        path = ROOT / name
        if path.name in ("launch.log", "train.jsonl"):
            assert collect.small_copy(path) == path.read_bytes(), (
                f"{name}: trim it as a lease brings it back"
            )
    work = tmp_path / "work"  # a diverged run's replay comes back whole: every step
    (work / "run" / "divergence").mkdir(parents=True)
    (work / "run" / "train.jsonl").write_text(train)
    (work / "run" / "divergence" / "train.jsonl").write_text(train)
    (work / "run" / "divergence" / "health.png").write_bytes(b"\x89PNG picture")
    collect.results_tarball(work, ["run"], tmp_path / "results.tar.gz")
    back = collect.join([tmp_path], tmp_path / "back")
    assert back == []  # no status: no run line, the files alone
    assert (tmp_path / "back" / "run" / "divergence" / "train.jsonl").read_text() == train
    assert (tmp_path / "back" / "run" / "divergence" / "health.png").read_bytes()[:4] == b"\x89PNG"
    assert len((tmp_path / "back" / "run" / "train.jsonl").read_text().splitlines()) == 200
    back = plan.Back(since=1764100000, starts=2, speed="baseline", items=("a", "a.w1"))
    assert plan.Back.parse(back.text()) == back
    command = plan.next_command({"LEASE_RUNS": "cifar10_paper", "LEASE_MACHINE_ID": "x"}, back)
    assert command == (
        "LEASE_RUNS=cifar10_paper LEASE_BACK=since:1764100000,starts:2,speed:baseline,"
        "back:a+a.w1 bash launch/gpu_lease.sh"
    )


# ---------------------------------------------------------------- a whole lease on this CPU


def write_data(data: Path) -> None:
    """DATA_DIR as prepare takes it: a CIFAR-10 lossless pack (its MANIFEST.json with the
    official files' SHA-256, its unpack tool in tools/) and cifar-100-binary.tar.xz; random
    records, 150 training and 30 test images each."""
    pack = data / "cifar-10-lossless"
    written = cifar_data.write_random(pack, "cifar10", records_per_file=30)
    assert len(written["train"][0]) == 150
    files = {
        f.name: {"sha256": carry.sha256_file(f), "records": 30} for f in sorted(pack.glob("*.bin"))
    }
    (pack / "MANIFEST.json").write_text(json.dumps({"files": files}))
    names = cifar_data.DATASETS["cifar10"].class_names
    (pack / "batches.meta.txt").write_text("\n".join(names) + "\n")
    (data / "tools").mkdir()
    (data / "tools" / carry.UNPACK_TOOL).write_text(UNPACK_TOOL)
    binary = data / "tmp" / "cifar-100-binary"
    cifar_data.write_random(binary, "cifar100", records_per_file=150, seed=1)
    with tarfile.open(data / "cifar-100-binary.tar.xz", "w:xz") as tar:
        for f in ("train.bin", "test.bin"):
            tar.add(binary / f, arcname=f"cifar-100-binary/{f}")
    shutil.rmtree(data / "tmp")


def copy_tree(dest: Path) -> None:
    """What travels of the tree: its tracked files and the untracked ones git does not ignore."""
    for name in carry.tree_files(ROOT):
        src = ROOT / name
        if src.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name)


class Lease:
    """Here (a checkout of the tree, where prepare runs) and there (the machine: a copy of the tree,
    the carried paths replaced on each call, its ignored files kept until it is lost)."""

    def __init__(self, tmp: Path):
        self.tmp, self.here, self.there = tmp, tmp / "here", tmp / "there"
        copy_tree(self.here)
        copy_tree(self.there)
        for git in (["init", "-q"], ["add", "-A"]):  # here is a checkout: prepare counts its tree
            subprocess.run(["git", *git], cwd=self.here, check=True)
        blocker, self.record = tmp / "blocker", tmp / "imported_from.txt"
        self.carry_reads = tmp / "carry_reads.txt"
        blocker.mkdir()
        (blocker / "sitecustomize.py").write_text(
            SITECUSTOMIZE.format(
                root=os.path.realpath(ROOT),
                record=str(self.record),
                sid=os.getsid(0),
                reads=str(self.carry_reads),
            )
        )
        self.marker = uuid.uuid4().hex
        self.env = {
            "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin",
            "HOME": str(tmp),
            "PYTHONPATH": str(blocker),
            "PYTHON": sys.executable,
            "JAX_PLATFORMS": "cpu",
            "LEASE_TEST_MACHINE": self.marker,
            # the session's JAX compilation cache (tests/conftest.py): a start reads what an
            # earlier one compiled (the machine is lost twice; the lease starts 3 times)
            **jax_cache.environment(),
        }
        self.outs: list[Path] = []

    def prepare(self, data: Path, **env) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "ops.lease", "prepare", str(data)],
            cwd=self.here,
            env={**self.env, **env},
            capture_output=True,
            text=True,
        )

    def call(self, carried: list[str], command: str, damage: bool = False):
        """A call: the carried paths replaced there (a part's copy damaged on the way where
        asked), ``command`` run there with $OUT empty; (its process, its reply's next carry
        list and command)."""
        for path in carried:
            shutil.rmtree(self.there / path, ignore_errors=True)
            (self.there / path).parent.mkdir(parents=True, exist_ok=True)
            if (self.here / path).is_dir():
                shutil.copytree(self.here / path, self.there / path)
            else:
                shutil.copyfile(self.here / path, self.there / path)
        if damage:
            with open(self.there / carried[-1], "r+b") as f:
                f.write(b"\xff")
        out = self.tmp / f"out{len(self.outs) + 1}"
        out.mkdir()
        self.outs.append(out)
        proc = subprocess.run(
            ["bash", "-c", command],
            cwd=self.there,
            env={**self.env, "OUT": str(out)},
            capture_output=True,
            text=True,
            timeout=540,
        )
        lines = proc.stdout.splitlines()
        nexts = [i for i, line in enumerate(lines) if line.startswith("next call")]
        if not nexts:
            return proc, None, None
        carry_list = json.loads(lines[nexts[-1]].split("carrying ")[1].split(" (about")[0])
        return proc, carry_list, lines[nexts[-1] + 1].strip()

    def lose_machine(self) -> None:
        """The machine goes back: its processes killed, its ignored files gone."""
        self.kill()
        shutil.rmtree(self.there / "runs")
        shutil.rmtree(self.there / ".carry")

    def kill(self) -> None:
        for environ in Path("/proc").glob("[0-9]*/environ"):
            try:
                if f"LEASE_TEST_MACHINE={self.marker}".encode() in environ.read_bytes().split(
                    b"\0"
                ):
                    os.kill(int(environ.parent.name), signal.SIGKILL)
            except OSError:
                pass


@pytest.fixture
def lease(tmp_path):
    pytest.importorskip("jax")
    lease = Lease(tmp_path)
    yield lease
    lease.kill()


def test_a_lease_in_parts_survives_lost_machines_and_its_weights_check_here(lease, tmp_path):
    """Prepared with 400 kB parts: CIFAR-10's pack in 2, CIFAR-100's tarball in 3. Each call
    takes its part in (a damaged one dropped and asked for again) and names the next. The
    machine is lost between two parts: the next call says so and asks for the part that went
    with it; the first run starts once CIFAR-10 is restored while CIFAR-100 travels. The machine
    is lost again while the second run trains, after the first run's results and weights came
    back: the first run is not redone and CIFAR-10 is not carried again. The last call brings
    the second run back (exit 0). Here the weights are joined, checked by SHA-256 and evaluated
    again on this CPU."""
    data = tmp_path / "data"
    write_data(data)
    knobs = {
        "LEASE_SMOKE": "1",
        "LEASE_TRAIN_STEPS": str(STEPS),
        "LEASE_RUNS": "cifar10_paper,cifar100_true_float32",
        "LEASE_SPEED": "",
        "LEASE_PROBE": "",
        "LEASE_WAIT_S": "300",
    }
    prepared = lease.prepare(data, LEASE_PART_BYTES="400000", **knobs)
    assert prepared.returncode == 0, prepared.stderr
    manifest = json.loads((lease.here / ".carry/base/parts.json").read_text())
    assert list(manifest["parts"]) == [f"cifar10-{i}" for i in (1, 2)] + [
        f"cifar100-{i}" for i in (1, 2, 3)
    ]
    assert manifest["datasets"]["cifar10"]["kind"] == "pack"
    assert manifest["datasets"]["cifar100"]["restored"].keys() == {
        "cifar-100-binary/train.bin",
        "cifar-100-binary/test.bin",
    }
    assert "call 5: tree" in prepared.stdout

    first = " ".join(f"{k}={v}" for k, v in knobs.items()) + " bash launch/gpu_lease.sh"
    proc, carried, command = lease.call([".carry/base", ".carry/parts/cifar10-1"], first)
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert "the lease's first call" in proc.stdout
    assert "part cifar10-1: arrived" in proc.stdout
    assert carried == [".carry/base", ".carry/parts/cifar10-2"]
    assert "LEASE_RUNS=cifar10_paper,cifar100_true_float32" in command
    proc, carried, command = lease.call(carried, command, damage=True)
    assert "part cifar10-2: SHA-256" in proc.stdout and "carry it again" in proc.stdout
    assert carried == [".carry/base", ".carry/parts/cifar10-2"]

    lease.lose_machine()  # between two parts
    proc, carried, command = lease.call(carried, command)
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert "the machine was lost" in proc.stdout and "part cifar10-2: arrived" in proc.stdout
    assert "parts on this machine ['cifar10-2'], to come ['cifar10-1']" in proc.stdout
    sent = []  # CIFAR-10's first part went with the machine
    while carried != [".carry/base"]:  # then all are here: the next call waits for news
        sent.append(carried[-1].split("/")[-1])
        proc, carried, command = lease.call(carried, command)
        assert proc.returncode == 3, proc.stdout + proc.stderr
    assert sent == ["cifar10-1", "cifar100-1", "cifar100-2", "cifar100-3"]
    deadline = time.time() + 400
    while "cifar10_paper.w1" not in command.split("back:")[1] and time.time() < deadline:
        proc, carried, command = lease.call(carried, command)
        assert proc.returncode == 3, proc.stdout + proc.stderr
    assert "cifar10_paper+" in command  # its results and weights came back

    lease.lose_machine()  # while the second run trains
    proc, carried, command = lease.call(carried, command)
    assert "the machine was lost" in proc.stdout
    assert "['cifar10_paper'] are not redone" in proc.stdout
    assert carried[-1] == ".carry/parts/cifar100-1"  # not CIFAR-10: its run came back
    while proc.returncode == 3 and time.time() < deadline + 300:
        proc, carried, command = lease.call(carried, command)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "everything came back" in proc.stdout
    status = json.loads((lease.outs[-1] / "status.json").read_text())
    assert status["starts"] == 3 and status["lost_machines"] == 2
    run = status["runs"]["cifar100_true_float32"]
    assert (run["state"], run["step"], run["steps"]) == ("done", 2, 2), run
    assert "--schedule_steps=4" in run["command"] and "--precision=true_float32" in run["command"]
    assert status["runs"]["cifar10_paper"]["state"] == "done earlier"
    assert not lease.carry_reads.exists(), lease.carry_reads.read_text()  # supervisor: none
    imported = set(lease.record.read_text().split())  # the copies' own, never the installed
    assert {str(lease.there / "resnet_noBN" / "__init__.py")} <= imported, imported
    assert all(p.startswith(str(tmp_path)) for p in imported), imported

    back = tmp_path / "back"
    joined = subprocess.run(
        [sys.executable, "-m", "ops.lease", "collect", *map(str, lease.outs)] + [f"--into={back}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert joined.returncode == 0, joined.stderr
    assert joined.stdout.count("SHA-256") == 2 and joined.stdout.count("... ok") == 2
    answers = (back / "cifar10_paper" / "answers.jsonl").read_text().splitlines()
    assert [json.loads(a)["step"] for a in answers] == [2, 4]
    assert "predicted" in json.loads(answers[-1])
    unpacked = tmp_path / "c10"
    unpacked.mkdir()
    tool = data / "tools" / carry.UNPACK_TOOL
    subprocess.run([sys.executable, tool, data / "cifar-10-lossless", unpacked], check=True)
    checked = subprocess.run(
        [sys.executable, "-m", "ops.lease", "check", f"--into={back}"]
        + [f"--data=cifar10={unpacked}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    line = next(x for x in checked.stdout.splitlines() if x.startswith("cifar10_paper:"))
    assert "predictions differ from the GPU's" in line and "=" in line.split("digest")[1]
    assert "cifar100_true_float32: no --data cifar100=DIR given" in checked.stdout
    record = json.loads((back / "cifar10_paper" / "cpu_check.json").read_text())
    assert record["digest_equal"] is True
    tested = json.loads(answers[-1])["examples"]  # the generated test split's images
    assert record["cpu"]["test_examples"] == tested and record["cpu"]["step"] == 4
    assert f"{record['cpu']['predictions_differ']:,} of {tested:,} predictions differ" in line
    assert not (back / "cifar100_true_float32" / "cpu_check.json").exists()
    assert np.load(back / "cifar10_paper" / "weights-4.npz")["step"] == 4
