"""launch/claims.py: every arm runs, the table and plots, resume, divergence, bad flags."""

import json

import launchers
import pytest

from resnet_noBN.datasets.data_config import DataConfig
from resnet_noBN.runs import arm_runs, claims


def run_claims(*args, env=None):
    return launchers.run("launch/claims.py", *args, timeout=600, env=env)


@pytest.fixture(scope="module")
def image_tree(tmp_path_factory, write_image_tree):
    root = tmp_path_factory.mktemp("data") / "cifar-10-jpeg"
    write_image_tree(root, "cifar10", 3, fmt="jpg")
    return root


def run_lines(proc, total):
    """The '[i/total] arm, seed s' of each run's done line, after checking each says how many
    runs are done and (but the last) what is left and when the sweep will finish."""
    done = [line for line in proc.stdout.splitlines() if " runs done, elapsed " in line]
    assert all(f"; {i} of {total} runs done, elapsed " in line for i, line in enumerate(done, 1))
    assert all(" left " in line and " finish " in line for line in done[:-1])
    return [line.split(": ")[0] for line in done]


def curves(run):
    """The steps of a run's training log and of its evaluations."""
    return [
        [json.loads(line)["step"] for line in (run / name).read_text().splitlines()]
        for name in ("train.jsonl", "metrics.jsonl")
    ]


