"""launch/cifar.py end to end: summary, a run and its files, resume, every bad input."""

import functools
import json
import os
import shutil
import signal
import subprocess
import sys

import launchers
import pytest
from launchers import REPO

from resnet_noBN.backends import registry
from resnet_noBN.configs.errors import InputError
from resnet_noBN.runs import folder_lock

SMALL = [
    "--model=small",
    "--batch_size=16",
    "--eval_batch_size=20",
    "--log_every=4",
    "--checkpoint_every=4",
    "--eval_every=4",
    "--seed=3",
    # steps, not the default fractions of the run: a rerun with more steps resumes the schedule
    "--lr_boundaries=30000,50000",
]


def cifar(*args, env=None):
    return launchers.run("launch/cifar.py", *args, env=env)


def test_summary_only_prints_counts_without_data():
    proc = cifar("--summary_only", "--data_path=/nonexistent")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert "trainable_params: 13538736" in lines and "non_trainable_params: 2560" in lines
    assert "convolutions: 55" in lines and "conv_kernel_weights: 13538736" in lines
    assert "stage3_unit8_conv2" in proc.stdout  # the layer table


def test_a_preset_is_the_start_and_model_flags_override_it():
    """--model=quarter: Table 1 at a quarter of the width (55 convolutions); a model flag given
    beside it wins (--num_residual_units=1: the small preset's network)."""
    quarter = cifar("--summary_only", "--model=quarter").stdout.splitlines()
    assert "convolutions: 55" in quarter and "trainable_params: 848304" in quarter
    one_unit = cifar("--print_config", "--model=quarter", "--num_residual_units=1")
    small = cifar("--print_config", "--model=small")
    network = json.loads(one_unit.stdout)["network"]
    assert network["num_residual_units"] == 1 and network["stage_widths"] == [16, 32, 64]
    assert network == json.loads(small.stdout)["network"]


def test_summary_of_the_paper_count_with_projection_shortcuts():
    """The text's "13.59 million" needs conv biases and 1x1 projections (58 convolutions)."""
    proc = cifar("--summary_only", "--shortcut=projection", "--conv_bias", "--dataset=cifar100")
    assert "trainable_params: 13588800" in proc.stdout.splitlines()
    assert "non_trainable_params: 25600" in proc.stdout.splitlines()


