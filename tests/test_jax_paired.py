"""Two runs in one program on JAX (``launch/cifar.py --pair_seed``,
resnet_noBN/trainers/jax_paired.py), on this CPU: each run of a pair trains as it does alone (its
losses, its evaluations, its weights within float32 rounding, in mixed_bfloat16 within bfloat16's:
the paired step maps one update over both runs, so XLA computes each convolution as one of two
groups, in another summation order), in a folder of its own (config.json with its seed and its
partner, checkpoints, train.jsonl, metrics.jsonl, answers.jsonl, its weights digest); a pair stopped
resumes both runs to the numbers of the pair not stopped, a pair stopped between its runs' saves
resumes both from their common step, and a pair's run resumes alone; what a pair cannot do is
refused in one line.

The small network (1 block per stage) on 40 generated records, batch 8, seed 4 and 5.
"""

import json
import subprocess
import sys

import launchers
import numpy as np
import pytest
from test_tensorflow_free_backends import (
    ROOT,
    backend_env,
    final_json,
    launch,
    small_run,
    stopped_at,
)

from resnet_noBN.trainers.answers import read_answers

# A pair's loss at every step against each run alone, float32 on a 2-core AMD Zen 4: measured
# largest relative difference 1.0e-07 (one float32 rounding, seed 4) and 0 (seed 5), the loss of
# step 50 equal in both; the bound leaves room for other CPUs' kernels. In mixed_bfloat16 (the
# lease's precision): 7.1e-06 and 8.7e-06 here (2.1e-05 and 2.9e-05 on the slices' CIFAR-10,
# 1,017 test images), within one bfloat16 rounding (2**-8), the bound.
LOSS_RTOL = {"float32": 1e-5, "mixed_bfloat16": 2**-8}
# A pair's weights against each run alone after 50 steps, the largest absolute difference of
# any array of the checkpoint: measured 6.0e-08 (seed 4) and 3.0e-08 (seed 5); the weights'
# digests differ for it (the lone and paired convolutions sum in other orders). In
# mixed_bfloat16: 1.0e-04 and 7.6e-05 here (9.5e-04 and 4.8e-04 on the slices): float32 weights
# updated from bfloat16 gradients.
WEIGHTS_ATOL = {"float32": 1e-5, "mixed_bfloat16": 1e-2}
# the test images whose answer may differ from its run alone's, at each evaluation: none in
# float32; in mixed_bfloat16 none here, on the slices' 1,017 test images the same right and
# wrong at both evaluations and one wrong answer's class another: the bound, one
ANSWERS_APART = {"float32": 0, "mixed_bfloat16": 1}
# The losses and weights above cannot tell bfloat16 from float32 on this run: its loss sits near
# ln 10, and a pair built in float32 beside its runs alone in mixed_bfloat16 stays within both
# bounds (measured: loss 1.9e-05 relative, weights 1.1e-04). What tells them apart is the pair
# itself: its weights after 50 steps in mixed_bfloat16 against the same pair in float32, the
# largest absolute difference of any array, measured 1.4e-04 here, and 0 exactly where the
# pair computes in float32 whatever --precision says. The bound: 1e-6, 16 times float32's noise
# between a pair and its runs alone (6.0e-08), a hundredth of bfloat16's.
BFLOAT16_FROM_FLOAT32 = 1e-6
# each precision's pair, its checkpoint of step 50 ({name: array}), for the other case to read
PAIR_WEIGHTS: dict[str, dict] = {}


def pair_flags(tmp_path, write_cifar, **intervals):
    return small_run(tmp_path, write_cifar, **intervals)  # seed 4; the pair adds seed 5


def records(folder, name):
    return [json.loads(line) for line in (folder / name).read_text().splitlines()]


def weights(checkpoint) -> dict:
    with np.load(checkpoint) as arrays:
        return {name: arrays[name] for name in arrays.files}


def float32_pair_weights(tmp_path, write_cifar) -> dict:
    """The float32 pair's checkpoint of step 50, as its case of the test left it, else run
    here (the float32 case not run in this session)."""
    if "float32" not in PAIR_WEIGHTS:
        folder = tmp_path / "float32-pair"
        flags = pair_flags(
            tmp_path / "float32",
            write_cifar,
            train_steps=50,
            log_every=1,
            eval_every=25,
            checkpoint_every=25,
            precision="float32",
        )
        pair = launch([*flags, "--pair_seed=5", f"--model_dir={folder}"])
        out, _ = pair.communicate(timeout=600)
        assert pair.returncode == 0, out
        PAIR_WEIGHTS["float32"] = weights(folder / "ckpt-50.npz")
    return PAIR_WEIGHTS["float32"]


