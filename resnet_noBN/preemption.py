"""Preemption: on SIGTERM or SIGINT, save a checkpoint of the step reached, on every worker at the
same step, then stop.

Schedulers stop jobs with SIGTERM and, after a grace period, SIGKILL: SLURM (preemption,
``scontrol requeue``, ``scancel``; its KillWait), Kubernetes (eviction;
terminationGracePeriodSeconds), ``docker stop``. TensorFlow's own
``tf.distribute.experimental.PreemptionCheckpointHandler`` does the agreeing: the training loop
runs each compiled call through ``handler.run``; after a signal the handler sets, through the
coordination service, the call count at which every worker saves (the current call and one
more), calls ``save_fn`` there and then ``exit_fn``, which raises :class:`Preempted`.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Callable

import tensorflow as tf

from resnet_noBN.distribute import is_parameter_server


class Preempted(RuntimeError):
    """SIGTERM or SIGINT stopped training; a checkpoint of the step reached was saved first."""


@contextlib.contextmanager
def guard(
    strategy: tf.distribute.Strategy,
    checkpoint_dir: str,
    save_fn: Callable[[], None],
    message: Callable[[], str],
    print_fn=print,
):
    """The handler for one training loop, which calls ``handler.run(fn, *args)`` per call.

    SIGTERM and SIGINT (Ctrl-C; a second one aborts with KeyboardInterrupt) print a line and go
    to the handler's own SIGTERM handler. ``save_fn`` saves; :class:`Preempted` carries
    ``message()``. The handler restores nothing (the trainer did, skipping unreadable
    checkpoints), so it gets an empty checkpoint manager. Under parameter servers only the
    chief runs the loop: the handler works there in its single-process mode. Signal handlers
    can only be set in the main thread: elsewhere the loop runs unguarded.
    """
    if threading.current_thread() is not threading.main_thread():
        yield _Unguarded()
        return
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}

    def exit_fn():
        raise Preempted(message())

    handler = tf.distribute.experimental.PreemptionCheckpointHandler(
        None if is_parameter_server(strategy) else strategy.cluster_resolver,
        tf.train.CheckpointManager(
            tf.train.Checkpoint(),
            os.path.join(checkpoint_dir, "preemption-handler-restores-nothing"),
            max_to_keep=1,
        ),
        termination_config=tf.distribute.experimental.TerminationConfig(
            exit_fn=exit_fn, grace_period=0, save_fn=save_fn
        ),
    )
    catch = signal.getsignal(signal.SIGTERM)  # the handler's own
    received = []

    def on_signal(signum, frame):
        if signum == signal.SIGINT and received:
            raise KeyboardInterrupt
        received.append(signum)
        print_fn(
            f"{signal.Signals(signum).name} received: saving a checkpoint at the end of "
            "the next call, then exiting"
            + (" (Ctrl-C again to abort)" if signum == signal.SIGINT else "")
        )
        catch(signal.SIGTERM, frame)

    for sig in previous:
        signal.signal(sig, on_signal)
    try:
        yield handler
    finally:
        for sig, handler_before in previous.items():
            signal.signal(sig, handler_before)
        # TF's own shutdown of the handler's watcher threads, while every worker is still up
        # (garbage collection never calls it: the threads hold the handler)
        handler.__del__()


class _Unguarded:
    """Stands in for the handler where signals cannot be caught."""

    @staticmethod
    def run(fn, *args):
        return fn(*args)
