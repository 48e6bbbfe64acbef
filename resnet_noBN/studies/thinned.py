"""A study's ended runs in the form they are committed: small, with every figure its report
gives still read from them (``launch/study.py --report_only --thin``).

Each ended run keeps its ``config.json`` and ``result.json`` whole. Three files shrink:

* ``answers.jsonl`` keeps its last evaluation's answers (each test image right or wrong; not its
  predicted classes); the figures the study reads from all evaluations (the best error and the
  2016 code's statistic, ``studies.original_eval``) are written first, whole, to
  ``figures.json``, which :func:`figures` reads in its place;
* ``train.jsonl`` and ``metrics.jsonl`` keep every record and the fields of a curve and of the
  run's health (``trainers.health``), each number to :data:`DIGITS` significant digits (a test
  error of 10,000 images is exact in 4); the speed and the clock (``images_per_sec``,
  ``elapsed_s``, ``time_left_s``, ``finish``) go, and so do the spaces JSON puts after ``,`` and
  ``:`` (a tenth of the bytes).

Thinning again changes nothing. A run still going is left as it is.
"""

from __future__ import annotations

import json
import os

from resnet_noBN.host import storage
from resnet_noBN.studies import original_eval
from resnet_noBN.trainers import run_log
from resnet_noBN.trainers.answers import ANSWERS_FILE, read_answers

FIGURES_FILE = "figures.json"
DIGITS = 5  # significant digits a thinned train.jsonl keeps (float32 holds about 7)
DROPPED = ("images_per_sec", "elapsed_s", "time_left_s", "finish")
COMPACT = (",", ":")  # json.dumps' separators without the spaces


def figures(folder: str) -> dict:
    """The run's figures (``original_eval.figures``): its ``figures.json`` where it was thinned,
    else from its whole ``answers.jsonl``."""
    path = os.path.join(folder, FIGURES_FILE)
    if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    return original_eval.figures(read_answers(os.path.join(folder, ANSWERS_FILE)))


def _rounded(value):
    if isinstance(value, float):
        return float(f"{value:.{DIGITS}g}")
    return value


def thin(folder: str) -> None:
    """The ended run in ``folder`` in its committed form (the module docstring); each file
    replaced whole (``host.storage``)."""
    answers = os.path.join(folder, ANSWERS_FILE)
    if not os.path.exists(os.path.join(folder, FIGURES_FILE)):
        storage.write_text(
            os.path.join(folder, FIGURES_FILE), json.dumps(figures(folder), indent=2) + "\n"
        )
    with open(answers, encoding="utf-8") as f:
        last = json.loads([line for line in f if line.strip()][-1])
    kept = {k: last[k] for k in ("step", "examples", "correct")}
    storage.write_text(answers, json.dumps(kept, separators=COMPACT) + "\n")
    for name in (run_log.TRAIN_FILE, run_log.METRICS_FILE):
        records = run_log.read_metrics(folder, name)
        rounded = [{k: _rounded(v) for k, v in r.items() if k not in DROPPED} for r in records]
        storage.write_text(
            os.path.join(folder, name),
            "".join(json.dumps(r, separators=COMPACT) + "\n" for r in rounded),
        )