@pytest.mark.parametrize("precision", ["float32", "mixed_bfloat16"])
def test_each_run_of_a_pair_trains_as_it_does_alone(tmp_path, write_cifar, precision):
    """Seeds 4 and 5 alone and as a pair, 50 steps: each run's loss at every step equals its
    run alone within LOSS_RTOL, its evaluations and answers the same (ANSWERS_APART), its
    checkpoints the same arrays within WEIGHTS_ATOL; each folder its own config.json (its seed,
    the other run in runtime.paired_with), checkpoints and logs; the pair's JSON each run's
    summary, and each run's weights digest that of its own checkpoint (launch/evaluate.py). In
    mixed_bfloat16 the pair's weights are not the float32 pair's (BFLOAT16_FROM_FLOAT32)."""
    common = pair_flags(
        tmp_path,
        write_cifar,
        train_steps=50,
        log_every=1,
        eval_every=25,
        checkpoint_every=25,
        precision=precision,
    )
    alone = {
        s: launch([*common, f"--seed={s}", f"--model_dir={tmp_path / f's{s}'}"]) for s in (4, 5)
    }
    pair = launch([*common, "--pair_seed=5", f"--model_dir={tmp_path / 'pair'}"])
    out, _ = pair.communicate(timeout=600)
    assert pair.returncode == 0, out
    result = final_json(out)
    folders = {4: tmp_path / "pair", 5: tmp_path / "pair-s5"}  # the default --pair_model_dir
    assert [(r["model_dir"], r["seed"], r["final_step"]) for r in result["runs"]] == [
        (str(folders[4]), 4, 50),
        (str(folders[5]), 5, 50),
    ]
    assert result["final_step"] == 50
    assert result["images_per_sec"] == pytest.approx(2 * result["runs"][0]["images_per_sec"])
    assert "seed 5: step      50  loss" in out and "seed 4: step      50  test error" in out
    PAIR_WEIGHTS[precision] = weights(folders[4] / "ckpt-50.npz")
    if precision == "mixed_bfloat16":
        reference = float32_pair_weights(tmp_path, write_cifar)
        assert list(reference) == list(PAIR_WEIGHTS[precision])
        apart = max(
            float(np.abs(reference[name] - array).max())
            for name, array in PAIR_WEIGHTS[precision].items()
            if array.dtype.kind == "f"
        )
        print(f"the mixed_bfloat16 pair's weights against the float32 pair's: {apart:.2e}")
        assert apart > BFLOAT16_FROM_FLOAT32, "the pair computed in float32"
    for i, seed in enumerate((4, 5)):
        worst_loss, worst_weight = 0.0, 0.0
        lone_out, _ = alone[seed].communicate(timeout=600)
        assert alone[seed].returncode == 0, lone_out
        lone, paired, run = tmp_path / f"s{seed}", folders[seed], result["runs"][i]
        config = json.loads((paired / "config.json").read_text())
        assert config["seed"] == seed and config["backend"] == "jax"
        assert config["runtime"]["paired_with"] == {
            "seed": 9 - seed,
            "model_dir": str(folders[9 - seed]),
        }
        assert json.loads((paired / "checkpoints.json").read_text())["checkpoints"] == [
            "ckpt-25.npz",
            "ckpt-50.npz",
        ]
        lone_train, paired_train = records(lone, "train.jsonl"), records(paired, "train.jsonl")
        assert [r["step"] for r in paired_train] == list(range(1, 51))
        for a, b in zip(lone_train, paired_train, strict=True):
            worst_loss = max(worst_loss, abs(a["loss"] - b["loss"]) / a["loss"])
            assert b["loss"] == pytest.approx(a["loss"], rel=LOSS_RTOL[precision])
            assert b["learning_rate"] == a["learning_rate"]
        evals = records(paired, "metrics.jsonl")
        assert [e["step"] for e in evals] == [25, 50]
        lone_answers = read_answers(str(lone / "answers.jsonl"))
        paired_answers = read_answers(str(paired / "answers.jsonl"))
        assert [e.step for e in paired_answers] == [e.step for e in lone_answers] == [25, 50]
        for a, b in zip(lone_answers, paired_answers):
            assert (a.correct != b.correct).sum() <= ANSWERS_APART[precision]
        apart = (lone_answers[-1].predicted != paired_answers[-1].predicted).sum()
        assert apart <= ANSWERS_APART[precision]
        if precision == "float32":
            assert (paired / "answers.jsonl").read_text() == (lone / "answers.jsonl").read_text()
            assert run["test_error"] == final_json(lone_out)["test_error"]
        with np.load(lone / "ckpt-50.npz") as a, np.load(paired / "ckpt-50.npz") as b:
            assert a.files == b.files  # the same variables, by the same names
            for name in a.files:
                if a[name].dtype.kind != "f":
                    assert np.array_equal(a[name], b[name]), name  # the step count
                    continue
                worst_weight = max(worst_weight, float(np.abs(a[name] - b[name]).max()))
        assert worst_weight <= WEIGHTS_ATOL[precision]
        print(
            f"seed {seed}: loss at step 50 {lone_train[-1]['loss']!r} alone, "
            f"{paired_train[-1]['loss']!r} paired; largest relative loss difference "
            f"{worst_loss:.2e}, weights {worst_weight:.2e}; digests "
            f"{final_json(lone_out)['weights_sha256']} alone, {run['weights_sha256']} paired; "
            f"{apart} final classes apart"
        )
    evaluated = launchers.run(
        "launch/evaluate.py",
        f"--model_dir={folders[5]}",
        f"--data_path={tmp_path / 'data'}",
        env=backend_env("jax"),
    )
    assert evaluated.returncode == 0, evaluated.stderr[-2000:]
    assert final_json(evaluated.stdout)["weights_sha256"] == result["runs"][1]["weights_sha256"]