def test_run_writes_its_files_and_resumes(tmp_path, cifar_bin):
    model_dir = tmp_path / "run"
    # Keras' form of momentum, as every run before 2026-11-28: what an older record without an
    # optimizer ran
    keras_form = "--optimizer=momentum"
    first = cifar(
        f"--data_path={cifar_bin.parent}",
        f"--model_dir={model_dir}",
        "--train_steps=8",
        *SMALL,
        keras_form,
    )
    assert first.returncode == 0, first.stderr[-3000:]
    result = json.loads(first.stdout.strip().splitlines()[-1])
    assert result["dataset"] == "cifar10" and result["final_step"] == 8
    assert result["test_examples"] == 16 and 0 <= result["test_error"] <= 1
    assert (
        result["train_examples"]
        == json.loads((model_dir / "config.json").read_text())["data"]["train_examples"]
    )
    assert result["images_per_sec"] > 0 and result["wall_time_s"] > 0
    assert "step       4  loss " in first.stdout and "images/s" in first.stdout
    for name in (
        "config.json",
        "metrics.jsonl",
        "train.jsonl",
        "test_error.png",
        "checkpoint",
        "ckpt-8.index",
    ):
        assert (model_dir / name).exists(), name
    assert [
        json.loads(line)["step"] for line in (model_dir / "metrics.jsonl").read_text().splitlines()
    ] == [4, 8]

    # a config.json of a run from before the leaky-ReLU / identity / norm switches and the
    # named optimizer and loss existed, flat as older versions wrote it
    config = json.loads((model_dir / "config.json").read_text())
    assert config["network"]["conv_bias"] is False and config["runtime"]["onednn"] in (True, False)
    flat = {**config["network"], "dataset": "cifar10", "seed": config["seed"]}
    for key in ("relu_leakiness", "identity", "block", "norm"):
        del flat[key]
    (model_dir / "config.json").write_text(json.dumps(flat))
    default_form = cifar(
        f"--data_path={cifar_bin.parent}", f"--model_dir={model_dir}", "--train_steps=12", *SMALL
    )
    assert default_form.returncode == 2  # it ran Keras' form: today's default is refused
    assert "(optimizer='momentum' there, 'momentum_2016' now)" in default_form.stderr
    again = cifar(
        f"--data_path={cifar_bin.parent}",
        f"--model_dir={model_dir}",
        "--train_steps=12",
        *SMALL,
        keras_form,
    )
    assert again.returncode == 0, again.stderr[-3000:]
    assert f"resumed from {model_dir}/ckpt-8 at step 8" in again.stdout
    assert json.loads(again.stdout.strip().splitlines()[-1])["final_step"] == 12

    other = cifar(
        f"--data_path={cifar_bin.parent}",
        f"--model_dir={model_dir}",
        "--train_steps=16",
        *SMALL,
        keras_form,
        "--num_residual_units=2",
    )
    assert other.returncode == 2
    assert (
        other.stderr.strip()
        .splitlines()[-1]
        .startswith(
            f"error: --model_dir {model_dir} holds a run of another model (num_residual_units=1 "
            "there, 2 now)"
        )
    )
    # another optimizer, or the 2016 code's form of momentum (its accumulator in gradient
    # units) for Keras' form the run started with: refused, the folder as it was, no lock file
    # in it (the run that ended took its own; the second on a copy of the folder, so the two
    # run side by side: a folder takes one run at a time)
    copy = tmp_path / "copy"
    shutil.copytree(model_dir, copy)

    def files(folder):
        return {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file()}

    before = files(copy)
    adam, form_2016 = launchers.run_many(
        [
            functools.partial(
                cifar,
                f"--data_path={cifar_bin.parent}",
                f"--model_dir={folder}",
                "--train_steps=16",
                *SMALL,
                f"--optimizer={optimizer}",
            )
            for folder, optimizer in ((model_dir, "adam"), (copy, "momentum_2016"))
        ]
    )
    assert adam.returncode == 2
    assert "(optimizer='momentum' there, 'adam' now)" in adam.stderr.strip().splitlines()[-1]
    assert form_2016.returncode == 2
    assert form_2016.stderr.strip().splitlines()[-1] == (
        f"error: --model_dir {copy} holds a run of another model (optimizer='momentum' "
        "there, 'momentum_2016' now); use a new --model_dir or the same flags"
    )
    assert files(copy) == before and "ckpt-12.index" in before
    assert folder_lock.LOCK_FILE not in before
    # a run of the old default (conv biases on) is refused, not silently resumed
    config = json.loads((model_dir / "config.json").read_text())
    config["network"]["conv_bias"] = True
    (model_dir / "config.json").write_text(json.dumps(config))
    old = cifar(
        f"--data_path={cifar_bin.parent}",
        f"--model_dir={model_dir}",
        "--train_steps=16",
        *SMALL,
        keras_form,
    )
    assert old.returncode == 2
    assert old.stderr.strip().splitlines()[-1] == (
        f"error: --model_dir {model_dir} holds a run of another model (conv_bias=True there, "
        "False now); use a new --model_dir or the same flags"
    )
    assert sorted(p.name for p in model_dir.glob("ckpt-*.index")) == [
        "ckpt-12.index",
        "ckpt-4.index",
        "ckpt-8.index",
    ]  # nothing lost


def test_divergence_stops_with_status_1_and_keeps_checkpoints(tmp_path, cifar_bin):
    model_dir = tmp_path / "run"
    proc = cifar(
        f"--data_path={cifar_bin}",
        f"--model_dir={model_dir}",
        "--train_steps=400",
        *SMALL,
        "--learning_rate=1e12",
    )
    assert proc.returncode == 1
    assert "training diverged" in proc.stderr.strip().splitlines()[-1]
    assert proc.stderr.strip().splitlines()[-1].startswith("error: loss is ")


