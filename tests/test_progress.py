"""resnet_noBN.progress: the recent rate, the time left, the finish, and the lines' cadence."""

import datetime

from resnet_noBN.progress import Progress, clock, duration, finish_at


class FakeClock:
    """A monotonic clock and a wall clock that move only when told."""

    def __init__(self, wall: float):
        self.t, self.wall0 = 0.0, wall

    def monotonic(self) -> float:
        return self.t

    def wall(self) -> float:
        return self.wall0 + self.t


def progress(total, fake, **kwargs) -> Progress:
    return Progress(total, monotonic=fake.monotonic, wall=fake.wall, **kwargs)


def test_duration_reads_at_a_glance():
    assert [duration(s) for s in (0, 45.4, 725, 10_920, 370_800, -3)] == [
        "0 s",
        "45 s",
        "12 min 05 s",
        "3 h 02 min",
        "4 d 07 h",
        "0 s",
    ]


def test_time_left_is_the_rest_at_the_recent_rate():
    fake = FakeClock(wall=1_700_000_000.0)
    p = progress(1_000, fake, done=100)  # resumed at 100: those count as done, not in the rate
    assert p.rate() is None and p.seconds_left() is None
    assert p.fields()["time_left_s"] is None and p.fields()["finish"] is None
    p.add(10, None)  # the first call also compiled: done, but not timed
    assert p.done == 110 and p.rate() is None
    p.add(20, 10.0)
    p.add(30, 10.0)
    assert p.rate() == 2.5  # 50 steps in 20 s
    assert p.seconds_left() == (1_000 - 160) / 2.5
    fake.t = 95.0
    fields = p.fields()
    assert fields["elapsed_s"] == 95.0 and fields["time_left_s"] == 336.0
    assert fields["finish"] == finish_at(336.0, fake.wall()).isoformat(timespec="seconds")


def test_the_rate_forgets_work_older_than_its_window():
    p = progress(10_000, FakeClock(0.0), window_s=100.0)
    p.add(10, 100.0)  # 0.1 unit/s
    p.add(100, 50.0)  # 2 units/s
    assert p.rate() == 110 / 150  # the newest alone is under the window: the older one stays
    p.add(100, 50.0)
    assert p.rate() == 2.0  # the two newest fill the window: the slow one is forgotten


def test_a_line_is_owed_every_n_units_or_every_s_seconds_whichever_first():
    fake = FakeClock(0.0)
    p = progress(1_000, fake, every_units=100, every_s=60.0)
    owed = []
    for _ in range(12):  # a slow step: 25 s each, 12 steps
        fake.t += 25.0
        p.add(1, 25.0)
        owed.append(p.due())
    # at 50, 100? no: 25 s a step, so seconds since the last line reach 60 at steps 3, 6, 9, 12
    assert [i + 1 for i, o in enumerate(owed) if o] == [3, 6, 9, 12]
    fast = progress(250, FakeClock(0.0), every_units=100, every_s=60.0)
    fast_owed = []
    for _ in range(25):  # fast steps: 0.01 s each, never 60 s: every 100 steps, and the end
        fast.add(10, 0.1)
        fast_owed.append(fast.due())
    assert [10 * (i + 1) for i, o in enumerate(fast_owed) if o] == [100, 200, 250]


def test_text_names_elapsed_left_and_finish_on_the_local_clock():
    start = datetime.datetime(2026, 11, 24, 14, 0, tzinfo=datetime.UTC).timestamp()
    fake = FakeClock(start)
    p = progress(100, fake)
    fake.t = 30.0
    assert p.text() == "elapsed 30 s"
    p.add(10, 20.0)
    left = 90 / 0.5
    assert p.text() == (
        f"elapsed 30 s  left 3 min 00 s  finish {clock(finish_at(left, fake.wall()), fake.wall())}"
    )


def test_clock_gives_the_day_only_when_it_is_not_today():
    now = datetime.datetime(2026, 11, 24, 14, 0).astimezone()
    later_today = now + datetime.timedelta(hours=3)
    tomorrow = now + datetime.timedelta(days=1)
    assert clock(later_today, now.timestamp()) == later_today.strftime("%H:%M")
    assert clock(tomorrow, now.timestamp()) == tomorrow.strftime("%a %d %b %H:%M")
