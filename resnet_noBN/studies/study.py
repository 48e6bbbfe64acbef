"""A study: a baseline experiment and arms that each change one thing from it
(``configs.experiments.STUDIES``), trained from several seeds at one budget, each (arm, seed) a
run of ``launch/cifar.py`` in its own folder, and a table of what each change does to every
figure a reader may compare with the paper's: the whole-test final and best errors and the
original 2016 code's figure (``studies.original_eval``), with the seed-to-seed spread.

``launch/study.py`` runs one (several runs side by side, resuming where it stopped); this module
holds the plan (:class:`Budget`, :func:`runs`, :func:`command`) and the summary, which reads
nothing but the runs' folders: ``result.json`` (the run's last line of JSON, or its divergence),
``answers.jsonl`` and the logs.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import statistics
import sys

from resnet_noBN.configs import experiments, presets
from resnet_noBN.configs.flag_config import check_at_least, check_choices
from resnet_noBN.configs.recipe_config import TrainConfig
from resnet_noBN.host import storage
from resnet_noBN.studies import thinned
from resnet_noBN.studies.arm_runs import machines, optimizers, read_result, run_dir
from resnet_noBN.study_plots import arm_curves, arm_errors, arm_health

TABLE_FILE = "study.md"
SUMMARY_FILE = "study.json"
PLOT_FILE = "study_curves.png"
ERRORS_FILE = "study_errors.png"
HEALTH_FILE = "study_health.png"
FIGURES = (
    ("final_error", "final"),
    ("best_error", "best (over evaluations)"),
    ("original_2016_error", "2016 figure, one window each"),
    ("original_2016_either_window_error", "2016 figure, either window"),
)


@dataclasses.dataclass(frozen=True)
class Budget:
    """What every run of a study shares: the network preset, the steps, how often it is
    evaluated (and logged, and checkpointed), the seeds, and the flags given to every run (the
    data, the precision...). Each field but ``flags`` is a flag of ``launch/study.py``
    (``configs.flag_config``), each study's own budget (:data:`BUDGETS`) standing for a flag
    not given."""

    model: str = dataclasses.field(
        default="small",
        metadata={"help": "The network preset of every run.", "choices": tuple(presets.MODELS)},
    )
    train_steps: int = dataclasses.field(
        default=8000, metadata={"help": "Steps per run; the lr drops at 1/2 and 5/6 of them."}
    )
    eval_every: int = dataclasses.field(
        default=500,
        metadata={"help": "Evaluate (the whole test split), log and checkpoint every N steps."},
    )
    seeds: int = dataclasses.field(default=3, metadata={"help": "Seeds per arm."})
    flags: tuple[str, ...] = ()

    def validate(self) -> None:
        """ValueError (one line, naming the flag) for a budget that runs nothing."""
        check_choices(self)
        check_at_least(self, ("train_steps", "eval_every", "seeds"), 1, "positive")


# each study's budget where its flags give none (presets.MODELS): Table 2's factors on the small
# network, CIFAR-100 held on the quarter one (the paper's depth, a quarter of its widths), 8,000
# steps each; the claims on the quarter network, 300 steps logged every 10 (the budget of their
# experiments, configs.experiments.CLAIMS_BUDGET)
BUDGETS = {
    "table2": Budget("small", 8000, 500, 3),
    "cifar100_held": Budget("quarter", 8000, 500, 2, ("--log_every=100",)),
    "claims": Budget("quarter", 300, 75, 3, ("--log_every=10", "--max_checkpoints=1")),
    # the paper's init against three others: CIFAR-10 at the small study's budget (the quarter
    # network's with --model=quarter --seeds=2); CIFAR-100 at the held study's, in its form of
    # momentum (Keras': the same update at a constant rate), so its baseline is that study's runs
    "identity": Budget("small", 8000, 500, 3),
    "identity_cifar100_held": Budget(
        "quarter", 8000, 500, 2, ("--log_every=100", "--optimizer=momentum")
    ),
    # the paper's init and Fixup's at four depths of the small network's widths, 4,000 steps
    # (the lr drops at 1/2 and 5/6 of them), one seed first (--seeds=2 where time is left)
    "near_identity": Budget("small", 4000, 500, 1, ("--log_every=100",)),
}


def describe(budget: Budget) -> str:
    """What the table holds, for the report's header."""
    return (
        "Test error (%) on the whole test split (final, best over evaluations every "
        f"{budget.eval_every} steps), and the original 2016 code's figure (the best precision "
        "over 5,000-image windows: resnet_noBN/studies/original_eval.py), mean ± sd over the seeds."
    )


def runs(arms: tuple[str, ...], budget: Budget) -> list[tuple[str, int]]:
    """(arm, seed) of every run, every arm's seed 0 first (the table fills evenly)."""
    return [(arm, seed) for seed in range(budget.seeds) for arm in arms]


