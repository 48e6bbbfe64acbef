"""The claims study (``launch/study.py --study=claims``, studies/claims.py): every arm runs, the
report with its verdicts and plot, resume, divergence, a folder of another run refused before
anything is written, bad flags."""

import json
import os
import sys

import launchers
import pytest

from resnet_noBN.configs import experiments
from resnet_noBN.studies import arm_runs, claims, study

BASE, STANDARD = "claims_hardt_ma", "claims_standard"
# a smoke budget: the small network, 6 steps of batch 16 logged every 2, evaluated every 3
TINY = (
    "--model=small",
    "--train_steps=6",
    "--eval_every=3",
    "--run_flags=--batch_size=16,--eval_batch_size=100,--log_every=2",
)


def run_claims(data, out, *args, env=None, budget=TINY):
    return launchers.run(
        "launch/study.py",
        "--study=claims",
        f"--data_path={data}",
        f"--output_dir={out}",
        *budget,
        *args,
        timeout=600,
        env=env,
    )


@pytest.fixture(scope="module")
def image_tree(tmp_path_factory, write_image_tree):
    root = tmp_path_factory.mktemp("data") / "cifar-10-jpeg"
    write_image_tree(root, "cifar10", 3, fmt="jpg")
    return root


def done_lines(proc, total):
    """The '[i/total] arm, seed s' of each run's done line, after checking that each but the
    last says what is left and when the study will finish."""
    done = [line for line in proc.stdout.splitlines() if line.startswith("[")]
    assert all(f"[{i}/{total}] " in line for i, line in enumerate(done, 1))
    assert all(" left " in line and " finish " in line for line in done[:-1])
    return [line.split(": ")[0].split("] ")[1] for line in done]


def curves(run):
    """The steps of a run's training log and of its evaluations."""
    return [
        [json.loads(line)["step"] for line in (run / name).read_text().splitlines()]
        for name in ("train.jsonl", "metrics.jsonl")
    ]


def test_the_claims_study_runs_every_arm_writes_its_verdicts_and_resumes(tmp_path, image_tree):
    """Two arms (the baseline and `standard`) from two seeds, side by side: the JSON line, the
    table (2/2 seeds each), the summary, the PNG plot, each run's curves, and two seeds giving
    the baseline different weights. Then every arm from one seed into the same folder: the two
    seed-0 runs already finished are kept as they are and only the six missing ones run; the
    report then holds every arm, each run with its curves."""
    out = tmp_path / "claims"
    proc = run_claims(image_tree, out, "--label=tiny tree", f"--arms={STANDARD}", "--seeds=2")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "study claims: 4 runs (2 arms x 2 seeds), 0 already finished" in proc.stdout
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["runs"] == 4 and list(result["arms"]) == ["hardt_ma", "standard"]
    for name, arm in result["arms"].items():
        assert arm["seeds"] == [0, 1] and arm["diverged"] == 0, name
        assert 0 <= arm["mean"] <= 100 and arm["sd"] >= 0
    assert result["arms"]["hardt_ma"]["verdict"]["text"] == "baseline"
    assert sorted(done_lines(proc, 4)) == sorted(
        f"{arm}, seed {seed}" for arm in (BASE, STANDARD) for seed in (0, 1)
    )
    for name in (claims.TABLE_FILE, claims.SUMMARY_FILE):
        assert (out / name).stat().st_size > 0, name
    assert (out / claims.PLOT_FILE).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not (out / study.TABLE_FILE).exists()  # the claims' report stands for the study's
    table = (out / claims.TABLE_FILE).read_text()
    assert table.startswith("# Study claims: small network, 6 steps, 2 seeds, tiny tree\n")
    assert table.count("\n| `") == 2 and table.count("| 2/2 (0) |") == 2
    assert "\nRuns (each run's config.json): 4 on a CPU with " in table  # its ISA, read back
    for arm in (BASE, STANDARD):
        run = out / "runs" / f"{arm}-seed1"
        assert json.loads((run / arm_runs.RESULT_FILE).read_text())["final_step"] == 6
        assert curves(run) == [[2, 4, 6], [3, 6]]
    # seeds are shared by the arms: the same seed gives the baseline the same weights and data
    digests = {
        json.loads((out / "runs" / f"{BASE}-seed{s}" / arm_runs.RESULT_FILE).read_text())[
            "weights_sha256"
        ]
        for s in (0, 1)
    }
    assert len(digests) == 2
    kept = {
        a: (out / "runs" / f"{a}-seed0" / arm_runs.RESULT_FILE).read_bytes()
        for a in (BASE, STANDARD)
    }
    plot = (out / claims.PLOT_FILE).read_bytes()

    again = run_claims(image_tree, out, "--label=tiny tree", "--seeds=1")
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert "study claims: 8 runs (8 arms x 1 seeds), 2 already finished" in again.stdout
    result = json.loads(again.stdout.strip().splitlines()[-1])
    assert list(result["arms"]) == list(claims.ARM_NAMES)
    for name, arm in result["arms"].items():
        assert arm["seeds"] == [0] and arm["diverged"] == 0, name
        assert 0 <= arm["mean"] <= 100 and arm["sd"] is None
    assert sorted(done_lines(again, 6)) == sorted(
        f"{arm.experiment}, seed 0" for arm in claims.ARMS[2:]
    )
    for arm, text in kept.items():
        assert (out / "runs" / f"{arm}-seed0" / arm_runs.RESULT_FILE).read_bytes() == text, arm
    table = (out / claims.TABLE_FILE).read_text()
    assert table.count("\n| `") == 8 and table.count("| 1/1 (0) |") == 8
    assert set(json.loads((out / claims.SUMMARY_FILE).read_text())["arms"]) == set(claims.ARM_NAMES)
    new_plot = (out / claims.PLOT_FILE).read_bytes()
    assert new_plot[:8] == b"\x89PNG\r\n\x1a\n" and new_plot != plot
    for arm in claims.ARMS:
        run = out / "runs" / f"{arm.experiment}-seed0"
        assert json.loads((run / arm_runs.RESULT_FILE).read_text())["final_step"] == 6
        assert curves(run) == [[2, 4, 6], [3, 6]]