# The paired step in one JAX process, on a network of one dense layer (its compilation is
# quick): two runs of seeds 4 and 5 (their stream seeds given past 2**32: the stream takes them
# modulo 2**32) trained as a pair for a call of 2 steps and one of 1, then each alone from the
# same weights; prints each call's metrics, the steps, how many times the paired step compiled
# and each run's largest weight difference.
PAIRED_STEP = """
import json, sys
sys.modules["tensorflow"] = None  # the paired step needs no TensorFlow (seconds to import)
import jax, keras, numpy as np
from resnet_noBN.configs.recipe_config import TrainConfig
from resnet_noBN.datasets.stream import TrainSplit
from resnet_noBN.trainers.jax_paired import PairedJaxTrainer
from resnet_noBN.trainers.jax_training import JaxTrainer

cfg = TrainConfig(batch_size=8, learning_rate=0.1)
def one_dense():
    layers = [keras.Input((32, 32, 3)), keras.layers.Flatten(name="flat")]
    return keras.Sequential([*layers, keras.layers.Dense(10, name="logits")], name="one_dense")
def trainer(seed, folder):
    keras.utils.set_random_seed(seed)
    return JaxTrainer(one_dense, cfg, folder)
rng = np.random.default_rng(0)
images = rng.integers(0, 256, (40, 32, 32, 3), np.uint8)
labels = rng.integers(0, 10, 40).astype(np.int32)
sources = [TrainSplit(images, labels, seed) for seed in (4 + 2**32, 5 + 2**32)]
out = sys.argv[1]
pair = PairedJaxTrainer([trainer(4, out + "/p4"), trainer(5, out + "/p5")], [4, 5])
data = pair.start(sources, 0)
result = {"paired": [pair.run_steps(data, 2), pair.run_steps(data, 1)], "alone": []}
result["steps"] = [pair.step] + [member.step for member in pair.members]
result["compiled"] = pair._step_jit._cache_size()
result["apart"] = []
for i, seed in enumerate((4, 5)):
    alone = trainer(seed, out + f"/a{seed}")
    lone = alone.start(sources[i], 0)
    result["alone"].append([alone.run_steps(lone, 2), alone.run_steps(lone, 1)])
    pairs = zip(jax.tree.leaves(alone._state), jax.tree.leaves(pair.members[i]._state))
    result["apart"].append(max(float(np.abs(np.subtract(a, b)).max()) for a, b in pairs))
print(json.dumps(result))
"""


