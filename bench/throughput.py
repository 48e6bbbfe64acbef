"""Training / evaluation / input throughput of the paper's CIFAR network on this device, on the
Keras backend in use (``KERAS_BACKEND``: tensorflow, the default, jax or torch).

    python bench/throughput.py                                 # paper model, batch 128
    python bench/throughput.py --synthetic                     # compute only (cached batch)
    python bench/throughput.py --synthetic --compare_torch     # TF, then the PyTorch twin
    python bench/throughput.py --precision=mixed_bfloat16 --jit_compile
    python bench/throughput.py --model=small --steps=2 --warmup=1 --eval_batches=1
    KERAS_BACKEND=jax python bench/throughput.py --precision=mixed_bfloat16 --compare_torch
    python bench/throughput.py --synthetic --compare_backend   # TF, then the same on JAX
    KERAS_BACKEND=torch python bench/throughput.py             # the PyTorch backend's trainer

Measures, for the launchers' trainer (``tensorflow_training.Trainer`` on TensorFlow,
``jax_training.JaxTrainer`` on JAX, ``torch_training.TorchTrainer`` on PyTorch: the real
training step, forward, backward, weight decay, momentum SGD) on the current device:

* training seconds/step and images/s: median and spread (p10/p90, min/max) of ``--steps``
  individually timed steps (``trainer.run_steps(it, 1)``) after ``--warmup`` untimed ones, and,
  with ``--chunk_steps K``, one call of K steps (the launcher's way: no host wake-up per step);
* the first step's time (tracing + compile + one step); with ``--loss_at_step N``, the training
  loss of step N (the same for two runs of the same arithmetic: a speed-up's check);
* with ``--profile_dir``, a profiler trace of ``--profile_steps`` steps, and with
  ``--kernel_summary FILE`` its top kernels by device time in a text file (``kernels.py``);
* evaluation images/s (``trainer.evaluate`` over ``--eval_batches`` batches, after one warm-up);
* the input alone, from ``--data_path`` (the official binary files or an image folder; default:
  random records written to a temporary folder in the official binary layout): TensorFlow's
  ``cifar_input.build_dataset`` (training split, augmentation), or on JAX the batch maker that
  runs inside the step on the device (``stream.training_batch``), compiled on its own;
* peak memory: host RSS (``resource.getrusage``), and the GPU's peak when there is one;
* FLOPs per image, computed analytically from the layer shapes (2 k^2 c_in c_out H_out W_out per
  conv, a multiply-add counting 2; a training step ~ 3x the forward pass), the achieved FLOP/s,
  and its fraction of the device's peak (MFU) from ``GPU_PEAKS`` or, on a CPU, a stated peak:
  cores x FLOP/cycle x clock (``cpu_peak``), beside a measured matmul rate.

``--synthetic`` (TensorFlow) feeds one cached batch instead of the pipeline (compute without
input). ``--compare_torch`` then runs ``bench/torch_twin.py`` (a subprocess, after ours) on the
same model, batch and thread count and prints both s/step and the ratio ours / torch;
``--compare_backend`` times the same training on the other Keras backend (a subprocess) and
prints the JAX / TF ratio.

This script is the command line and the order of the run; the rest of ``bench/`` holds the
parts: ``flops.py`` (the analytic FLOP count), ``peaks.py`` (the device peaks), ``timing.py``
(timing and its statistics), ``measure.py`` (each measurement of the trainer), ``compare.py``
(the peers timed in subprocesses), ``engines.py`` (what differs between the Keras backends).

The LAST stdout line is the result as JSON (also written to ``--output``).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

# resnet_noBN without installing it; imported inside the functions only, so that --onednn is set
# before resnet_noBN and TensorFlow load (configs/ is plain Python).
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
# The parts of the benchmark (bench/ is not a package): plain Python, no backend loads with them.
from compare import compare_with_other_backend, compare_with_torch  # noqa: E402
from flops import model_flops  # noqa: E402
from measure import (  # noqa: E402
    count_model,
    measure_chunk,
    measure_evaluation,
    measure_first_step,
    measure_input_pipeline,
    measure_loss,
    measure_memory,
    measure_mfu,
    measure_training,
    profile,
    say,
    time_steps,
)
from peaks import COMPUTE_PRECISIONS, device_peak_flops, peak_precision  # noqa: E402

from resnet_noBN.configs.flag_config import add_argument  # noqa: E402
from resnet_noBN.configs.network_config import BlockConfig  # noqa: E402
from resnet_noBN.configs.presets import MODELS  # noqa: E402  the architectures, by name
from resnet_noBN.configs.runtime_config import RuntimeConfig  # noqa: E402

# the counts each flag must reach: one at least, or none (0: skip that measurement)
AT_LEAST_ONE = ("batch_size", "steps", "compare_rounds", "eval_batch_size", "profile_steps")
AT_LEAST_ZERO = ("warmup", "chunk_steps", "eval_batches", "input_batches", "loss_at_step")


# --------------------------------------------------------------------------- command line
def add_timing_flags(p: argparse.ArgumentParser) -> None:
    """What is trained and how it is timed: the network, the batch, the steps, a profile."""
    p.add_argument(
        "--model",
        choices=list(MODELS),
        default="paper",
        help="the network (resnet_noBN/configs/presets.py): paper (Table 1 of arXiv:1611.04231), "
        "quarter (its widths / 4), small (1 block per stage: a smoke test)",
    )
    p.add_argument("--batch_size", type=int, default=128, help="global training batch")
    p.add_argument("--steps", type=int, default=20, help="individually timed training steps")
    p.add_argument(
        "--warmup",
        type=int,
        default=3,
        help="untimed training steps after the first (compile) step",
    )
    p.add_argument(
        "--chunk_steps",
        type=int,
        default=0,
        help="also time K steps in ONE run_steps call (0: skip)",
    )
    p.add_argument(
        "--profile_dir",
        default=None,
        help="then trace --profile_steps steps (one run_steps call) with tf.profiler or "
        "jax.profiler "
        "into this folder: TensorBoard's Profile tab shows where the time goes",
    )
    p.add_argument("--profile_steps", type=int, default=3)
    p.add_argument(
        "--kernel_summary",
        default=None,
        help="with --profile_dir: write the traced steps' top kernels by device time to this "
        "text file (bench/kernels.py)",
    )
    p.add_argument(
        "--loss_at_step",
        type=int,
        default=0,
        help="report the training loss of this step (from the first, after the warm-up, before "
        "the timed steps; 0: skip): the same for two runs of the same arithmetic",
    )


def add_runtime_flags(p: argparse.ArgumentParser) -> None:
    """How the step runs: precision, XLA, layout, threads, oneDNN."""
    add_argument(p, RuntimeConfig, "precision")  # the launchers' flag, declared once there
    p.add_argument(
        "--jit_compile",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="XLA-compile the forward/backward (Trainer(jit_compile=True)); TensorFlow only: "
        "JAX always compiles",
    )
    add_argument(p, BlockConfig, "data_format")
    p.add_argument(
        "--intra_op_threads",
        type=int,
        default=None,
        help="default: speed.default_threads() (CPU: one per core; GPU: TF's); 0: TF's default",
    )
    p.add_argument(
        "--inter_op_threads",
        type=int,
        default=None,
        help="default: speed.default_threads() (CPU: 1; GPU: TF's); 0: TF's default",
    )
    p.add_argument(
        "--onednn",
        choices=("0", "1"),
        default=None,
        help="set TF_ENABLE_ONEDNN_OPTS before TF is imported (default: inherit the "
        "environment; TF enables oneDNN on x86 Linux when unset)",
    )


def add_measurement_flags(p: argparse.ArgumentParser) -> None:
    """The input, and what else is measured: evaluation, the input alone, the peaks."""
    p.add_argument(
        "--synthetic",
        action="store_true",
        help="train on one cached in-memory batch instead of the input pipeline",
    )
    p.add_argument(
        "--data_path",
        default=None,
        help="CIFAR-10 as the official binary files or an image folder (default: "
        "random records in a temporary folder)",
    )
    p.add_argument("--eval_batch_size", type=int, default=500)
    p.add_argument(
        "--eval_batches",
        type=int,
        default=2,
        help="timed evaluation batches, after one warm-up batch (0: skip)",
    )
    p.add_argument(
        "--input_batches",
        type=int,
        default=400,
        help="timed batches of the input pipeline alone, after a warm-up epoch (0: skip)",
    )
    p.add_argument(
        "--measure_matmul",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="time a 2048^3 matmul in the run's precision: a practical peak",
    )
    p.add_argument(
        "--cpu_clock_ghz",
        type=float,
        default=None,
        help="clock for the CPU's stated peak (default: lscpu / /proc/cpuinfo)",
    )


def add_compare_flags(p: argparse.ArgumentParser) -> None:
    """The peers timed after ours (``compare.py``)."""
    p.add_argument(
        "--compare_torch",
        action="store_true",
        help="then run bench/torch_twin.py with the same model, batch, steps and "
        "threads, and print the TF / torch s/step ratio",
    )
    p.add_argument(
        "--compare_backend",
        action="store_true",
        help="then time the same training on the other Keras backend (TensorFlow or JAX: a "
        "subprocess) and print the JAX / TF s/step ratio",
    )
    p.add_argument(
        "--compare_rounds",
        type=int,
        default=1,
        help="with --compare_torch or --compare_backend: alternate our timed windows with the "
        "peer's this many times (ours re-timed in-process, the peer a fresh subprocess each "
        "round)",
    )


def parse_args(argv=None):
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    add_timing_flags(p)
    add_runtime_flags(p)
    add_measurement_flags(p)
    add_compare_flags(p)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--output", default=None, help="also write the JSON result here")
    args = p.parse_args(argv)
    for name in AT_LEAST_ONE:
        if getattr(args, name) < 1:
            p.error(f"--{name} must be >= 1")
    for name in AT_LEAST_ZERO:
        if getattr(args, name) < 0:
            p.error(f"--{name} must be >= 0")
    if args.kernel_summary and not args.profile_dir:
        p.error("--kernel_summary needs --profile_dir")
    if args.loss_at_step and args.loss_at_step <= 1 + args.warmup:
        p.error("--loss_at_step must come after the first step and the --warmup steps")
    return args


# --------------------------------------------------------------------------- the run
def set_environment(args) -> None:
    """What must be settled before TensorFlow loads: torch for --compare_torch, --onednn and
    TensorFlow's log level, then oneDNN's default (``cpu.default_onednn``)."""
    if args.compare_torch:
        import importlib.util

        if importlib.util.find_spec("torch") is None:
            raise SystemExit(
                "error: --compare_torch needs torch: pip install -r bench/requirements.txt"
            )
    if args.onednn is not None:
        os.environ["TF_ENABLE_ONEDNN_OPTS"] = args.onednn
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    from resnet_noBN.host import cpu

    cpu.default_onednn()


def describe_device(args, eng) -> dict:
    """device ("cpu" or "gpu"), device_name, cores, and the peak FLOP/s at peak_precision (bf16
    for mixed_bfloat16, tf32 for float32 on a GPU that runs float32 as TF32)."""
    from resnet_noBN.host import cpu

    precision = peak_precision(COMPUTE_PRECISIONS[args.precision], eng.float32_as_tf32)
    name = eng.gpu_name or cpu.cpu_name()
    cores = len(os.sched_getaffinity(0))
    return {
        "device": eng.device,
        "device_name": name,
        "cores": cores,
        "peak_precision": precision,
        "peak": device_peak_flops(eng.device, precision, name, args.cpu_clock_ghz, cores),
    }


def training_data(args, folder: Path) -> tuple[str, str]:
    """(data_path, where it came from): --data_path, or random records written into folder."""
    from resnet_noBN.datasets import cifar_data

    if args.data_path:
        data_path, source = args.data_path, "--data_path"
    else:
        data_path = str(folder / "cifar-10-batches-bin")
        # a test file of at least one evaluation batch: evaluation drops a partial one
        per_file = max(256, args.eval_batch_size)
        cifar_data.write_random(data_path, "cifar10", records_per_file=per_file)
        source = "random records (no --data_path)"
    cifar_data.check_data_path("cifar10", data_path)
    return data_path, source


def onednn_isa() -> str | None:
    """The instruction set oneDNN chose on this CPU, as its verbose mode names it (None where
    oneDNN is off): one small convolution in a subprocess with ``ONEDNN_VERBOSE=1``."""
    code = (
        "import tensorflow as tf; tf.nn.conv2d(tf.ones([1, 8, 8, 4]), tf.ones([3, 3, 4, 4]), "
        "1, 'SAME')"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "ONEDNN_VERBOSE": "1"},
    )
    match = re.search(r"onednn_verbose,.*?info,cpu,isa:(.*)", proc.stdout + proc.stderr)
    return match.group(1).strip() if match else None


def describe_run(args, eng, dev: dict, data_path: str, data_source: str, flops: dict) -> dict:
    """What was measured, where and how (the start of the JSON), printed as two lines."""
    import keras

    from resnet_noBN.backends import registry
    from resnet_noBN.configs.network_config import ModelConfig
    from resnet_noBN.host import cpu

    tensorflow = eng.name == "tensorflow"
    say(
        f"{dev['device_name']} ({dev['device']}); {eng.version}, Keras {keras.__version__}; "
        f"model {args.model}, batch {args.batch_size}"
        + f", {args.precision}, "
        + (f"jit_compile={args.jit_compile}, " if tensorflow else "")
        + f"{args.data_format}, "
        + (
            f"threads intra={eng.intra} inter={eng.inter}, "
            f"TF_ENABLE_ONEDNN_OPTS={os.environ.get('TF_ENABLE_ONEDNN_OPTS')}; "
            if tensorflow
            else ""
        )
        + f"input: {eng.input} from {data_path} ({data_source})"
    )
    result = {
        "framework": eng.name,
        "framework_version": eng.version,
        "keras_version": keras.__version__,
        "device": dev["device"],
        "device_name": dev["device_name"],
        "model": args.model,
        "model_config": dataclasses.asdict(ModelConfig.preset(args.model)),
        "batch_size": args.batch_size,
        "precision": args.precision,
        "jit_compile": args.jit_compile if tensorflow else True,
        "data_format": args.data_format,
        "intra_op_threads": eng.intra,
        "inter_op_threads": eng.inter,
        "synthetic": args.synthetic,
        "input": eng.input,
        "data_path": data_path,
        "data_source": data_source,
        **flops,
        "load_average_at_start": list(os.getloadavg()),
    }
    if tensorflow:
        result.update(
            TF_ENABLE_ONEDNN_OPTS=os.environ.get("TF_ENABLE_ONEDNN_OPTS"),
            **cpu.runtime_report(),
            onednn_isa=onednn_isa() if dev["device"] == "cpu" else None,
        )
        say(
            f"oneDNN {'on' if result['onednn'] else 'off'} ({result['onednn_reason']}), ISA "
            f"{result['onednn_isa']}; CPU {', '.join(result['cpu_isa'])}"
        )
    else:
        result["cpu_isa"] = [isa for isa, present in cpu.isa().items() if present]
        say(f"XLA on {registry.name()}; CPU {', '.join(result['cpu_isa'])}")
    return result


def main(argv=None) -> dict:
    """The run, in order: the environment before any backend loads, the engine, the device and
    its peak, then each measurement of one trainer; the JSON result printed last."""
    args = parse_args(argv)
    set_environment(args)
    from engines import engine

    eng = engine(args)
    dev = describe_device(args, eng)
    from resnet_noBN.configs.network_config import ModelConfig

    flops = model_flops(**dataclasses.asdict(ModelConfig.preset(args.model)))
    with tempfile.TemporaryDirectory(prefix="throughput_") as tmp:
        data_path, data_source = training_data(args, Path(tmp))
        result = describe_run(args, eng, dev, data_path, data_source, flops)
        if args.input_batches:  # before the model exists: nothing else competes for the CPU
            result.update(measure_input_pipeline(args, eng, data_path))
        trainer, iterator = eng.trainer(data_path, tmp + "/model")
        result.update(count_model(trainer.model))
        result.update(measure_first_step(args, trainer, iterator))
        if args.loss_at_step:
            result.update(measure_loss(args, trainer, iterator))
        training, times = measure_training(args, trainer, iterator, flops)
        result.update(training)
        if args.chunk_steps:
            result.update(measure_chunk(args, trainer, iterator))
        if args.profile_dir:
            result.update(profile(args, eng, trainer, iterator))
        if args.eval_batches:
            result.update(measure_evaluation(args, eng, trainer, data_path, flops))
        result.update(measure_mfu(args, dev, flops, result))
        result.update(measure_memory(eng))

        def time_window():  # ours again, between the peer's rounds
            return time_steps(trainer, iterator, args.steps)[0]

        if args.compare_torch:
            threads = eng.intra or dev["cores"]
            result.update(
                compare_with_torch(
                    args, eng, threads, times, time_window, result["trainable_params"]
                )
            )
        if args.compare_backend:
            result.update(compare_with_other_backend(args, eng, times, time_window))
    result["load_average_at_end"] = list(os.getloadavg())
    line = json.dumps(result)
    if args.output:
        Path(args.output).parent.mkdir(parents=True, exist_ok=True)
        Path(args.output).write_text(line + "\n")
    print(line, flush=True)
    return result


if __name__ == "__main__":
    main()
