"""A stop at any moment: SIGTERM (a scheduler, ``kill``) and SIGINT (Ctrl-C) end a launcher in
one line and exit 3 (``configs.errors.PREEMPTED_EXIT``), whatever it is doing, and lose nothing
it wrote.

:func:`install` is a launcher's first statement (``launch/cifar.py``, ``launch/study.py``,
``launch/table2.py``, ``launch/evaluate.py``). From then on the first SIGTERM or SIGINT writes one
line on stderr, ``stopped by SIGTERM <when>; <then>`` (what the launcher is doing and what to do
next: :func:`doing`), and raises ``SystemExit(3)`` where the program is: its ``finally`` blocks
and ``atexit`` handlers run (a folder's lock withdrawn, a temporary file removed, a child of
``subprocess.run`` killed), and no traceback is printed. Where the signal lands in a finaliser
or a garbage collector's callback, which cannot raise, it is delivered again once that code has
returned. A later signal is ignored, so that the
clean-up finishes; so is one after the launcher's last line (:func:`ended`, which
``runs.cli.exit_codes`` calls), so that it ends as it was ending. What a stop may cut short is
written whole or not at all (``host.storage``).

Where a stop must wait for the work in hand, the code doing it puts its own handlers in for the
while and this one back after: a training call (``host.preemption``: a checkpoint of the step
reached, then ``preempted at step N``) and a launcher's runs (``studies.run_loop``: each run
stopped with SIGTERM and waited for, the tables written, then one line).
"""

from __future__ import annotations

import os
import signal
import sys

from resnet_noBN.configs.errors import PREEMPTED_EXIT

SIGNALS = (signal.SIGTERM, signal.SIGINT)
RESUME = "rerun the same command to resume"

_said = {"when": "as it started: nothing lost", "then": RESUME}
_received: list[int] = []
_ended: list[bool] = []  # the program's work is done (:func:`ended`)
_written: list[bool] = []  # the stop's line is written
_again: list[int] = []  # a stop swallowed, to deliver again (_swallowed)
AGAIN_S = 0.001  # a swallowed stop is delivered again this long after (_swallowed)


def doing(when: str, then: str = RESUME) -> None:
    """What a stop now interrupts, for its line: ``when`` (e.g. "while checking every run:
    nothing written") and ``then``, what to do next."""
    _said.update(when=when, then=then)


def name(signum: int) -> str:
    """A signal's name: "SIGTERM"."""
    return signal.Signals(signum).name


def note(signum: int) -> None:
    """A signal met by the code in charge (a training call, a launcher's runs): from now on the
    handler :func:`install` put in ignores every signal, so that the stop under way ends in its
    own one line."""
    _received.append(signum)


def ended() -> None:
    """The program's work is done, its last line written (its result, or its one line of an
    error): a signal from now on is ignored, so that it ends as it was ending (its exit status,
    its clean-up at exit), not in a second line."""
    _ended.append(True)


def _stop(signum, frame) -> None:
    if _received or _ended:  # a stop under way (its clean-up finishes), or the end
        return
    note(signum)
    if not _written:
        _written.append(True)
        # os.write, not print: the signal may come while the program is inside a print
        os.write(2, f"stopped by {name(signum)} {_said['when']}; {_said['then']}\n".encode())
    raise SystemExit(PREEMPTED_EXIT)


def _swallowed(unraisable, previous=sys.unraisablehook) -> None:
    """``sys.unraisablehook``: a stop's SystemExit raised where Python cannot raise it, in a
    finaliser or a garbage collector's callback (JAX's runs at each collection). Python would
    print it and go on, the stop lost. So the signal comes again a moment later (SIGALRM),
    once that code has returned; its line is not written twice. Anything else goes to
    ``previous``."""
    stop = unraisable.exc_value
    if isinstance(stop, SystemExit) and stop.code == PREEMPTED_EXIT and _written and _received:
        _again.append(_received.pop())
        signal.signal(signal.SIGALRM, _stop_again)
        signal.setitimer(signal.ITIMER_REAL, AGAIN_S)
        return
    previous(unraisable)


def _stop_again(signum, frame) -> None:
    """The swallowed stop, again (:func:`_swallowed`); later still where it lands in that hook."""
    if frame is not None and frame.f_code is _swallowed.__code__:
        signal.setitimer(signal.ITIMER_REAL, AGAIN_S)
        return
    _stop(_again.pop(), frame)


def install(when: str | None = None, then: str = RESUME) -> None:
    """SIGTERM and SIGINT end the program in one line and exit 3 (the module's docstring);
    ``when`` and ``then``: what a stop interrupts first (:func:`doing`)."""
    if when:
        doing(when, then)
    for sig in SIGNALS:
        signal.signal(sig, _stop)
    sys.unraisablehook = _swallowed
