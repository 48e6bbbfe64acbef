"""The paper's empirical claims as controlled, seeded comparisons (arXiv:1611.04231, Section 4):
the study ``claims`` (``configs.experiments.STUDIES``), run by ``launch/study.py --study=claims``.

Every arm is a named experiment (``configs.experiments``, ``claims_<arm>``): the paper's CIFAR
network with one change from the baseline (the paper's own choices: sigma = 1/(k^2 c), fixed
random projection, identity shortcuts, ReLU, no biases, no batch norm), trained with the
paper's recipe scaled to the study's budget (``studies.study.BUDGETS``): SGD with momentum 0.9,
batch 128, learning rate 0.05 divided by 10 at S/2 and 5S/6 of S steps (the paper's 30k and
50k of 60k), weight decay 1e-4. Each (arm, seed) pair is one run in its own folder; a seed
fixes the weights, the data order and the augmentation, and is shared by all arms, so arms
differ only by their change.

This module holds the arms' claims and the study's report (``claims.md``: the table with a
verdict per claim, ``claims.json``, ``claims_curves.png``), which reads nothing but the runs'
files and loads no backend; it stands for ``studies.study``'s report where the study is ``claims``.
"""

from __future__ import annotations

import dataclasses
import os
import statistics

from resnet_noBN.configs.recipe_config import TrainConfig
from resnet_noBN.datasets import cifar_data
from resnet_noBN.runs.record import read_config, section
from resnet_noBN.studies import study
from resnet_noBN.studies.arm_runs import read_result, run_dir
from resnet_noBN.study_plots import arm_curves

TABLE_FILE = "claims.md"
SUMMARY_FILE = "claims.json"
PLOT_FILE = "claims_curves.png"


@dataclasses.dataclass(frozen=True)
class Arm:
    """One network of the sweep: the experiment ``claims_<name>`` (``configs.experiments``: the
    paper's network with one change).

    ``claim``: what the paper says about this change (quoted, with its place), or why the arm is
    measured. ``paper_expects_worse``: True where the paper says the baseline is better, None
    where the paper makes no claim (the arm is a choice of the original code).
    """

    name: str
    what: str
    claim: str
    paper_expects_worse: bool | None

    @property
    def experiment(self) -> str:
        return f"claims_{self.name}"


BASELINE = "hardt_ma"
ARMS = (
    Arm(
        BASELINE,
        "the paper's network",
        "baseline: sigma = 1/(k^2 c), fixed random projection, identity shortcuts",
        None,
    ),
    Arm(
        "standard",
        "init sigma = 1/(k sqrt c)",
        '"this substantially smaller weight initialization helped training" (Sec. 4)',
        True,
    ),
    Arm(
        "he",
        "init sigma = sqrt(2/(k^2 c)), the original code's",
        "the same claim against the original code's He init",
        True,
    ),
    Arm(
        "trainable_head",
        "last layer trained",
        'fixed random projection "slightly improved test error" (Sec. 4)',
        True,
    ),
    Arm(
        "no_identity",
        "no identity shortcuts (a plain chain)",
        "identity matters: the title claim (Sec. 1-2)",
        True,
    ),
    Arm(
        "leaky_relu",
        "leaky ReLU 0.1, the original code's",
        "no claim: the paper uses ReLU",
        None,
    ),
    Arm(
        "conv_bias",
        "a bias on every convolution",
        "no claim: Table 1 counts kernels only",
        None,
    ),
    Arm(
        "batch_norm",
        "the original unit: BN, ReLU, conv, BN, ReLU, conv (He init)",
        '"difficult to train a model with batch normalization of this '
        'size without significant overfitting" (Sec. 4)',
        True,
    ),
)
ARM_NAMES = tuple(arm.name for arm in ARMS)


def arm_summary(results: list[dict], num_classes: int) -> dict:
    """Final test error (%) over the finished seeds (at least one): mean, sd (n-1; None for
    one seed), each seed's.

    A diverged seed counts as chance error, 100 (1 - 1/classes): it learned nothing usable.
    """
    chance = 100.0 * (1 - 1 / num_classes)
    errors = [chance if r.get("diverged") else 100.0 * r["test_error"] for r in results]
    return {
        "seeds": [r["seed"] for r in results],
        "test_errors": errors,
        "diverged": sum(bool(r.get("diverged")) for r in results),
        "mean": statistics.fmean(errors),
        "sd": statistics.stdev(errors) if len(errors) > 1 else None,
    }