def test_the_paired_step_gives_each_run_its_own_update_as_alone(tmp_path):
    """PAIRED_STEP: each call's metrics of each run of the pair (the loss, its parts, the batch's
    right answers and examples, the last gradient's norm, the largest logit) those of the run
    alone within float32's rounding (LOSS_RTOL), the runs' own (not each other's), each run's
    weights and optimizer state within WEIGHTS_ATOL, and each run's step the pair's, 3."""
    proc = subprocess.run(
        [sys.executable, "-c", PAIRED_STEP, str(tmp_path)],
        cwd=ROOT,
        env=backend_env("jax"),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["steps"] == [3, 3, 3]
    assert result["compiled"] == 1  # its inputs placed as its outputs: one compilation
    for call, (paired, alone) in enumerate(zip(result["paired"], zip(*result["alone"]))):
        assert [run["examples"] for run in paired] == [8 * (2 - call)] * 2
        assert paired[0]["loss"] != paired[1]["loss"]  # two runs, not one twice
        for run, lone in zip(paired, alone):
            assert list(run) == list(lone)
            assert run == pytest.approx(lone, rel=LOSS_RTOL["float32"]), (call, run, lone)
    assert max(result["apart"]) <= WEIGHTS_ATOL["float32"], result["apart"]
    print(f"largest weight difference, paired against alone: {max(result['apart']):.1e}")


def test_a_pair_resumes_together_from_one_step_and_each_run_alone(tmp_path, write_cifar):
    """A pair stopped by SIGTERM checkpoints both runs and exits 3; rerun, it resumes both and
    ends with the weights of the pair not stopped. A pair whose second run lost its newest
    checkpoint (stopped between the two runs' saves) resumes both from their common step and
    ends with the same weights again. A pair's run then resumes alone from its checkpoint, and
    a run paired with a folder not started is refused (exit 2: no common step)."""
    common = pair_flags(
        tmp_path, write_cifar, train_steps=10, log_every=1, eval_every=5, checkpoint_every=5
    )
    pair = [*common, "--pair_seed=5"]
    whole = launch([*pair, f"--model_dir={tmp_path / 'whole'}"])
    cut = launch([*pair, f"--model_dir={tmp_path / 'cut'}"])
    first = stopped_at(cut, "seed 5: step       3")
    out, _ = whole.communicate(timeout=600)
    assert whole.returncode == 0, out
    digests = [r["weights_sha256"] for r in final_json(out)["runs"]]
    assert cut.returncode == 3, first
    stopped = int(first.split("preempted at step ")[1].split(":")[0])
    assert 3 <= stopped < 10
    folders = [tmp_path / "cut", tmp_path / "cut-s5"]
    assert f"a checkpoint of that step is in {folders[0]} and {folders[1]}" in first
    for folder in folders:
        index = json.loads((folder / "checkpoints.json").read_text())["checkpoints"]
        assert index[-1] == f"ckpt-{stopped}.npz"
    again = launch([*pair, f"--model_dir={folders[0]}"])
    out, _ = again.communicate(timeout=600)
    assert again.returncode == 0, out
    at = " and ".join(str(f / f"ckpt-{stopped}.npz") for f in folders)
    assert f"resumed from {at} at step {stopped}" in out
    assert [r["weights_sha256"] for r in final_json(out)["runs"]] == digests

    index = tmp_path / "whole-s5" / "checkpoints.json"  # its ckpt-10 lost: at step 5
    index.write_text(json.dumps({"checkpoints": ["ckpt-5.npz"]}))
    behind = launch([*pair, f"--model_dir={tmp_path / 'whole'}"])
    alone = launch([*common, "--seed=5", "--train_steps=12", f"--model_dir={folders[1]}"])
    fresh = launch([*pair, f"--model_dir={folders[0]}", f"--pair_model_dir={tmp_path / 'new'}"])
    out, _ = behind.communicate(timeout=600)
    assert behind.returncode == 0, out
    at = " and ".join(str(tmp_path / f / "ckpt-5.npz") for f in ("whole", "whole-s5"))
    assert f"resumed from {at} at step 5" in out
    assert [r["weights_sha256"] for r in final_json(out)["runs"]] == digests
    out, _ = alone.communicate(timeout=600)
    assert alone.returncode == 0, out
    assert f"resumed from {folders[1] / 'ckpt-10.npz'} at step 10" in out
    assert final_json(out)["final_step"] == 12 and "runs" not in final_json(out)
    out, _ = fresh.communicate(timeout=600)  # a run at step 10 beside one not started
    assert fresh.returncode == 2, out
    assert f"error: {folders[0]} resumes at step 10, {tmp_path / 'new'} at step 0: a pair" in out


REFUSED = {  # flags beside seed 4's run -> what the one error line says
    "--pair_seed=4": "--pair_seed=4 is the first run's seed",
    "--pair_seed=5 --strategy=mirrored": "--strategy=mirrored spreads a run over several",
    "--pair_seed=5 --replay_divergence=3": "cannot replay a divergence (--replay_divergence=3",
    "--pair_seed=5 --pair_model_dir=MODEL_DIR": "each run of a pair needs a folder of its own",
    "--pair_model_dir=OTHER": "give both",
}


def test_what_a_pair_cannot_do_is_refused_in_one_line(tmp_path, write_cifar):
    """One seed twice, several devices, a divergence's replay, one folder for both runs, a
    second folder without a second seed, another backend than JAX: exit 2, one ``error:``
    line, nothing written."""
    common = pair_flags(tmp_path, write_cifar, train_steps=2)
    cases = []
    for i, (flags, said) in enumerate(REFUSED.items()):
        folder = tmp_path / f"run{i}"
        flags = flags.replace("MODEL_DIR", str(folder)).replace("OTHER", str(tmp_path / "other"))
        cases.append((folder, [*common, *flags.split(), f"--model_dir={folder}"], "jax", said))
    folder = tmp_path / "tf"
    cases.append(
        (
            folder,
            [*common, "--pair_seed=5", f"--model_dir={folder}"],
            "tensorflow",
            "KERAS_BACKEND=jax",
        )
    )

    def refused(case):
        folder, flags, backend, _ = case
        env = {**backend_env("jax"), "KERAS_BACKEND": backend}
        return launchers.run("launch/cifar.py", *flags, env=env)

    for case, proc in zip(cases, launchers.run_many([lambda c=c: refused(c) for c in cases])):
        folder, flags, backend, said = case
        errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
        assert proc.returncode == 2 and len(errors) == 1, (flags, proc.stderr[-2000:])
        assert said in errors[0], (said, errors[0])
        assert not folder.exists() and not (tmp_path / "other").exists()
        assert not folder.with_name(folder.name + "-s5").exists()


def test_the_benchmark_times_a_pair_as_the_lease_reads_it(tmp_path):
    """bench/throughput.py --pair (the lease's pair try): its images/s count both runs' images,
    its loss at step N is the first run's, the loss of the same benchmark alone (seed 0, the
    same batches and weights), the second run's beside it; refused beside a peer that trains
    one run, and on TensorFlow."""
    flags = [
        "--model=small",
        "--batch_size=8",
        "--steps=1",
        "--warmup=1",
        "--loss_at_step=4",
        "--chunk_steps=2",
        "--eval_batches=0",
        "--input_batches=0",
        "--no-measure_matmul",
    ]
    env = backend_env("jax")

    def bench(*more, backend="jax"):
        return lambda: launchers.run(
            "bench/throughput.py", *flags, *more, env={**env, "KERAS_BACKEND": backend}
        )

    pair, alone, peer, tf = launchers.run_many(
        [
            bench("--pair", f"--output={tmp_path / 'pair.json'}"),
            bench(f"--output={tmp_path / 'alone.json'}"),
            bench("--pair", "--compare_torch"),
            bench("--pair", backend="tensorflow"),
        ]
    )
    assert pair.returncode == 0 and alone.returncode == 0, pair.stderr[-2000:]
    paired = json.loads((tmp_path / "pair.json").read_text())
    one = json.loads((tmp_path / "alone.json").read_text())
    assert paired["pair"] is True and one["pair"] is False
    assert paired["loss_step"] == 4 and paired["loss_at_step"] == one["loss_at_step"]
    assert paired["pair_loss_at_step"] != paired["loss_at_step"]  # seed 1's own batches
    step = paired["chunk_s_per_step"]  # 2 runs x 8 images a step
    assert paired["chunk_images_per_s"] == pytest.approx(16 / step, rel=1e-3)
    assert peer.returncode == 2 and "--pair times two runs in one step" in peer.stderr
    assert tf.returncode != 0 and "error: --pair trains two runs in one compiled JAX step" in (
        tf.stdout + tf.stderr
    )
