"""launch/study.py and studies.study: a baseline and its one-change arms, each from its seeds, run
side by side as launch/cifar.py runs, resumed where they stopped, summed up in a table of the
final, best and original-2016 figures with the seed spread."""

import json
import shutil
import statistics
from pathlib import Path

import launchers
import numpy as np
import pytest

from resnet_noBN.configs import experiments
from resnet_noBN.studies import arm_runs, study
from resnet_noBN.study_plots import arm_errors
from resnet_noBN.trainers.answers import read_answers

CIFAR_RECORDS = 8  # a file, in the cifar_bin fixture (conftest.py)


def run_study(cifar_bin, output_dir, *more, env=None):
    return launchers.run(
        "launch/study.py",
        "--study=table2",
        "--arms=cifar10_leaky",
        "--model=small",
        "--train_steps=4",
        "--eval_every=2",
        "--seeds=1",
        "--parallel=2",
        f"--data_path={cifar_bin}",
        "--run_flags=--batch_size=8,--eval_batch_size=16",
        f"--output_dir={output_dir}",
        *more,
        timeout=600,
        env=env,
    )


@pytest.mark.parametrize(
    "flag, message",
    [
        (
            "--study=nope",
            "error: flag --study=nope: value should be one of "
            "<table2|cifar100_held|identity|identity_cifar100_held|near_identity|claims>",
        ),
        ("--seeds=0", "error: --seeds must be positive, got 0"),
        ("--eval_every=0", "error: --eval_every must be positive, got 0"),
        ("--parallel=0", "error: --parallel must be positive, got 0"),
    ],
)
def test_a_bad_flag_is_one_line_exit_2_and_nothing_written(cifar_bin, tmp_path, flag, message):
    proc = run_study(cifar_bin, tmp_path / "study", flag, env=launchers.IMPORT_TIMES)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert proc.stderr.strip().splitlines()[-1].startswith(message)
    assert not (tmp_path / "study").exists()
    assert not launchers.imported(proc) & launchers.BACKEND_MODULES  # the runs load theirs


def test_a_study_runs_its_arms_side_by_side_and_resumes_without_rerunning(cifar_bin, tmp_path):
    out = tmp_path / "study"
    proc = run_study(cifar_bin, out)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "2 runs (2 arms x 1 seeds), 0 already finished; 2 side by side" in proc.stdout
    for arm in ("cifar10_paper", "cifar10_leaky"):
        folder = out / "runs" / f"{arm}-seed0"
        config = json.loads((folder / "config.json").read_text())
        assert config["experiment"] == arm and config["seed"] == 0
        assert config["recipe"]["lr_boundaries"] == [2, 3]  # 1/2 and 5/6 of 4 steps
        assert config["network"]["relu_leakiness"] == (0.1 if arm == "cifar10_leaky" else 0.0)
        result = json.loads((folder / "result.json").read_text())
        answers = read_answers(folder / "answers.jsonl")
        assert [a.step for a in answers] == [2, 4] and len(answers[-1].correct) == 8
        assert result["test_error"] == pytest.approx(1 - np.mean(answers[-1].correct))
    summary = json.loads((out / study.SUMMARY_FILE).read_text())
    assert list(summary["arms"]) == ["cifar10_paper", "cifar10_leaky"]
    leaky = summary["arms"]["cifar10_leaky"]
    base = summary["arms"]["cifar10_paper"]
    assert leaky["final_error"]["gap"] == pytest.approx(
        leaky["final_error"]["mean"] - base["final_error"]["mean"]
    )
    assert leaky["final_error"]["exceeds_spread"] is None  # one seed: no spread
    table = (out / study.TABLE_FILE).read_text().splitlines()
    assert sum(line.startswith("Runs (each run's config.json): 2 on a CPU") for line in table) == 1
    # a row an arm in the table, then a row a run in the health's
    health = table.index("## Health, run by run (train.jsonl)")
    rows = [i for i, line in enumerate(table) if line.startswith("| `cifar10_")]
    assert len([i for i in rows if i < health]) == 2 and len([i for i in rows if i > health]) == 2
    assert [h["largest_grad_norm"][1] for h in base["health"]] in ([2], [4])
    assert (out / study.PLOT_FILE).stat().st_size > 0
    assert (out / study.ERRORS_FILE).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (out / study.HEALTH_FILE).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    again = run_study(cifar_bin, out)
    assert again.returncode == 0, again.stderr[-2000:]
    assert "2 runs (2 arms x 1 seeds), 2 already finished" in again.stdout
    assert "started" not in again.stdout
    # the one run left to do gets every core: --parallel shares them among the runs to do
    leaky = out / "runs" / "cifar10_leaky-seed0"
    threads = json.loads((leaky / "config.json").read_text())["runtime"]["intra_op_threads"]
    assert threads == study.threads_each(2)
    shutil.rmtree(leaky)
    alone = run_study(cifar_bin, out)
    assert alone.returncode == 0, alone.stderr[-2000:]
    assert "2 runs (2 arms x 1 seeds), 1 already finished" in alone.stdout
    config = json.loads((leaky / "config.json").read_text())
    assert config["runtime"]["intra_op_threads"] == study.threads_each(1)


