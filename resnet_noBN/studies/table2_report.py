"""Table 2 of arXiv:1611.04231 written beside the paper's from one's own runs
(``launch/table2.py``; the runs: ``studies.table2_plan``): ``table2.md``, ``table2.json``,
``table2.png`` (each seed's final error per data set, the paper's figure a line) and
``table2_curves.png`` (the runs' loss and test error against step, ``arm_curves``).

Per data set, each seed's whole-test final error and the figure the 2016 code would have logged
(the best precision over 5,000-image windows of the test split, one per evaluation:
``studies.original_eval``; optimistic by construction), their mean ± sd over the seeds that ended,
and the paper's figure (``configs.experiments.TABLE2_ERRORS``). A run whose loss turned
non-finite is shown as diverged at its step, with its replay (``--replay_divergence``:
``divergence/train.jsonl`` and ``health.png``), not as a number; a run not ended as stopped
(at its checkpoint's step) or to do. What ran is said from each run's config.json (its network,
steps and test images); the runs are called the paper's only where none departs from the
paper's run (``run_config.build``; the intervals, precision and data's copy a resumed run may
change apart). Reads nothing but the runs' folders; each file is replaced whole.
"""

from __future__ import annotations

import json
import os

from resnet_noBN.configs import experiments
from resnet_noBN.configs.network_config import ModelConfig
from resnet_noBN.datasets import cifar_data
from resnet_noBN.host import storage
from resnet_noBN.runs import record, run_config
from resnet_noBN.runs.record import read_config
from resnet_noBN.studies import arm_runs, study
from resnet_noBN.studies.table2_plan import EXPERIMENTS, TABLE_FREE, runs, seeds_text, state
from resnet_noBN.study_plots import arm_curves
from resnet_noBN.trainers import run_log

TABLE_FILE = "table2.md"
SUMMARY_FILE = "table2.json"
PLOT_FILE = "table2.png"
CURVES_FILE = "table2_curves.png"
FIGURES = ("final_error", "best_error", "original_2016_error")  # of original_eval.figures
# the presets' names in the table's words (presets.MODELS)
NETWORK_NAMES = {
    "paper": "Table 1's network",
    "quarter": "the quarter network",
    "small": "the small network",
}


def _relative(output_dir: str, path: str) -> str:
    return os.path.relpath(path, output_dir)


def network_name(network: dict) -> str:
    """A recorded network (config.json's ``network``) named by its preset (``presets.MODELS``)
    where its depth and widths are one's, with both in numbers."""
    units, widths = network["num_residual_units"], tuple(network["stage_widths"])
    shape = f"{units} block{'' if units == 1 else 's'} a stage, widths {'/'.join(map(str, widths))}"
    for name, words in NETWORK_NAMES.items():
        preset = ModelConfig.preset(name)
        if (preset.num_residual_units, preset.stage_widths) == (units, widths):
            return f"{words} ({shape})"
    return f"a network of {shape}"


def departures(config: dict, experiment: str) -> list[str]:
    """The fields of a run's config.json (``config``) that differ from the paper's run of
    ``experiment`` (``run_config.build``, at the run's steps: its learning-rate drops fall at the
    same fractions), those a resumed run may change (the intervals, the precision, the data's
    copy) apart; ``train_steps`` where its steps are not the paper's; the data's counts where
    they are not the whole splits."""
    steps = record.section(config, "recipe")["train_steps"]
    paper = run_config.build(experiment)
    at_steps = run_config.build(experiment, recipe={"train_steps": steps}).sections()
    at_steps = json.loads(json.dumps(at_steps))  # as config.json holds it: tuples are lists
    found = [] if steps == paper.recipe.train_steps else ["train_steps"]
    for name in record.SECTIONS:
        saved = record.section(config, name)
        found += [
            key
            for key, value in at_steps[name].items()
            if key not in TABLE_FREE and key in saved and saved[key] != value
        ]
    data = config.get("data", {})
    for split in cifar_data.SPLITS:
        official = cifar_data.num_records(data.get("dataset", "cifar10"), None, split)
        if data.get(f"{split}_examples", official) != official:
            found.append(f"{split}_examples")
    return found


