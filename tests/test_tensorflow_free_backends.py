"""The backends without TensorFlow, JAX and PyTorch: the same network, recipe and stream as
TensorFlow's, and a training run with no TensorFlow at all (CPU; `jax` is in the test extras,
`torch` an extra of its own: its cases skip where it is not installed).

Each JAX or PyTorch side runs in a subprocess with KERAS_BACKEND set and
``sys.modules["tensorflow"] = None``, so any import of TensorFlow on that path fails the test.
"""

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import keras
import launchers
import numpy as np
import pytest
import tensorflow as tf
import warm_start

from resnet_noBN.backends import registry
from resnet_noBN.configs.network_config import ModelConfig
from resnet_noBN.configs.recipe_config import TrainConfig
from resnet_noBN.datasets import cifar_data, cifar_input, stream
from resnet_noBN.models.networks import build_cifar_model, param_counts
from resnet_noBN.runs import run_config
from resnet_noBN.trainers.answers import read_answers
from resnet_noBN.trainers.health import HEALTH
from resnet_noBN.trainers.tensorflow_training import Trainer

ROOT = Path(__file__).resolve().parents[1]


def without_tensorflow(script: str) -> str:
    """``python -c`` code that runs the repository's ``script`` (from the repository root) as
    ``python script`` would, in a process where any import of TensorFlow fails."""
    return warm_start.blocked(script, ("tensorflow",))


NO_TF = without_tensorflow("launch/cifar.py")
BACKENDS = ("jax", "torch")  # KERAS_BACKEND names; each is also the module it needs


def backend_env(backend: str) -> dict:
    """This process's variables, ``backend`` the Keras backend, on the CPU."""
    pytest.importorskip(backend)
    path = [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]  # tests/cold_jax kept
    return {
        **os.environ,
        "KERAS_BACKEND": backend,
        "PYTHONPATH": os.pathsep.join(path),
        "JAX_PLATFORMS": "cpu",
        "CUDA_VISIBLE_DEVICES": "",
        "PYTHONUNBUFFERED": "1",
    }


MODELS = ("paper", "small")  # presets.MODELS names: their logits compared
# the networks whose first training steps are compared: a trainer's step is one code for every
# network (``build`` is all it is given), and the small network (1 block a stage, a quarter of
# the width) has every kind of layer the paper's has, so its steps check their gradients; the
# paper's network is compared by its logits and counts. Training it too (13.5M parameters) on
# TensorFlow and each backend compiled the same step at full width, about a minute a backend
TRAINED = ("small",)
TRAIN = {"batch_size": 8, "train_steps": 3}
SEED = 11
BATCHES = [[11, 0], [11, 4], [3, 9]]  # (seed, step); step 4 of 40 records / 8 spans two epochs
# the 2016 code's networks (batch norm removed) and the text's 13.59M one, on CIFAR-10: trainable
# and non-trainable parameters, convolutions, their kernel weights, and Keras layers; on every
# backend. Table 1's network has 117 layers: the input, the first conv, 27 blocks of conv, ReLU,
# conv and add, 5 shortcut layers (stage 1's channel pad, stages 2 and 3's pool and pad), the
# pool and the head. The 2016 network: its 13,538,736 kernel weights and its head's 256 x 10 +
# 10, and 28 more layers, the activations before each block's first conv and before the pool.
# The 13.59M network: 3 projection convolutions in place of the 5 shortcut layers. The identity
# inits (models/blocks.py): Fixup's 5 scalars a block (a layer each), SkipInit's 1, none for a
# zero last convolution.
COUNTS = {
    "cifar10_paper": [13_538_736, 2_560, 55, 13_538_736, 117],
    "cifar10_original_2016": [13_541_306, 0, 55, 13_538_736, 145],
    "cifar10_original_2016_wd": [13_541_306, 0, 55, 13_538_736, 145],
    "cifar10_13_59m": [13_588_800, 2_560, 58, 13_580_720, 115],
    "cifar10_fixup": [13_538_736 + 135, 2_560, 55, 13_538_736, 117 + 135],
    "cifar10_skipinit": [13_538_736 + 27, 2_560, 55, 13_538_736, 117 + 27],
    "cifar10_zero_last": [13_538_736, 2_560, 55, 13_538_736, 117],
}


