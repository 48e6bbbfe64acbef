"""launch/evaluate.py and resnet_noBN.trained.evaluation: a finished run's checkpoint evaluated
again, and the probe of the original CIFAR-100 reader's label leak (the first red pixel
replaced)."""

import json
import shutil

import launchers
import numpy as np
import pytest
from test_launch_cifar import SMALL, cifar

from resnet_noBN.configs.data_config import DataConfig
from resnet_noBN.configs.errors import DataError, InputError
from resnet_noBN.datasets import cifar_data
from resnet_noBN.trained.evaluation import probed_test_split
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


COMMITTED_RUN = launchers.REPO / "results" / "table2_quarter" / "runs" / "cifar10_paper-seed0"


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


def test_the_wrong_label_is_another_class_drawn_uniformly_and_seeded(c100):
    """Each image's offset to its wrong label drawn from 1 to 99 by a generator of seed 0 (the
    default): the same images probed again get the same labels, another seed others; an
    unknown probe, or one of a run in the official layout, is one line naming what to use."""
    folder, _ = c100
    _, labels = probed_test_split(read_2016(folder))
    wrong, _ = probed_test_split(read_2016(folder), "wrong_label")
    offsets = np.random.default_rng(0).integers(1, 100, len(labels))
    assert np.array_equal(wrong[:, 0, 0, 0], (labels + offsets) % 100)
    other, _ = probed_test_split(read_2016(folder), "wrong_label", seed=1)
    assert not np.array_equal(other[:, 0, 0, 0], wrong[:, 0, 0, 0])
    with pytest.raises(InputError) as unknown:
        probed_test_split(read_2016(folder), "blue")
    assert str(unknown.value) == (
        "--first_red_pixel=blue is unknown; choose one of as_read, wrong_label, true_pixel"
    )
    with pytest.raises(InputError) as official:
        probed_test_split(read_2016(folder, "official"), "true_pixel")
    assert str(official.value) == (
        "--first_red_pixel=true_pixel probes the label leak of the original 2016 reader, but "
        "this run read cifar100 with layout official; use a run trained with "
        "--cifar100_layout=original_2016"
    )
    cifar_data.clear_cache()


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


class Reader:
    """What evaluate_run asks of a trainer that reads a run's checkpoints, without a network:
    checkpoints of steps 2, 3 (damaged) and 4, its latest; ``evaluate`` gives the step read,
    the source it was handed and its progress's batches."""

    unreadable = (ValueError,)

    def __init__(self, model_dir, newest=4):
        self.cfg = type("Cfg", (), {"eval_batch_size": 16})()
        self.paths = [f"{model_dir}/ckpt-{s}" for s in ("2", "3-damaged", "4")][: newest - 1]
        self.step, self.restored_from, self.weights = 0, None, None

    def restore(self, print_fn):
        if not self.paths:
            return 0
        self.restored_from = self.paths[-1]
        print_fn(f"resumed from {self.restored_from}")
        return 4

    def checkpoints(self):
        return self.paths

    def read_checkpoint(self, path):
        if "damaged" in path:
            raise ValueError("truncated record\nat offset 12")
        self.step = int(path.rsplit("-", 1)[1])

    def read_weights(self, path):
        if path.endswith("other.npz"):
            raise KeyError("conv1/kernel")
        self.weights, self.step = path, 9

    def evaluate(self, source, progress, print_fn):
        print_fn(f"evaluated step {self.step}")
        return {"test_error": self.step / 10, "source": source, "batches": progress.total}

    def weights_digest(self):
        return f"digest of step {self.step}"


