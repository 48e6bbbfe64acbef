"""Where a comparison of arms (the claims sweep of ``launch/claims.py``, a study of
``launch/study.py``) keeps its runs: ``<output_dir>/runs/<arm>-seed<k>``, a folder per arm and
seed, holding ``result.json`` once the run has ended (its last line of JSON, or its divergence);
a folder without one is a run to start or resume. Plain files: no backend."""

from __future__ import annotations

import json
import os

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


def write_result(folder: str, result: dict) -> None:
    """``result`` as the ``result.json`` of the run in ``folder``."""
    with open(os.path.join(folder, RESULT_FILE), "w", encoding="utf-8") as f:
        json.dump(result, f, indent=2)