@pytest.fixture(scope="module")
def tensorflow_side(tmp_path_factory, write_cifar):
    """What TensorFlow computes, once for every backend compared with it: weights files of
    each model (seed 5), their logits on fixed inputs, the first 3 losses of TensorFlow's
    trainer from the ``TRAINED`` ones on the stream of 40 CIFAR-10 records (seed 11), and the
    inputs."""
    folder = tmp_path_factory.mktemp("tensorflow")
    write_cifar(folder / "cifar-10-batches-bin", "cifar10", 8)  # 40 training records
    images, labels = cifar_data.load_split("cifar10", "train", folder)
    inputs = np.random.default_rng(0).normal(size=(8, 32, 32, 3)).astype(np.float32)
    logits, losses = {}, {}
    for name in MODELS:
        model_cfg = ModelConfig.preset(name)
        keras.utils.set_random_seed(5)
        model = build_cifar_model(model_cfg)
        weights = str(folder / f"{name}.weights.h5")
        model.save_weights(weights)
        logits[name] = model(inputs, training=False).numpy()
        if name not in TRAINED:
            continue

        def build(model_cfg=model_cfg, weights=weights):
            net = build_cifar_model(model_cfg)
            net.load_weights(weights)
            return net

        trainer = Trainer(
            tf.distribute.get_strategy(), build, TrainConfig(**TRAIN), str(folder / f"tf_{name}")
        )
        fn = cifar_input.split_fns("cifar10", data_path=folder, seed=SEED)
        iterator = trainer.start(fn("train", TRAIN["batch_size"]), 0)
        losses[name] = np.array([trainer.run_steps(iterator, 1)["loss"] for _ in range(3)])
    return folder, images, labels, inputs, logits, losses


@pytest.mark.parametrize("backend", BACKENDS)
def test_backends_agree_on_weights_logits_steps_and_batches(backend, tmp_path, tensorflow_side):
    """Weights saved on TensorFlow load on ``backend``: logits within 1e-5 of the largest logit
    (the paper's network and the small one); from the small one's weights, the first 3 training
    steps of each backend's trainer on the same stream give losses within 1e-4 relative (one
    step code for every network: see ``TRAINED``); the stream's uint8 batches and labels are
    bit-identical, one batch across an epoch boundary; under mixed_bfloat16 the residual stream
    stays float32; the named experiments' networks count alike."""
    env = backend_env(backend)
    folder, images, labels, inputs, logits, losses = tensorflow_side
    spec = {
        "backend": backend,
        "dir": str(folder),
        "models": MODELS,
        "trained": TRAINED,
        "train": TRAIN,
        "seed": SEED,
        "batches": BATCHES,
        "experiments": list(COUNTS),
    }
    given = tmp_path / "given.npz"
    np.savez(given, inputs=inputs, images=images, labels=labels, spec=json.dumps(spec))
    probe = [sys.executable, str(ROOT / "tests" / "backend_probe.py"), str(given)]
    subprocess.run([*probe, str(tmp_path / "out.npz")], env=env, check=True, timeout=900)
    out = np.load(tmp_path / "out.npz")
    for name in MODELS:
        scale = np.abs(logits[name]).max()
        np.testing.assert_allclose(out[f"logits_{name}"], logits[name], rtol=0, atol=1e-5 * scale)
    for name in TRAINED:
        np.testing.assert_allclose(out[f"losses_{name}"], losses[name], rtol=1e-4)
        assert losses[name][2] != losses[name][0]  # the steps did update the weights
    # mixed_bfloat16: the convolutions in bfloat16, the residual stream in float32
    assert list(out["mixed_dtypes"]) == ["float32", "bfloat16"]
    for seed, step in BATCHES:
        batch, batch_labels = stream.augmented_batch(
            tf.constant(images), tf.constant(labels), seed, step, TRAIN["batch_size"], 2
        )
        np.testing.assert_array_equal(out[f"batch_{seed}_{step}"], batch.numpy())
        np.testing.assert_array_equal(out[f"labels_{seed}_{step}"], batch_labels.numpy())
    for name, counts in COUNTS.items():
        assert list(out[f"counts_{name}"]) == counts, name
    # true_float32 turns the backend's TF32 off, read back from the library; float32 allows it
    assert str(out["float32_math_true_float32"]) == "true_float32"
    assert str(out["float32_math_float32"]) == "tf32"