def test_a_diverging_arm_is_a_result_and_a_folder_of_another_run_is_refused(tmp_path, image_tree):
    """A learning rate of 1e12 diverges: a result (chance error, 90%), not a failure. Its
    folder, with its result taken away (a run to resume), is then refused at the study's
    check, before anything is written: one line naming the run and the field, exit 2, the
    folder's files as they were."""
    out = tmp_path / "claims"
    budget = (*TINY[:-1], TINY[-1] + ",--learning_rate=1e12,--precision=mixed_bfloat16")
    proc = run_claims(image_tree, out, f"--arms={BASE}", "--seeds=1", budget=budget)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    run = out / "runs" / f"{BASE}-seed0"
    config = json.loads((run / "config.json").read_text())
    assert config["runtime"]["precision"] == "mixed_bfloat16"
    arm = json.loads(proc.stdout.strip().splitlines()[-1])["arms"]["hardt_ma"]
    assert arm["diverged"] == 1 and arm["mean"] == pytest.approx(90.0)
    assert f"{BASE}, seed 0: diverged after step" in proc.stdout
    assert "| 1/1 (1) |" in (out / claims.TABLE_FILE).read_text()
    assert json.loads((run / arm_runs.RESULT_FILE).read_text())["diverged"] is True

    (run / arm_runs.RESULT_FILE).unlink()
    before = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    other = run_claims(image_tree, out, f"--arms={BASE}", "--seeds=1")
    assert other.returncode == 2, other.stdout[-2000:] + other.stderr[-2000:]
    assert (
        other.stderr.strip()
        .splitlines()[-1]
        .startswith(
            f"error: {BASE}, seed 0: --model_dir {run} holds a run of another model "
            "(learning_rate=1000000000000.0 there, 0.05 now"
        )
    )
    after = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    assert after == before