def test_quick_sweep_runs_every_arm_writes_table_and_plot_and_resumes(tmp_path, image_tree):
    """Two arms (the baseline and `standard`) from two seeds, every arm's seed 0 first: the
    progress lines, the JSON line, the table (2/2 seeds each), the JSON summary, the PNG plot,
    each run's curves (6 steps, logged every 2, evaluated every 3), and two seeds giving the
    baseline different weights. Then every arm from one seed into the same folder: the two
    seed-0 runs already finished are kept as they are and only the six missing ones run; the
    table, summary and plot then hold every arm, each run with its curves."""
    out = tmp_path / "claims"
    two = claims.ARM_NAMES[:2]
    assert two == ("hardt_ma", "standard")
    proc = run_claims(
        "--quick",
        f"--data_path={image_tree}",
        f"--output_dir={out}",
        "--label=tiny tree",
        f"--arms={','.join(two)}",
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["runs"] == result["ran"] == 4
    assert list(result["arms"]) == list(two)
    for name, arm in result["arms"].items():
        assert arm["seeds"] == [0, 1] and arm["diverged"] == 0, name
        assert 0 <= arm["mean"] <= 100 and arm["sd"] >= 0
    assert result["arms"]["hardt_ma"]["verdict"] == "baseline"
    assert "[1/4] hardt_ma, seed 0" in proc.stdout and "[2/4] standard, seed 0" in proc.stdout
    assert "images/s" in proc.stdout  # progress of each run
    assert run_lines(proc, 4) == [
        f"[{i}/4] {arm}, seed {seed}"
        for i, (seed, arm) in enumerate(((s, a) for s in (0, 1) for a in two), 1)
    ]
    for name in (claims.TABLE_FILE, claims.SUMMARY_FILE, claims.PLOT_FILE):
        assert (out / name).stat().st_size > 0, name
    assert (out / claims.PLOT_FILE).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    table = (out / claims.TABLE_FILE).read_text()
    assert table.startswith("# The paper's claims, measured: tiny tree")
    assert table.count("\n| `") == 2 and table.count("| 2/2 (0) |") == 2
    assert "\nRuns (each run's config.json): 4 on a CPU with " in table  # its ISA, read back
    for arm in two:
        run = out / "runs" / f"{arm}-seed1"
        assert json.loads((run / arm_runs.RESULT_FILE).read_text())["final_step"] == 6
        assert curves(run) == [[2, 4, 6], [3, 6]]
    # seeds are shared by the arms: the same seed gives the baseline the same weights and data
    digests = {
        json.loads((out / "runs" / f"hardt_ma-seed{s}" / arm_runs.RESULT_FILE).read_text())[
            "weights_sha256"
        ]
        for s in (0, 1)
    }
    assert len(digests) == 2
    kept = {arm: (out / "runs" / f"{arm}-seed0" / arm_runs.RESULT_FILE).read_bytes() for arm in two}
    plot = (out / claims.PLOT_FILE).read_bytes()

    again = run_claims(
        "--quick",
        f"--data_path={image_tree}",
        f"--output_dir={out}",
        "--label=tiny tree",
        "--seeds=1",
    )
    assert again.returncode == 0, again.stderr[-3000:]
    assert "claims: 8 runs (8 arms x 1 seeds), 2 already finished" in again.stdout
    result = json.loads(again.stdout.strip().splitlines()[-1])
    assert (result["runs"], result["ran"]) == (8, 6)
    assert list(result["arms"]) == list(claims.ARM_NAMES)
    for name, arm in result["arms"].items():
        assert arm["seeds"] == [0] and arm["diverged"] == 0, name
        assert 0 <= arm["mean"] <= 100 and arm["sd"] is None
    assert run_lines(again, 6) == [
        f"[{i}/6] {arm}, seed 0" for i, arm in enumerate(claims.ARM_NAMES[2:], 1)
    ]
    for arm, text in kept.items():
        assert (out / "runs" / f"{arm}-seed0" / arm_runs.RESULT_FILE).read_bytes() == text, arm
    table = (out / claims.TABLE_FILE).read_text()
    assert table.startswith("# The paper's claims, measured: tiny tree")
    assert table.count("\n| `") == 8 and table.count("| 1/1 (0) |") == 8
    assert set(json.loads((out / claims.SUMMARY_FILE).read_text())["arms"]) == set(claims.ARM_NAMES)
    new_plot = (out / claims.PLOT_FILE).read_bytes()
    assert new_plot[:8] == b"\x89PNG\r\n\x1a\n" and new_plot != plot
    for arm in claims.ARM_NAMES:
        run = out / "runs" / f"{arm}-seed0"
        assert json.loads((run / arm_runs.RESULT_FILE).read_text())["final_step"] == 6
        assert curves(run) == [[2, 4, 6], [3, 6]]


def test_a_diverging_arm_is_a_result_and_other_settings_are_refused(tmp_path, image_tree):
    out = tmp_path / "claims"
    proc = run_claims(
        "--quick",
        f"--data_path={image_tree}",
        f"--output_dir={out}",
        "--arms=hardt_ma",
        "--seeds=1",
        "--learning_rate=1e12",
        "--precision=mixed_bfloat16",
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    config = json.loads((out / "runs/hardt_ma-seed0/config.json").read_text())
    assert config["runtime"]["precision"] == "mixed_bfloat16"
    assert ", 1 seeds per arm, mixed_bfloat16; " in (out / claims.TABLE_FILE).read_text()
    arm = json.loads(proc.stdout.strip().splitlines()[-1])["arms"]["hardt_ma"]
    assert arm["diverged"] == 1 and arm["mean"] == pytest.approx(90.0)
    assert "hardt_ma, seed 0: diverged at step" in proc.stdout
    assert "| 1/1 (1) |" in (out / claims.TABLE_FILE).read_text()
    result = json.loads((out / "runs/hardt_ma-seed0" / arm_runs.RESULT_FILE).read_text())
    assert result["diverged"] and "training diverged" in result["why"]

    other = run_claims(
        "--quick",
        f"--data_path={image_tree}",
        f"--output_dir={out}",
        "--arms=hardt_ma",
        "--seeds=1",
        "--precision=mixed_bfloat16",
    )
    assert other.returncode == 2
    assert (
        other.stderr.strip()
        .splitlines()[-1]
        .startswith(
            f"error: --model_dir {out}/runs/hardt_ma-seed0 holds a run of another model "
            "(learning_rate=1000000000000.0 there, 0.05 now)"
        )
    )


@pytest.mark.parametrize(
    "args, message",
    [
        (["--arms=hardt_ma,resnet"], "error: --arms: unknown arm(s) resnet; choose from hardt_ma,"),
        (["--seeds=0"], "error: --seeds must be >= 1, got 0"),
        (["--train_steps=1"], "error: --train_steps must be >= 2, got 1"),
        (["--eval_every=0"], "error: --eval_every must be >= 1, got 0"),
        (["--learning_rate=0"], "error: --learning_rate must be positive, got 0.0"),
        (["--data_path=/nonexistent"], "error: --data_path /nonexistent is not a folder"),
        (["--dataset=mnist"], "error: flag --dataset=mnist: value should be one of"),
        (["--model=huge"], "error: flag --model=huge: value should be one of"),
    ],
)
def test_bad_flags_exit_2_with_one_line_and_write_nothing(tmp_path, image_tree, args, message):
    out = tmp_path / "claims"
    flags = ("--quick", f"--data_path={image_tree}", f"--output_dir={out}", *args)
    proc = run_claims(*flags, env=launchers.IMPORT_TIMES)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1].startswith(message)
    assert not out.exists()
    if "--data_path" not in message:  # the data is checked by the backend, as it reads it
        assert not launchers.imported(proc) & launchers.BACKEND_MODULES


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


def test_the_budgeted_recipe_keeps_the_papers_proportions():
    cfg = claims.Sweep().recipe
    assert cfg.train_steps == 300 and cfg.boundary_steps() == (150, 250)  # 30k, 50k of 60k
    assert (cfg.batch_size, cfg.learning_rate, cfg.momentum, cfg.weight_decay) == (
        128,
        0.05,
        0.9,
        1e-4,
    )
    data = DataConfig()
    model = claims.arm_config(claims.ARMS[-1], claims.Sweep(), data).network
    assert (model.num_residual_units, model.stage_widths, model.block, model.norm, model.init) == (
        9,
        (16, 32, 64),
        "preactivation",
        "batch",
        "he",
    )
    # each arm is its named experiment at the sweep's budget
    for arm in claims.ARMS:
        assert claims.arm_config(arm, claims.Sweep(), data).experiment == f"claims_{arm.name}"
    assert claims.QUICK.recipe.boundary_steps() == (3, 5)
    assert claims.arm_config(claims.ARMS[0], claims.QUICK, data).network.num_residual_units == 1
    assert claims.scaled_recipe(cfg, 60_000).boundary_steps() == (30_000, 50_000)
    assert (
        claims.scaled_recipe(cfg, 40).eval_every
        == claims.scaled_recipe(cfg, 40).checkpoint_every
        == 40
    )
    gpu = claims.scaled_recipe(cfg, 20_000, eval_every=2_000)
    assert (gpu.boundary_steps(), gpu.eval_every, gpu.checkpoint_every) == (
        (10_000, 16_666),
        2_000,
        2_000,
    )
