"""Choosing the ``tf.distribute`` strategy the training loop runs under.

``default``: one device (TF's default strategy). ``mirrored``: all local GPUs, synchronous.
``multi_worker``: ``MultiWorkerMirroredStrategy`` across the machines that ``TF_CONFIG`` names.
"""

from __future__ import annotations

import tensorflow as tf

STRATEGIES = ("default", "mirrored", "multi_worker")


def make_strategy(name: str) -> tf.distribute.Strategy:
    """The strategy called ``name`` (ValueError naming the choices for an unknown one)."""
    if name == "default":
        return tf.distribute.get_strategy()
    if name == "mirrored":
        return tf.distribute.MirroredStrategy()
    if name == "multi_worker":
        return tf.distribute.MultiWorkerMirroredStrategy()
    raise ValueError(f"--strategy={name} is unknown; choose one of {', '.join(STRATEGIES)}")


def is_chief(strategy: tf.distribute.Strategy) -> bool:
    """Whether this process writes the run's files: the chief, or worker 0 when there is none."""
    resolver = getattr(strategy, "cluster_resolver", None)
    if resolver is None or not resolver.task_type:
        return True
    if resolver.task_type == "chief":
        return True
    return (resolver.task_type == "worker" and resolver.task_id == 0
            and "chief" not in resolver.cluster_spec().as_dict())