def test_the_networks_count_alike_on_tensorflow_and_its_precision_is_read_back():
    """TensorFlow's side of the counts and of the precision the backends agree on."""
    for name, counts in COUNTS.items():
        net = build_cifar_model(run_config.build(name).network)
        assert [*param_counts(net).values(), len(net.layers)] == counts, name
    backend = registry.current()
    try:  # what Backend.start does with --precision (the threads are set once per process)
        backend.set_float32_math(True)
        assert backend.float32_math() == "true_float32"
        assert not tf.config.experimental.tensor_float_32_execution_enabled()
    finally:
        backend.set_float32_math(False)
    assert backend.float32_math() == "tf32"


def launch(args, backend: str = "jax", **kwargs):
    """launch/cifar.py with ``args`` on ``backend``, TensorFlow unimportable: the process."""
    return launchers.start(
        [sys.executable, "launch/cifar.py", *args],
        backend_env(backend),
        subprocess.PIPE,
        subprocess.STDOUT,
        cwd=ROOT,
        unimportable=("tensorflow",),
        **kwargs,
    )


def small_run(tmp_path, write_cifar, **intervals) -> list[str]:
    """Writes 40 training / 8 test CIFAR-10 records under tmp_path/data; returns the flags of a
    small run on them (1 block per stage, batch 8, seed 4) with the given --name=value
    ``intervals``."""
    write_cifar(tmp_path / "data" / "cifar-10-batches-bin", "cifar10", 8)
    return [
        f"--data_path={tmp_path / 'data'}",
        "--model=small",
        "--batch_size=8",
        "--eval_batch_size=16",
        "--seed=4",
        *(f"--{name}={value}" for name, value in intervals.items()),
    ]


def stopped_at(proc, line_start: str) -> str:
    """``proc``'s whole output, SIGTERM sent once a line starting with ``line_start`` came."""
    lines = []
    for line in proc.stdout:
        lines.append(line)
        if line.startswith(line_start):
            proc.send_signal(signal.SIGTERM)
            break
    rest, _ = proc.communicate(timeout=600)
    return "".join(lines) + rest


def final_json(output: str) -> dict:
    return json.loads([line for line in output.splitlines() if line.startswith("{")][-1])


