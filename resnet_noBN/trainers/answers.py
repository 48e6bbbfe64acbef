"""Which test images each evaluation got right, kept in the run's folder (``answers.jsonl``): the
figures of any run can then be recomputed image by image, the original code's statistic among
them (``studies.original_eval``), and two runs compared prediction by prediction.

One line per evaluation, in the split's order (the order the run reads its test images: the
official record order of the binary files)::

    {"step": 2000, "examples": 10000, "correct": "<base64 of the packed bits>",
     "predicted": "<base64 of zlib of the uint8/uint16 classes>"}      # the last evaluation only

A bit is 1 where the image's arg max is its label; ``predicted`` (the final evaluation's) is each
image's predicted class. About 1.7 KB a line for CIFAR's 10,000 images, 5 to 15 KB for the
final classes.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import os
import zlib

import numpy as np

ANSWERS_FILE = "answers.jsonl"


@dataclasses.dataclass(frozen=True)
class Answers:
    """One evaluation of a split: ``correct`` (bool [N]) and ``predicted`` (int [N], the top-1
    class), both in the split's order."""

    correct: np.ndarray
    predicted: np.ndarray

    @classmethod
    def gathered(cls, parts: list[tuple[np.ndarray, np.ndarray, np.ndarray]]) -> Answers | None:
        """The answers of the whole split from its batches' (image index, correct, predicted),
        in any order (the batches of several replicas or input pipelines); None unless the
        indices are 0 to N - 1, each once (a pass over part of the split, or a repeated one, as
        a benchmark's, has no answers)."""
        index = np.concatenate([p[0] for p in parts]).astype(np.int64)
        order = np.argsort(index, kind="stable")
        if not np.array_equal(index[order], np.arange(len(index))):
            return None
        correct = np.concatenate([p[1] for p in parts]).astype(bool)[order]
        predicted = np.concatenate([p[2] for p in parts]).astype(np.int64)[order]
        return cls(correct, predicted)

    def line(self, step: int, final: bool) -> str:
        """The line of ``answers.jsonl`` for the evaluation of ``step`` (with the predicted
        classes where ``final``)."""
        record = {
            "step": step,
            "examples": len(self.correct),
            "correct": base64.b64encode(np.packbits(self.correct).tobytes()).decode(),
        }
        if final:
            dtype = np.uint8 if self.predicted.max(initial=0) < 256 else np.uint16
            packed = zlib.compress(self.predicted.astype(dtype).tobytes(), 9)
            record["predicted"] = base64.b64encode(packed).decode()
            record["predicted_dtype"] = np.dtype(dtype).name
        return json.dumps(record)


@dataclasses.dataclass(frozen=True)
class Evaluation:
    """One line of ``answers.jsonl`` read back: the step, ``correct`` (bool [N]) and, for the
    final evaluation, ``predicted`` (int [N]; None otherwise)."""

    step: int
    correct: np.ndarray
    predicted: np.ndarray | None


def decode(record: dict) -> Evaluation:
    """One line of ``answers.jsonl`` as an :class:`Evaluation`."""
    n = record["examples"]
    bits = np.frombuffer(base64.b64decode(record["correct"]), np.uint8)
    correct = np.unpackbits(bits)[:n].astype(bool)
    predicted = None
    if "predicted" in record:
        raw = zlib.decompress(base64.b64decode(record["predicted"]))
        predicted = np.frombuffer(raw, record["predicted_dtype"]).astype(np.int64)
    return Evaluation(record["step"], correct, predicted)


def read_answers(path: str) -> list[Evaluation]:
    """The evaluations of the answers file ``path`` (a run's ``answers.jsonl``), by step (a later
    line of the same step wins: a resumed run repeats the evaluation after its checkpoint); []
    where there is none."""
    if not os.path.exists(path):
        return []
    by_step = {}
    with open(path, encoding="utf-8") as f:
        for text in f:
            if text.strip():
                evaluation = decode(json.loads(text))
                by_step[evaluation.step] = evaluation
    return [by_step[step] for step in sorted(by_step)]


def final_predictions(path: str) -> Evaluation | None:
    """The last evaluation of the answers file ``path`` that holds predicted classes (a run's
    final one); None where there is none."""
    with_classes = [e for e in read_answers(path) if e.predicted is not None]
    return with_classes[-1] if with_classes else None