@pytest.mark.parametrize(
    "args, message",
    [
        (
            [f"--arms={BASE},resnet"],
            "error: --arms: resnet is not an arm of claims; choose from claims_hardt_ma,",
        ),
        (["--seeds=0"], "error: --seeds must be positive, got 0"),
        (["--train_steps=0"], "error: --train_steps must be positive, got 0"),
        (["--model=huge"], "error: flag --model=huge: value should be one of"),
        (
            ["--data_path=/nonexistent"],
            f"error: {BASE}, seed 0: --data_path /nonexistent is not a folder",
        ),
        (
            ["--run_flags=--dataset=mnist"],
            f"error: {BASE}, seed 0: flag --dataset=mnist: value should be one of",
        ),
        (
            ["--run_flags=--learning_rate=0"],
            f"error: {BASE}, seed 0: --learning_rate must be positive, got 0.0",
        ),
    ],
)
def test_bad_flags_exit_2_with_one_line_and_write_nothing(tmp_path, image_tree, args, message):
    out = tmp_path / "claims"
    proc = run_claims(image_tree, out, "--seeds=1", *args, env=launchers.IMPORT_TIMES, budget=())
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert proc.stderr.strip().splitlines()[-1].startswith(message)
    assert not out.exists()
    assert not launchers.imported(proc) & launchers.BACKEND_MODULES  # its runs load theirs


def result(seed, error=None):
    return {"seed": seed, "diverged": error is None, "test_error": error}


def test_a_diverged_seed_counts_as_chance_and_verdicts_weigh_the_spread():
    summary = claims.arm_summary([result(0, 0.30), result(1, None)], num_classes=10)
    assert summary["test_errors"] == [30.0, 90.0] and summary["diverged"] == 1
    assert summary["mean"] == pytest.approx(60.0)
    assert summary["sd"] == pytest.approx(42.426406871)

    base = claims.arm_summary([result(s, e) for s, e in enumerate((0.30, 0.32, 0.31))], 10)
    arms = {arm.name: arm for arm in claims.ARMS}
    worse = claims.arm_summary([result(s, e) for s, e in enumerate((0.40, 0.41, 0.42))], 10)
    v = claims.verdict(arms["no_identity"], worse, base)
    assert v["gap"] == pytest.approx(10.0) and v["holds"] and v["exceeds_spread"]
    assert v["text"] == "paper's direction holds; gap > seed spread"
    close = claims.arm_summary([result(s, e) for s, e in enumerate((0.29, 0.31, 0.30))], 10)
    v = claims.verdict(arms["trainable_head"], close, base)
    assert v["holds"] is False and v["exceeds_spread"] is False
    assert v["text"] == "paper's direction does not hold; gap within seed spread"
    v = claims.verdict(arms["leaky_relu"], worse, base)
    assert v["holds"] is None and v["text"] == (
        "no claim: worse than the baseline; gap > seed spread"
    )
    one = claims.arm_summary([result(0, 0.5)], 10)
    assert one["sd"] is None
    assert claims.verdict(arms["he"], one, base)["text"].endswith("one seed: spread unknown")


def test_a_verdict_at_its_edges():
    """A gap of 0 is neither way (and no claim holds at 0), a gap of 0.5 already one way, a gap
    equal to the spread is within it, and one seed on either side leaves the spread unknown."""
    arms = {arm.name: arm for arm in claims.ARMS}
    base = claims.arm_summary([result(0, 0.30), result(1, 0.30)], 10)  # sd 0
    same = claims.verdict(arms["leaky_relu"], base, base)
    assert same["text"] == "no claim: the same as the baseline; gap within seed spread"
    same = claims.verdict(arms["he"], base, base)
    assert same["holds"] is False and same["exceeds_spread"] is False
    assert same["text"] == "paper's direction does not hold; gap within seed spread"
    half = claims.arm_summary([result(0, 0.305), result(1, 0.305)], 10)
    assert claims.verdict(arms["leaky_relu"], half, base)["text"].startswith("no claim: worse")
    v = claims.verdict(arms["he"], half, base)
    assert v["gap"] == pytest.approx(0.5) and v["holds"] is True
    assert v["text"] == "paper's direction holds; gap > seed spread"
    one = claims.arm_summary([result(0, 0.30)], 10)
    v = claims.verdict(arms["he"], half, one)
    assert v["exceeds_spread"] is None and v["text"].endswith("; one seed: spread unknown")