def test_report_only_writes_the_report_of_the_runs_that_ended_and_starts_none(tmp_path):
    """Three of the committed quarter runs copied (the baseline's two seeds, one of an arm's):
    --report_only writes the table of those three, the arm at 1/2 seeds, and starts nothing;
    over a folder with no ended run it is one line, exit 2, nothing written."""
    committed = Path(__file__).parents[1] / "results" / "table2_quarter"
    out = tmp_path / "quarter"
    ended = [("cifar10_paper", 0), ("cifar10_paper", 1), ("cifar10_original_2016", 0)]
    for arm, seed in ended:
        name = f"runs/{arm}-seed{seed}"
        shutil.copytree(committed / name, out / name)
    flags = ("--study=table2", "--arms=cifar10_original_2016", "--model=quarter", "--seeds=2")
    proc = launchers.run("launch/study.py", *flags, "--report_only", f"--output_dir={out}")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "report of 3 of 4 runs; not ended: cifar10_original_2016 seed 1" in proc.stdout
    assert "started" not in proc.stdout
    assert sorted(p.name for p in (out / "runs").iterdir()) == sorted(
        f"{arm}-seed{seed}" for arm, seed in ended
    )
    arms = json.loads((out / study.SUMMARY_FILE).read_text())["arms"]
    before = json.loads((committed / study.SUMMARY_FILE).read_text())["arms"]
    assert arms["cifar10_paper"]["final_error"] == before["cifar10_paper"]["final_error"]
    seed0 = before["cifar10_original_2016"]["final_error"]["values"][0]
    assert arms["cifar10_original_2016"]["final_error"]["values"] == [seed0]
    table = (out / study.TABLE_FILE).read_text()
    assert "| `cifar10_original_2016` |" in table and " | 1/2 | " in table
    assert "This invocation: the report only, nothing trained, " in table
    budget = study.Budget(model="quarter", seeds=2)
    arm_pair = ("cifar10_paper", "cifar10_original_2016")
    assert study.title(budget, str(out), arm_pair) == (
        "quarter network, 8000 steps, 2 seeds, 3 of 4 runs ended"  # the plots' title
    )
    assert study.title(budget, str(committed), arm_pair) == "quarter network, 8000 steps, 2 seeds"
    empty = launchers.run(
        "launch/study.py", *flags, "--report_only", f"--output_dir={tmp_path / 'none'}"
    )
    assert empty.returncode == 2
    assert empty.stderr.strip().splitlines()[-1] == (
        f"error: --report_only: no run of table2 has ended in {tmp_path / 'none'}; "
        "check --output_dir, --arms and --seeds"
    )
    assert not (tmp_path / "none").exists()


def test_an_unknown_arm_is_one_line(cifar_bin, tmp_path):
    proc = run_study(cifar_bin, tmp_path / "study", "--arms=cifar10_nope")
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1] == (
        "error: --arms: cifar10_nope is not an arm of table2; choose from "
        "cifar10_paper,cifar10_jpeg_q75,cifar10_leaky,cifar10_wd_2016,cifar10_momentum_keras,"
        "cifar10_original_2016,cifar10_original_2016_wd,cifar10_preactivation,cifar10_trained_head_2016,"
        "cifar10_preactivation_trained_head,cifar10_13_59m"
    )
    assert not (tmp_path / "study").exists()


