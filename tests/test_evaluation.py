"""launch/evaluate.py and resnet_noBN.runs.evaluation: a finished run's checkpoint evaluated again,
and the probe of the original CIFAR-100 reader's label leak (the first red pixel replaced)."""

import json
import shutil

import launchers
import numpy as np
import pytest
from test_launch_cifar import SMALL, cifar

from resnet_noBN.configs.errors import InputError
from resnet_noBN.datasets import cifar_data
from resnet_noBN.datasets.data_config import DataConfig
from resnet_noBN.runs.evaluation import probed_test_split
from resnet_noBN.trainers.answers import read_answers


@pytest.fixture(scope="module")
def c100(tmp_path_factory, write_cifar):
    folder = tmp_path_factory.mktemp("data") / "cifar-100-binary"
    return folder, write_cifar(folder, "cifar100", 40)


@pytest.fixture(scope="module")
def leaky_run(tmp_path_factory, c100):
    """4 steps on CIFAR-100 read as the original 2016 code did."""
    model_dir = tmp_path_factory.mktemp("run") / "c100_2016"
    proc = cifar(
        *SMALL,
        "--dataset=cifar100",
        "--cifar100_layout=original_2016",
        f"--data_path={c100[0]}",
        "--train_steps=4",
        "--eval_every=2",
        "--checkpoint_every=2",
        f"--model_dir={model_dir}",
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return model_dir


def evaluate(*args):
    return launchers.run("launch/evaluate.py", *args)


def listing(folder):
    return {p: (p.stat().st_size, p.stat().st_mtime_ns) for p in folder.rglob("*")}


def read_2016(folder, layout="original_2016"):
    return DataConfig("cifar100", data_path=str(folder), cifar100_layout=layout)


def test_the_probe_replaces_only_the_first_red_pixel(c100):
    folder, written = c100
    as_read, labels = probed_test_split(read_2016(folder))
    assert np.array_equal(as_read[:, 0, 0, 0], labels)  # the leak
    wrong, wrong_labels = probed_test_split(read_2016(folder), "wrong_label")
    true, _ = probed_test_split(read_2016(folder), "true_pixel")
    assert np.array_equal(wrong_labels, labels)
    assert np.all(wrong[:, 0, 0, 0] != labels) and np.all(wrong[:, 0, 0, 0] < 100)
    assert np.array_equal(true[:, 0, 0, 0], written["test"][0][:, 0, 0, 0])
    for probed in (wrong, true):
        rest = np.ones(as_read.shape, bool)
        rest[:, 0, 0, 0] = False
        assert np.array_equal(probed[rest], as_read[rest])
    assert not np.array_equal(wrong[:, 0, 0, 0], true[:, 0, 0, 0])
    cifar_data.clear_cache()


def test_the_probe_needs_the_original_layout(c100):
    with pytest.raises(InputError, match="--first_red_pixel=wrong_label probes the label leak"):
        probed_test_split(read_2016(c100[0], "official"), "wrong_label")


def test_a_run_evaluated_again_gives_its_own_figure_and_writes_nothing(leaky_run, c100):
    before = listing(leaky_run)
    proc = evaluate(f"--model_dir={leaky_run}", f"--data_path={c100[0]}")
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    last = json.loads((leaky_run / "metrics.jsonl").read_text().splitlines()[-1])
    assert (result["step"], result["test_examples"]) == (4, 40)
    assert result["test_error"] == last["test_error"]
    assert (result["layout"], result["first_red_pixel"]) == ("original_2016", "as_read")
    assert listing(leaky_run) == before


def test_every_checkpoint_evaluated_again_gives_the_answers_the_run_kept(leaky_run, c100, tmp_path):
    """A run from before answers were kept gets them from its checkpoints: the same bits as
    the run's own evaluations (every 2 steps: checkpoints at 2 and 4), the last with its
    predicted classes."""
    answers = tmp_path / "again.jsonl"
    proc = evaluate(
        f"--model_dir={leaky_run}",
        f"--data_path={c100[0]}",
        "--every_checkpoint",
        f"--answers_to={answers}",
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    steps = [json.loads(line)["step"] for line in proc.stdout.splitlines() if line[:1] == "{"]
    assert steps == [2, 4]
    kept, again = read_answers(leaky_run / "answers.jsonl"), read_answers(answers)
    assert [e.step for e in kept] == [e.step for e in again] == [2, 4]
    for a, b in zip(kept, again):
        assert np.array_equal(a.correct, b.correct) and len(a.correct) == 40
    assert again[0].predicted is None and np.array_equal(again[1].predicted, kept[1].predicted)


@pytest.mark.parametrize("probe", ["wrong_label", "true_pixel"])
def test_the_leak_probe_evaluates_every_test_image(leaky_run, c100, probe):
    proc = evaluate(
        f"--model_dir={leaky_run}", f"--data_path={c100[0]}", f"--first_red_pixel={probe}"
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert (result["first_red_pixel"], result["test_examples"]) == (probe, 40)
    assert 0 <= result["test_error"] <= 1


def test_a_folder_without_a_run_is_one_line(tmp_path, c100):
    proc = evaluate(f"--model_dir={tmp_path}", f"--data_path={c100[0]}")
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1] == (
        f"error: --model_dir {tmp_path} has no config.json: not a run of launch/cifar.py; name "
        "the folder a run wrote"
    )
    assert list(tmp_path.iterdir()) == []


def test_a_damaged_checkpoint_is_skipped_where_every_checkpoint_is_listed(
    leaky_run, c100, tmp_path
):
    """A checkpoint cut short (a full disk, a copy broken off) is skipped with one line, as a
    resume skips it: the others are evaluated and the command ends with exit 0."""
    run = tmp_path / "run"
    shutil.copytree(leaky_run, run)
    data = next(run.glob("ckpt-4.data-*"))
    data.write_bytes(data.read_bytes()[:100])
    proc = evaluate(f"--model_dir={run}", f"--data_path={c100[0]}", "--every_checkpoint")
    assert proc.returncode == 0, proc.stderr[-2000:]
    steps = [json.loads(line)["step"] for line in proc.stdout.splitlines() if line[:1] == "{"]
    assert steps == [2]
    skipped = [line for line in proc.stdout.splitlines() if line.endswith("; skipped")]
    assert len(skipped) == 1 and skipped[0].startswith(f"warning: checkpoint {run}/ckpt-4 ")
