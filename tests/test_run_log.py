"""trainers.run_log, in this process: what a run writes beside its checkpoints (train.jsonl,
metrics.jsonl, answers.jsonl, TensorBoard's train/ and eval/, the plot), each record once, what
a resumed run drops from them, its divergence's folder, and a failed write in one line naming
what it wrote; nothing at all from a worker that is not the chief."""

import json
import os
import types

import numpy as np
import pytest
from tensorboard.backend.event_processing.event_file_loader import EventFileLoader

from resnet_noBN.configs.errors import StorageError
from resnet_noBN.trainers import run_log
from resnet_noBN.trainers.answers import Answers
from resnet_noBN.trainers.run_log import RunLog

ANSWERS = Answers(np.array([True, False, True]), np.array([3, 7, 1]))


def scalars_of(folder) -> dict[int, set[str]]:
    """{step: names} of the scalars TensorBoard's event files in ``folder`` hold."""
    found = {}
    for name in os.listdir(folder):
        for event in EventFileLoader(str(folder / name)).Load():
            for value in event.summary.value:
                found.setdefault(event.step, set()).add(value.tag)
    return found


def scalars_listed(folder) -> list[tuple[int, str]]:
    """(step, name) of every scalar TensorBoard's event files in ``folder`` hold, repeats kept."""
    return sorted(
        (event.step, value.tag)
        for name in os.listdir(folder)
        for event in EventFileLoader(str(folder / name)).Load()
        for value in event.summary.value
    )