def test_a_run_is_evaluated_at_each_checkpoint_it_asks_for_in_its_own_reading(
    c100, tmp_path, monkeypatch
):
    """evaluate_run with a stand-in trainer: the run's config.json read (CIFAR-100 in the 2016
    layout, on another copy of the data), its test split probed as asked and handed over in
    batches of its evaluation batch (40 images: 3 batches of 16); the latest checkpoint, or
    every one oldest first with a damaged one skipped in one line, or a weights file; a
    folder without a checkpoint, or without the data, refused in one line."""
    from resnet_noBN.trained import evaluation
    from resnet_noBN.trainers.loop import unreadable_checkpoint_line

    folder, _ = c100
    run = tmp_path / "run"
    run.mkdir()
    config = json.loads((COMMITTED_RUN / "config.json").read_text())
    config["data"].update(dataset="cifar100", cifar100_layout="original_2016", data_path="/x")
    (run / "config.json").write_text(json.dumps(config))
    readers, lines = [], []

    def reading(saved, recorded, model_dir):
        assert (saved["experiment"], recorded.data.dataset, model_dir) == (
            "cifar10_paper",
            "cifar100",
            str(run),
        )
        readers.append(Reader(model_dir, newest))
        return readers[-1]

    class Backend:
        name = "tensorflow"

        def evaluation_source(self, images, labels, batch):
            return images, labels, batch

    monkeypatch.setattr(evaluation, "reading_trainer", reading)
    monkeypatch.setattr(evaluation.registry, "current", Backend)
    newest = 4

    def evaluated(**flags):
        return list(evaluation.evaluate_run(str(run), str(folder), print_fn=lines.append, **flags))

    [latest] = evaluated()
    images, labels, batch = latest.pop("source")
    probed, expected_labels = probed_test_split(read_2016(folder))
    assert np.array_equal(images, probed) and np.array_equal(labels, expected_labels)
    assert batch == 16 and lines == [f"resumed from {run}/ckpt-4", "evaluated step 4"]
    assert latest == {
        "model_dir": str(run),
        "checkpoint": f"{run}/ckpt-4",
        "step": 4,
        "dataset": "cifar100",
        "layout": "original_2016",
        "data_path": str(folder),
        "first_red_pixel": "as_read",
        "weights_sha256": "digest of step 4",
        "test_error": 0.4,
        "batches": 3,
    }
    lines.clear()
    every = evaluated(every_checkpoint=True, first_red_pixel="wrong_label")
    assert [(r["checkpoint"], r["step"], r["weights_sha256"]) for r in every] == [
        (f"{run}/ckpt-2", 2, "digest of step 2"),
        (f"{run}/ckpt-4", 4, "digest of step 4"),
    ]
    wrong, _ = probed_test_split(read_2016(folder), "wrong_label")
    assert all(np.array_equal(r["source"][0], wrong) for r in every)
    assert {r["first_red_pixel"] for r in every} == {"wrong_label"}
    damaged = unreadable_checkpoint_line(
        f"{run}/ckpt-3-damaged", ValueError("truncated record\nat offset 12"), "skipped"
    )
    assert lines == [f"resumed from {run}/ckpt-4", "evaluated step 2", damaged, "evaluated step 4"]
    [weighed] = evaluated(weights=str(tmp_path / "final.npz"))
    assert (weighed["checkpoint"], weighed["step"]) == (str(tmp_path / "final.npz"), 9)
    assert readers[-1].weights == str(tmp_path / "final.npz") and readers[-1].restored_from is None
    with pytest.raises(InputError) as other:
        evaluated(weights=str(tmp_path / "other.npz"))
    assert (
        str(other.value) == f"{tmp_path / 'other.npz'} holds no weights of this run: 'conv1/kernel'"
    )
    newest = 1
    with pytest.raises(InputError) as untrained:
        evaluated()
    assert str(untrained.value) == f"--model_dir {run} holds no checkpoint; train it first"
    with pytest.raises(DataError):
        list(evaluation.evaluate_run(str(run), str(tmp_path / "no data")))
    cifar_data.clear_cache()


def test_a_weights_file_needs_a_backend_that_reads_one():
    from resnet_noBN.trained import evaluation

    with pytest.raises(InputError) as refused:
        evaluation.read_weights(object(), "final.npz")
    assert str(refused.value) == (
        "final.npz is a weights file, read on the JAX and PyTorch backends, not tensorflow"
    )


def test_a_jax_run_of_another_optimizer_is_evaluated_from_its_checkpoint(c100, tmp_path):
    """A JAX checkpoint names its optimizer's variables after the optimizer (Keras' form of
    momentum: ``sgd``): the run is read back with its own optimizer, not today's default, and
    gives its own figure."""
    from test_tensorflow_free_backends import backend_env

    env = backend_env("jax")
    run = tmp_path / "keras_momentum"
    trained = launchers.run(
        "launch/cifar.py",
        *SMALL,
        "--dataset=cifar100",
        f"--data_path={c100[0]}",
        "--train_steps=2",
        "--eval_every=2",
        "--optimizer=momentum",
        f"--model_dir={run}",
        env=env,
    )
    assert trained.returncode == 0, trained.stderr[-2000:]
    again = launchers.run(
        "launch/evaluate.py", f"--model_dir={run}", f"--data_path={c100[0]}", env=env
    )
    assert again.returncode == 0, again.stderr[-2000:]
    figure = json.loads(again.stdout.strip().splitlines()[-1])
    assert (figure["step"], figure["checkpoint"]) == (2, str(run / "ckpt-2.npz"))
    assert (
        figure["test_error"]
        == json.loads((run / "metrics.jsonl").read_text().splitlines()[-1])["test_error"]
    )
