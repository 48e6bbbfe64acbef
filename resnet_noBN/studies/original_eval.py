"""A run's figures, the whole-test ones and the original code's (arXiv:1611.04231, Table 2's
figures came from the tensorflow/models ``resnet/`` code of 2016), from its folder alone.

The original ``resnet_main.py`` evaluated in a process of its own, beside training: in a loop, it
restored the latest checkpoint, read ``eval_batch_count`` = 50 batches of 100 test images (5,000
of CIFAR's 10,000) from a queue that runs through the test file in order and round again, and
logged the precision of those 5,000 and the **best precision seen so far**; then it slept 60 s.
So each evaluation saw the next 5,000 images of the cycle (for CIFAR: its two halves in turn),
of whichever checkpoint was newest (one every 600 s by default), and the figure it left was a
maximum over the run.

From a run's ``answers.jsonl`` (``trainers.answers``: which test images each evaluation got
right), :func:`figures` gives, beside the whole-test final and best errors:

* ``original_2016_error``: 100% minus the best precision over successive 5,000-image windows, one
  window per evaluation (the k-th evaluation reads images 5000k .. 5000k + 4999 of the cycle):
  the original figure with one of its evaluations per checkpoint;
* ``original_2016_either_window_error``: the same with every evaluation's best window (both
  halves of CIFAR's test set): the original evaluator, which evaluated each checkpoint several
  times (every 60 s plus the evaluation's own time, against a checkpoint every 600 s), saw each
  checkpoint on both halves in turn.

Both are optimistic by construction: a maximum over evaluations of noisy half-set figures, not
a held-out estimate. They are labelled so wherever printed.
"""

from __future__ import annotations

import numpy as np

from resnet_noBN.trainers.answers import Evaluation

WINDOW = 50 * 100  # the original evaluation: eval_batch_count 50 batches of 100 images


def window_precision(correct: np.ndarray, start: int, size: int = WINDOW) -> float:
    """The precision over ``size`` images of the test cycle from image ``start`` on (wrapping
    round at the end, as the original queue does)."""
    n = len(correct)
    index = (start + np.arange(min(size, n))) % n
    return float(np.mean(correct[index]))


def _percent(fraction: float) -> float:
    """A fraction of the test images as a percentage, to a hundredth of an image in 10,000."""
    return round(100.0 * fraction, 4)


def window_starts(n: int, size: int = WINDOW) -> list[int]:
    """Where the successive windows of the cycle through ``n`` test images start, until they
    repeat (CIFAR's 10,000: 0 and 5,000); one window (0) where it holds the whole set."""
    if size >= n:
        return [0]
    starts, start = [], 0
    while start not in starts:
        starts.append(start)
        start = (start + size) % n
    return starts


def figures(evaluations: list[Evaluation]) -> dict:
    """The run's test-error figures (%, over ``evaluations``, oldest first): the final and the
    best whole-test error, and the two original-code figures of the module's docstring, with the
    steps where each was reached. Empty where there is no evaluation."""
    if not evaluations:
        return {}
    whole = [_percent(1 - float(np.mean(e.correct))) for e in evaluations]
    steps = [e.step for e in evaluations]
    n = len(evaluations[0].correct)
    starts = window_starts(n)
    windows = [[window_precision(e.correct, start) for start in starts] for e in evaluations]
    one_each = [w[k % len(w)] for k, w in enumerate(windows)]
    either = [max(w) for w in windows]
    best = int(np.argmin(whole))
    return {
        "evaluations": len(evaluations),
        "test_examples": n,
        "final_step": steps[-1],
        "final_error": whole[-1],
        "best_error": whole[best],
        "best_step": steps[best],
        "original_2016_error": _percent(1 - max(one_each)),
        "original_2016_step": steps[int(np.argmax(one_each))],
        "original_2016_either_window_error": _percent(1 - max(either)),
        "original_2016_either_window_step": steps[int(np.argmax(either))],
    }
