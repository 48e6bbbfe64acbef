"""resnet_noBN.progress: the recent rate, the time left, the finish, and the lines' cadence;
the training loop's progress lines, records and warning on a slow fake step."""

import contextlib
import datetime
import time

import numpy as np

from resnet_noBN.configs.recipe_config import TrainConfig
from resnet_noBN.progress import Progress, clock, duration, finish_at, step_of
from resnet_noBN.trainers import health
from resnet_noBN.trainers.loop import TrainLoop, slow_run_warning
from resnet_noBN.trainers.run_log import TRAIN_FILE, RunLog, read_metrics


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


# ------------------------------------------------------------------ the training loop's progress
class SlowFakeTrainer(TrainLoop):
    """A TrainLoop whose every step takes ``step_s`` seconds of a fake clock (the first call
    ``compile_s`` more), with no model: the loop's schedule alone."""

    def __init__(self, tmp_path, clock: FakeClock, step_s: float, compile_s: float, **recipe):
        self.cfg = TrainConfig(**recipe)
        self.model_dir, self.log = str(tmp_path), RunLog(str(tmp_path), "fake")
        self.clock, self.step_s, self.compile_s, self._step = clock, step_s, compile_s, 0

    step = property(lambda self: self._step)

    def checkpoints(self):
        return []

    def save(self):
        self._saved_step = self._step

    def learning_rate(self):
        return self.cfg.learning_rate

    def start(self, train_source, step):
        return None

    def run_steps(self, iterator, num_steps):
        self.clock.t += num_steps * self.step_s + (self.compile_s if self._step == 0 else 0)
        self._step += num_steps
        n, batch = num_steps, self.cfg.batch_size
        # health.METRICS: the sums of the loss, the hits, the examples and the two terms over
        # the call's steps, the last step's |g|^2, the largest |logit|
        values = [2.0 * n, 0.5 * batch * n, batch * n, 1.9 * n, 0.1 * n, 4.0, 3.0]
        return dict(zip(health.METRICS, values))

    def eval_batches(self, eval_source):
        return [(np.array([1, 0]), np.array([[1], [1]]), np.arange(2))]

    def weight_norm(self):
        return 10.0

    def guard(self, print_fn):
        return contextlib.nullcontext(Unguarded())

    def weights_digest(self):
        return "fake"


class Unguarded:
    signalled = False  # no signal reached it

    @staticmethod
    def run(fn, *args):
        return fn(*args)


def train_fake(tmp_path, monkeypatch, step_s, compile_s=30.0, faster="", **recipe):
    fake = FakeClock(wall=time.time())
    monkeypatch.setattr(time, "perf_counter", fake.monotonic)
    monkeypatch.setattr(time, "monotonic", fake.monotonic)
    trainer = SlowFakeTrainer(tmp_path, fake, step_s, compile_s, **recipe)
    lines = []
    trainer.train(None, None, print_fn=lines.append, faster=faster)
    return lines, read_metrics(str(tmp_path), TRAIN_FILE)


def test_a_slow_step_shows_progress_every_minute_and_records_every_log_every(tmp_path, monkeypatch):
    # 25 s a step: log_every=100 alone would say nothing for 42 minutes
    lines, records = train_fake(
        tmp_path, monkeypatch, step_s=25.0, train_steps=12, log_every=100, eval_every=100
    )
    progress = [line for line in lines if line.startswith("step ") and "loss" in line]
    # step 1 (30 s of compiling + 25 s) is not yet a minute; then a line once 60 s have passed
    # since the last: every third step (75 s), and the last
    assert [int(line.split()[1]) for line in progress] == [2, 5, 8, 11, 12]
    assert "25.0 images/s" not in progress[0] and "5.1 images/s" in progress[1]  # 128 / 25
    assert "left 2 min 55 s" in progress[1]  # 7 steps of 25 s
    assert all("elapsed " in line and "finish " in line for line in progress)
    announce = [line for line in lines if line.startswith("the first call took")]
    assert announce == [
        f"the first call took 55.0 s (tracing and compiling the step); at 5.1 images/s the 10 "
        f"steps left take 4 min 10 s (finish {announce[0].split('(finish ')[1]}"
    ]
    assert not any(line.startswith("warning:") for line in lines)
    # train.jsonl: the last step only (log_every=100), with the progress fields
    assert [r["step"] for r in records] == [12]
    assert records[0]["elapsed_s"] == 55.0 + 11 * 25 and records[0]["time_left_s"] == 0.0
    assert records[0]["images_per_sec"] == 128 / 25


