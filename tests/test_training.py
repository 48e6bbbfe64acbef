"""The custom training loop: recipe, learning, fixed head, resume, divergence, replicas."""

import contextlib
import dataclasses
import glob
import json
import re
import subprocess
import sys

import keras
import numpy as np
import optimizer_probe
import pytest
import tensorflow as tf
from test_tensorflow_free_backends import backend_env

from resnet_noBN.configs.errors import CheckpointError, TrainingDiverged
from resnet_noBN.configs.network_config import ModelConfig
from resnet_noBN.configs.recipe_config import TrainConfig
from resnet_noBN.host import stops
from resnet_noBN.models.networks import build_cifar_model
from resnet_noBN.trainers import health, loop, run_log
from resnet_noBN.trainers.recipe import (
    LOSSES,
    OPTIMIZERS,
    Momentum2016,
    learning_rate_schedule,
    make_optimizer,
    objective,
)
from resnet_noBN.trainers.tensorflow_training import Trainer

SMALL = ModelConfig.preset("small")
RNG = np.random.default_rng(0)
# class c: a colour gradient of its own (a pooled, nearly linear network at init can see it)
_ramp = np.linspace(-1, 1, 32, dtype=np.float32)
TEMPLATES = (
    RNG.normal(size=(10, 1, 1, 3))
    + RNG.normal(size=(10, 1, 1, 3)) * _ramp[:, None, None]
    + RNG.normal(size=(10, 1, 1, 3)) * _ramp[None, :, None]
).astype(np.float32)


def synthetic(n, seed):
    """A learnable problem: class c is template c plus noise."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 10, n).astype(np.int32)
    images = TEMPLATES[labels] + rng.normal(scale=0.7, size=(n, 32, 32, 3)).astype(np.float32)
    return tf.image.per_image_standardization(images).numpy(), labels  # as the real pipeline


def input_fns(global_batch, n_train=512, n_test=100, nan_after=None):
    train, test = synthetic(n_train, 1), synthetic(n_test, 2)

    def train_fn(ctx, start_step=0):
        ds = tf.data.Dataset.from_tensor_slices(train).shuffle(n_train, seed=0).repeat()
        ds = ds.batch(ctx.get_per_replica_batch_size(global_batch), drop_remainder=True)
        if nan_after is not None:
            ds = ds.take(nan_after).concatenate(ds.map(lambda x, y: (x * np.nan, y)))
        return ds.skip(start_step)

    def test_fn(ctx):
        return tf.data.Dataset.from_tensor_slices(test).batch(ctx.get_per_replica_batch_size(32))

    return train_fn, test_fn


def make_trainer(model_dir, strategy=None, **overrides):
    cfg = TrainConfig(
        **{
            "batch_size": 32,
            "train_steps": 20,
            "eval_every": 10,
            "checkpoint_every": 5,
            "log_every": 5,
            "eval_batch_size": 32,
            "learning_rate": 0.02,  # 0.05 diverges on this toy problem
            **overrides,
        }
    )
    keras.utils.set_random_seed(0)
    return Trainer(
        strategy or tf.distribute.get_strategy(),
        lambda: build_cifar_model(SMALL),
        cfg,
        str(model_dir),
    )


@pytest.mark.parametrize(
    "step, lr",
    [
        (0, 0.05),
        (29_999, 0.05),
        (30_000, 0.005),
        (49_999, 0.005),
        (50_000, 0.0005),
        (59_999, 0.0005),
    ],
)
def test_learning_rate_schedule(step, lr):
    assert float(learning_rate_schedule(TrainConfig())(step)) == pytest.approx(lr, rel=1e-6)


def test_a_stop_as_training_gives_the_signals_back_says_the_run_has_ended(tmp_path, monkeypatch):
    """The training guard gives SIGTERM and SIGINT back to the launcher's handler
    (``host.stops``) with what a stop interrupts already said: the run's last step, written. A
    quiet whole run's every-stop test (2026-12-06) sent SIGINT as the checkpoint of step 40 was
    named, and the run said "stopped by SIGINT before training": the phase was set a line after
    the guard's end."""
    monkeypatch.setitem(stops._said, "when", "before training: nothing lost")
    trainer = make_trainer(tmp_path, train_steps=3, eval_every=3, checkpoint_every=3, log_every=3)
    guard, said = trainer.guard, []

    @contextlib.contextmanager
    def watched(print_fn):
        with guard(print_fn) as handler:
            yield handler
        said.append(stops._said["when"])  # the signals are the launcher's again here

    monkeypatch.setattr(trainer, "guard", watched)
    assert trainer.train(*input_fns(32), print_fn=lambda _: None)["final_step"] == 3
    assert said == [loop.AFTER_THE_END]


