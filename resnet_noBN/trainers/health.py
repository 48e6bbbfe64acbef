"""The run's health, logged at every progress record (``train.jsonl``) on every backend, so that a
divergence is explained and not only seen: the objective's two terms apart (cross-entropy and
the weight decay r·Σ‖W‖²/2 of arXiv:1611.04231, Section 4's recipe), the global gradient norm,
the largest |logit| of a batch and the global weight norm.

A training step gives its metrics as a dict by name, :data:`METRICS`, the same on every backend:
the objective, the correct predictions and the examples of its batch, the two terms, its
gradient's squared norm and its largest |logit|. Each metric's rule says how a compiled call of K
steps combines its steps, and a step its replicas: ``sum`` (over the steps and the replicas),
``last`` (the call's last step's; the same on every replica), ``max`` (the largest over both).
The trainers build a step's dict with :func:`step_metrics` (``recipe.objective``'s parts and the
gradient) and a call's with :func:`add_step` (``keras.ops``: a TensorFlow graph loop, a JAX step,
a PyTorch step alike); :func:`scalars` turns a call's into the logged values. A call ends at
every progress record, so a record's gradient norm is the gradient of the step it names.

A new metric is one line of :data:`METRICS` and its value in the step (``recipe.objective``'s
parts, or :func:`step_metrics`): every backend carries it, and :func:`scalars` logs it in
``train.jsonl`` (a summed one as its mean over the call's steps).
"""

from __future__ import annotations

import math

import numpy as np
from keras import ops

# Each metric of a training step, by name, and how a call combines it over its steps and a step
# over its replicas: "sum" both, "last" the call's last step's (the same on every replica),
# "max" the largest of both. A compiled call returns one float32 scalar of each.
METRICS = {
    "loss": "sum",  # the objective (cross-entropy + weight decay)
    "correct": "sum",  # arg-max hits on the training batch
    "examples": "sum",  # the batch's size
    "cross_entropy": "sum",  # the batch's mean cross-entropy (the loss's term)
    "weight_decay": "sum",  # r * sum ||W||^2 / 2
    "grad_norm_sq": "last",  # ||gradient||^2 (the objective's, decay included)
    "max_abs_logit": "max",  # the largest |logit| of the batch
}


def zeros() -> dict:
    """The metrics of a call before its first step."""
    return {name: ops.zeros([], "float32") for name in METRICS}


def grad_norm_sq(grads):
    """||g||^2 over every gradient (float32)."""
    return sum(ops.sum(ops.square(ops.cast(g, "float32"))) for g in grads if g is not None)


def step_metrics(loss, parts: dict, examples, grads_norm_sq) -> dict:
    """One step's :data:`METRICS`, float32 scalars: ``loss``, ``parts`` (``recipe.objective``'s,
    by name, combined over the replicas by their rules), the batch's ``examples`` and its
    gradient's squared norm."""
    values = {**parts, "loss": loss, "examples": examples, "grad_norm_sq": grads_norm_sq}
    return {name: ops.cast(values[name], "float32") for name in METRICS}


def combine(rule: str, before, after):
    """Two values of a metric of rule ``rule``, one after the other, as one (keras.ops)."""
    if rule == "sum":
        return before + after
    return after if rule == "last" else ops.maximum(before, after)


def add_step(totals: dict, step: dict) -> dict:
    """``totals`` with one more step, each metric by its rule."""
    return {name: combine(rule, totals[name], step[name]) for name, rule in METRICS.items()}


def to_numpy(totals: dict) -> dict[str, float]:
    """A call's metrics on the host (Python floats, each the float32 it was), from any
    backend's tensors."""
    return {name: float(ops.convert_to_numpy(value)) for name, value in totals.items()}


def combine_calls(calls: list[dict]) -> dict[str, np.float64]:
    """The metrics of several calls run one after the other (oldest first), as one call's (the
    parameter-server trainer schedules one-step calls)."""
    totals = {name: np.float64(value) for name, value in calls[0].items()}
    for call in calls[1:]:
        totals = {
            name: np.float64(combine(rule, totals[name], np.float64(call[name])))
            for name, rule in METRICS.items()
        }
    return totals


def scalars(totals: dict, num_steps: int) -> dict[str, float]:
    """The logged values of a call of ``num_steps`` steps from its metrics: the mean loss, the
    precision of its batches, then each other metric in :data:`METRICS`' order: a summed one as
    its mean over the steps (the cross-entropy and weight-decay terms), the last step's gradient
    norm, the largest |logit|."""
    t = {name: float(value) for name, value in totals.items()}
    logged = {"loss": t["loss"] / num_steps, "precision": t["correct"] / t["examples"]}
    for name, rule in METRICS.items():
        if name in ("loss", "correct", "examples"):
            continue
        if name == "grad_norm_sq":
            logged["grad_norm"] = math.sqrt(t[name]) if t[name] >= 0 else math.nan
        else:
            logged[name] = t[name] / num_steps if rule == "sum" else t[name]
    return logged


HEALTH = ("cross_entropy", "weight_decay", "weight_norm", "grad_norm", "max_abs_logit")


def text(values: dict) -> str:
    """The health of ``values`` (:func:`scalars` with ``weight_norm``) in words, for the line
    that reports a divergence."""
    return ", ".join(f"{name} {values[name]:.4g}" for name in HEALTH if name in values)