BAD_INPUT = [  # a launch's arguments, the start of its last line
    (
        ["--dataset=mnist"],
        "error: flag --dataset=mnist: value should be one of <cifar10|cifar100>",
    ),
    (
        ["--init=xavier"],
        "error: flag --init=xavier: value should be one of <hardt_ma|standard|he>",
    ),
    (["--relu_leakiness=1"], "error: --relu_leakiness must be in [0, 1), got 1.0"),
    (["--norm=layer"], "error: flag --norm=layer: value should be one of <none|batch>"),
    (
        ["--block=resnet"],
        "error: flag --block=resnet: value should be one of "
        "<hardt_ma|preactivation|fixup|skipinit|zero_last>",
    ),
    (
        ["--norm=batch"],
        "error: --norm=batch stands where the original code's unit normalises: use it with "
        "--block=preactivation, not --block=hardt_ma",
    ),
    (["--batch_size=0"], "error: --batch_size must be positive, got 0"),
    (["--train_steps=-1"], "error: --train_steps must be positive, got -1"),
    (
        ["--lr_boundaries=50000,30000"],
        "error: --lr_boundaries must be strictly increasing, all fractions of --train_steps "
        "or all steps, got 50000,30000",
    ),
    (
        ["--lr_boundaries=1/2,x"],
        "error: --lr_boundaries entries are fractions of --train_steps in (0, 1) (1/2, 0.5) or "
        "steps >= 1, got 'x'",
    ),
    (["--stage_widths=64,48,256"], "error: a pool_pad shortcut cannot go from 64 to 48"),
    (["--pad=-1"], "error: --pad must be >= 0, got -1"),
    (
        ["--data_path=/nonexistent/cifar"],
        "error: --data_path /nonexistent/cifar is not a folder",
    ),
    (["--strategy=multi_worker"], "error: --strategy=multi_worker needs TF_CONFIG"),
    (["stray"], "error: unexpected arguments ['stray']; flags are written --name=value"),
    (["--seed=-1"], "error: --seed=-1 is outside 0 to 4,294,967,295"),
    (["--seed=4294967296"], "error: --seed=4294967296 is outside 0 to 4,294,967,295"),
]


@pytest.fixture(scope="module")
def bad_input_runs(tmp_path_factory, cifar_bin):
    """Each BAD_INPUT case launched (two at a time): its --model_dir and its process."""
    root = tmp_path_factory.mktemp("bad_input")
    dirs = [root / f"run{i}" for i in range(len(BAD_INPUT))]
    launches = [
        functools.partial(
            cifar, f"--model_dir={d}", f"--data_path={cifar_bin}", *args, env=launchers.IMPORT_TIMES
        )
        for d, (args, _) in zip(dirs, BAD_INPUT)
    ]
    return list(zip(dirs, launchers.run_many(launches)))


@pytest.mark.parametrize(
    "case", range(len(BAD_INPUT)), ids=[" ".join(args) for args, _ in BAD_INPUT]
)
def test_bad_input_one_line_nothing_written(bad_input_runs, case):
    model_dir, proc = bad_input_runs[case]
    args, message = BAD_INPUT[case]
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert proc.stderr.strip().splitlines()[-1].startswith(message)
    assert not model_dir.exists()
    # answered before any backend loads (in about a second; TensorFlow's import takes 5-7 s of
    # CPU): the flags, then the cluster and the data (runs.preflight)
    assert "resnet_noBN.runs.run_config" in launchers.imported(proc)
    assert not launchers.imported(proc) & launchers.BACKEND_MODULES


BROKEN_DATA = {  # a flaw of the data folder, what the error line names
    "truncated": "data_batch_3.bin is 49268 bytes, not a whole number (>= 1) of 3073-byte "
    "CIFAR-10 records",
    "layout": "lacks test_batch.bin: --data_path must be the folder",
}