def test_the_report_reads_each_arms_ended_seeds_and_writes_a_row_each(tmp_path):
    """summarize and markdown_table on run folders written here, 3 seeds: the baseline's seeds
    0 and 1 ended (seed 2 still running, its config.json naming CIFAR-100, so a diverged seed
    counts as 99%); no_identity's two, one diverged; conv_bias's one; standard's none (no row);
    he not in the study. Rows in the table's order, not the order asked in."""
    out = str(tmp_path)

    def write(arm, seed, name, record):
        folder = arm_runs.run_dir(out, f"claims_{arm}", seed)
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, name), "w") as f:
            json.dump(record, f)

    def ended(arm, seed, error=None):
        write(arm, seed, arm_runs.RESULT_FILE, {"test_error": error, "diverged": error is None})

    ended("hardt_ma", 0, 0.60)
    ended("hardt_ma", 1, 0.62)
    write("hardt_ma", 2, "config.json", {"data": {"dataset": "cifar100"}})
    ended("no_identity", 0, 0.70)
    ended("no_identity", 1)
    ended("conv_bias", 0, 0.5555)
    asked = ("claims_conv_bias", "claims_no_identity", "claims_standard", "claims_hardt_ma")
    budget = study.Budget(seeds=3)
    summary = claims.summarize(out, asked, budget)
    assert list(summary) == ["hardt_ma", "no_identity", "conv_bias"]
    assert summary["hardt_ma"]["seeds"] == [0, 1] and summary["hardt_ma"]["diverged"] == 0
    assert summary["no_identity"]["test_errors"] == [70.0, 99.0]
    assert summary["no_identity"]["sd"] == pytest.approx(20.5060966)
    assert summary["no_identity"]["verdict"]["gap"] == pytest.approx(23.5)
    assert summary["conv_bias"]["sd"] is None
    assert claims.markdown_table(summary, asked, budget).splitlines() == [
        "| arm | change from the paper's network | the paper | test error % (mean ± sd) "
        "| seeds (diverged) | gap to baseline (pp) | verdict |",
        "| --- | --- | --- | --- | --- | --- | --- |",
        "| `hardt_ma` | the paper's network | baseline: sigma = 1/(k^2 c), fixed random "
        "projection, identity shortcuts | 61.00 ± 1.41 | 2/3 (0) | - | baseline |",
        "| `no_identity` | no identity shortcuts (a plain chain) | identity matters: the title "
        "claim (Sec. 1-2) | 84.50 ± 20.51 | 2/3 (1) | +23.50 | paper's direction holds; "
        "gap > seed spread |",
        "| `conv_bias` | a bias on every convolution | no claim: Table 1 counts kernels only "
        "| 55.55 ± - | 1/3 (0) | -5.45 | no claim: better than the baseline; one seed: "
        "spread unknown |",
    ]
    assert claims.summarize(out, ("claims_standard",), budget) == {}
    write("he", 0, "config.json", {"data": {}})  # a record without its data set: CIFAR-10
    assert claims.classes(out, ("claims_he",), 1) == 10
    alone = claims.summarize(out, ("claims_no_identity",), budget)["no_identity"]
    assert alone["test_errors"] == [70.0, 90.0]  # no config.json read: CIFAR-10's chance
    assert alone["verdict"] == {"gap": None, "text": "no baseline yet"}


def test_the_studys_budget_keeps_the_papers_proportions():
    """The claims study's arms are its experiments, in the table's order; the run the study
    starts for an arm (its command, printed as config by launch/cifar.py) is the paper's recipe
    at 300 steps (drops at 150 and 250: its 30k and 50k of 60k) on the quarter network, logged
    every 10 steps."""
    assert experiments.STUDIES["claims"] == tuple(arm.experiment for arm in claims.ARMS)
    budget = study.BUDGETS["claims"]
    command = study.command("/tmp/nowhere", "claims_batch_norm", 0, budget, None)
    assert command[0] == sys.executable
    proc = launchers.run(command[1].split("/../../")[1], *command[2:], "--print_config")
    assert proc.returncode == 0, proc.stderr[-2000:]
    config = json.loads(proc.stdout)
    recipe, network = config["recipe"], config["network"]
    assert (recipe["train_steps"], recipe["eval_every"], recipe["log_every"]) == (300, 75, 10)
    assert recipe["lr_boundaries"] == [150, 250] and recipe["max_checkpoints"] == 1
    assert (recipe["batch_size"], recipe["learning_rate"], recipe["momentum"]) == (128, 0.05, 0.9)
    assert recipe["weight_decay"] == 1e-4
    assert (network["num_residual_units"], network["stage_widths"]) == (9, [16, 32, 64])
    assert (network["block"], network["norm"], network["init"]) == ("preactivation", "batch", "he")