def run_entry(output_dir: str, experiment: str, seed: int) -> dict:
    """One run of the table: its seed, folder, state ("ended", "diverged", "stopped", "to do")
    and step, where it computed, what ran (its network, steps, test images, and where it departs
    from the paper's run: :func:`departures`; all from its config.json), and its figures (%,
    where it ended) or its replay's files (where it diverged and replayed)."""
    run = state(output_dir, experiment, seed)
    config = read_config(run.folder)
    runtime = config.get("runtime", {})
    entry = {
        "seed": seed,
        "folder": _relative(output_dir, run.folder) if os.path.isdir(run.folder) else None,
        "state": run.kind,
        "step": run.step,
        "backend": config.get("backend"),
        "precision": runtime.get("precision"),
        "devices": runtime.get("devices"),
    }
    if config:
        entry.update(
            network=network_name(record.section(config, "network")),
            train_steps=record.section(config, "recipe")["train_steps"],
            test_images=config.get("data", {}).get("test_examples"),
            departures=departures(config, experiment),
        )
    if run.kind == "ended":
        figures = study.run_figures(output_dir, experiment, seed)
        entry.update({k: figures[k] for k in (*FIGURES, "best_step", "test_examples")})
    replay = os.path.join(run.folder, run_log.DIVERGENCE_DIR)
    if run.kind == "diverged" and os.path.isfile(os.path.join(replay, run_log.TRAIN_FILE)):
        entry["replay"] = _relative(output_dir, os.path.join(replay, run_log.TRAIN_FILE))
        entry["replayed_steps"] = len(run_log.read_metrics(replay, run_log.TRAIN_FILE))
        health = os.path.join(replay, run_log.HEALTH_PLOT)
        entry["health"] = _relative(output_dir, health) if os.path.isfile(health) else None
    return entry


def summarize(output_dir: str, seeds: int) -> dict:
    """Per data set: its experiment, the paper's figure, each seed's :func:`run_entry`, how many
    ended, the diverged seeds' steps, and each figure's mean ± sd over the seeds that ended
    (``study.spread``; None where none has) with the final error's gap to the paper's."""
    summary = {}
    for dataset, experiment in EXPERIMENTS.items():
        entries = [run_entry(output_dir, experiment, seed) for seed in range(seeds)]
        ended = [e for e in entries if e["state"] == "ended"]
        paper = experiments.TABLE2_ERRORS[experiment]
        entry = {
            "experiment": experiment,
            "title": cifar_data.DATASETS[dataset].title,
            "paper_error": paper,
            "seeds": seeds,
            "ended": len(ended),
            "diverged": [
                {"seed": e["seed"], "step": e["step"]} for e in entries if e["state"] == "diverged"
            ],
            "runs": entries,
        }
        for key in FIGURES:
            entry[key] = study.spread([e[key] for e in ended]) if ended else None
        final = entry["final_error"]
        entry["final_minus_paper"] = None if final is None else final["mean"] - paper
        summary[dataset] = entry
    return summary


def _run_cell(entry: dict) -> str:
    """A run's final error, or what it is instead: diverged at its step (its replay linked),
    stopped at its checkpoint's step, to do."""
    if entry["state"] == "ended":
        return f"{entry['final_error']:.2f}"
    if entry["state"] == "diverged":
        replay = entry.get("replay")
        links = (
            f": [replay of its last {entry['replayed_steps']} steps]({replay})"
            + (f", [health]({entry['health']})" if entry.get("health") else "")
            if replay
            else " (no replay: no checkpoint before it)"
        )
        return f"diverged at step {entry['step']:,}{links}"
    if entry["state"] == "stopped":
        return f"stopped at step {entry['step']:,}: rerun to resume"
    return "to do"


def _computed(entry: dict) -> str:
    if not entry["backend"]:
        return ""
    return f"{entry['backend']}, {entry['precision']}, {' + '.join(entry['devices'] or ['?'])}"