@pytest.fixture(scope="module")
def broken_data_runs(tmp_path_factory, cifar_bin):
    """A copy of the generated data set with each flaw, launched on (both at once): its
    --model_dir and its process."""
    root, launches = tmp_path_factory.mktemp("broken"), []
    for kind in BROKEN_DATA:
        folder = root / kind / "cifar-10-batches-bin"
        shutil.copytree(cifar_bin, folder)
        if kind == "truncated":
            with open(folder / "data_batch_3.bin", "ab") as f:
                f.write(b"\0" * 100)
        elif kind == "layout":
            (folder / "test_batch.bin").unlink()
        model_dir = root / kind / "run"
        launches.append(
            functools.partial(
                cifar,
                f"--model_dir={model_dir}",
                f"--data_path={folder}",
                *SMALL,
                env=launchers.IMPORT_TIMES,
            )
        )
    runs = launchers.run_many(launches)
    return {kind: (root / kind / "run", proc) for kind, proc in zip(BROKEN_DATA, runs)}


@pytest.mark.parametrize("kind", BROKEN_DATA)
def test_broken_data_files_are_named(broken_data_runs, kind):
    model_dir, proc = broken_data_runs[kind]
    assert proc.returncode == 2, proc.stderr[-2000:]
    line = proc.stderr.strip().splitlines()[-1]
    assert line.startswith("error: ") and BROKEN_DATA[kind] in line
    assert not model_dir.exists()
    assert not launchers.imported(proc) & launchers.BACKEND_MODULES  # runs.preflight's


def test_help_exits_0_and_a_backend_keras_cannot_load_is_one_line(tmp_path, cifar_bin):
    """--help prints the flags with exit 0; an unknown KERAS_BACKEND is refused with one line
    and exit 2 before Keras is imported (registry.check_chosen, below)."""
    helped = cifar("--help")
    assert helped.returncode == 0 and "--model_dir" in helped.stdout + helped.stderr
    run = [f"--model_dir={tmp_path / 'run'}", f"--data_path={cifar_bin}", *SMALL]
    bogus = cifar(*run, env={"KERAS_BACKEND": "bogus", **launchers.IMPORT_TIMES})
    assert bogus.returncode == 2
    assert bogus.stderr.strip().splitlines()[-1] == (
        "error: KERAS_BACKEND=bogus is not supported; use tensorflow or jax or torch"
    )
    assert "keras" not in launchers.imported(bogus)
    assert not (tmp_path / "run").exists()


