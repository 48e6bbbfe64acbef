"""Speed settings that leave the mathematics unchanged (issue: "Fast"), on TensorFlow.

* Threading: on a small CPU, TensorFlow's default inter-op pool runs independent ops of a step
  concurrently with the intra-op pool that each conv already saturates, so steps are bimodal and
  slower; one inter-op thread and one intra-op thread per core keeps them steady.
* Mixed precision is the network's dtype policy (``build_cifar_model(cfg, precision)``), not a
  setting here: ``mixed_bfloat16`` computes convolutions in bfloat16 with float32 weights and
  float32 updates; the loss and the logits are cast to float32 (``trainers.recipe.objective``),
  and the fixed head's float32 kernel is never updated, so it stays bit-for-bit fixed.

Call :func:`configure` before any TensorFlow op runs.
"""

from __future__ import annotations

import os

import tensorflow as tf


def configure(intra_op_threads: int = 0, inter_op_threads: int = 0) -> None:
    """Set TF's thread pools (0 = TF's default for that pool)."""
    if intra_op_threads:
        tf.config.threading.set_intra_op_parallelism_threads(intra_op_threads)
    if inter_op_threads:
        tf.config.threading.set_inter_op_parallelism_threads(inter_op_threads)


def default_threads() -> tuple[int, int]:
    """(intra, inter) for a CPU-only host: all cores to each op, one op at a time.

    With a GPU, TF's defaults are kept (0, 0): the host threads only feed the device.
    """
    if tf.config.list_physical_devices("GPU"):
        return 0, 0
    return len(os.sched_getaffinity(0)), 1