def lines(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.fixture
def plots(monkeypatch):
    """The plots a run log draws, as (steps, path, title), none drawn."""
    drawn = []

    def plot(records, path, title):
        drawn.append(([r["step"] for r in records], path, title))

    monkeypatch.setattr(run_log, "plot_error_curve", plot)
    return drawn


@pytest.fixture
def clock(monkeypatch):
    """The run log's clock (``time.monotonic``), set by the test: ``clock[0]`` seconds."""
    now = [100.0]
    monkeypatch.setattr(run_log, "time", types.SimpleNamespace(monotonic=lambda: now[0]))
    return now


def test_each_record_is_written_once_where_a_reader_finds_it(tmp_path, plots, clock):
    """A progress record: its scalars in train.jsonl and TensorBoard's train/; an evaluation:
    metrics.jsonl whole, its two errors in eval/, its answers (the predicted classes where
    final), the plot of every evaluation so far with the run's title (at the final one, then
    10 s later); the best test error and the record of a step read back; the later of two
    records of a step wins."""
    log = RunLog(str(tmp_path), "a title")
    assert log.best_test_error() is None and log.evaluation_at(5) is None
    log.train(5, {"loss": 2.5, "learning_rate": 0.1}, {"progress": 0.5})
    first = {"step": 5, "test_error": 0.4, "test_precision": 0.6, "test_examples": 3}
    log.evaluation(first, ANSWERS)
    log.evaluation({**first, "step": 10, "test_error": 0.3, "test_precision": 0.7}, ANSWERS, True)
    clock[0] += 10  # the default redraw_every_s
    log.evaluation({**first, "step": 15, "test_error": 0.35, "test_precision": 0.65})
    assert lines(tmp_path / "train.jsonl") == [
        {"step": 5, "loss": 2.5, "learning_rate": 0.1, "progress": 0.5}
    ]
    assert [r["step"] for r in lines(tmp_path / "metrics.jsonl")] == [5, 10, 15]
    assert lines(tmp_path / "metrics.jsonl")[0] == first
    assert (tmp_path / "answers.jsonl").read_text() == (
        ANSWERS.line(5, final=False) + "\n" + ANSWERS.line(10, final=True) + "\n"
    )
    assert scalars_of(tmp_path / "train") == {5: {"loss", "learning_rate"}}
    assert scalars_of(tmp_path / "eval") == {
        s: {"test_error", "test_precision"} for s in (5, 10, 15)
    }
    path = str(tmp_path / "test_error.png")
    assert plots == [([5, 10], path, "a title"), ([5, 10, 15], path, "a title")]
    assert log.best_test_error() == 0.3 and log.evaluation_at(10)["test_error"] == 0.3
    with open(tmp_path / "metrics.jsonl", "a") as f:
        f.write("\n" + json.dumps({**first, "step": 10, "test_error": 0.2}) + "\n")
    assert [r["test_error"] for r in run_log.read_metrics(str(tmp_path))] == [0.4, 0.2, 0.35]
    assert log.best_test_error() == 0.2


def test_the_plot_is_redrawn_at_most_every_10_s_at_the_last_evaluation_and_at_a_stop(
    tmp_path, plots, clock
):
    """An evaluation redraws the plot once redraw_every_s (10 s by default) have passed since
    the last redraw or the log's opening, and at the final evaluation; else the redraw is owed,
    and draw() (as a run stops) makes it once; 0 redraws at every evaluation; a log that is not
    the chief's draws nothing."""
    log, path = RunLog(str(tmp_path), "t"), str(tmp_path / "test_error.png")
    assert log.redraw_every_s == 10.0
    log.draw()  # nothing evaluated: nothing owed
    clock[0] += 9.9
    log.evaluation({"step": 5, "test_error": 0.5})
    assert plots == []
    clock[0] += 0.1  # 10 s since the log was opened
    log.evaluation({"step": 10, "test_error": 0.4})
    assert plots == [([5, 10], path, "t")]
    clock[0] += 9.9
    log.evaluation({"step": 15, "test_error": 0.3})
    log.evaluation({"step": 20, "test_error": 0.2})
    assert len(plots) == 1
    log.draw()
    log.draw()  # owed once
    assert plots[1:] == [([5, 10, 15, 20], path, "t")]
    clock[0] += 9.9  # 9.9 s after that redraw: owed, but the final evaluation draws
    log.evaluation({"step": 25, "test_error": 0.1}, final=True)
    assert plots[2:] == [([5, 10, 15, 20, 25], path, "t")]
    each = RunLog(str(tmp_path), "t", redraw_every_s=0)
    each.evaluation({"step": 30, "test_error": 0.1})
    assert plots[3:] == [([5, 10, 15, 20, 25, 30], path, "t")]
    (tmp_path / "worker").mkdir()
    worker = RunLog(str(tmp_path / "worker"), "t", enabled=False)
    clock[0] += 60
    worker.evaluation({"step": 5, "test_error": 0.5}, final=True)
    worker.draw()
    assert len(plots) == 4 and os.listdir(tmp_path / "worker") == []


def test_a_resumed_run_drops_the_records_past_its_checkpoint(tmp_path, plots):
    """resume_at(10): every record past step 10 dropped from the three files, and a line cut
    short (whatever it holds); the plot redrawn from what is left; a file with nothing past it
    left as it was; resume_at(0) drops every evaluation and removes the plot; a folder without
    records has nothing dropped, its plot kept."""
    log = RunLog(str(tmp_path), "t")
    for step in (5, 10, 15):
        log.train(step, {"loss": 1.0})
        log.evaluation({"step": step, "test_error": step / 100}, ANSWERS)
    with open(tmp_path / "train.jsonl", "a") as f:
        f.write('{"step": 20, "lo')  # a kill as it was appended
    with open(tmp_path / "metrics.jsonl", "a") as f:
        f.write('{"step": 10}')  # cut before its newline: a record is a whole line
    plots.clear()
    log.resume_at(10)
    for name in ("train.jsonl", "metrics.jsonl", "answers.jsonl"):
        assert [r["step"] for r in lines(tmp_path / name)] == [5, 10], name
    assert plots == [([5, 10], str(tmp_path / "test_error.png"), "t")]
    before = (tmp_path / "metrics.jsonl").stat().st_mtime_ns
    log.resume_at(12)
    assert (tmp_path / "metrics.jsonl").stat().st_mtime_ns == before and len(plots) == 1
    (tmp_path / "test_error.png").write_bytes(b"a plot")
    log.resume_at(0)
    assert (tmp_path / "metrics.jsonl").read_text() == "" and len(plots) == 1
    assert not (tmp_path / "test_error.png").exists()
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "test_error.png").write_bytes(b"a plot")
    RunLog(str(tmp_path / "other"), "t").resume_at(0)
    assert os.listdir(tmp_path / "other") == ["test_error.png"]