# every run's launcher: one CIFAR run, in its folder
LAUNCHER = os.path.join(os.path.dirname(__file__), "..", "..", "launch", "cifar.py")


def command(output_dir: str, arm: str, seed: int, budget: Budget, threads: int | None) -> list:
    """The ``launch/cifar.py`` command of one run: its experiment at the budget, seeded, in its
    folder; ``threads``: TensorFlow's intra-op threads (runs side by side share the cores)."""
    every = min(budget.eval_every, budget.train_steps)
    return [
        sys.executable,
        LAUNCHER,
        f"--experiment={arm}",
        f"--model={budget.model}",
        f"--train_steps={budget.train_steps}",
        f"--eval_every={every}",
        f"--checkpoint_every={every}",
        f"--log_every={every}",
        "--max_checkpoints=2",
        f"--seed={seed}",
        f"--model_dir={run_dir(output_dir, arm, seed)}",
        *([f"--intra_op_threads={threads}"] if threads else []),
        *budget.flags,
    ]


def run_figures(output_dir: str, arm: str, seed: int) -> dict | None:
    """A finished run's figures (%, ``original_eval.figures``; a committed run's
    ``figures.json``: ``studies.thinned``), or ``{"diverged": step}``: the step its loss turned
    non-finite (``diverged_at``: ``arm_runs.outcome``), else, in a result that does not say, the
    last step it evaluated."""
    result = read_result(output_dir, arm, seed)
    if result is None:
        return None
    if result.get("diverged"):
        return {"diverged": result.get("diverged_at") or result.get("final_step")}
    return thinned.figures(run_dir(output_dir, arm, seed))


def spread(values: list[float]) -> dict:
    """The mean of ``values``, their sd (None for one value) and the values."""
    return {
        "mean": statistics.fmean(values),
        "sd": statistics.stdev(values) if len(values) > 1 else None,
        "values": values,
    }


def summarize(output_dir: str, arms: tuple[str, ...], budget: Budget) -> dict:
    """Per arm: its finished seeds' figures (mean, sd over seeds, each seed's), the diverged
    seeds, and each figure's gap to the baseline (the first arm) with whether it exceeds the
    spread (|gap| > the two sd's summed; None with one seed)."""
    summary = {}
    for arm in arms:
        found = [f for seed in range(budget.seeds) if (f := run_figures(output_dir, arm, seed))]
        finished = [f for f in found if "diverged" not in f]
        if not found:
            continue
        entry = {
            "about": experiments.about(arm),
            "seeds": len(found),
            "diverged": [f["diverged"] for f in found if "diverged" in f],
        }
        for key, _ in FIGURES:
            if finished:
                entry[key] = spread([f[key] for f in finished])
        summary[arm] = entry
    base = summary.get(arms[0])
    for arm, entry in summary.items():
        for key, _ in FIGURES:
            if arm == arms[0] or not base or key not in entry or key not in base:
                continue
            gap = entry[key]["mean"] - base[key]["mean"]
            sds = (entry[key]["sd"], base[key]["sd"])
            entry[key]["gap"] = gap
            entry[key]["exceeds_spread"] = None if None in sds else abs(gap) > sum(sds)
    return summary


def cell(figure: dict | None) -> str:
    """A :func:`spread` as a table's cell, ``mean ± sd`` (``-`` for none)."""
    if figure is None:
        return "-"
    sd = "" if figure["sd"] is None else f" ± {figure['sd']:.2f}"
    return f"{figure['mean']:.2f}{sd}"


def _gap(figure: dict | None) -> str:
    if figure is None or "gap" not in figure:
        return "baseline" if figure is not None else "-"
    mark = {True: " (> spread)", False: " (within spread)", None: ""}[figure["exceeds_spread"]]
    return f"{figure['gap']:+.2f}{mark}"


def _diverged(entry: dict) -> str:
    """The arm's diverged seeds and their steps, " (1 diverged at step 6,799)", or nothing."""
    steps = entry["diverged"]
    if not steps:
        return ""
    at = ", ".join(f"{step:,}" for step in steps)
    return f" ({len(steps)} diverged at step{'s' if len(steps) > 1 else ''} {at})"


def row_labels(summary: dict, arms: tuple[str, ...]) -> list[str]:
    """The final errors' picture's row names in the table's words: each arm of ``summary`` in
    the order of ``arms``, its final error's gap to the baseline (with whether it exceeds the
    spread) and its diverged seeds."""
    return [
        f"{arm}: {_gap(summary[arm].get('final_error'))}{_diverged(summary[arm])}"
        for arm in arms
        if arm in summary
    ]


