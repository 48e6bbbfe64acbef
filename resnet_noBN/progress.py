"""How far a long job has come and how long the rest will take.

A job is a count of equal units of work (a run's training steps; a study's runs; the
theory launchers' experiments). :class:`Progress` keeps the rate over the recent units only, so
that a rate printed an hour into a run is the rate of that hour, not one diluted by the first
call's compilation or by evaluations (the caller times only the work, and shows the rest apart),
and turns it into the time left and the finish on the local clock. :meth:`Progress.due` says
when a progress line is owed: every ``every_units`` units or every ``every_s`` seconds,
whichever comes first, so a slow machine shows life within a minute. Plain Python: no Keras.
"""

from __future__ import annotations

import collections
import datetime
import time

RECENT_S = 300.0  # the rate is measured over the work of about the last five minutes
DAY_S = 86_400.0


def duration(seconds: float) -> str:
    """``seconds`` to read at a glance: "45 s", "12 min 05 s", "3 h 02 min", "4 d 07 h"."""
    seconds = max(0, round(seconds))
    days, rest = divmod(seconds, 86_400)
    hours, rest = divmod(rest, 3_600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days} d {hours:02d} h"
    if hours:
        return f"{hours} h {minutes:02d} min"
    if minutes:
        return f"{minutes} min {secs:02d} s"
    return f"{secs} s"


def finish_at(seconds_left: float, now: float) -> datetime.datetime:
    """The local time ``seconds_left`` after the epoch time ``now``."""
    return datetime.datetime.fromtimestamp(now + seconds_left).astimezone()


def clock(moment: datetime.datetime, now: float) -> str:
    """``moment`` on the local clock: "17:05" on the day of ``now``, else "Wed 25 Nov 17:05"."""
    today = datetime.datetime.fromtimestamp(now).astimezone().date()
    return moment.strftime("%H:%M" if moment.date() == today else "%a %d %b %H:%M")


class Progress:
    """Units done out of ``total``, the recent rate, the time left and the finish.

    ``done``: units already done when this process started (a resumed run's step); they count
    toward the total but not toward the rate. ``monotonic`` and ``wall`` are the clocks (default
    ``time.monotonic`` and ``time.time``; tests pass fakes): ``monotonic`` times the lines'
    cadence and the elapsed time, ``wall`` gives the finish on the local clock.
    """

    def __init__(
        self,
        total: int,
        done: int = 0,
        every_units: int | None = None,
        every_s: float | None = 60.0,
        window_s: float = RECENT_S,
        monotonic=None,
        wall=None,
    ):
        self.total, self.done = total, done
        self.every_units, self.every_s, self.window_s = every_units, every_s, window_s
        self._monotonic, self._wall = monotonic or time.monotonic, wall or time.time
        self.start = self._last_line = self._monotonic()
        self._recent: collections.deque[tuple[int, float]] = collections.deque()

    def add(self, units: int, seconds: float | None) -> None:
        """``units`` more done; ``seconds`` the time they took, or None where that time is not
        the work's alone (a first call that also compiled): counted as done, not in the rate."""
        self.done += units
        if seconds is None or seconds <= 0:
            return
        self._recent.append((units, seconds))
        while sum(s for _, s in self._recent) - self._recent[0][1] >= self.window_s:
            self._recent.popleft()

    def rate(self) -> float | None:
        """Units per second over the recent timed work (None before any)."""
        seconds = sum(s for _, s in self._recent)
        return sum(u for u, _ in self._recent) / seconds if seconds else None

    def seconds_left(self) -> float | None:
        rate = self.rate()
        return None if rate is None else max(0, self.total - self.done) / rate

    def elapsed(self) -> float:
        return self._monotonic() - self.start

    def due(self) -> bool:
        """Whether a progress line is owed now: ``done`` is a multiple of ``every_units``, at
        least ``every_s`` seconds passed since the last line, or the job is done. Resets the
        time since the last line when it says yes."""
        now = self._monotonic()
        owed = (
            self.done >= self.total
            or (self.every_units is not None and self.done % self.every_units == 0)
            or (self.every_s is not None and now - self._last_line >= self.every_s)
        )
        if owed:
            self._last_line = now
        return owed

    def fields(self) -> dict:
        """What a progress record adds: elapsed_s, time_left_s and finish (ISO 8601, local
        time with its offset); the last two None before the rate is known."""
        left = self.seconds_left()
        return {
            "elapsed_s": round(self.elapsed(), 1),
            "time_left_s": None if left is None else round(left, 1),
            "finish": None
            if left is None
            else finish_at(left, self._wall()).isoformat(timespec="seconds"),
        }

    def text(self, seconds_left: float | None = None) -> str:
        """``elapsed 12 min 03 s  left 3 h 02 min  finish 17:05`` (left and finish once the
        rate is known); ``seconds_left``: the time left where the caller knows it better (a
        plan's projection), instead of the one at the recent rate."""
        line = f"elapsed {duration(self.elapsed())}"
        left = self.seconds_left() if seconds_left is None else seconds_left
        if left is not None:
            now = self._wall()
            line += f"  left {duration(left)}  finish {clock(finish_at(left, now), now)}"
        return line


def step_of(progress: Progress, name: str, say, work):
    """``work()`` timed as one unit of ``progress``'s job, then one line, e.g.
    ``[2/5] Lemma 2.4 done; elapsed 40 s  left 1 min 40 s  finish 17:05``; returns its result.
    For jobs of a few unequal parts (the theory launchers): the time left assumes the parts to
    come take what the recent ones took."""
    t0 = time.perf_counter()
    result = work()
    progress.add(1, time.perf_counter() - t0)
    say(f"[{progress.done}/{progress.total}] {name} done; {progress.text()}")
    return result