def test_a_resumed_run_drops_the_tensorboard_events_past_its_checkpoint(
    tmp_path, plots, monkeypatch
):
    """resume_at(10) in a new run's log (as a resumed run starts): TensorBoard's train/ and
    eval/ keep their events up to step 10 and lose a record cut short; the steps trained again
    are then in TensorBoard once, in the new writer's file beside the old; a file with nothing
    past the step is left as it was; resume_at(0) keeps no scalar."""
    first = RunLog(str(tmp_path), "t")
    for step in (5, 10, 15):
        first.train(step, {"loss": 1.0})
        first.evaluation({"step": step, "test_error": step / 100})
    (old,) = os.listdir(tmp_path / "train")
    with open(tmp_path / "train" / old, "ab") as f:
        f.write(b"\x20\x00\x00")  # a kill as the next record was written
    renamed = []
    monkeypatch.setattr(
        os, "replace", lambda a, b, real=os.replace: (renamed.append(a), real(a, b))
    )
    resumed = RunLog(str(tmp_path), "t")
    resumed.resume_at(10)
    # each event file written first beside it, under a name TensorBoard does not read
    events = [a for a in renamed if not a.endswith(".jsonl.tmp")]
    assert [os.path.dirname(a) for a in events] == [str(tmp_path / d) for d in ("train", "eval")]
    assert not [a for a in events if run_log.EVENTS_MARK in os.path.basename(a)]
    assert scalars_listed(tmp_path / "train") == [(5, "loss"), (10, "loss")]
    assert scalars_listed(tmp_path / "eval") == [(5, "test_error"), (10, "test_error")]
    assert sorted(os.listdir(tmp_path / "train")) == [old]  # no temporary file left
    resumed.train(15, {"loss": 0.5})
    resumed.evaluation({"step": 15, "test_error": 0.1})
    assert scalars_listed(tmp_path / "train") == [(5, "loss"), (10, "loss"), (15, "loss")]
    assert [s for s, _ in scalars_listed(tmp_path / "eval")] == [5, 10, 15]
    assert len(os.listdir(tmp_path / "train")) == 2  # the new writer's file beside the old
    before = (tmp_path / "train" / old).stat().st_mtime_ns
    RunLog(str(tmp_path), "t").resume_at(15)
    assert (tmp_path / "train" / old).stat().st_mtime_ns == before
    RunLog(str(tmp_path), "t").resume_at(12)  # the old file as it was, the new one's 15 dropped
    assert (tmp_path / "train" / old).stat().st_mtime_ns == before
    assert scalars_listed(tmp_path / "train") == [(5, "loss"), (10, "loss")]
    RunLog(str(tmp_path), "t").resume_at(0)
    assert scalars_listed(tmp_path / "train") == scalars_listed(tmp_path / "eval") == []


def test_a_divergence_gets_a_folder_of_its_own_emptied_of_an_earlier_replay(tmp_path):
    log = RunLog(str(tmp_path), "t")
    replay = log.divergence()
    assert (replay.model_dir, replay.title, replay.enabled) == (
        str(tmp_path / "divergence"),
        "t",
        True,
    )
    (tmp_path / "divergence" / "train.jsonl").write_text("{}\n")
    again = log.divergence()
    assert os.listdir(tmp_path / "divergence") == [] and again.model_dir == replay.model_dir


def test_a_worker_that_is_not_the_chief_writes_nothing(tmp_path, plots):
    (tmp_path / "metrics.jsonl").write_text('{"step": 5, "test_error": 0.4}\n')
    log = RunLog(str(tmp_path / "run"), "t", enabled=False)
    log.train(5, {"loss": 1.0})
    log.evaluation({"step": 5, "test_error": 0.4}, ANSWERS)
    log.resume_at(0)
    replay = log.divergence()
    assert not (tmp_path / "run").exists() and not plots and replay.enabled is False
    assert RunLog(str(tmp_path), "t", enabled=False).best_test_error() is None


def test_a_failed_write_is_one_line_naming_what_it_wrote(tmp_path):
    log = RunLog(str(tmp_path), "t")
    (tmp_path / "train.jsonl").mkdir()
    (tmp_path / "metrics.jsonl").mkdir()
    end = "free space there or move the run to a larger disk, then rerun the same command to "
    end += "resume from the latest checkpoint"
    with pytest.raises(StorageError) as train:
        log.train(5, {"loss": 1.0})
    assert str(train.value) == (
        f"cannot write the training log (train.jsonl, train/) of step 5 into {tmp_path} (Is a "
        f"directory): {end}"
    )
    with pytest.raises(StorageError) as evaluation:
        log.evaluation({"step": 5, "test_error": 0.4})
    assert str(evaluation.value) == (
        f"cannot write the evaluation of step 5 (metrics.jsonl, eval/) into {tmp_path} (Is a "
        f"directory): {end}"
    )
    (tmp_path / "metrics.jsonl").rmdir()
    (tmp_path / "metrics.jsonl").write_text('{"step": 5}\n{"step": 10}\n')
    (tmp_path / "metrics.jsonl.tmp").mkdir()  # where the file is rewritten
    with pytest.raises(StorageError) as dropping:
        log.resume_at(5)
    assert str(dropping.value) == (
        f"cannot write the records past step 5 (metrics.jsonl, train.jsonl) into {tmp_path} (Is "
        f"a directory): {end}"
    )
    (tmp_path / "file").write_text("")
    with pytest.raises(StorageError) as replay:
        RunLog(str(tmp_path / "file"), "t").divergence()
    assert str(replay.value) == (
        f"cannot write the replay's folder {tmp_path / 'file' / 'divergence'} into "
        f"{tmp_path / 'file'} (Not a directory): {end}"
    )
    (tmp_path / "metrics.jsonl").unlink()
    (tmp_path / "test_error.png").mkdir()  # where the plot goes
    with pytest.raises(StorageError) as plot:
        log.evaluation({"step": 15, "test_error": 0.3}, final=True)
    assert str(plot.value) == (
        f"cannot write the plot test_error.png into {tmp_path} (Is a directory): {end}"
    )
    assert run_log.read_metrics(str(tmp_path)) == [{"step": 15, "test_error": 0.3}]