def verdict(arm: Arm, summary: dict, baseline: dict) -> dict:
    """The gap to the baseline (percentage points), whether it goes the paper's way, and whether
    it exceeds the seed spread (|gap| > sd of the arm + sd of the baseline)."""
    if arm.name == BASELINE or baseline is None:
        return {"gap": None, "text": "baseline" if arm.name == BASELINE else "no baseline yet"}
    gap = summary["mean"] - baseline["mean"]
    seeded = len(summary["test_errors"]) > 1 and len(baseline["test_errors"]) > 1
    clear = abs(gap) > summary["sd"] + baseline["sd"] if seeded else None
    size = {
        True: "gap > seed spread",
        False: "gap within seed spread",
        None: "one seed: spread unknown",
    }[clear]
    if arm.paper_expects_worse is None:
        way = (
            "no claim: "
            + ("worse than" if gap > 0 else "better than" if gap < 0 else "the same as")
            + " the baseline"
        )
    else:
        way = "paper's direction holds" if gap > 0 else "paper's direction does not hold"
    return {
        "gap": gap,
        "holds": None if arm.paper_expects_worse is None else gap > 0,
        "exceeds_spread": clear,
        "text": f"{way}; {size}",
    }


def describe(budget) -> str:
    """What the table holds, for the report's header (``budget``: ``studies.study.Budget``)."""
    return (
        "Each arm is the paper's network with one change; test error (%) on the whole test "
        "split after the last step, mean ± sd over the seeds (a diverged seed counts as chance "
        "error), and the verdict on the paper's claim: its direction, against the seed spread."
    )


def _arms(experiments: tuple[str, ...]) -> list[Arm]:
    """The arms whose experiments are in ``experiments``, in the table's order."""
    return [arm for arm in ARMS if arm.experiment in experiments]


def classes(output_dir: str, experiments: tuple[str, ...], seeds: int) -> int:
    """The number of classes of the data the runs read (their config.json's; CIFAR-10 before
    any has recorded one)."""
    for name in experiments:
        for seed in range(seeds):
            saved = read_config(run_dir(output_dir, name, seed))
            if saved:
                return cifar_data.num_classes(section(saved, "data").get("dataset", "cifar10"))
    return cifar_data.num_classes("cifar10")


def summarize(output_dir: str, experiments: tuple[str, ...], budget) -> dict:
    """Per arm (by its short name) of ``experiments``: the ended seeds' summary and the verdict
    against the baseline."""
    count = classes(output_dir, experiments, budget.seeds)
    summaries = {}
    for arm in _arms(experiments):
        ended = [(s, read_result(output_dir, arm.experiment, s)) for s in range(budget.seeds)]
        results = [{**r, "seed": seed} for seed, r in ended if r is not None]
        if results:
            summaries[arm.name] = arm_summary(results, count)
    base = summaries.get(BASELINE)
    return {
        arm.name: {**summaries[arm.name], "verdict": verdict(arm, summaries[arm.name], base)}
        for arm in _arms(experiments)
        if arm.name in summaries
    }


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def markdown_table(summary: dict, experiments: tuple[str, ...], budget) -> str:
    """The claims table: one row per arm."""
    lines = [
        "| arm | change from the paper's network | the paper | test error % (mean ± sd) "
        "| seeds (diverged) | gap to baseline (pp) | verdict |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for arm in _arms(experiments):
        if arm.name not in summary:
            continue
        s = summary[arm.name]
        gap = s["verdict"]["gap"]
        lines.append(
            f"| `{arm.name}` | {arm.what} | {arm.claim} | {_fmt(s['mean'])} ± "
            f"{_fmt(s['sd'])} | {len(s['seeds'])}/{budget.seeds} ({s['diverged']}) | "
            f"{'-' if gap is None else f'{gap:+.2f}'} | {s['verdict']['text']} |"
        )
    return "\n".join(lines) + "\n"


def plot_curves(output_dir: str, experiments: tuple[str, ...], budget, path: str) -> None:
    """Training loss and test error against step, one colour per arm, the seeds' range shaded
    (``arm_curves.plot``), a diverged arm's curves up to its last step."""
    folders = {
        arm.name: [run_dir(output_dir, arm.experiment, seed) for seed in range(budget.seeds)]
        for arm in _arms(experiments)
    }
    diverged = {}
    for arm in _arms(experiments):
        results = [read_result(output_dir, arm.experiment, seed) for seed in range(budget.seeds)]
        steps = [r["final_step"] for r in results if r and r.get("diverged")]
        if steps:
            diverged[arm.name] = max(steps)
    batch = TrainConfig().batch_size
    arm_curves.plot(
        folders,
        path,
        study.title(budget, output_dir, experiments),
        batch_size=batch,
        diverged=diverged,
    )


def write_report(output_dir: str, experiments: tuple[str, ...], budget, header: str) -> dict:
    """``claims.md`` (``header``, where the runs computed, and the table), ``claims.json`` and
    the curves' PNG, from the runs ended so far; returns the summary."""
    summary = summarize(output_dir, experiments, budget)
    table = markdown_table(summary, experiments, budget)
    files = (TABLE_FILE, SUMMARY_FILE)
    study.write_tables(output_dir, files, header, table, summary, experiments, budget)
    plot_curves(output_dir, experiments, budget, os.path.join(output_dir, PLOT_FILE))
    return summary
