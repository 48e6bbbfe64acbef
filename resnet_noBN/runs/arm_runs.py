"""Where a comparison of arms (a study of ``launch/study.py``, the paper's claims among them)
keeps its runs: ``<output_dir>/runs/<arm>-seed<k>``, a folder per arm and
seed, holding ``result.json`` once the run has ended (its last line of JSON, or its divergence);
a folder without one is a run to start or resume. Plain files: no backend."""

from __future__ import annotations

import collections
import json
import os
from collections.abc import Iterable

from resnet_noBN.runs.record import read_config, section

RESULT_FILE = "result.json"


def run_dir(output_dir: str, arm: str, seed: int) -> str:
    return os.path.join(output_dir, "runs", f"{arm}-seed{seed}")


def read_result(output_dir: str, arm: str, seed: int) -> dict | None:
    """The ended run's result (None while it has not ended)."""
    path = os.path.join(run_dir(output_dir, arm, seed), RESULT_FILE)
    if not os.path.exists(path):
        return None
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def _machine(runtime: dict) -> str:
    """Where a run computed, from its config.json's ``runtime``: its accelerator, or on a CPU
    the widest vector extension it had (what sets a CPU run's speed here)."""
    if runtime.get("devices", ["CPU"]) != ["CPU"]:
        return " + ".join(runtime["devices"])
    if "cpu_isa" not in runtime:
        return "a CPU its config.json does not name"
    isa = runtime["cpu_isa"]
    if "avx512f" in isa:
        return "a CPU with AVX-512 and AMX" if "amx_tile" in isa else "a CPU with AVX-512"
    return "a CPU with AVX2" if "avx2" in isa else "a CPU without AVX2"


def machines(output_dir: str, runs: Iterable[tuple[str, int]]) -> str:
    """How many of the ended ``runs`` ((arm, seed) pairs) computed where, most first, each read
    from the run's own config.json: a comparison resumed over days may mix machines, and its
    wall times compare only within one."""
    counts = collections.Counter()
    for arm, seed in runs:
        if read_result(output_dir, arm, seed) is not None:
            counts[_machine(read_config(run_dir(output_dir, arm, seed)).get("runtime", {}))] += 1
    return ", ".join(f"{n} on {where}" for where, n in counts.most_common())


def optimizers(output_dir: str, runs: Iterable[tuple[str, int]]) -> str:
    """How many of the ended ``runs`` trained with which optimizer, most first, each read from
    the run's own config.json (``record.section``: a record without one ran Keras' momentum): a
    comparison resumed across the change of default (``momentum_2016`` since 2026-11-28) may mix
    the two forms of momentum."""
    counts = collections.Counter()
    for arm, seed in runs:
        if read_result(output_dir, arm, seed) is not None:
            recipe = section(read_config(run_dir(output_dir, arm, seed)), "recipe")
            counts[recipe["optimizer"]] += 1
    return ", ".join(f"{name} in {n}" for name, n in counts.most_common())


def write_result(folder: str, result: dict) -> None:
    """``result`` as the ``result.json`` of the run in ``folder``."""
    with open(os.path.join(folder, RESULT_FILE), "w", encoding="utf-8") as f:
        json.dump(result, f, indent=2)