@pytest.mark.parametrize("backend", BACKENDS)
def test_tensorflow_free_run_is_stopped_by_sigterm_and_resumes_bit_identically(
    backend, tmp_path, write_cifar
):
    """launch/cifar.py on ``backend`` with TensorFlow unimportable writes the run's files
    (metrics.jsonl, train.jsonl, test_error.png, TensorBoard's events); SIGTERM at step 3
    checkpoints and exits 3; the rerun resumes there and ends with the weights of an
    uninterrupted run. (The uninterrupted run and the one cut short run side by side: two
    processes of their own, each on its own folder.)"""
    common = small_run(
        tmp_path, write_cifar, train_steps=10, log_every=1, eval_every=5, checkpoint_every=5
    )
    whole = launch([*common, f"--model_dir={tmp_path / 'whole'}"], backend)
    run = launch([*common, f"--model_dir={tmp_path / 'cut'}"], backend)
    first = stopped_at(run, "step       3")
    out, _ = whole.communicate(timeout=600)
    assert whole.returncode == 0, out
    assert f"{backend} backend" in out
    expected = final_json(out)
    assert expected["final_step"] == 10 and expected["test_examples"] == 8
    whole_dir = tmp_path / "whole"
    assert [json.loads(line)["step"] for line in open(whole_dir / "metrics.jsonl")] == [5, 10]
    assert len((whole_dir / "train.jsonl").read_text().splitlines()) == 10
    # the run's health at every record: the loss's two terms (summing to it), the norms, the
    # largest |logit|; which test images each evaluation got right, the last's predictions
    for line in (whole_dir / "train.jsonl").read_text().splitlines():
        record = json.loads(line)
        assert set(HEALTH) <= set(record)
        assert record["cross_entropy"] + record["weight_decay"] == pytest.approx(
            record["loss"], rel=1e-5
        )
        assert record["grad_norm"] > 0 and record["weight_norm"] > 0 < record["max_abs_logit"]
    answers = read_answers(whole_dir / "answers.jsonl")
    assert [(a.step, len(a.correct)) for a in answers] == [(5, 8), (10, 8)]
    assert 1 - answers[-1].correct.mean() == pytest.approx(expected["test_error"])
    assert answers[0].predicted is None and answers[-1].predicted.shape == (8,)
    assert (whole_dir / "test_error.png").stat().st_size > 0
    assert [
        len(list((whole_dir / part).glob("events.out.tfevents.*"))) for part in ("train", "eval")
    ] == [1, 1]

    assert run.returncode == 3, first
    assert "SIGTERM received" in first and "preempted at step" in first
    stopped = int(first.split("preempted at step ")[1].split(":")[0])
    assert 3 <= stopped < 10
    assert json.loads((tmp_path / "cut" / "checkpoints.json").read_text())["checkpoints"][-1] == (
        f"ckpt-{stopped}.npz"
    )
    again = launch([*common, f"--model_dir={tmp_path / 'cut'}"], backend)
    out, _ = again.communicate(timeout=600)
    assert again.returncode == 0, out
    assert f"resumed from {tmp_path / 'cut' / f'ckpt-{stopped}.npz'} at step {stopped}" in out
    assert final_json(out)["weights_sha256"] == expected["weights_sha256"]
    config = json.loads((tmp_path / "cut" / "config.json").read_text())
    assert config["backend"] == backend and config["runtime"]["backend"] == backend


