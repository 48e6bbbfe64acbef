"""The study ``near_identity`` summarised by depth (``launch/near_identity.py --summarize``): does
each trained block sit closer to the identity as the network deepens, as Theorem 2.1's optimum
does (arXiv:1611.04231, Section 2: max_i ‖A_i‖ ≤ (4π + 3γ)/ℓ, a slope of −1 on log-log axes)?

Reads the ``near_identity.json`` of each run of ``<study>/runs/`` (``trained.near_identity``) and
its last test error (``metrics.jsonl``); writes ``summary.json`` (per init, by depth ℓ, the
residual blocks: the largest and the mean over blocks of the ratio ‖h(x)‖/‖s(x)‖ and of the
Lipschitz bound, trained and at initialisation, each with its fitted slope and 95% interval,
``theory.near_identity.fitted_slope``) and ``near_identity.png`` (the two measures against ℓ on
log-log axes, slopes −1 and log ℓ / ℓ drawn for reference, and the test error by depth).
Plain files: no Keras.
"""

from __future__ import annotations

import glob
import json
import math
import os

from resnet_noBN import plotting
from resnet_noBN.configs.errors import InputError
from resnet_noBN.host import storage
from resnet_noBN.theory.near_identity import fitted_slope
from resnet_noBN.trained.model_paths import NEAR_IDENTITY_FILE
from resnet_noBN.trainers.run_log import read_metrics

SUMMARY = "summary.json"
PLOT = "near_identity.png"
MEASURES = ("largest_ratio", "mean_ratio", "largest_lipschitz", "mean_lipschitz")
STATES = ("trained", "initialisation")
# the init of a run, named by its network's block (configs.experiments.NEAR_IDENTITY_INITS)
INITS = {"hardt_ma": "paper", "fixup": "fixup"}


def runs(study_dir: str) -> list[tuple[str, dict]]:
    """(run folder, its near_identity.json) of every run of the study measured; InputError
    where none is."""
    found = []
    for path in sorted(glob.glob(os.path.join(study_dir, "runs", "*", NEAR_IDENTITY_FILE))):
        with open(path, encoding="utf-8") as f:
            found.append((os.path.dirname(path), json.load(f)))
    if not found:
        raise InputError(
            f"--summarize {study_dir}: no run there holds {NEAR_IDENTITY_FILE}; measure each run "
            "first (python launch/near_identity.py --model_dir=RUN)"
        )
    return found


def summary(found: list[tuple[str, dict]]) -> dict:
    """Per init: one row a run, by depth ℓ, and each series' slope against ℓ."""
    by_init: dict[str, list] = {}
    for folder, record in found:
        init = INITS.get(record["network"]["block"], record["network"]["block"])
        metrics = read_metrics(folder)
        row = {
            "run": os.path.basename(folder),
            "seed": record.get("seed"),
            "blocks": record["residual_blocks"],
            "layers": 2 * record["residual_blocks"] + 2,
            "step": record["step"],
            "test_error": metrics[-1]["test_error"] if metrics else None,
            **{
                f"{state}_{key}": (record[state] or {}).get(key)
                for state in STATES
                for key in MEASURES
            },
        }
        by_init.setdefault(init, []).append(row)
    result = {}
    for init, rows in by_init.items():
        rows.sort(key=lambda r: (r["blocks"], r["seed"]))
        depths = [r["blocks"] for r in rows]
        result[init] = {
            "runs": rows,
            "slopes": {
                f"{state}_{key}": fitted_slope(depths, [r[f"{state}_{key}"] for r in rows])
                for state in STATES
                for key in MEASURES
            },
        }
    return result


def _slope_text(fit: dict | None) -> str:
    if fit is None:
        return "no slope"
    interval = f" [{fit['low']:.2f}, {fit['high']:.2f}]" if "low" in fit else ""
    return f"slope {fit['slope']:.2f}{interval}"