def test_the_final_errors_picture_names_each_arm_in_the_tables_words(tmp_path):
    def figure(values, gap=None, exceeds=None):
        entry = {"values": values, "mean": float(np.mean(values)), "sd": float(np.std(values))}
        return entry if gap is None else {**entry, "gap": gap, "exceeds_spread": exceeds}

    summary = {
        "cifar10_paper": {"seeds": 2, "diverged": [], "final_error": figure([12.76, 12.80])},
        "cifar10_leaky": {
            "seeds": 2,
            "diverged": [],
            "final_error": figure([12.70, 12.9], 0.02, False),
            "original_2016_error": figure([12.5, 12.7], -0.1, False),
        },
        "cifar10_original_2016": {
            "seeds": 2,
            "diverged": [],
            "final_error": figure([11.0, 11.2], -1.68, True),
        },
        "cifar10_wd_2016": {"seeds": 2, "diverged": [7500], "final_error": figure([13.0], 0.22)},
        "cifar10_jpeg_q75": {"seeds": 2, "diverged": [500, 1250]},  # each diverged: no point
    }
    arms = ("cifar10_paper", "cifar10_jpeg_q75", "cifar10_leaky", "cifar10_wd_2016")
    arms += ("cifar10_original_2016", "cifar10_preactivation")  # the last one not run yet
    labels = study.row_labels(summary, arms)
    assert labels == [
        "cifar10_paper: baseline",
        "cifar10_jpeg_q75: - (2 diverged at steps 500, 1,250)",
        "cifar10_leaky: +0.02 (within spread)",
        "cifar10_wd_2016: +0.22 (1 diverged at step 7,500)",
        "cifar10_original_2016: -1.68 (> spread)",
    ]
    path = tmp_path / "errors.png"
    arm_errors.plot(summary, arms, labels, str(path), "small network")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_report_counts_where_its_runs_computed_from_their_own_configs(tmp_path):
    """A study resumed over days mixes machines: study.md says how many runs computed where,
    read from each run's config.json (the committed small table: seeds 0 and 1 on an AVX2 EPYC,
    the later runs on an AVX-512 Xeon), not only the machine of the invocation that wrote it."""
    arms = tuple(experiments.STUDIES["table2"])
    small = study.Budget(model="small", seeds=3)
    committed = str(Path(__file__).parents[1] / "results" / "table2_small")
    assert arm_runs.machines(committed, study.runs(arms, small)) == (
        "22 on a CPU with AVX2, 8 on a CPU with AVX-512 and AMX"
    )
    # every one in Keras' form of momentum, the default before 2026-11-28
    assert arm_runs.optimizers(committed, study.runs(arms, small)) == "momentum in 30"
    folder = tmp_path / "runs" / "cifar10_paper-seed0"
    folder.mkdir(parents=True)
    runtime = {"devices": ["NVIDIA H100 80GB HBM3"], "cpu_isa": ["avx2", "avx512f"]}
    (folder / "config.json").write_text(json.dumps({"runtime": runtime}))
    assert arm_runs.machines(str(tmp_path), study.runs(arms, small)) == ""  # not ended
    (folder / "result.json").write_text("{}")
    assert arm_runs.machines(str(tmp_path), study.runs(arms, small)) == "1 on NVIDIA H100 80GB HBM3"
    assert arm_runs.optimizers(str(tmp_path), study.runs(arms, small)) == "momentum in 1"  # old
    (folder / "config.json").write_text(json.dumps({"recipe": {"optimizer": "momentum_2016"}}))
    assert arm_runs.optimizers(str(tmp_path), study.runs(arms, small)) == "momentum_2016 in 1"


