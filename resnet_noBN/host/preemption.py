"""Preemption: on SIGTERM or SIGINT, save a checkpoint of the step reached, on every worker at the
same step, then stop.

Schedulers stop jobs with SIGTERM and, after a grace period, SIGKILL: SLURM (preemption,
``scontrol requeue``, ``scancel``; its KillWait), Kubernetes (eviction;
terminationGracePeriodSeconds), ``docker stop``. The training loop runs each compiled call
through ``handler.run`` of one of two guards:

* :func:`guard` (TensorFlow, any strategy): TensorFlow's own
  ``tf.distribute.experimental.PreemptionCheckpointHandler`` does the agreeing: after a signal it
  sets, through the coordination service, the call count at which every worker saves (the
  current call and one more), calls ``save_fn`` there and then raises :class:`Preempted`.
* :func:`local_guard` (JAX and PyTorch: one process, or each process of a JAX job): the call in
  progress ends and the loop writes its step's records; before the next call ``save_fn`` saves
  and :class:`Preempted` is raised; in a job, before every call, when a signal reached any
  process (``agree``), so that all save at the same step and stop together.

Signal handlers can only be set in the main thread: elsewhere the loop runs unguarded. No
TensorFlow is imported unless :func:`guard` is called.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Callable

from resnet_noBN.configs.errors import Preempted
from resnet_noBN.host import stops

_SIGNALS = (signal.SIGTERM, signal.SIGINT)


@contextlib.contextmanager
def _catch_signals(then: Callable, print_fn):
    """While inside (as: the signals received), the first SIGTERM or SIGINT prints a line and
    calls ``then(signum, frame)``; a later one is ignored (a second Ctrl-C, or the SIGTERM a
    launcher sends its run after the terminal's SIGINT: the checkpoint under way is saved all
    the same), and so is any after the block (``stops.note``). The previous handlers are
    restored after."""
    previous = {sig: signal.getsignal(sig) for sig in _SIGNALS}
    received = []

    def on_signal(signum, frame):
        if received:
            return
        received.append(signum)
        stops.note(signum)
        print_fn(
            f"{signal.Signals(signum).name} received: saving a checkpoint at the end of "
            "the next call, then exiting"
        )
        then(signum, frame)

    for sig in previous:
        signal.signal(sig, on_signal)
    try:
        yield received
    finally:
        for sig, handler_before in previous.items():
            signal.signal(sig, handler_before)


@contextlib.contextmanager
def guard(
    strategy,
    parameter_server: bool,
    checkpoint_dir: str,
    save_fn: Callable[[], None],
    message: Callable[[], str],
    print_fn=print,
):
    """The TensorFlow handler for one training loop under ``strategy`` (``parameter_server``:
    a ``ParameterServerStrategy``).

    ``save_fn`` saves; :class:`Preempted` carries ``message()``. The handler restores nothing
    (the trainer did, skipping unreadable checkpoints), so it gets an empty checkpoint manager.
    Under parameter servers only the chief runs the loop: the handler works there in its
    single-process mode.
    """
    if threading.current_thread() is not threading.main_thread():
        yield _Unguarded()
        return
    import tensorflow as tf

    def exit_fn():
        raise Preempted(message())

    handler = tf.distribute.experimental.PreemptionCheckpointHandler(
        None if parameter_server else strategy.cluster_resolver,
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
    try:
        with _catch_signals(lambda signum, frame: catch(signal.SIGTERM, frame), print_fn) as got:
            yield _Watched(handler, got)
    finally:
        # TF's own shutdown of the handler's watcher threads, while every worker is still up
        # (garbage collection never calls it: the threads hold the handler)
        handler.__del__()


@contextlib.contextmanager
def local_guard(
    save_fn: Callable[[], None],
    message: Callable[[], str],
    print_fn=print,
    agree: Callable[[bool], bool] | None = None,
):
    """The handler of a loop run by one process, or by each process of a JAX job: after a
    signal, the call in progress ends (and the loop writes its step's records), then, before
    the next, ``save_fn()`` and :class:`Preempted` (``message()``). ``agree``: in a job, whether
    any process received one, asked of every process before every call (each must run it,
    signalled or not)."""
    if threading.current_thread() is not threading.main_thread():
        yield _Unguarded()
        return
    handler = _LocalHandler(save_fn, message, agree or bool)
    with _catch_signals(lambda signum, frame: handler.stop.set(), print_fn) as got:
        yield _Watched(handler, got)


class _Watched:
    """A guard's handler (its ``run``) and whether a signal reached it (:attr:`signalled`):
    one that came after the loop's last call is a stop all the same (``TrainLoop.train``)."""

    def __init__(self, handler, received: list[int]):
        self._handler, self._received = handler, received

    def run(self, fn, *args):
        return self._handler.run(fn, *args)

    @property
    def signalled(self) -> bool:
        return bool(self._received)


class _LocalHandler:
    def __init__(self, save_fn, message, agree):
        self.save_fn, self.message, self.agree = save_fn, message, agree
        self.stop = threading.Event()

    def run(self, fn, *args):
        """``fn(*args)``, where no signal has come before it (TensorFlow's handler's order: the
        loop's records and events of the step a signal came in are written before the save, so
        the resumed run's curve has no hole at it)."""
        if self.agree(self.stop.is_set()):
            self.save_fn()
            raise Preempted(self.message())
        return fn(*args)


class _Unguarded:
    """Stands in for the handler where signals cannot be caught."""

    signalled = False

    @staticmethod
    def run(fn, *args):
        return fn(*args)