def markdown_table(summary: dict, arms: tuple[str, ...], budget: Budget) -> str:
    """One row per arm: the figures (% test error, mean ± sd over seeds) and the gaps of the
    final and of the 2016 figure to the baseline."""
    head = " | ".join(label for _, label in FIGURES)
    lines = [
        f"| experiment | what it changes | seeds | {head} | final − baseline (pp) "
        "| 2016 figure − baseline (pp) |",
        "| --- | --- | --- |" + " --- |" * (len(FIGURES) + 2),
    ]
    for arm in arms:
        if arm not in summary:
            continue
        s = summary[arm]
        cells = " | ".join(cell(s.get(key)) for key, _ in FIGURES)
        lines.append(
            f"| `{arm}` | {s['about']} | {s['seeds']}/{budget.seeds}{_diverged(s)} | {cells} | "
            f"{_gap(s.get('final_error'))} | {_gap(s.get('original_2016_error'))} |"
        )
    return "\n".join(lines) + "\n"


def title(budget: Budget, output_dir: str, arms: tuple[str, ...]) -> str:
    """The plots' title: the budget in words, and how many of its runs of ``arms`` have ended
    where not all have (a report written while runs go on)."""
    text = f"{budget.model} network, {budget.train_steps} steps, {budget.seeds} seeds"
    ran = runs(arms, budget)
    ended = sum(finished(output_dir, arm, seed) for arm, seed in ran)
    return text if ended == len(ran) else f"{text}, {ended} of {len(ran)} runs ended"


def write_tables(
    output_dir: str,
    files: tuple[str, str],
    header: str,
    table: str,
    summary: dict,
    arms: tuple[str, ...],
    budget: Budget,
) -> None:
    """A report's two files (``files``: the markdown's and the JSON's names): ``header``, where
    the runs of ``arms`` computed and in which optimizer (each run's config.json) and ``table``;
    the budget and ``summary``. The one writer of study.md and claims.md."""
    markdown, summary_file = files
    ran = runs(arms, budget)
    where, forms = machines(output_dir, ran), optimizers(output_dir, ran)
    storage.write_text(  # each file replaced whole: a stop as it is written leaves the old one
        os.path.join(output_dir, markdown),
        f"{header}\nRuns (each run's config.json): {where}; optimizer {forms}.\n\n{table}",
    )
    storage.write_text(
        os.path.join(output_dir, summary_file),
        json.dumps({"budget": dataclasses.asdict(budget), "arms": summary}, indent=2),
    )


def write_report(output_dir: str, arms: tuple[str, ...], budget: Budget, header: str) -> dict:
    """``study.md`` (``header``, where the runs computed, the table and each run's health in
    numbers, ``arm_health.figures``), ``study.json``, the
    curves' PNG, the final errors' (``arm_errors``) and the health's (``arm_health``), from the
    runs finished so far (the health also of the runs still going); returns the summary."""
    summary = summarize(output_dir, arms, budget)
    folders = {a: [run_dir(output_dir, a, s) for s in range(budget.seeds)] for a in arms}
    for arm, entry in summary.items():
        entry["health"] = [
            arm_health.figures(d) if os.path.isdir(d) else None for d in folders[arm]
        ]
    table = (
        f"{markdown_table(summary, arms, budget)}\n## Health, run by run (train.jsonl)\n\n"
        f"{arm_health.markdown_table(folders)}"
    )
    write_tables(output_dir, (TABLE_FILE, SUMMARY_FILE), header, table, summary, arms, budget)
    name = title(budget, output_dir, arms)
    diverged = {a: max(e["diverged"]) for a, e in summary.items() if e["diverged"]}
    arm_curves.plot(
        folders,
        os.path.join(output_dir, PLOT_FILE),
        name,
        batch_size=TrainConfig().batch_size,
        diverged=diverged,
    )
    path = os.path.join(output_dir, ERRORS_FILE)
    arm_errors.plot(summary, arms, row_labels(summary, arms), path, name)
    health = os.path.join(output_dir, HEALTH_FILE)
    arm_health.plot(folders, health, name, batch_size=TrainConfig().batch_size)
    return summary


def finished(output_dir: str, arm: str, seed: int) -> bool:
    return read_result(output_dir, arm, seed) is not None


def threads_each(parallel: int) -> int:
    """The cores each of ``parallel`` runs side by side gets (at least one)."""
    return max(1, math.floor(len(os.sched_getaffinity(0)) / parallel))


def advice_when_alone(threads: int | None):
    """For ``run_loop.run_all``: the line for the runs left training once none waits, with
    cores free. Each keeps the intra-op threads it started with (``threads``, None where the
    backend takes no such flag); a rerun gives the runs left all the cores (``launch/study.py``
    shares them among no more runs than there are to do). None where that gains no thread."""

    def advice(left: int) -> str | None:
        if threads is None or threads_each(left) <= threads:
            return None
        runs = "the run left trains" if left == 1 else f"the {left} runs left train"
        return (
            f"{runs} on {threads} intra-op thread(s) each with cores free: stop the study "
            "(Ctrl-C) and rerun the same command to resume from the checkpoints with "
            f"{threads_each(left)} each"
        )

    return advice