def test_the_health_panels_draw_each_arms_mean_over_its_seeds(tmp_path, monkeypatch):
    """arm_health.plot: a panel per health figure, a line per arm at the mean of its seeds
    that reached each step (a run still going counts as far as it got), on a log scale for the
    norms, the decay term and the logit."""
    from resnet_noBN import plotting
    from resnet_noBN.study_plots import arm_health

    def write(folder, rows):
        folder.mkdir(parents=True)
        lines = [
            json.dumps({"step": step, **dict.fromkeys(arm_health.PANELS, v)}) for step, v in rows
        ]
        (folder / "train.jsonl").write_text("\n".join(lines) + "\n")

    write(tmp_path / "a0", [(100, 1.0), (200, 3.0)])
    write(tmp_path / "a1", [(100, 2.0)])  # still going: one record so far
    write(tmp_path / "b0", [(100, 5.0), (200, 6.0)])
    drawn = {}
    monkeypatch.setattr(plotting, "save", lambda fig, path: drawn.update(fig=fig, path=path))
    arms = {"a": [str(tmp_path / "a0"), str(tmp_path / "a1")], "b": [str(tmp_path / "b0")]}
    arm_health.plot(arms, str(tmp_path / "health.png"), "t", batch_size=128)
    axes = drawn["fig"].axes
    assert [ax.get_title() for ax in axes] == list(arm_health.PANELS.values())
    for ax in axes:
        (a, b) = ax.get_lines()
        assert (a.get_label(), list(a.get_xdata()), list(a.get_ydata())) == (
            "a",
            [100, 200],
            [1.5, 3.0],
        )
        assert (b.get_label(), list(b.get_ydata())) == ("b", [5.0, 6.0])
    assert [ax.get_yscale() for ax in axes] == ["linear", "log", "log", "log", "log"]


def test_a_retired_arm_is_reported_from_its_committed_runs_and_never_trained(tmp_path):
    """The small table's cifar10_momentum_2016 (an arm until the 2016 form of momentum became
    the default): --report_only gives back its committed figures and gap from its runs; a study
    that would train it is one line, exit 2, nothing written."""
    committed = Path(__file__).parents[1] / "results" / "table2_small"
    out = tmp_path / "small"
    for arm in ("cifar10_paper", "cifar10_momentum_2016"):
        shutil.copytree(committed / f"runs/{arm}-seed0", out / f"runs/{arm}-seed0")
    flags = ("--study=table2", "--arms=cifar10_momentum_2016", "--model=small", "--seeds=1")
    proc = launchers.run("launch/study.py", *flags, "--report_only", f"--output_dir={out}")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "report of 2 of 2 runs; not ended: none" in proc.stdout
    arms = json.loads((out / study.SUMMARY_FILE).read_text())["arms"]
    before = json.loads((committed / study.SUMMARY_FILE).read_text())["arms"]
    assert list(arms) == ["cifar10_paper", "cifar10_momentum_2016"]
    values = {arm: before[arm]["final_error"]["values"][0] for arm in arms}
    assert {arm: arms[arm]["final_error"]["values"] for arm in arms} == {
        arm: [value] for arm, value in values.items()
    }
    gap = arms["cifar10_momentum_2016"]["final_error"]["gap"]
    assert gap == pytest.approx(values["cifar10_momentum_2016"] - values["cifar10_paper"])
    assert arms["cifar10_momentum_2016"]["about"].endswith("today's cifar10_paper")
    trained = launchers.run("launch/study.py", *flags, f"--output_dir={tmp_path / 'new'}")
    assert trained.returncode == 2
    assert trained.stderr.strip().splitlines()[-1] == (
        "error: --arms: cifar10_momentum_2016 is an arm table2 no longer runs; only "
        "--report_only writes the report of its runs"
    )
    assert not (tmp_path / "new").exists()