def test_short_run_lowers_loss_and_writes_run_files(tmp_path):
    lines = []
    # the rate held (no drop: 40 steps of this toy problem learn little after a tenfold one)
    trainer = make_trainer(tmp_path, train_steps=40, eval_every=20, lr_boundaries=())
    result = trainer.train(*input_fns(32), print_fn=lines.append)
    losses = [float(line.split("loss ")[1].split()[0]) for line in lines if " loss " in line]
    assert len(losses) == 8
    assert losses[-1] < 0.8 * losses[0]
    assert result["final_step"] == 40 and trainer.step == 40
    assert result["test_examples"] == 100  # the whole split, partial last batch included
    assert result["test_error"] < 0.75  # chance is 0.9
    assert result["images_per_sec"] > 0
    records = [json.loads(line) for line in open(tmp_path / "metrics.jsonl")]
    assert [r["step"] for r in records] == [20, 40]
    assert records[-1]["test_error"] == result["test_error"]
    assert (tmp_path / "test_error.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert tf.train.latest_checkpoint(str(tmp_path)).endswith("ckpt-40")
    for sub in ("train", "eval"):
        assert glob.glob(str(tmp_path / sub / "events.out.tfevents.*"))


def test_head_bit_for_bit_unchanged_by_training(tmp_path):
    trainer = make_trainer(tmp_path, train_steps=3, eval_every=3, checkpoint_every=3, log_every=3)
    head = trainer.model.get_layer("projection").kernel.numpy().copy()
    conv = trainer.model.get_layer("stage1_unit0_conv1").kernel.numpy().copy()
    trainer.train(*input_fns(32), print_fn=lambda _: None)
    np.testing.assert_array_equal(trainer.model.get_layer("projection").kernel.numpy(), head)
    assert not np.allclose(trainer.model.get_layer("stage1_unit0_conv1").kernel.numpy(), conv)


def test_resume_continues_step_optimizer_state_and_schedule(tmp_path):
    first = make_trainer(tmp_path, train_steps=10, lr_boundaries=(12,))
    first.train(*input_fns(32), print_fn=lambda _: None)
    momenta = [v.numpy().copy() for v in first.optimizer.variables]
    weights = [w.numpy().copy() for w in first.model.weights]

    lines = []
    second = make_trainer(tmp_path, train_steps=15, lr_boundaries=(12,))
    assert second.restore() == 10
    for saved, restored in zip(
        momenta + weights, second.optimizer.variables + second.model.weights
    ):
        np.testing.assert_array_equal(saved, restored.numpy())
    result = second.train(*input_fns(32), print_fn=lines.append)
    assert lines[0].startswith("resumed from ") and lines[0].endswith("at step 10")
    assert result["final_step"] == 15
    assert float(second.optimizer.learning_rate) == pytest.approx(0.002)  # 0.02 / 10 past step 12
    assert [json.loads(line)["step"] for line in open(tmp_path / "metrics.jsonl")] == [10, 15]


def test_a_run_lost_right_after_a_checkpoint_resumes_with_that_steps_evaluation(tmp_path):
    """A step's evaluation is logged before its checkpoint is written: a run lost the moment
    ckpt-10 is whole (a kill, a lost machine) resumes from it with the evaluation of step 10
    already in metrics.jsonl, so its curve has every point of an uninterrupted run's (the other
    order lost that point for good: the resumed run trains on from step 10)."""

    class Lost(Exception):
        pass

    first = make_trainer(tmp_path)  # evaluations every 10 steps, checkpoints every 5, 20 steps
    save = first.save

    def save_then_lost():
        save()
        if first.step == 10:
            raise Lost

    first.save = save_then_lost
    with pytest.raises(Lost):
        first.train(*input_fns(32), print_fn=lambda _: None)
    assert first.latest_checkpoint() == str(tmp_path / "ckpt-10")

    def steps():
        return [json.loads(line)["step"] for line in open(tmp_path / "metrics.jsonl")]

    assert steps() == [10]
    lines = []
    make_trainer(tmp_path).train(*input_fns(32), print_fn=lines.append)
    assert lines[0] == f"resumed from {tmp_path / 'ckpt-10'} at step 10"
    assert steps() == [10, 20]


def test_a_truncated_latest_checkpoint_is_named_and_the_one_before_restored(tmp_path):
    first = make_trainer(tmp_path, train_steps=10)
    first.train(*input_fns(32), print_fn=lambda _: None)
    data = tmp_path / "ckpt-10.data-00000-of-00001"
    data.write_bytes(data.read_bytes()[: data.stat().st_size // 2])  # killed while writing

    lines = []
    second = make_trainer(tmp_path, train_steps=10)
    assert second.restore(lines.append) == 5 and second.restored_from == str(tmp_path / "ckpt-5")
    assert len(lines) == 1 and lines[0].startswith(
        f"warning: checkpoint {tmp_path / 'ckpt-10'} cannot be restored ("
    )
    assert lines[0].endswith("trying the one before it")
    result = make_trainer(tmp_path, train_steps=10).train(*input_fns(32), print_fn=lines.append)
    assert f"resumed from {tmp_path / 'ckpt-5'} at step 5" in lines and result["final_step"] == 10
    assert make_trainer(tmp_path).restore() == 10  # the rewritten ckpt-10 is whole again

    for path in tmp_path.glob("ckpt-*.index"):
        path.write_bytes(b"")
    with pytest.raises(CheckpointError, match=r"^no checkpoint in .* can be restored \(tried "):
        make_trainer(tmp_path).restore(lambda _: None)


def test_nan_loss_stops_and_keeps_last_good_checkpoint(tmp_path, monkeypatch):
    """The run stops at the first non-finite loss, its last good checkpoint kept, its plot
    drawn by then with every evaluation written (step 10's: owed where 10 s had not passed
    since the log was opened, and drawn as the run stops)."""
    drawn = []
    monkeypatch.setattr(run_log, "plot_error_curve", lambda r, p, t: drawn.append(r[-1]["step"]))
    trainer = make_trainer(tmp_path, train_steps=30)
    with pytest.raises(TrainingDiverged, match=r"loss is nan at step 15: .*ckpt-10"):
        trainer.train(*input_fns(32, nan_after=11), print_fn=lambda _: None)
    assert drawn == [10]
    assert tf.train.latest_checkpoint(str(tmp_path)).endswith("ckpt-10")
    assert make_trainer(tmp_path).restore() == 10
    good = make_trainer(tmp_path)
    good.restore()
    assert all(np.isfinite(w.numpy()).all() for w in good.model.weights)


HEALTH_FIELDS = ("loss", "precision", "learning_rate", *health.HEALTH)


def test_a_divergence_is_replayed_step_by_step_from_the_last_good_checkpoint(tmp_path):
    """--replay_divergence=2: the data turns NaN at step 17, found at the end of the call 15-20;
    the replay restores ckpt-10, runs 10-13 in one call and 14, 15, 16 one at a time (their
    records the same, to the bit, as those of a run logging every step), finds the NaN at step
    17 and says so on the divergence's line; it writes no checkpoint. With no checkpoint yet,
    nothing is replayed."""
    trainer = make_trainer(
        tmp_path / "run", train_steps=30, checkpoint_every=10, replay_divergence=2
    )
    lines = []
    with pytest.raises(TrainingDiverged) as caught:
        trainer.train(*input_fns(32, nan_after=16), print_fn=lines.append)
    replay = tmp_path / "run" / "divergence"
    replayed = [json.loads(line) for line in open(replay / "train.jsonl")]
    message = str(caught.value)
    assert message.startswith("loss is nan at step 20: training diverged (")
    # the NaN step's health (its batch's decay term finite, computed before the update) and
    # that of the replayed step before it
    assert re.search(
        re.escape(
            f"; replayed from {tmp_path / 'run' / 'ckpt-10'} one step at a time from step 14: "
        )
        + r"loss nan at step 17 \(cross_entropy nan, weight_decay [0-9.]+, weight_norm nan, "
        r"grad_norm nan, max_abs_logit nan; at step 16: "
        + re.escape(f"{health.text(replayed[-1])}), every step before it in {replay}")
        + "$",
        message,
    ), message
    assert lines[-1] == (
        f"replaying the divergence from {tmp_path / 'run' / 'ckpt-10'} (step 10), steps 14 to 20 "
        f"one at a time; each step's health in {replay}"
    )
    assert tf.train.latest_checkpoint(str(tmp_path / "run")).endswith("ckpt-10")
    assert [r["step"] for r in replayed] == [14, 15, 16]

    every = make_trainer(tmp_path / "every", train_steps=16, schedule_steps=30, log_every=1)
    every.train(*input_fns(32), print_fn=lambda _: None)
    logged = {r["step"]: r for r in map(json.loads, open(tmp_path / "every" / "train.jsonl"))}
    for record in replayed:
        assert {k: record[k] for k in HEALTH_FIELDS} == {
            k: logged[record["step"]][k] for k in HEALTH_FIELDS
        }

    early = make_trainer(tmp_path / "early", checkpoint_every=10, replay_divergence=2)
    with pytest.raises(TrainingDiverged) as caught:
        early.train(*input_fns(32, nan_after=2), print_fn=lambda _: None)
    assert str(caught.value).endswith(
        "the latest checkpoint (none yet) is the last good one; lower --learning_rate or check "
        "the input data; nothing replayed: no checkpoint before the divergence"
    )
    assert not (tmp_path / "early" / "divergence").exists()


def test_mirrored_two_replicas_equal_one_device(tmp_path, mirrored_strategy):
    """Global-batch loss scaling and gradient all-reduce: 2 replicas == 1 device, same batch."""
    mirrored = mirrored_strategy
    single = make_trainer(
        tmp_path / "one", train_steps=2, log_every=1, checkpoint_every=2, eval_every=2
    )
    multi = make_trainer(
        tmp_path / "two",
        strategy=mirrored,
        train_steps=2,
        log_every=1,
        checkpoint_every=2,
        eval_every=2,
    )
    multi.model.set_weights(single.model.get_weights())
    outs = [[], []]
    r1 = single.train(*input_fns(32), print_fn=outs[0].append)
    r2 = multi.train(*input_fns(32), print_fn=outs[1].append)
    assert multi.strategy.num_replicas_in_sync == 2
    for a, b in zip(single.model.get_weights(), multi.model.get_weights()):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)
    assert r1["test_examples"] == r2["test_examples"] == 100
    assert r1["test_error"] == pytest.approx(r2["test_error"])


@pytest.mark.parametrize(
    "overrides, message",
    [
        (dict(batch_size=0), "--batch_size must be positive, got 0"),
        (dict(train_steps=-5), "--train_steps must be positive, got -5"),
        (
            dict(lr_boundaries=(50_000, 30_000)),
            "--lr_boundaries must be strictly increasing, all fractions of --train_steps or all "
            "steps, got 50000,30000",
        ),
        (dict(lr_boundaries=(30_000, 30_000)), "strictly increasing"),
        (dict(learning_rate=0.0), "--learning_rate must be positive"),
        (
            dict(optimizer="lamb"),
            "--optimizer=lamb is unknown; choose one of momentum, momentum_2016, nesterov, adam",
        ),
        (dict(loss="hinge"), "--loss=hinge is unknown; choose one of softmax_cross_entropy, "),
        (dict(label_smoothing=1.0), r"--label_smoothing must be in \[0, 1\), got 1.0"),
    ],
)
def test_impossible_recipes(overrides, message):
    with pytest.raises(ValueError, match=message):
        TrainConfig(**overrides).validate()


def test_top5_error_counts_the_whole_split(tmp_path):
    keras.utils.set_random_seed(0)
    trainer = Trainer(
        tf.distribute.get_strategy(),
        lambda: build_cifar_model(SMALL),
        TrainConfig(batch_size=32, eval_batch_size=32),
        str(tmp_path),
        top5=True,
    )
    result = trainer.evaluate(input_fns(32)[1])
    assert result["test_examples"] == 100
    images, labels = synthetic(100, 2)
    logits = trainer.model.predict(images, verbose=0)
    top5 = np.argsort(-logits, axis=1)[:, :5]
    expected = 1 - np.mean([label in row for label, row in zip(labels, top5)])
    assert result["test_top5_error"] == pytest.approx(expected)
    assert result["test_top5_error"] <= result["test_error"]


@pytest.mark.parametrize("top5", [False, True])
def test_tied_logits_are_one_prediction_not_all(tmp_path, top5):
    """Equal logits predict the lowest class (tf.argmax), not every tied class (in_top_k)."""

    def constant_logits():
        inputs = keras.Input((32, 32, 3))
        return keras.Model(
            inputs, keras.layers.Lambda(lambda x: tf.zeros([tf.shape(x)[0], 10]))(inputs)
        )

    trainer = Trainer(
        tf.distribute.get_strategy(),
        constant_logits,
        TrainConfig(batch_size=10, eval_batch_size=10),
        str(tmp_path),
        top5=top5,
    )
    labels = np.arange(20, dtype=np.int32) % 10
    test_fn = lambda ctx: tf.data.Dataset.from_tensor_slices(  # noqa: E731
        (np.zeros([20, 32, 32, 3], np.float32), labels)
    ).batch(10)
    result = trainer.evaluate(test_fn)
    assert result["test_error"] == pytest.approx(0.9)  # class 0 predicted: 2 of 20 right
    if top5:
        assert result["test_top5_error"] == pytest.approx(0.5)  # classes 0-4


@pytest.mark.parametrize("optimizer", ["momentum", "momentum_2016"])
def test_a_run_resumed_at_an_awkward_step_is_bit_identical(tmp_path, write_cifar, optimizer):
    """The real CIFAR pipeline (100 training records, batches of 16: epochs end mid-batch):
    30 steps in one go, or 13 steps (no interval divides 13), then a new process-like Trainer
    resuming from that checkpoint to 30: the same weights, to the bit. Keras' momentum form and
    the 2016 code's (its accumulators in the checkpoint; the rate drops after the resume)."""
    from resnet_noBN.datasets import cifar_input

    root = tmp_path / "cifar-10-batches-bin"
    write_cifar(root, "cifar10", 20)
    dataset_fn = cifar_input.split_fns("cifar10", data_path=root, seed=4)

    def run(model_dir, steps):
        # the learning rate drops at steps: the 13-step run's schedule is the 30-step run's
        trainer = make_trainer(
            model_dir, train_steps=steps, batch_size=16, lr_boundaries=(20,), optimizer=optimizer
        )
        return trainer.train(
            dataset_fn("train", 16), dataset_fn("test", 32), print_fn=lambda _: None
        )

    uninterrupted = run(tmp_path / "once", 30)
    assert run(tmp_path / "twice", 13)["final_step"] == 13
    resumed = run(tmp_path / "twice", 30)
    assert resumed["final_step"] == 30
    assert resumed["weights_sha256"] == uninterrupted["weights_sha256"]
    if optimizer == "momentum":  # a second run from scratch: the same (once is enough)
        assert run(tmp_path / "other", 30)["weights_sha256"] == uninterrupted["weights_sha256"]


def _log_softmax(logits):
    shifted = logits - logits.max(-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))


@pytest.mark.parametrize("smoothing", [0.0, 0.1])
def test_the_named_losses_are_their_formulas(smoothing):
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(6, 5)).astype(np.float32)
    labels = rng.integers(0, 5, 6).astype(np.int32)
    one_hot = np.eye(5, dtype=np.float64)[labels]
    cfg = TrainConfig(batch_size=8, label_smoothing=smoothing)
    # softmax: the cross-entropy against (1 - s) one-hot + s / classes
    targets = one_hot * (1 - smoothing) + smoothing / 5
    softmax = -(targets * _log_softmax(logits.astype(np.float64))).sum(-1)
    # sigmoid: every class its own binary cross-entropy, targets (1 - s) one-hot + s / 2
    targets = one_hot * (1 - smoothing) + smoothing / 2
    p = 1 / (1 + np.exp(-logits.astype(np.float64)))
    sigmoid = -(targets * np.log(p) + (1 - targets) * np.log(1 - p)).sum(-1)
    for name, expected in (("softmax_cross_entropy", softmax), ("sigmoid_cross_entropy", sigmoid)):
        cfg = dataclasses.replace(cfg, loss=name)
        np.testing.assert_allclose(np.asarray(LOSSES[name](logits, labels, cfg)), expected, 1e-5)
        loss, parts = objective(logits, labels, 0.5, cfg)
        assert list(parts) == ["correct", "cross_entropy", "weight_decay", "max_abs_logit"]
        # summed over the replica's examples / the global batch of 8, plus the decay
        assert float(loss) == pytest.approx(expected.sum() / 8 + 0.5, rel=1e-5)
        assert float(parts["cross_entropy"]) == pytest.approx(expected.sum() / 8, rel=1e-5)
        assert float(parts["weight_decay"]) == 0.5
        assert float(parts["max_abs_logit"]) == np.abs(logits).max()
        assert float(parts["correct"]) == (logits.argmax(-1) == labels).sum()