# What each backend refuses beside the TensorFlow-only flags: the strategies it cannot run
REFUSED_STRATEGIES = {"jax": ("--strategy=parameter_server",), "torch": ("--strategy=mirrored",)}


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_installed_tensorflow_is_not_imported(backend, tmp_path, write_cifar):
    """TensorFlow installed (it is, here) and importable: a JAX or PyTorch run to its end,
    summaries and checkpoints written, never imports it (Keras's set_random_seed and
    tensorboard's writer would, SplitsInMemory.start)."""
    args = small_run(tmp_path, write_cifar, train_steps=2, log_every=1, eval_every=2)
    run = subprocess.run(
        [
            sys.executable,
            "-X",
            "importtime",
            "launch/cifar.py",
            *args,
            f"--model_dir={tmp_path / 'run'}",
        ],
        cwd=ROOT,
        env=backend_env(backend),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert final_json(run.stdout)["final_step"] == 2
    assert (tmp_path / "run" / "train").is_dir()  # the summaries' writer ran
    imported = [line for line in run.stderr.splitlines() if line.startswith("import time:")]
    assert len(imported) > 100  # -X importtime reported
    # a real import loads tensorflow.python; a refused one reports "tensorflow" alone, in µs
    assert not [line for line in imported if "tensorflow." in line.split("|")[-1]]


@pytest.mark.parametrize("backend", BACKENDS)
def test_tensorflow_only_flags_and_a_corrupt_checkpoint(backend, tmp_path, write_cifar):
    """A TensorFlow-only flag (or strategy) is one line and exit 2 with nothing written; a
    truncated newest checkpoint is named and the one before it restored; a TensorFlow run's
    folder is refused. (Runs that share no folder run side by side: the refused flags with the
    first run, the resumed run with the refused folder.)"""
    common = small_run(tmp_path, write_cifar, log_every=2, eval_every=4, checkpoint_every=2)
    flags = ("--jit_compile", "--intra_op_threads=2", *REFUSED_STRATEGIES[backend])
    bads = [
        launch([*common, "--train_steps=4", flag, f"--model_dir={tmp_path / 'bad'}"], backend)
        for flag in flags
    ]
    first = launch([*common, "--train_steps=4", f"--model_dir={tmp_path / 'run'}"], backend)
    for flag, bad in zip(flags, bads):
        out, _ = bad.communicate(timeout=300)
        assert bad.returncode == 2, out
        errors = [line for line in out.splitlines() if line.startswith("error:")]
        assert len(errors) == 1 and flag.split("=")[0] in errors[0], out
    assert not (tmp_path / "bad").exists()
    out, _ = first.communicate(timeout=600)
    assert first.returncode == 0, out
    newest = tmp_path / "run" / "ckpt-4.npz"
    newest.write_bytes(newest.read_bytes()[:1000])  # a save cut short
    (tmp_path / "tf").mkdir()
    (tmp_path / "tf" / "config.json").write_text(
        (tmp_path / "run" / "config.json").read_text().replace(f'"{backend}"', '"tensorflow"')
    )
    again = launch([*common, "--train_steps=6", f"--model_dir={tmp_path / 'run'}"], backend)
    refused = launch([*common, "--train_steps=2", f"--model_dir={tmp_path / 'tf'}"], backend)
    out, _ = again.communicate(timeout=600)
    assert again.returncode == 0, out
    assert f"warning: checkpoint {newest} cannot be restored" in out
    assert f"resumed from {tmp_path / 'run' / 'ckpt-2.npz'} at step 2" in out
    assert final_json(out)["final_step"] == 6
    out, _ = refused.communicate(timeout=300)
    assert refused.returncode == 2 and f"backend='tensorflow' there, '{backend}' now" in out, out


def test_torch_mixed_bfloat16_time_budget_and_divergence(tmp_path, write_cifar):
    """On PyTorch: a mixed_bfloat16 run out of --time_budget_s after its first call saves that
    step and exits 3, the rerun resumes and finishes; a diverging run stops with exit 1 and one
    line naming the last good checkpoint. (The diverging run runs beside the other two.)"""
    common = small_run(tmp_path, write_cifar, log_every=2, eval_every=4, checkpoint_every=2)
    nan = launch(
        [*common, "--train_steps=8", "--learning_rate=1e12", f"--model_dir={tmp_path / 'nan'}"],
        "torch",
    )
    bf16 = [*common, "--precision=mixed_bfloat16", "--train_steps=4"]
    cut = launch([*bf16, "--time_budget_s=0.01", f"--model_dir={tmp_path / 'bf16'}"], "torch")
    out, _ = cut.communicate(timeout=300)
    assert cut.returncode == 3, out
    assert "time budget of 0.01 s reached at step 1: a checkpoint of that step is in " in out
    again = launch([*bf16, f"--model_dir={tmp_path / 'bf16'}"], "torch")
    out, _ = again.communicate(timeout=300)
    assert again.returncode == 0, out
    assert f"resumed from {tmp_path / 'bf16' / 'ckpt-1.npz'} at step 1" in out
    result = final_json(out)
    assert result["final_step"] == 4 and result["test_examples"] == 8
    config = json.loads((tmp_path / "bf16" / "config.json").read_text())
    assert config["runtime"]["precision"] == "mixed_bfloat16" and config["backend"] == "torch"

    out, _ = nan.communicate(timeout=300)
    assert nan.returncode == 1, out
    last = out.strip().splitlines()[-1]
    assert last.startswith("error: loss is ") and "training diverged (" in last
    assert "; the latest checkpoint (none yet) is the last good one" in last
    for health in ("cross_entropy", "weight_decay", "weight_norm", "grad_norm", "max_abs_logit"):
        assert f"{health} " in last, (health, last)  # the run's health when it diverged
    assert "Traceback" not in out


def test_a_jax_divergence_is_replayed_step_by_step_and_drawn(tmp_path, write_cifar):
    """On JAX (the GPU lease's backend), --replay_divergence: lr 3 on the small run diverges
    after its step-4 checkpoint; the replay restores ckpt-4.npz, runs every step after it one at
    a time, meets the NaN again within the call that found it, records each step before it in
    divergence/train.jsonl, draws divergence/health.png, and writes no checkpoint."""
    run_dir = tmp_path / "run"
    common = small_run(tmp_path, write_cifar, log_every=4, eval_every=12, checkpoint_every=4)
    flags = ["--train_steps=12", "--learning_rate=3", "--replay_divergence=3"]
    proc = launch([*common, *flags, f"--model_dir={run_dir}"], "jax")
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 1, out
    last = out.strip().splitlines()[-1]
    found = re.fullmatch(
        r"error: loss is nan at step (\d+): training diverged \(.*\); the latest checkpoint "
        + re.escape(f"({run_dir / 'ckpt-4.npz'})")
        + r" is the last good one; lower --learning_rate or check the input data; replayed from "
        + re.escape(str(run_dir / "ckpt-4.npz"))
        + r" one step at a time from step 5: loss nan at step (\d+) \(.*\), every step before "
        + re.escape(f"it in {run_dir / 'divergence'}"),
        last,
    )
    assert found, last
    diverged, again = int(found[1]), int(found[2])
    assert diverged == 8 and 5 < again <= diverged, last  # the NaN within the call 4-8
    assert (
        f"replaying the divergence from {run_dir / 'ckpt-4.npz'} (step 4), steps 5 to 8 one at a "
        f"time; each step's health in {run_dir / 'divergence'}"
    ) in out
    records = [json.loads(line) for line in open(run_dir / "divergence" / "train.jsonl")]
    assert [r["step"] for r in records] == list(range(5, again))
    assert all(np.isfinite(r[name]) for r in records for name in HEALTH)
    assert (run_dir / "divergence" / "health.png").read_bytes()[:4] == b"\x89PNG"
    assert json.loads((run_dir / "checkpoints.json").read_text())["checkpoints"][-1] == (
        "ckpt-4.npz"
    )
    assert json.loads((run_dir / "config.json").read_text())["recipe"]["replay_divergence"] == 3


HELD_RATE = """
import keras
from resnet_noBN.configs.recipe_config import TrainConfig
from resnet_noBN.trainers.recipe import learning_rate_schedule
schedule = learning_rate_schedule(TrainConfig(lr_boundaries=()))
steps = keras.ops.convert_to_tensor([1, 30000, 2**31 - 2], dtype="int32")
print([round(float(schedule(step)), 6) for step in steps])
"""


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_held_rate_is_one_that_an_int32_step_reaches(backend):
    """An experiment with no drop (``cifar100_held_lr*``: lr 0.05 held) on JAX, which counts
    the optimizer's steps in int32: the schedule's one boundary fits that type, and the rate is
    the same at every step (a boundary of 2**62 overflowed there, and the held run of the GPU
    lease plan could not have run)."""
    proc = subprocess.run(
        [sys.executable, "-c", HELD_RATE],
        env=backend_env(backend),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip().splitlines()[-1] == "[0.05, 0.05, 0.05]"