def health_of(folder, rows: list[dict]) -> dict | None:
    """arm_health.figures of a run folder whose train.jsonl holds ``rows``."""
    from resnet_noBN.study_plots import arm_health

    folder.mkdir()
    (folder / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return arm_health.figures(str(folder))


def test_a_runs_health_in_numbers_its_spike_and_its_row(tmp_path):
    """arm_health.figures: the last weight norm, the largest gradient norm, |logit| and spike
    (a record's gradient norm over the median of the 10 before it), each with its step, a
    diverged run's non-finite records left out; one row a run in the table, none without
    records."""
    from resnet_noBN.study_plots import arm_health

    norms = [1.0] * 10 + [1.5, 4.0, 2.0, float("nan")]
    rows = [
        {"step": 100 * (i + 1), "grad_norm": g, "max_abs_logit": 3.0 + i, "weight_norm": 10.0 + i}
        for i, g in enumerate(norms)
    ]
    rows[-1].update(max_abs_logit=float("nan"), weight_norm=float("inf"))
    health = health_of(tmp_path / "a0", rows)
    # the spike at step 1,200: 4.0 over the median of 1.0 x 9 and 1.5
    assert health == {
        "final_weight_norm": 22.0,
        "largest_grad_norm": [4.0, 1200],
        "largest_logit": [15.0, 1300],
        "largest_spike": [4.0, 1200],
    }
    assert arm_health.figures(str(tmp_path / "none")) is None
    table = arm_health.markdown_table({"a": [str(tmp_path / "a0"), str(tmp_path / "a1")]})
    assert table.splitlines()[2:] == [
        "| `a` | 0 | 22.00 | 4.00 (step 1,200) | 4.0 (step 1,200) | 15.0 (step 1,300) |"
    ]


def test_health_figures_tell_the_window_and_the_last_record_apart(tmp_path):
    """Series that do not rise: the weight norm climbs then falls (its last record is not its
    largest), the gradient norm steps down before a jump, and the jump's spike is 2.0 against
    the median of the 10 records before it but 4.0 against the 5 before it, so a wrong window
    or a "final" that is the largest fails here; the table's header states the window. A run
    without some figures shows a dash for each, and a seed whose folder is missing no row."""
    from resnet_noBN.study_plots import arm_health

    norms = [3.0] * 6 + [1.0] * 5 + [4.0, 1.0, 1.0]
    weights = [10.0, 14.0, 18.0, 21.0, 19.0, 16.0, 15.0, 17.0, 13.0, 12.0, 11.0, 10.5, 10.2, 9.9]
    logits = [5.0, 9.0, 30.0, 8.0, 7.0, 6.0, 6.5, 6.0, 6.0, 6.0, 6.0, 25.0, 6.0, 6.0]
    rows = [
        {"step": 50 * (i + 1), "grad_norm": g, "weight_norm": w, "max_abs_logit": m}
        for i, (g, w, m) in enumerate(zip(norms, weights, logits))
    ]
    health = health_of(tmp_path / "run", rows)
    # step 600: 4.0 over the median of 3.0 x 5 and 1.0 x 5 (2.0); over the last 5 alone: 4.0
    assert health == {
        "final_weight_norm": 9.9,
        "largest_grad_norm": [4.0, 600],
        "largest_logit": [30.0, 150],
        "largest_spike": [2.0, 600],
    }
    assert arm_health.SPIKE_WINDOW == 10
    # a run without weight norms or logits, its gradient norm 0 over the window (no ratio to
    # a median of 0), and a seed's folder missing before one that is there
    bare = [{"step": 10 * (i + 1), "grad_norm": 0.0 if i < 11 else 2.0} for i in range(12)]
    assert health_of(tmp_path / "bare", bare) == {
        "final_weight_norm": None,
        "largest_grad_norm": [2.0, 120],
        "largest_logit": None,
        "largest_spike": None,
    }
    table = arm_health.markdown_table(
        {"a": [str(tmp_path / "run")], "b": [str(tmp_path / "gone"), str(tmp_path / "bare")]}
    )
    assert table.splitlines() == [
        "| experiment | seed | weight norm, last record | largest gradient norm | largest "
        "spike (× the median of the 10 records before) | largest \\|logit\\| |",
        "| --- | --- | --- | --- | --- | --- |",
        "| `a` | 0 | 9.90 | 4.00 (step 600) | 2.0 (step 600) | 30.0 (step 150) |",
        "| `b` | 1 | - | 2.00 (step 120) | - | - |",
    ]


def halves_right(first: int, second: int) -> np.ndarray:
    """10,000 answers: ``first`` of images 0..4,999 right, ``second`` of the rest."""
    bits = np.zeros(10_000, bool)
    bits[:first] = True
    bits[5_000 : 5_000 + second] = True
    return bits


def test_a_studys_summary_of_runs_whose_figures_are_known(tmp_path):
    """Two seeds an arm, each run two evaluations: the baseline's final errors 20 and 22; the
    leaky arm's 25 and 27 (+5.00, over the two sd's 2.83: beyond the spread); Keras' momentum
    21 and 23 (+1.00, within); the JPEG arm one seed ended (21.5) and one diverged after step
    300, its loss non-finite at step 342 (no sd: no verdict); the 2016 decay's one seed diverged
    after step 50 (its result does not say where its loss turned), the other not ended (no
    figure); the original network none (not in the summary). Every figure's mean, sd, values
    and gap, and each as a table's cell. A gap equal to the two sd's summed is within them."""
    from resnet_noBN.studies.original_eval import figures
    from resnet_noBN.trainers.answers import ANSWERS_FILE, Answers, Evaluation

    def ended(arm, seed, *halves, root=tmp_path):
        folder = root / "runs" / f"{arm}-seed{seed}"
        folder.mkdir(parents=True)
        evaluations = [
            Evaluation(100 * (i + 1), halves_right(*h), None) for i, h in enumerate(halves)
        ]
        (folder / ANSWERS_FILE).write_text(
            "".join(
                Answers(e.correct, np.zeros(10_000, int)).line(e.step, False) + "\n"
                for e in evaluations
            )
        )
        (folder / arm_runs.RESULT_FILE).write_text('{"final_step": 200}')
        return figures(evaluations)

    def diverged(arm, seed, step, at=None):  # at: the step its loss turned non-finite
        folder = tmp_path / "runs" / f"{arm}-seed{seed}"
        folder.mkdir(parents=True)
        said = {"diverged_at": at} if at else {}  # an older result does not say
        (folder / arm_runs.RESULT_FILE).write_text(
            json.dumps({"diverged": True, "final_step": step, **said})
        )

    runs = {
        "cifar10_paper": [
            ended("cifar10_paper", 0, (4_000, 3_000), (4_000, 4_000)),
            ended("cifar10_paper", 1, (3_500, 4_500), (4_000, 3_800)),
        ],
        "cifar10_leaky": [
            ended("cifar10_leaky", 0, (4_500, 2_000), (3_800, 3_700)),
            ended("cifar10_leaky", 1, (3_000, 3_000), (3_700, 3_600)),
        ],
        "cifar10_momentum_keras": [
            ended("cifar10_momentum_keras", 0, (4_000, 3_000), (3_900, 4_000)),
            ended("cifar10_momentum_keras", 1, (4_000, 3_000), (3_900, 3_800)),
        ],
        "cifar10_jpeg_q75": [ended("cifar10_jpeg_q75", 0, (4_100, 3_000), (3_950, 3_900))],
    }
    assert [f["final_error"] for f in runs["cifar10_paper"]] == [20.0, 22.0]
    assert [f["final_error"] for f in runs["cifar10_leaky"]] == [25.0, 27.0]
    assert [f["final_error"] for f in runs["cifar10_momentum_keras"]] == [21.0, 23.0]
    assert runs["cifar10_jpeg_q75"][0]["final_error"] == 21.5
    diverged("cifar10_jpeg_q75", 1, 300, at=342)
    diverged("cifar10_wd_2016", 1, 50)
    arms = ("cifar10_paper", "cifar10_jpeg_q75", "cifar10_leaky", "cifar10_wd_2016")
    arms += ("cifar10_momentum_keras", "cifar10_original_2016")
    budget = study.Budget(seeds=2)
    assert study.run_figures(str(tmp_path), "cifar10_leaky", 1) == runs["cifar10_leaky"][1]
    assert study.run_figures(str(tmp_path), "cifar10_jpeg_q75", 1) == {"diverged": 342}
    assert study.run_figures(str(tmp_path), "cifar10_wd_2016", 0) is None
    summary = study.summarize(str(tmp_path), arms, budget)
    assert list(summary) == list(arms[:-1])
    assert [(s["seeds"], s["diverged"]) for s in summary.values()] == [
        (2, []),
        (2, [342]),
        (2, []),
        (1, [50]),
        (2, []),
    ]
    assert all(s["about"] == experiments.about(arm) for arm, s in summary.items())
    assert not any(key in summary["cifar10_wd_2016"] for key, _ in study.FIGURES)
    base = summary["cifar10_paper"]
    for arm, found in runs.items():
        for key, _ in study.FIGURES:
            values = [f[key] for f in found]
            figure = summary[arm][key]
            assert figure["values"] == values and figure["mean"] == statistics.fmean(values)
            assert figure["sd"] == (statistics.stdev(values) if len(values) > 1 else None)
            if arm == "cifar10_paper":
                assert "gap" not in figure and "exceeds_spread" not in figure
                continue
            assert figure["gap"] == figure["mean"] - base[key]["mean"]
            sds = (figure["sd"], base[key]["sd"])
            beyond = None if None in sds else abs(figure["gap"]) > sum(sds)
            assert figure["exceeds_spread"] is beyond
    verdicts = {
        arm: s["final_error"].get("exceeds_spread")
        for arm, s in summary.items()
        if "final_error" in s
    }
    assert verdicts == {
        "cifar10_paper": None,
        "cifar10_jpeg_q75": None,
        "cifar10_leaky": True,
        "cifar10_momentum_keras": False,
    }
    cells = [
        (study.cell(s.get("final_error")), study._gap(s.get("final_error")))
        for s in summary.values()
    ]
    assert cells == [
        ("21.00 ± 1.41", "baseline"),
        ("21.50", "+0.50"),
        ("26.00 ± 1.41", "+5.00 (> spread)"),
        ("-", "-"),
        ("22.00 ± 1.41", "+1.00 (within spread)"),
    ]
    rows = study.markdown_table(summary, arms, budget).splitlines()
    assert [r.split(" | ")[2] for r in rows if r.startswith("| `cifar10_")] == [
        "2/2",
        "2/2 (1 diverged at step 342)",
        "2/2",
        "1/2 (1 diverged at step 50)",
        "2/2",
    ]
    # no baseline ended: no gaps
    alone = study.summarize(str(tmp_path), ("cifar10_original_2016", "cifar10_leaky"), budget)
    assert list(alone) == ["cifar10_leaky"] and "gap" not in alone["cifar10_leaky"]["final_error"]
    # three seeds, 20, 22, 24 against 24, 26, 28: a gap of 4 is the two sd's of 2 summed, not
    # beyond them
    tie = tmp_path / "tie"
    for seed, right in enumerate((4_000, 3_900, 3_800)):
        ended("cifar10_paper", seed, (right, right), root=tie)
        ended("cifar10_leaky", seed, (right - 200, right - 200), root=tie)
    pair = ("cifar10_paper", "cifar10_leaky")
    leaky = study.summarize(str(tie), pair, study.Budget(seeds=3))["cifar10_leaky"]
    assert leaky["final_error"]["values"] == [24.0, 26.0, 28.0] and leaky["final_error"]["sd"] == 2
    assert (leaky["final_error"]["gap"], leaky["final_error"]["exceeds_spread"]) == (4.0, False)


def whole_run(committed: Path, folder: Path, seed: int) -> None:
    """A run's folder in the form a run writes it, made from a committed (thinned) one: an
    answers line per evaluation (drawn with that evaluation's test error, the last the kept
    answers with the final classes), train.jsonl's records in float32's digits with the clock."""
    from resnet_noBN.trainers.answers import Answers

    folder.mkdir(parents=True)
    for name in ("config.json", "result.json", "metrics.jsonl"):
        shutil.copy(committed / name, folder / name)
    rng = np.random.default_rng(seed)
    evaluations = [json.loads(line) for line in (committed / "metrics.jsonl").open()]
    last = read_answers(str(committed / "answers.jsonl"))[-1].correct
    lines = []
    for record in evaluations[:-1]:
        correct = np.zeros(len(last), bool)
        right = round((1 - record["test_error"]) * len(last))
        correct[rng.choice(len(last), right, replace=False)] = True
        lines.append(Answers(correct, np.zeros(len(last), int)).line(record["step"], False))
    classes = rng.integers(0, 10, len(last))
    lines.append(Answers(last, classes).line(evaluations[-1]["step"], True))
    (folder / "answers.jsonl").write_text("\n".join(lines) + "\n")
    with (folder / "train.jsonl").open("w") as f:
        for i, line in enumerate((committed / "train.jsonl").open()):
            record = json.loads(line)
            record = {
                k: v * (1 + 1.2345e-6) if isinstance(v, float) else v for k, v in record.items()
            }
            clock = {"images_per_sec": 101.5, "elapsed_s": 10.0 * i, "time_left_s": 5.0}
            f.write(json.dumps({**record, **clock, "finish": "2026-12-02T01:00:00+00:00"}) + "\n")


def test_thinned_runs_give_the_same_report_in_a_quarter_of_the_bytes(tmp_path):
    """--report_only --thin over two quarter runs in the form a run writes them (made from the
    committed ones): answers.jsonl keeps the last evaluation's answers alone, figures.json the
    figures of all of them, train.jsonl and metrics.jsonl every record in 5 digits without the
    clock or JSON's spaces; the report's figures are those of the whole records, and thinning
    again changes no byte. --thin alone is refused."""
    from resnet_noBN.studies import thinned
    from resnet_noBN.trainers.run_log import read_metrics

    committed = Path(__file__).parents[1] / "results" / "table2_quarter"
    out = tmp_path / "quarter"
    for seed in (0, 1):
        name = f"runs/cifar10_paper-seed{seed}"
        whole_run(committed / name, out / name, seed)
    folder = out / "runs" / "cifar10_paper-seed0"
    whole = {p.name: p.stat().st_size for p in folder.iterdir()}
    evaluations = read_answers(str(folder / "answers.jsonl"))
    assert len(evaluations) == 16
    records = read_metrics(str(folder), "train.jsonl")
    flags = ("--study=table2", "--arms=cifar10_paper", "--model=quarter", "--seeds=2")
    refused = launchers.run("launch/study.py", *flags, "--thin", f"--output_dir={out}")
    assert refused.returncode == 2 and refused.stderr.strip().splitlines() == [
        "error: --thin changes the records of ended runs: give it with --report_only"
    ]
    report = launchers.run("launch/study.py", *flags, "--report_only", f"--output_dir={out}")
    assert report.returncode == 0, report.stderr[-2000:]
    before = json.loads((out / study.SUMMARY_FILE).read_text())["arms"]["cifar10_paper"]
    proc = launchers.run(
        "launch/study.py", *flags, "--report_only", "--thin", f"--output_dir={out}"
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    thin = {p.name: p.stat().st_size for p in folder.iterdir()}
    assert sum(thin.values()) < sum(whole.values()) / 3
    kept = read_answers(str(folder / "answers.jsonl"))
    assert [e.step for e in kept] == [evaluations[-1].step] and kept[0].predicted is None
    np.testing.assert_array_equal(kept[0].correct, evaluations[-1].correct)
    again = read_metrics(str(folder), "train.jsonl")
    assert [r["step"] for r in again] == [r["step"] for r in records]
    assert "finish" not in again[-1] and again[-1]["grad_norm"] == float(
        f"{records[-1]['grad_norm']:.5g}"
    )
    assert again[-1]["grad_norm"] != records[-1]["grad_norm"]  # rounded
    for name in ("train.jsonl", "metrics.jsonl"):
        lines = (folder / name).read_text().splitlines()
        assert lines[-1].startswith('{"step":8000,') and ", " not in "".join(lines), name
    arms = json.loads((out / study.SUMMARY_FILE).read_text())["arms"]
    for figure in ("final_error", "best_error", "original_2016_error"):
        assert arms["cifar10_paper"][figure] == before[figure], figure
    assert before["original_2016_error"] != before["final_error"]  # the windows of all 16 read
    files = {p: p.read_bytes() for p in folder.iterdir()}
    thinned.thin(str(folder))
    assert {p: p.read_bytes() for p in folder.iterdir()} == files