def test_the_named_optimizers():
    schedule = learning_rate_schedule(TrainConfig())
    assert TrainConfig().optimizer == "momentum_2016"  # the 2016 code's form, the default
    sgd = make_optimizer(TrainConfig(optimizer="momentum"))
    assert type(sgd) is keras.optimizers.SGD and not sgd.nesterov and sgd.momentum == 0.9
    nesterov = make_optimizer(TrainConfig(optimizer="nesterov", momentum=0.8), schedule)
    assert type(nesterov) is keras.optimizers.SGD and nesterov.nesterov
    assert nesterov.momentum == 0.8
    adam = make_optimizer(TrainConfig(optimizer="adam", momentum=0.85), schedule)
    assert type(adam) is keras.optimizers.Adam and adam.beta_1 == 0.85
    form_2016 = make_optimizer(TrainConfig(optimizer="momentum_2016", momentum=0.8), schedule)
    assert type(form_2016) is Momentum2016 and form_2016.momentum == 0.8
    config = keras.optimizers.serialize(form_2016)
    assert config["config"]["momentum"] == 0.8
    again = keras.optimizers.deserialize(config)
    assert type(again) is Momentum2016 and again.momentum == 0.8
    assert set(OPTIMIZERS) == {"momentum", "momentum_2016", "nesterov", "adam"}


