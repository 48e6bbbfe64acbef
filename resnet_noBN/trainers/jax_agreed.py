"""The decisions every process of a JAX job (``backends.jax_job``) holds alike: a process waits
for the others in every step's gradient sum, so a decision one process takes from its own clock
or its own signals (the steps of the next call, the time budget, a stop on SIGTERM, a seed drawn
at random) would leave another waiting forever. One process: each is its own value.
"""

from __future__ import annotations

import jax
import numpy as np
from jax.experimental import multihost_utils


def is_job() -> bool:
    """Whether this process is one of several of a JAX job."""
    return jax.process_count() > 1


def from_process_0(value):
    """Process 0's ``value`` (a number or a tree of arrays, alike in shape on every process), on
    every process (one all-reduce; only the input of process 0 counts)."""
    return multihost_utils.broadcast_one_to_all(value)


def any_process(flag: bool) -> bool:
    """Whether ``flag`` is set on any process of the job (one all-gather)."""
    return bool(np.any(multihost_utils.process_allgather(np.array(flag))))