def test_a_backend_whose_framework_is_not_installed_is_named(monkeypatch):
    monkeypatch.setattr(registry.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(InputError) as refused:
        registry.check_chosen({"KERAS_BACKEND": "jax"})
    assert str(refused.value) == (
        "KERAS_BACKEND=jax, but jax is not installed: pip install -e '.[jax]', or choose "
        "another backend"
    )


def test_refused_after_the_data_is_read_writes_nothing(tmp_path, cifar_bin):
    """A batch larger than the training split is refused before the folder is made; a data
    folder of fewer records than the official split is said in one line and recorded."""
    big = cifar(
        f"--model_dir={tmp_path / 'big'}", f"--data_path={cifar_bin}", *SMALL, "--batch_size=100000"
    )
    assert big.returncode == 2
    line = big.stderr.strip().splitlines()[-1]
    assert line.startswith("error: --batch_size=100000 exceeds the ") and "training images" in line
    assert not (tmp_path / "big").exists()
    small = cifar(
        f"--model_dir={tmp_path / 'small'}", f"--data_path={cifar_bin}", "--train_steps=1", *SMALL
    )
    assert small.returncode == 0, small.stderr[-2000:]
    config = json.loads((tmp_path / "small" / "config.json").read_text())["data"]
    assert (
        f"note: {cifar_bin} holds {config['train_examples']:,} of the 50,000 train images and "
        f"{config['test_examples']:,} of the 10,000 test images of cifar10: the figures are this "
        "subset's (config.json records it)"
    ) in small.stdout


def test_a_run_replayed_from_its_config_json_is_the_same_run(tmp_path, cifar_bin):
    """--config=RUN/config.json trains the run it records again (its seed included): the same
    weights at the same step; a flag given beside it overrides its value; a file that is no
    record, or --model beside it, is one line."""
    first = cifar(
        f"--model_dir={tmp_path / 'a'}", f"--data_path={cifar_bin}", "--train_steps=8", *SMALL
    )
    assert first.returncode == 0, first.stderr[-2000:]
    record = tmp_path / "a" / "config.json"
    replay, shorter = launchers.run_many(
        [
            functools.partial(cifar, f"--config={record}", f"--model_dir={tmp_path / 'b'}"),
            functools.partial(
                cifar, f"--config={record}", f"--model_dir={tmp_path / 'c'}", "--train_steps=4"
            ),
        ]
    )
    assert replay.returncode == 0 and shorter.returncode == 0, replay.stderr[-2000:]
    a, b, c = (json.loads(p.stdout.strip().splitlines()[-1]) for p in (first, replay, shorter))
    assert (b["final_step"], b["weights_sha256"]) == (a["final_step"], a["weights_sha256"])
    assert c["final_step"] == 4 and a["final_step"] > 4
    saved = {name: json.loads((tmp_path / name / "config.json").read_text()) for name in "abc"}
    for section in ("network", "data", "experiment"):
        assert saved["a"][section] == saved["b"][section] == saved["c"][section], section
    assert saved["a"]["recipe"] == saved["b"]["recipe"] and saved["a"]["seed"] == saved["c"]["seed"]
    assert saved["c"]["recipe"]["train_steps"] == 4
    for args, line in (
        (
            [f"--config={tmp_path / 'none.json'}"],
            f"error: --config {tmp_path / 'none.json'} cannot be read (No such file or "
            "directory); give a run's config.json",
        ),
        (
            [f"--config={record}", "--model=quarter"],
            f"error: --config replays the run {record} records; --model cannot change it: give "
            "the network's, data's, recipe's or runtime's own flags instead",
        ),
    ):
        refused = cifar(*args, f"--model_dir={tmp_path / 'd'}")
        assert refused.returncode == 2 and refused.stderr.strip().splitlines()[-1] == line
    assert not (tmp_path / "d").exists()


def test_scale_lr_is_the_linear_scaling_rule(tmp_path, cifar_bin):
    """--scale_lr: 0.05 x 32 / 128 (the paper's batch) = 0.0125 at --batch_size=32."""
    proc = cifar(
        f"--data_path={cifar_bin}",
        f"--model_dir={tmp_path / 'run'}",
        "--train_steps=4",
        *SMALL,
        "--batch_size=32",
        "--scale_lr",
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "lr 0.0125 " in proc.stdout


def test_an_unwritable_model_dir_is_one_line(cifar_bin):
    proc = cifar(
        "--model_dir=/proc/resnet_noBN/run", f"--data_path={cifar_bin}", "--train_steps=1", *SMALL
    )
    assert proc.returncode == 2
    assert (
        proc.stderr.strip()
        .splitlines()[-1]
        .startswith("error: --model_dir /proc/resnet_noBN/run cannot be written (")
    )


def start(*args):
    return launchers.start(
        [sys.executable, str(REPO / "launch/cifar.py"), *args],
        dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"),
        subprocess.PIPE,
        subprocess.STDOUT,
    )


def signal_when(proc, marker, signum):
    """Send ``signum`` once ``marker`` appears in the output; the whole output and the status."""
    lines = []
    for line in proc.stdout:
        lines.append(line)
        if marker in line and proc.poll() is None:
            proc.send_signal(signum)
            marker = "\0"  # once
    return "".join(lines), proc.wait(timeout=120)


def preemption_args(cifar_bin):
    return [
        f"--data_path={cifar_bin}",
        "--train_steps=150",
        "--log_every=1",
        "--checkpoint_every=1000",
        "--eval_every=1000",
        *[
            a
            for a in SMALL
            if a.split("=")[0] not in ("--log_every", "--checkpoint_every", "--eval_every")
        ],
    ]


@pytest.fixture(scope="module")
def uninterrupted_digest(tmp_path_factory, cifar_bin):
    proc = cifar(*preemption_args(cifar_bin), f"--model_dir={tmp_path_factory.mktemp('once')}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])["weights_sha256"]


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_preempted_run_saves_its_step_and_resumes_bit_identically(
    tmp_path, cifar_bin, uninterrupted_digest, signum
):
    """SIGTERM (a scheduler) or SIGINT (Ctrl-C) mid-run: a checkpoint of the step reached,
    exit 3. After SIGTERM the same command resumes there (0 steps lost) and ends with the
    weights of a run that was never interrupted; SIGINT goes through the same handler
    (``host.preemption``), so its resume is not run twice."""
    args = preemption_args(cifar_bin)
    model_dir = tmp_path / "run"
    output, status = signal_when(start(*args, f"--model_dir={model_dir}"), "step      20 ", signum)
    assert status == 3, output[-3000:]
    assert f"{signum.name} received: saving a checkpoint" in output
    saved = int(output.split("preempted at step ")[1].split(":")[0])
    assert 20 < saved < 150
    assert tf_latest(model_dir) == f"{model_dir}/ckpt-{saved}"
    assert f"step {saved:>7d}  loss" in output  # the last step trained is the one saved
    if signum == signal.SIGINT:
        return

    resumed = cifar(*args, f"--model_dir={model_dir}")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"resumed from {model_dir}/ckpt-{saved} at step {saved}" in resumed.stdout
    assert (
        json.loads(resumed.stdout.strip().splitlines()[-1])["weights_sha256"]
        == uninterrupted_digest
    )


def tf_latest(model_dir):
    import tensorflow as tf

    return tf.train.latest_checkpoint(str(model_dir))


def test_a_kill_during_a_checkpoint_write_leaves_the_previous_one_restorable(tmp_path, cifar_bin):
    """SIGKILL while ckpt-4 of a large model is being written (its temporary files exist):
    the latest checkpoint is still ckpt-2, complete, and the rerun resumes from it."""
    model_dir = tmp_path / "run"
    args = [
        f"--data_path={cifar_bin}",
        f"--model_dir={model_dir}",
        "--train_steps=4",
        "--stage_widths=128,256,512",
        "--num_residual_units=1",
        "--batch_size=16",
        "--eval_batch_size=16",
        "--checkpoint_every=2",
        "--eval_every=1000",
        "--seed=1",
    ]
    proc = start(*args)
    while proc.poll() is None and not list(model_dir.glob("ckpt-4*_temp*")):
        pass
    proc.kill()
    proc.wait()
    assert list(model_dir.glob("ckpt-4*_temp*")), "the kill came after the write"
    assert tf_latest(model_dir) == f"{model_dir}/ckpt-2"
    rerun = cifar(*args)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert f"resumed from {model_dir}/ckpt-2 at step 2" in rerun.stdout
    assert "cannot be restored" not in rerun.stdout


def test_a_rerun_without_seed_reuses_the_seed_of_the_run_it_resumes(tmp_path, cifar_bin):
    args = [
        f"--data_path={cifar_bin}",
        f"--model_dir={tmp_path / 'run'}",
        *[a for a in SMALL if not a.startswith("--seed")],
    ]
    first = cifar(*args, "--train_steps=4")
    assert first.returncode == 0, first.stderr[-3000:]
    seed = json.loads((tmp_path / "run" / "config.json").read_text())["seed"]
    assert f"seed {seed}, model_dir" in first.stdout
    second = cifar(*args, "--train_steps=8")
    assert second.returncode == 0, second.stderr[-3000:]
    assert f"seed {seed}, model_dir" in second.stdout and "at step 4" in second.stdout
