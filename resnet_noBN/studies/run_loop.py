"""The one loop of the launchers that train several runs (``launch/study.py``,
``launch/table2.py``), each a ``launch/cifar.py`` process in its own folder: :func:`run_all`
starts them (``arm_runs.start``), ``parallel`` at a time, in order; watches them (with ``echo``,
the lines of a run's log worth showing: :class:`LogTail`); and reports each as it ends
(``arm_runs.outcome``), in a line with the runs done and the time left, then calls the launcher
back to write its tables.

Its stops, made here once for both launchers. While it runs, the first SIGTERM or SIGINT starts
no run more and sends SIGTERM to each running one: each saves a checkpoint of the step it
reached and exits 3 (``host.preemption``). The loop waits for them, reports them, writes the
tables, and returns the signal (:attr:`Ended.stopped_by`), for the launcher's one line
(:meth:`Ended.stop_line`) and exit 3. A later signal is ignored (``host.stops.note``), so a
second Ctrl-C cuts no save short. Killed (``kill -9``), its runs get SIGTERM all the same
(``arm_runs.start``).
"""

from __future__ import annotations

import dataclasses
import os
import re
import signal
import time
from collections.abc import Callable

from resnet_noBN.host import stops
from resnet_noBN.progress import Progress
from resnet_noBN.studies import arm_runs

POLL_S = 1.0  # how often the runs are looked at
# what a run's log shows with ``echo``: its evaluations, its rate and projection, a resume, a
# divergence's replay, warnings and errors; its progress lines once a minute (SHOW_EVERY_S)
SHOWN = re.compile(r"test error|the first call took|^resumed from|^replaying|^warning|^error")
PROGRESS = re.compile(r"^step +\d+ +loss")
SHOW_EVERY_S = 60.0


@dataclasses.dataclass(frozen=True)
class Job:
    """One run to do: its name in words ("cifar10_paper, seed 0"), its folder, its
    ``launch/cifar.py`` command and environment (None: this one's)."""

    name: str
    folder: str
    command: tuple[str, ...]
    env: dict | None = None


@dataclasses.dataclass(frozen=True)
class Ended:
    """How the loop ended: ``stopped_by``, the signal that stopped it (None: every run ran);
    ``stopped``, the runs it stopped, each with the step of its checkpoint; ``failed``, the
    runs that failed (neither ended nor diverged) while it was not stopping."""

    stopped_by: int | None
    stopped: tuple[tuple[str, int], ...]
    failed: tuple[str, ...]

    def stop_line(self) -> str:
        """The launcher's one line of a stop: the signal, what each run stopped kept."""
        kept = "; ".join(
            f"{name} saved at step {step:,}"
            if step
            else f"{name} stopped before its first checkpoint"
            for name, step in self.stopped
        )
        return (
            f"stopped by {stops.name(self.stopped_by)}: {kept or 'no run was training'}; rerun "
            "the same command to resume"
        )


class LogTail:
    """The lines a run appends to its launch.log from now on, the ones worth showing echoed
    with the run's name (:data:`SHOWN`; a progress line once a minute)."""

    def __init__(self, path: str, name: str, print_fn=print):
        self.path, self.name, self.print_fn, self.partial, self.shown_s = (
            path,
            name,
            print_fn,
            "",
            0.0,
        )
        self.offset = os.path.getsize(path) if os.path.exists(path) else 0

    def echo(self) -> None:
        with open(self.path, encoding="utf-8", errors="replace") as f:
            f.seek(self.offset)
            text = self.partial + f.read()
            self.offset = f.tell()
        *lines, self.partial = text.split("\n")
        for line in lines:
            progress = PROGRESS.match(line) and time.monotonic() - self.shown_s >= SHOW_EVERY_S
            if SHOWN.search(line) or progress:
                self.shown_s = time.monotonic() if progress else self.shown_s
                self.print_fn(f"  {self.name}: {line}")


def run_all(
    jobs: list[Job],
    after_each: Callable[[], object],
    parallel: int = 1,
    echo: bool = False,
    seconds_left: Callable[[], float | None] | None = None,
    print_fn=print,
    alone: Callable[[int], str | None] | None = None,
) -> Ended:
    """Every run of ``jobs`` (the module's docstring); ``after_each()`` after each ends (the
    launcher's tables). The line of each: ``[2/4] NAME: what it did; elapsed ... left ...
    finish ...``, the time left from ``seconds_left()`` where given (a plan's projection), else
    at the rate of the runs that ended here (a stopped one is not done: it counts among those
    left, not in the rate). ``alone(n)``: a line said once, the first time ``n`` runs train
    with fewer than ``parallel`` and none waiting (the launcher's advice; None: nothing). No
    jobs: it returns at once and leaves the signals to the caller's handlers (a stop then comes
    during what the caller does next, and says so)."""
    if not jobs:
        return Ended(None, (), ())
    todo, running, stopping, stopped, failed = list(jobs), [], [], [], []
    progress, reported, advised = Progress(len(jobs), every_units=1), 0, alone is None

    def stop(signum, frame):
        if stopping:
            return
        stopping.append(signum)
        stops.note(signum)
        for proc, *_ in running:
            proc.send_signal(signal.SIGTERM)

    previous = {sig: signal.signal(sig, stop) for sig in stops.SIGNALS}
    try:
        while running or (todo and not stopping):
            while todo and len(running) < parallel and not stopping:
                job = todo.pop(0)
                path = os.path.join(job.folder, arm_runs.LOG_FILE)
                tail = LogTail(path, job.name, print_fn) if echo else None
                proc = arm_runs.start(job.folder, list(job.command), job.env)
                running.append((proc, job, time.perf_counter(), tail))
                if stopping:  # a signal as it started
                    proc.send_signal(signal.SIGTERM)
                print_fn(f"started {job.name}")
            if not (advised or todo or stopping) and 0 < len(running) < parallel:
                advised, line = True, alone(len(running))
                if line:
                    print_fn(line)
            time.sleep(POLL_S)
            for entry in list(running):
                proc, job, began, tail = entry
                if tail is not None:
                    tail.echo()
                if proc.poll() is None:
                    continue
                running.remove(entry)
                said = arm_runs.outcome(job.folder, proc.returncode)
                if proc.returncode in (0, 1):  # ended, or diverged: done
                    progress.add(1, time.perf_counter() - began)
                elif stopping:
                    stopped.append((job.name, arm_runs.checkpoint_step(job.folder)))
                else:
                    failed.append(job.name)
                reported += 1
                left = seconds_left() if seconds_left else None
                print_fn(f"[{reported}/{len(jobs)}] {job.name}: {said}; {progress.text(left)}")
                after_each()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return Ended(stopping[0] if stopping else None, tuple(stopped), tuple(failed))
