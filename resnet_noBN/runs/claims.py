"""The paper's empirical claims as controlled, seeded comparisons (arXiv:1611.04231, Section 4).

Every arm is a named experiment (``configs.experiments``, ``claims_<arm>``): the paper's CIFAR
network with one change from the baseline (the paper's own choices: sigma = 1/(k^2 c), fixed
random projection, identity shortcuts, ReLU, no biases, no batch norm), trained with the
paper's recipe scaled to a budget: SGD with momentum 0.9, batch 128, learning rate 0.05 divided
by 10 at S/2 and 5S/6 of S steps (the paper's 30k and 50k of 60k), weight decay 1e-4. Each
(arm, seed) pair is one run in its own folder; a seed fixes the weights, the data order and the
augmentation, and is shared by all arms, so arms differ only by their change.

``launch/claims.py`` runs the sweep; this module holds the arms and the summary (table,
verdicts, plots), which reads nothing but the runs' files, and loads no backend (a bad flag of
the sweep is answered at once); ``runs.claim_run`` trains one run.
"""

from __future__ import annotations

import dataclasses
import json
import os
import statistics

from resnet_noBN.configs.recipe_config import TrainConfig
from resnet_noBN.datasets.data_config import DataConfig
from resnet_noBN.runs import arm_curves, run_config
from resnet_noBN.runs.arm_runs import machines, optimizers, read_result, run_dir
from resnet_noBN.runs.run_config import RunConfig

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


def scaled_recipe(cfg: TrainConfig, train_steps: int, eval_every: int | None = None) -> TrainConfig:
    """``cfg`` for S = ``train_steps`` steps (its learning rate drops at the paper's 1/2 and 5/6
    of them, ``TrainConfig.boundary_steps``), evaluated and checkpointed every ``eval_every``
    steps (default ``cfg.eval_every``), at most S."""
    every = min(eval_every or cfg.eval_every, train_steps)
    return dataclasses.replace(
        cfg, train_steps=train_steps, eval_every=every, checkpoint_every=every
    )


def sweep_recipe() -> TrainConfig:
    """The full sweep's recipe: the claims experiments' (the paper's, at their budget)."""
    return run_config.build(ARMS[0].experiment).recipe


@dataclasses.dataclass(frozen=True)
class Sweep:
    """The budget: the network (a ``presets.MODELS`` name), each run's recipe (the paper's,
    ``recipe.TrainConfig``'s defaults, scaled to its steps) and the seeds. Default: the full
    sweep, the paper's depth (9 blocks per stage) at a quarter of Table 1's widths."""

    model: str = "quarter"
    recipe: TrainConfig = dataclasses.field(default_factory=sweep_recipe)
    seeds: int = 3


QUICK = Sweep(
    model="small",
    recipe=scaled_recipe(
        dataclasses.replace(
            sweep_recipe(), batch_size=16, eval_every=3, log_every=2, eval_batch_size=100
        ),
        6,
    ),
    seeds=2,
)


def arm_config(arm: Arm, sweep: Sweep, data: DataConfig, precision: str = "float32") -> RunConfig:
    """The arm's run: its experiment at the sweep's budget (network preset, recipe), on ``data``,
    in ``precision``."""
    return run_config.build(
        arm.experiment,
        model=sweep.model,
        data=dataclasses.asdict(data),
        recipe=dataclasses.asdict(sweep.recipe),
        runtime={"precision": precision},
    )


def arm_summary(results: list[dict], num_classes: int) -> dict:
    """Final test error (%) over the finished seeds (at least one): mean, sd (n-1; None for
    one seed), each seed's.

    A diverged seed counts as chance error, 100 (1 - 1/classes): it learned nothing usable.
    """
    chance = 100.0 * (1 - 1 / num_classes)
    errors = [chance if r["diverged"] else 100.0 * r["test_error"] for r in results]
    return {
        "seeds": [r["seed"] for r in results],
        "test_errors": errors,
        "diverged": sum(r["diverged"] for r in results),
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


def summarize(output_dir: str, sweep: Sweep, num_classes: int) -> dict:
    """Per arm: the finished seeds' summary and the verdict against the baseline."""
    found = {
        arm.name: [
            r
            for seed in range(sweep.seeds)
            if (r := read_result(output_dir, arm.name, seed)) is not None
        ]
        for arm in ARMS
    }
    summaries = {
        name: arm_summary(results, num_classes) for name, results in found.items() if results
    }
    return {
        name: {**s, "verdict": verdict(arm, s, summaries.get(BASELINE))}
        for arm in ARMS
        if (s := summaries.get(name := arm.name))
    }


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def markdown_table(summary: dict, sweep: Sweep) -> str:
    """The claims table: one row per arm."""
    lines = [
        "| arm | change from the paper's network | the paper | test error % (mean ± sd) "
        "| seeds (diverged) | gap to baseline (pp) | verdict |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for arm in ARMS:
        if arm.name not in summary:
            continue
        s = summary[arm.name]
        gap = s["verdict"]["gap"]
        lines.append(
            f"| `{arm.name}` | {arm.what} | {arm.claim} | {_fmt(s['mean'])} ± "
            f"{_fmt(s['sd'])} | {len(s['seeds'])}/{sweep.seeds} ({s['diverged']}) | "
            f"{'-' if gap is None else f'{gap:+.2f}'} | {s['verdict']['text']} |"
        )
    return "\n".join(lines) + "\n"


def plot_curves(output_dir: str, sweep: Sweep, path: str, title: str) -> None:
    """Training loss and test error against step, one colour per arm, the seeds' range shaded
    (``arm_curves.plot``)."""
    arms = {
        arm.name: [run_dir(output_dir, arm.name, seed) for seed in range(sweep.seeds)]
        for arm in ARMS
    }
    diverged = {}
    for arm in ARMS:
        results = [read_result(output_dir, arm.name, seed) for seed in range(sweep.seeds)]
        steps = [r["final_step"] for r in results if r and r["diverged"]]
        if steps:
            diverged[arm.name] = max(steps)
    arm_curves.plot(arms, path, title, sweep.recipe.batch_size, diverged)


def write_report(output_dir: str, sweep: Sweep, num_classes: int, header: str, title: str) -> dict:
    """``claims.md`` (``header``, where the runs computed, and the table), ``claims.json`` and
    the curves' PNG, from the runs finished so far; returns the summary."""
    summary = summarize(output_dir, sweep, num_classes)
    with open(os.path.join(output_dir, TABLE_FILE), "w", encoding="utf-8") as f:
        ran = [(a.name, s) for a in ARMS for s in range(sweep.seeds)]
        where, forms = machines(output_dir, ran), optimizers(output_dir, ran)
        f.write(f"{header}\nRuns (each run's config.json): {where}; optimizer {forms}.\n\n")
        f.write(markdown_table(summary, sweep))
    with open(os.path.join(output_dir, SUMMARY_FILE), "w", encoding="utf-8") as f:
        json.dump({"sweep": dataclasses.asdict(sweep), "arms": summary}, f, indent=2)
    plot_curves(output_dir, sweep, os.path.join(output_dir, PLOT_FILE), title)
    return summary