def _depth_axis(ax, depths: list[int]) -> None:
    """The x axis of depths: a tick at each depth run, no minor ticks."""
    ax.set_xticks(depths, [str(d) for d in depths])
    ax.tick_params(axis="x", which="minor", bottom=False, labelbottom=False)
    ax.set_xlabel("residual blocks ℓ")


def plot(result: dict, path: str) -> str:
    """The two measures against ℓ (log-log; largest solid, mean dashed; at initialisation
    thin), the references ℓ^-1 and log ℓ / ℓ, and the test error by depth."""
    fig, (ratio_ax, bound_ax, error_ax) = plotting.figure(ncols=3, width=5.2, height=4.4)
    depths = sorted({r["blocks"] for init in result.values() for r in init["runs"]})
    for i, (init, entry) in enumerate(sorted(result.items())):
        rows = entry["runs"]
        x = [r["blocks"] for r in rows]
        for ax, measure in ((ratio_ax, "ratio"), (bound_ax, "lipschitz")):
            for state, width in (("trained", 2.0), ("initialisation", 0.8)):
                for which, style in (("largest", "-"), ("mean", "--")):
                    key = f"{state}_{which}_{measure}"
                    points = [(d, r[key]) for d, r in zip(x, rows) if r[key]]
                    if not points:
                        continue
                    label = f"{init}, {state}, {which}: {_slope_text(entry['slopes'][key])}"
                    ax.plot(
                        *zip(*points), style, marker="o", lw=width, ms=3 * width,
                        color=plotting.colour(i), label=label,
                    )  # fmt: skip
        errors = [(d, 100 * r["test_error"]) for d, r in zip(x, rows) if r["test_error"]]
        if errors:
            error_ax.plot(*zip(*errors), "-o", color=plotting.colour(i), label=init)
    for ax, measure in ((ratio_ax, "ratio"), (bound_ax, "lipschitz")):
        anchor = [
            r[f"trained_largest_{measure}"]
            for entry in result.values()
            for r in entry["runs"]
            if r["blocks"] == depths[0] and r[f"trained_largest_{measure}"]
        ]
        if anchor and len(depths) > 1:
            top, d0 = max(anchor), depths[0]
            ax.plot(depths, [top * d0 / d for d in depths], ":", color="grey", label="1/ℓ")
            ax.plot(
                depths,
                [top * (math.log(d) * d0) / (math.log(d0) * d) for d in depths],
                "-.",
                color="grey",
                label="log ℓ / ℓ",
            )
        ax.set_xscale("log")
        ax.set_yscale("log")
        _depth_axis(ax, depths)
        ax.legend(fontsize=5.5)
    ratio_ax.set_title("‖h(x)‖ / ‖s(x)‖ on the test images")
    bound_ax.set_title("Lipschitz bound ‖C2‖·‖C1‖ of each branch")
    error_ax.set_xscale("log")
    _depth_axis(error_ax, depths)
    error_ax.set_ylabel("test error (%)")
    error_ax.set_title("test error by depth")
    if error_ax.get_lines():  # no run evaluated: no legend (matplotlib warns on an empty one)
        error_ax.legend(fontsize=7)
    return plotting.save(fig, path)


def summarize(study_dir: str, print_fn=print) -> dict:
    """``summary.json`` and ``near_identity.png`` of the study in ``study_dir``; prints a line
    a series with its slope."""
    result = summary(runs(study_dir))
    storage.write_text(os.path.join(study_dir, SUMMARY), json.dumps(result, indent=1) + "\n")
    plot(result, os.path.join(study_dir, PLOT))
    for init, entry in sorted(result.items()):
        depths = ", ".join(str(r["blocks"]) for r in entry["runs"])
        print_fn(f"{init} (blocks {depths}):")
        for key, fit in entry["slopes"].items():
            print_fn(f"  {key}: {_slope_text(fit)}")
    return result