def markdown_tables(summary: dict) -> str:
    """The table per data set (the paper's figure, mean ± sd of the final error and of the 2016
    code's figure, the gap, seeds ended and diverged) and the table per run."""
    lines = [
        "| data set | paper (Table 2) | final error, mean ± sd | final − paper (pp) | 2016 code's "
        "figure, mean ± sd | seeds ended | diverged |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for s in summary.values():
        gap = "-" if s["final_minus_paper"] is None else f"{s['final_minus_paper']:+.2f}"
        diverged = ", ".join(f"seed {d['seed']} at step {d['step']:,}" for d in s["diverged"])
        lines.append(
            f"| {s['title']} (`{s['experiment']}`) | {s['paper_error']:.2f} | "
            f"{study.cell(s['final_error'])} | {gap} | {study.cell(s['original_2016_error'])} | "
            f"{s['ended']}/{s['seeds']} | {diverged or 'none'} |"
        )
    lines += [
        "",
        "| data set | seed | final error (%) | 2016 code's figure (%) | best over evaluations "
        "(%) | computed | run |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for s in summary.values():
        for e in s["runs"]:
            ended = e["state"] == "ended"
            original = f"{e['original_2016_error']:.2f}" if ended else ""
            best = f"{e['best_error']:.2f} (step {e['best_step']:,})" if ended else ""
            folder = f"[{e['folder']}]({e['folder']})" if e["folder"] else "-"
            lines.append(
                f"| {s['title']} | {e['seed']} | {_run_cell(e)} | {original} | {best} | "
                f"{_computed(e)} | {folder} |"
            )
    return "\n".join(lines) + "\n"


ABOUT = (
    "Test error (%) of each run on every image of its test split at the last step, and the "
    "figure the 2016 code would have logged (the best precision over 5,000-image windows of the "
    "test split, one per evaluation: resnet_noBN/studies/original_eval.py; optimistic by "
    "construction), beside Table 2's; mean ± sd over the seeds that ended. A diverged run (its "
    "loss NaN or infinite) is no number: it is shown at the step its loss turned, with the "
    "replay of its last steps."
)


def seeds_named(seeds: list[int]) -> str:
    """ "seed 0", "seeds 0 and 1", "seeds 0, 1 and 2"."""
    if len(seeds) == 1:
        return f"seed {seeds[0]}"
    return f"seeds {', '.join(map(str, seeds[:-1]))} and {seeds[-1]}"


def what_ran(summary: dict) -> str:
    """Each data set's runs as their config.json records them (the network, the steps, the test
    images), and whether they are the paper's (no :func:`departures`) or which fields are not."""
    parts, departed = [], set()
    for s in summary.values():
        kinds = {}
        for e in (e for e in s["runs"] if "network" in e):
            kinds.setdefault((e["network"], e["train_steps"], e["test_images"]), []).append(
                e["seed"]
            )
            departed.update(e["departures"])
        parts += [
            f"{s['title']}, {seeds_named(seeds)}: {network}, {steps:,} steps, "
            f"{images:,} test images"
            for (network, steps, images), seeds in kinds.items()
        ]
    if not parts:
        return "What ran: no run has started yet."
    verdict = (
        f"These are not the paper's runs: their {', '.join(sorted(departed))} differ from "
        "the paper's run."
        if departed
        else "These are the paper's runs: Table 1's network and Section 4's recipe, on the whole "
        "splits."
    )
    return f"What ran (each run's config.json): {'; '.join(parts)}. {verdict}"


def title(summary: dict) -> str:
    """The plots' title: the seeds, and the runs ended where not all have."""
    total = sum(s["seeds"] for s in summary.values())
    done = sum(s["ended"] + len(s["diverged"]) for s in summary.values())
    seeds = next(iter(summary.values()))["seeds"]
    text = f"Table 2 of arXiv:1611.04231, {seeds_text(seeds)}"
    return text if done == total else f"{text}, {done} of {total} runs ended"


def plot(summary: dict, path: str) -> None:
    """``table2.png``: a panel per data set, each seed's final error a dot and its 2016 figure a
    cross, their mean a line, the paper's figure a dashed line, a diverged seed marked at the
    top with its step."""
    from resnet_noBN import plotting  # matplotlib only where it is drawn

    fig, axes = plotting.figure(ncols=len(summary), width=4.5, height=4.0)
    for ax, s in zip(axes, summary.values()):
        ended = [e for e in s["runs"] if e["state"] == "ended"]
        seeds = [e["seed"] for e in ended]
        ax.plot(seeds, [e["final_error"] for e in ended], "o", color=plotting.colour(0))
        ax.plot(seeds, [e["original_2016_error"] for e in ended], "x", color=plotting.colour(1))
        if s["final_error"]:
            ax.axhline(s["final_error"]["mean"], color=plotting.colour(0), linewidth=1)
        ax.axhline(s["paper_error"], color="0.2", linestyle="--", linewidth=1)
        ax.annotate(
            f"paper {s['paper_error']:.2f}%",
            (1.0, s["paper_error"]),
            xycoords=("axes fraction", "data"),
            ha="right",
            va="bottom",
            fontsize=8,
        )
        values = [e[k] for e in ended for k in ("final_error", "original_2016_error")]
        low, high = min([s["paper_error"], *values]), max([s["paper_error"], *values])
        ax.set_ylim(low - 0.1 * (high - low) - 1, high + 0.25 * (high - low) + 1)
        for d in s["diverged"]:
            ax.annotate(
                f"diverged\nstep {d['step']:,}",
                (d["seed"], ax.get_ylim()[1]),
                ha="center",
                va="top",
                color="tab:red",
                fontsize=8,
            )
        ax.set_xlim(-0.5, s["seeds"] - 0.5)
        ax.set_xticks(range(s["seeds"]))
        ax.set_xlabel("seed")
        ax.set_ylabel("test error (%), whole test split")
        ax.set_title(f"{s['title']}: {s['ended']} of {seeds_text(s['seeds'])} ended", fontsize=9)
        ax.grid(alpha=0.3)
    grey = "0.35"
    axes[0].legend(
        handles=[
            axes[0].plot([], [], "o", color=grey, label="a seed's final error")[0],
            axes[0].plot([], [], "x", color=grey, label="its 2016 code's figure")[0],
            axes[0].plot([], [], "-", color=grey, label="mean final error")[0],
            axes[0].plot([], [], "--", color="0.2", label="the paper (Table 2)")[0],
        ],
        fontsize=7,
    )
    fig.suptitle(title(summary), fontsize=10)
    plotting.save(fig, path)


def write(output_dir: str, seeds: int, header: str, batch_size: int) -> dict:
    """``table2.md`` (``header``, where the runs computed and in which optimizer, each run's
    config.json, the tables), ``table2.json``, ``table2.png`` and ``table2_curves.png``, from
    the runs' folders as they stand; returns the summary."""
    summary = summarize(output_dir, seeds)
    ran = runs(seeds)
    where = arm_runs.machines(output_dir, ran) or "none ended yet"
    forms = arm_runs.optimizers(output_dir, ran) or "-"
    storage.write_text(  # each file replaced whole: a stop as it is written leaves the old one
        os.path.join(output_dir, TABLE_FILE),
        f"{header}\n{ABOUT}\n\n{what_ran(summary)}\n\nRuns (each run's config.json): {where}; "
        f"optimizer {forms}.\n\n{markdown_tables(summary)}",
    )
    storage.write_text(
        os.path.join(output_dir, SUMMARY_FILE),
        json.dumps({"header": header, "datasets": summary}, indent=2),
    )
    plot(summary, os.path.join(output_dir, PLOT_FILE))
    folders = {
        f"{s['title']} ({s['experiment']})": [
            os.path.join(output_dir, e["folder"]) for e in s["runs"] if e["folder"]
        ]
        for s in summary.values()
    }
    diverged = {
        f"{s['title']} ({s['experiment']})": max(d["step"] for d in s["diverged"])
        for s in summary.values()
        if s["diverged"] and not s["ended"]
    }
    curves = os.path.join(output_dir, CURVES_FILE)
    arm_curves.plot(folders, curves, title(summary), batch_size=batch_size, diverged=diverged)
    return summary