def test_a_run_past_a_day_is_warned_of_once_with_the_faster_paths(tmp_path, monkeypatch):
    lines, _ = train_fake(
        tmp_path,
        monkeypatch,
        step_s=2.0,
        train_steps=50_000,
        log_every=10_000,
        eval_every=50_000,
        checkpoint_every=50_000,
        log_every_s=0,
        faster="a GPU",
    )
    warnings = [line for line in lines if line.startswith("warning:")]
    # after the first timed call: 49,998 steps of 2 s = 1 d 03 h 46 min
    assert warnings == [
        "warning: at this rate the run takes 1 d 03 h more on this machine; faster: a GPU"
    ]
    assert lines.index(warnings[0]) == 1  # right after the announcement, before any progress
    progress = [line for line in lines if line.startswith("step ") and "loss" in line]
    assert [int(line.split()[1]) for line in progress] == [10_000, 20_000, 30_000, 40_000, 50_000]


def test_a_run_just_under_a_day_is_not_warned_of(tmp_path, monkeypatch):
    lines, _ = train_fake(
        tmp_path,
        monkeypatch,
        step_s=1.0,
        train_steps=86_000,
        log_every=86_000,
        eval_every=86_000,
        checkpoint_every=86_000,
    )
    assert not any(line.startswith("warning:") for line in lines)
    assert "steps left take 23 h 53 min" in lines[0]


def test_the_warning_names_default_paths_without_a_launchers_own():
    assert slow_run_warning(200_000.0) == (
        "warning: at this rate the run takes 2 d 07 h more on this machine; faster: a GPU, or "
        "fewer --train_steps (the time is proportional to them)"
    )


def test_an_evaluation_on_its_own_says_the_batches_done_and_the_time_left(monkeypatch, tmp_path):
    fake = FakeClock(wall=time.time())
    monkeypatch.setattr(time, "perf_counter", fake.monotonic)
    monkeypatch.setattr(time, "monotonic", fake.monotonic)

    class SlowEvaluation(SlowFakeTrainer):
        def eval_batches(self, eval_source):
            for batch in range(10):  # 10 batches of 500 images, 20 s each, the first 40 s
                fake.t += 40.0 if fake.t == 0 else 20.0
                labels = np.arange(500) % 10
                predicted = np.where(np.arange(500) < 400, labels, labels + 1)[:, None]
                yield labels, predicted, batch * 500 + np.arange(500)

    trainer = SlowEvaluation(tmp_path, fake, step_s=1.0, compile_s=0.0)
    lines = []
    result = trainer.evaluate(None, Progress(10), lines.append)
    assert result["test_examples"] == 5_000 and result["test_precision"] == 0.8
    # a line once a minute has passed since the last (40+20, then every 3 batches), and the end
    assert [line.split(", elapsed")[0] for line in lines] == [
        "evaluated 2 of 10 batches (1000 images)",
        "evaluated 5 of 10 batches (2500 images)",
        "evaluated 8 of 10 batches (4000 images)",
        "evaluated 10 of 10 batches (5000 images)",
    ]
    assert "elapsed 1 min 00 s  left 2 min 40 s  finish " in lines[0]  # 8 batches of 20 s


def test_a_job_of_unequal_parts_says_each_part_done_and_the_time_left(monkeypatch):
    fake = FakeClock(wall=time.time())
    monkeypatch.setattr(time, "perf_counter", fake.monotonic)
    monkeypatch.setattr(time, "monotonic", fake.monotonic)
    job, said = Progress(3), []

    def part(seconds, value):
        fake.t += seconds
        return value

    assert step_of(job, "Claim 2.3", said.append, lambda: part(10.0, "a")) == "a"
    step_of(job, "Lemma 2.4", said.append, lambda: part(30.0, "b"))
    step_of(job, "Theorem 2.1", said.append, lambda: part(20.0, "c"))
    assert [line.split(";")[0] for line in said] == [
        "[1/3] Claim 2.3 done",
        "[2/3] Lemma 2.4 done",
        "[3/3] Theorem 2.1 done",
    ]
    assert "elapsed 40 s  left 20 s  finish " in said[1]  # one part left at 20 s a part
    assert "elapsed 1 min 00 s  left 0 s" in said[2]
