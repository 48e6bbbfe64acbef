"""The run's health, logged at every progress record (``train.jsonl``) on every backend, so that a
divergence is explained and not only seen: the objective's two terms apart (cross-entropy and
the weight decay r·Σ‖W‖²/2 of arXiv:1611.04231, Section 4's recipe), the global gradient norm,
the largest |logit| of a batch and the global weight norm.

A compiled call of K steps returns one vector, :data:`CALL_TOTALS`, the same on every backend:
its steps' sums of the loss, the correct predictions, the examples and the two terms; the
squared gradient norm of its last step; the largest |logit| over its batches. The trainers build
it with :func:`step_totals` and :func:`add_step` (``keras.ops``: a TensorFlow graph loop, a JAX
step, a PyTorch step alike); :func:`scalars` turns it into the logged values. A call ends at
every progress record, so a record's gradient norm is the gradient of the step it names.
"""

from __future__ import annotations

import math

import numpy as np
from keras import ops

# What a compiled call returns, in this order (a float32 vector)
CALL_TOTALS = (
    "loss",  # sum over the call's steps of the objective (cross-entropy + weight decay)
    "correct",  # sum of arg-max hits on the training batches
    "examples",  # sum of the batches' sizes
    "cross_entropy",  # sum over the steps of the batch's mean cross-entropy (the loss's term)
    "weight_decay",  # sum over the steps of r * sum ||W||^2 / 2
    "grad_norm_sq",  # ||gradient||^2 of the call's last step (the objective's, decay included)
    "max_abs_logit",  # the largest |logit| over the call's batches
)
SUMMED = 5  # the first five are sums over the steps (and over the replicas of a step)


def zeros():
    """The totals of a call before its first step."""
    return ops.zeros([len(CALL_TOTALS)], "float32")


def grad_norm_sq(grads):
    """||g||^2 over every gradient (float32)."""
    return sum(ops.sum(ops.square(ops.cast(g, "float32"))) for g in grads if g is not None)


def step_totals(loss, parts, examples, grads_norm_sq):
    """One step's vector of :data:`CALL_TOTALS`: ``loss``, ``parts`` (``recipe.objective``'s
    [correct, cross-entropy, weight decay, largest |logit|], summed over the replicas but the
    last, which is their largest), the batch's ``examples`` and its gradient's squared norm."""
    f32 = [ops.cast(v, "float32") for v in (loss, parts[0], examples, parts[1], parts[2])]
    return ops.stack(f32 + [ops.cast(grads_norm_sq, "float32"), ops.cast(parts[3], "float32")])


def add_step(totals, step):
    """``totals`` with one more step: the sums added, the gradient norm replaced by the step's,
    the largest |logit| kept."""
    return ops.concatenate(
        [
            totals[:SUMMED] + step[:SUMMED],
            step[SUMMED : SUMMED + 1],
            ops.maximum(totals[6:], step[6:]),
        ]
    )


def combine_calls(calls: np.ndarray) -> np.ndarray:
    """The totals of several calls run one after the other ([calls, CALL_TOTALS], oldest first),
    as one call's (the parameter-server trainer schedules one-step calls)."""
    calls = np.asarray(calls, np.float64)
    return np.concatenate([calls[:, :SUMMED].sum(0), calls[-1, SUMMED:-1], calls[:, -1:].max(0)])


def scalars(totals, num_steps: int) -> dict[str, float]:
    """The logged values of a call of ``num_steps`` steps from its :data:`CALL_TOTALS`: the mean
    loss, the precision of its batches, the mean cross-entropy and weight-decay terms, the last
    step's gradient norm and the largest |logit|."""
    t = dict(zip(CALL_TOTALS, (float(v) for v in totals)))
    return {
        "loss": t["loss"] / num_steps,
        "precision": t["correct"] / t["examples"],
        "cross_entropy": t["cross_entropy"] / num_steps,
        "weight_decay": t["weight_decay"] / num_steps,
        "grad_norm": math.sqrt(t["grad_norm_sq"]) if t["grad_norm_sq"] >= 0 else math.nan,
        "max_abs_logit": t["max_abs_logit"],
    }


HEALTH = ("cross_entropy", "weight_decay", "weight_norm", "grad_norm", "max_abs_logit")


def text(values: dict) -> str:
    """The health of ``values`` (:func:`scalars` with ``weight_norm``) in words, for the line
    that reports a divergence."""
    return ", ".join(f"{name} {values[name]:.4g}" for name in HEALTH if name in values)