# --- the two momentum forms: Keras' (v = m v - lr g, w += v) and the 2016 code's
# tf.train.MomentumOptimizer (a = m a + g, w -= lr a), each against its formula in numpy


def momentum_formula(form: str, weights, gradients, rates, m: float):
    """The weights after each update, in float64: ``form`` "momentum" (Keras' velocity in the
    rate's units) or "momentum_2016" (the accumulator in gradient units, the rate at use)."""
    weights = [np.asarray(w, np.float64).copy() for w in weights]
    state = [np.zeros_like(w) for w in weights]
    after = []
    for grads, lr in zip(gradients, rates):
        for w, s, g in zip(weights, state, grads):
            if form == "momentum":
                s *= m
                s -= lr * np.asarray(g, np.float64)
                w += s
            else:
                s *= m
                s += g
                w -= lr * s
        after.append(np.concatenate([w.ravel() for w in weights]))
    return np.array(after)


def flat(steps) -> np.ndarray:
    """[step][weight] nested lists -> [step, all weights]."""
    return np.array([np.concatenate([np.ravel(w) for w in ws]) for ws in steps])


def probe_backend(backend: str) -> dict:
    """tests/optimizer_probe.py's trajectories on ``backend``: in this process on TensorFlow;
    on JAX or PyTorch in a process of its own with TensorFlow unimportable (skipped where the
    backend is not installed)."""
    if backend == "tensorflow":
        return optimizer_probe.trajectories()
    proc = subprocess.run(
        [sys.executable, optimizer_probe.__file__],
        env=backend_env(backend),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("backend", ["tensorflow", "jax", "torch"])
def test_the_two_momentum_forms_agree_at_a_constant_rate_and_part_at_a_drop(backend):
    """On each backend, as its trainer applies updates (JAX: ``stateless_apply`` in
    ``jax.jit``): lr 0.05, momentum 0.9, a tenfold drop at step 4 of 8, random gradients. Each
    form follows its own formula (numpy, float64); the two are equal while the rate is constant
    and differ after the drop by what the formulas say; stopped after 3 updates and carried on
    from the optimizer's variables (a checkpoint's), each continues to the bit."""
    out = probe_backend(backend)
    probe = optimizer_probe
    rates = [probe.LEARNING_RATE * (0.1 if k >= probe.DROP else 1) for k in range(probe.STEPS)]
    expected = {
        name: momentum_formula(
            name, probe.initial_weights(), probe.gradients(), rates, probe.MOMENTUM
        )
        for name in probe.NAMES
    }
    got = {name: flat(out[name]["weights"]) for name in probe.NAMES}
    for name in probe.NAMES:
        np.testing.assert_allclose(got[name], expected[name], rtol=1e-6, atol=1e-6, err_msg=name)
        np.testing.assert_array_equal(flat(out[name]["resumed"]), got[name], err_msg=name)
        # the step counter (the schedule's), and one velocity or accumulator per weight
        assert out[name]["variables"] == len(probe.SHAPES) + 1
    keras_form, form_2016 = got["momentum"], got["momentum_2016"]
    drop = probe.DROP
    np.testing.assert_allclose(keras_form[:drop], form_2016[:drop], rtol=1e-6, atol=1e-6)
    apart = expected["momentum"][drop:] - expected["momentum_2016"][drop:]
    assert np.abs(apart[0]).max() > 0.01  # far beyond the float32 tolerance
    np.testing.assert_allclose(keras_form[drop:] - form_2016[drop:], apart, rtol=0, atol=2e-6)


def test_the_worked_example_of_a_rate_drop():
    """A constant gradient 1, momentum 0.9, 20 updates at lr 0.05, then 20 at 0.005 (the
    schedule's boundary at step 20), from w = 0, float64 weights: Keras' form moves w by -0.400
    on the 21st update, the 2016 form by -0.0445; 20 updates after the drop Keras' has moved
    3.1 units further. The optimizers' steps are their formulas' (numpy) to 1e-6."""
    rates = [0.05] * 20 + [0.005] * 20
    ones = [[np.ones(1)]] * 40
    expected = {
        name: momentum_formula(name, [np.zeros(1)], ones, rates, 0.9)[:, 0]
        for name in ("momentum", "momentum_2016")
    }
    steps = {name: np.diff(w, prepend=0.0) for name, w in expected.items()}
    keras_step, step_2016 = steps["momentum"][20], steps["momentum_2016"][20]
    gap = expected["momentum_2016"][-1] - expected["momentum"][-1]
    assert (round(keras_step, 3), round(step_2016, 4), round(gap, 1)) == (-0.4, -0.0445, 3.1)
    np.testing.assert_allclose(steps["momentum"][:20], steps["momentum_2016"][:20], rtol=1e-12)
    cfg = TrainConfig(learning_rate=0.05, lr_boundaries=("20",), train_steps=40, momentum=0.9)
    got = {}
    for name, want in expected.items():
        w = keras.Variable(np.zeros(1), dtype="float64")
        optimizer = make_optimizer(dataclasses.replace(cfg, optimizer=name))
        after = []
        for _ in range(40):
            optimizer.apply([tf.ones(1, tf.float64)], [w])
            after.append(float(w.numpy()[0]))
        got[name] = np.array(after)
        np.testing.assert_allclose(got[name], want, rtol=1e-6, err_msg=name)
        np.testing.assert_allclose(np.diff(after, prepend=0.0)[20], steps[name][20], rtol=1e-6)
    assert got["momentum_2016"][-1] - got["momentum"][-1] == pytest.approx(gap, rel=1e-6)
