"""Training / evaluation / input throughput of the paper's CIFAR network on this device, on the
Keras backend in use (``KERAS_BACKEND``: tensorflow, the default, or jax).

    python bench/throughput.py                                 # paper model, batch 128
    python bench/throughput.py --synthetic                     # compute only (cached batch)
    python bench/throughput.py --synthetic --compare_torch     # TF, then the PyTorch twin
    python bench/throughput.py --precision=mixed_bfloat16 --jit_compile
    python bench/throughput.py --model=small --steps=2 --warmup=1 --eval_batches=1
    KERAS_BACKEND=jax python bench/throughput.py --precision=mixed_bfloat16 --compare_torch
    python bench/throughput.py --synthetic --compare_backend   # TF, then the same on JAX

Measures, for the launchers' trainer (``training.Trainer`` on TensorFlow,
``jax_training.JaxTrainer`` on JAX: the real training step, forward, backward, weight decay,
momentum SGD) on the current device:

* training seconds/step and images/s: median and spread (p10/p90, min/max) of ``--steps``
  individually timed steps (``trainer.run_steps(it, 1)``) after ``--warmup`` untimed ones, and,
  with ``--chunk_steps K``, one call of K steps (the launcher's way: no host wake-up per step);
* the first step's time (tracing + compile + one step);
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
prints the JAX / TF ratio. What differs between the backends is in ``engines.py``.

The LAST stdout line is the result as JSON (also written to ``--output``).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
# resnet_noBN without installing it (also for torch_twin.py); imported inside the functions only,
# so that --onednn is set before resnet_noBN and TensorFlow load (presets is plain Python).
sys.path.insert(0, str(REPO))
from resnet_noBN.configs.presets import MODELS  # noqa: E402  the architectures, by name

# Dense peak FLOP/s by GPU name (first substring match wins), from NVIDIA's data sheets
# (without sparsity). "float32" is the non-tensor-core rate; TF runs float32 convs and matmuls
# in TF32 on Ampere and newer unless tf.config.experimental.enable_tensor_float_32_execution(False).
_H100_SXM = {"bfloat16": 989e12, "tf32": 494.5e12, "float32": 67e12}
GPU_PEAKS = (
    ("H100 PCIe", {"bfloat16": 756e12, "tf32": 378e12, "float32": 51e12}),
    ("H100 NVL", {"bfloat16": 835e12, "tf32": 417.5e12, "float32": 60e12}),
    ("H100", _H100_SXM),  # H100 SXM ("NVIDIA H100 80GB HBM3")
    ("H200", _H100_SXM),  # the same GH100 chip, more and faster memory
    ("GH200", _H100_SXM),
    ("A100", {"bfloat16": 312e12, "tf32": 156e12, "float32": 19.5e12}),
)


# --------------------------------------------------------------------------- FLOPs
def conv_flops(kernel: int, c_in: int, c_out: int, h_out: int, w_out: int) -> int:
    """FLOPs of one k x k convolution on one image: 2 k^2 c_in c_out H_out W_out (a multiply-add
    is 2 FLOPs; bias, padding and the stride's skipped positions are not counted)."""
    return 2 * kernel * kernel * c_in * c_out * h_out * w_out


def model_flops(
    num_classes: int = 10,
    num_residual_units: int = 9,
    init_filters: int = 16,
    stage_widths=(64, 128, 256),
    stage_strides=(1, 2, 2),
    shortcut: str = "pool_pad",
    image_size: int = 32,
    **_ignored,
) -> dict:
    """Analytic FLOPs per image of the CIFAR network (arXiv:1611.04231 Table 1 by default).

    Forward: every conv (first conv, C1 and C2 of each block, and 1x1 projection shortcuts if
    ``shortcut="projection"``) plus the head's matmul; element-wise ops (bias, ReLU, add, pools)
    are left out (< 0.1%). A training step costs ~3x the forward pass (the backward pass computes
    the input and the weight gradient, each as costly as the forward conv); the first conv's
    input gradient is not needed, which this rounds over (< 0.03%).
    """
    size = image_size
    convs = conv_flops(3, 3, init_filters, size, size)
    c_in = init_filters
    for width, stride in zip(stage_widths, stage_strides, strict=True):
        for unit in range(num_residual_units):
            s = stride if unit == 0 else 1
            size = -(-size // s)  # SAME padding
            convs += conv_flops(3, c_in, width, size, size) + conv_flops(
                3, width, width, size, size
            )
            if shortcut == "projection" and (c_in != width or s != 1):
                convs += conv_flops(1, c_in, width, size, size)
            c_in = width
    head = 2 * c_in * num_classes
    forward = convs + head
    return {
        "forward_flops_per_image": forward,
        "conv_flops_per_image": convs,
        "head_flops_per_image": head,
        "train_flops_per_image": 3 * forward,
    }


def keras_model_flops(model) -> int:
    """Forward FLOPs per image read off a built Keras model's layers (Conv2D and Dense): the
    same count as :func:`model_flops`, from the kernels' and outputs' shapes."""
    import keras

    total = 0
    for layer in model.layers:
        if isinstance(layer, keras.layers.Conv2D):
            kh, kw, c_in, c_out = layer.kernel.shape
            shape = layer.output.shape
            h, w = (
                (shape[1], shape[2])
                if layer.data_format == "channels_last"
                else (shape[2], shape[3])
            )
            total += 2 * kh * kw * c_in * c_out * h * w
        elif isinstance(layer, keras.layers.Dense):
            total += 2 * math.prod(layer.kernel.shape)
    return int(total)


# --------------------------------------------------------------------------- peaks
def cpu_info() -> dict:
    """vendor, family, model, flags, name and clock (MHz) of this CPU: ``backends.cpu``'s
    reading of /proc/cpuinfo, with lscpu's max clock where the kernel exposes one."""
    from resnet_noBN.backends import cpu

    fields = cpu.cpu_fields()
    info = {
        "vendor": fields.get("vendor_id", ""),
        "name": fields.get("model name", ""),
        "family": int(fields.get("cpu family", 0) or 0),
        "model": int(fields.get("model", 0) or 0),
        "flags": set(fields.get("flags", "").split()),
        "mhz": float(fields.get("cpu MHz", 0) or 0),
        "clock_source": "",
    }
    if info["mhz"]:
        info["clock_source"] = "/proc/cpuinfo 'cpu MHz' (nominal)"
    try:  # a max (boost) clock, where the kernel exposes one (not in most VMs)
        out = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=10).stdout
        match = re.search(r"^CPU max MHz:\s*([\d.]+)", out, re.M)
        if match and float(match.group(1)) > 0:
            info["mhz"], info["clock_source"] = float(match.group(1)), "lscpu 'CPU max MHz'"
    except (OSError, subprocess.SubprocessError):
        pass
    return info


def cpu_flops_per_cycle(vendor: str, family: int, flags: set) -> tuple[int, int, str]:
    """(fp32 FLOP/cycle/core, bf16 FLOP/cycle/core, why) from the microarchitecture.

    FMA = 2 FLOPs. AMD Zen 4 (family 0x19 with AVX-512) has two 256-bit FMA pipes and runs a
    512-bit instruction as two halves: 2 x 8 fp32 lanes x 2 = 32 fp32 FLOP/cycle (the same as
    Zen 3's AVX2), NOT 2 x 16 x 2. Zen 5 (family 0x1A) has 512-bit pipes: 64. Intel with
    AVX-512: two 512-bit FMA units assumed (Xeon Gold/Platinum; some parts have one): 64.
    bf16: AVX512_BF16's VDPBF16PS does 2 products per fp32 lane: 2x fp32; AMX: 1024/cycle
    (Intel's figure for Sapphire Rapids' TMUL).
    """
    if vendor == "AuthenticAMD" and family >= 0x1A and "avx512f" in flags:
        fp32, why = 64, "AMD Zen 5: 2 FMA pipes x 16 fp32 lanes (512-bit) x 2"
    elif vendor == "AuthenticAMD" and "avx512f" in flags:
        fp32, why = (
            32,
            ("AMD Zen 4: 2 FMA pipes x 8 fp32 lanes (256-bit; AVX-512 is run as two halves) x 2"),
        )
    elif "avx512f" in flags:
        fp32, why = 64, "AVX-512: 2 FMA units x 16 fp32 lanes x 2 (assumed 2 units)"
    elif "avx2" in flags and "fma" in flags:
        fp32, why = 32, "AVX2: 2 FMA units x 8 fp32 lanes x 2"
    else:
        fp32, why = 8, "SSE: 4 lanes x (1 mul + 1 add)"
    if "amx_bf16" in flags:
        bf16, why_bf16 = 1024, "AMX-BF16 tiles: 1024 bf16 FLOP/cycle"
    elif "avx512_bf16" in flags:
        bf16, why_bf16 = 2 * fp32, "AVX512_BF16 dot products: 2x the fp32 rate"
    else:
        bf16, why_bf16 = fp32, "no bf16 arithmetic: bf16 computed at the fp32 rate at best"
    return fp32, bf16, f"{why}; {why_bf16}"


def cpu_peak(precision: str, cores: int | None = None, clock_ghz: float | None = None) -> dict:
    """The STATED peak of this CPU: cores x FLOP/cycle x clock (not measured).

    The clock is ``clock_ghz`` if given, else lscpu's max clock, else /proc/cpuinfo's (in a VM
    usually the nominal clock: the cores may boost above it, so a real kernel can exceed this
    "peak"; compare with the measured matmul rate that throughput.py reports beside it).
    """
    info = cpu_info()
    cores = cores or len(os.sched_getaffinity(0))
    fp32, bf16, why = cpu_flops_per_cycle(info["vendor"], info["family"], info["flags"])
    per_cycle = bf16 if precision == "bfloat16" else fp32
    ghz = clock_ghz or info["mhz"] / 1000
    source = "--cpu_clock_ghz" if clock_ghz else info["clock_source"]
    return {
        "flops_per_s": cores * per_cycle * ghz * 1e9 if ghz else None,
        "source": (
            f"stated: {cores} cores x {per_cycle} FLOP/cycle x {ghz:.3f} GHz ({source}); {why}"
        ),
        "cpu": info["name"],
        "cpu_family": info["family"],
        "cpu_model": info["model"],
    }


def gpu_peak(device_name: str, precision: str) -> dict:
    """Dense peak FLOP/s of a GPU from ``GPU_PEAKS`` (None where the name is not listed)."""
    for key, peaks in GPU_PEAKS:
        if key.lower() in device_name.lower():
            return {
                "flops_per_s": peaks[precision],
                "source": f"data sheet: {key} {precision} dense {peaks[precision] / 1e12:g} "
                "TFLOP/s",
            }
    return {"flops_per_s": None, "source": f"{device_name!r} is not in GPU_PEAKS"}


def device_peak_flops(
    device: str,
    precision: str,
    device_name: str = "",
    clock_ghz: float | None = None,
    cores: int | None = None,
) -> dict:
    """Peak FLOP/s for ``device`` ("cpu" or "gpu") at ``precision`` ("float32", "tf32",
    "bfloat16")."""
    if device == "gpu":
        return gpu_peak(device_name, precision)
    return cpu_peak("float32" if precision == "tf32" else precision, cores, clock_ghz)


# --------------------------------------------------------------------------- timing
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


def summarize(seconds) -> dict:
    """median, mean, p10, p90, min, max of a list of durations (seconds)."""
    seconds = sorted(seconds)
    if len(seconds) == 1:
        q = seconds * 9
    else:
        q = statistics.quantiles(seconds, n=10, method="inclusive")
    return {
        "median": statistics.median(seconds),
        "mean": statistics.fmean(seconds),
        "p10": q[0],
        "p90": q[-1],
        "min": seconds[0],
        "max": seconds[-1],
        "n": len(seconds),
    }


def _rounded(stats: dict, digits: int = 5) -> dict:
    return {k: (v if k == "n" else round(v, digits)) for k, v in stats.items()}


def measure_matmul(dtype: str, n: int = 2048, reps: int = 5) -> float:
    """FLOP/s of an n x n x n matmul on the current device (a practical peak), in keras.ops:
    the backend's own kernel; reading one element back waits for the last product."""
    import keras

    a = keras.ops.cast(keras.random.normal([n, n], seed=0), dtype)

    def finish(out):
        return float(keras.ops.convert_to_numpy(keras.ops.cast(out[:1, :1], "float32"))[0, 0])

    finish(keras.ops.matmul(a, a))
    t0 = time.perf_counter()
    for _ in range(reps):
        out = keras.ops.matmul(a, a)
    finish(out)
    return 2 * n**3 * reps / (time.perf_counter() - t0)


# --------------------------------------------------------------------------- benchmark
def parse_args(argv=None):
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
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
    p.add_argument("--precision", choices=("float32", "mixed_bfloat16"), default="float32")
    p.add_argument(
        "--jit_compile",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="XLA-compile the forward/backward (Trainer(jit_compile=True)); TensorFlow only: "
        "JAX always compiles",
    )
    p.add_argument(
        "--data_format", choices=("channels_last", "channels_first"), default="channels_last"
    )
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
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--output", default=None, help="also write the JSON result here")
    args = p.parse_args(argv)
    for name in ("batch_size", "steps", "compare_rounds", "eval_batch_size", "profile_steps"):
        if getattr(args, name) < 1:
            p.error(f"--{name} must be >= 1")
    for name in ("warmup", "chunk_steps", "eval_batches", "input_batches"):
        if getattr(args, name) < 0:
            p.error(f"--{name} must be >= 0")
    return args


def run_torch_twin(args, threads: int, device: str = "cpu", print_fn=print) -> dict:
    """bench/torch_twin.py in a subprocess (its own thread pools) on ``device`` ("cpu" or
    "gpu": CUDA); its last line's JSON."""
    cmd = [
        sys.executable,
        str(BENCH / "torch_twin.py"),
        f"--device={'cuda' if device == 'gpu' else 'cpu'}",
        f"--model={args.model}",
        f"--batch_size={args.batch_size}",
        f"--steps={args.steps}",
        f"--warmup={max(args.warmup, 1)}",
        f"--threads={threads}",
        f"--seed={args.seed}",
        "--precision=" + ("bfloat16" if args.precision == "mixed_bfloat16" else "float32"),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode:
        raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    lines = proc.stdout.strip().splitlines()
    for line in lines[:-1]:
        print_fn(line)
    return json.loads(lines[-1])


def say(line: str) -> None:
    print(line, flush=True)


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
    from resnet_noBN.backends import cpu

    cpu.default_onednn()


def describe_device(args, eng) -> dict:
    """device ("cpu" or "gpu"), device_name, cores, and the peak FLOP/s at peak_precision (bf16
    for mixed_bfloat16, tf32 for float32 on a GPU that runs float32 as TF32)."""
    from resnet_noBN.backends import cpu

    if args.precision == "mixed_bfloat16":
        precision = "bfloat16"
    elif eng.float32_as_tf32:
        precision = "tf32"
    else:
        precision = "float32"
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
        cifar_data.write_random(data_path, "cifar10", records_per_file=256)
        source = "random records (no --data_path)"
    cifar_data.check_data_path("cifar10", data_path)
    return data_path, source


def describe_run(args, eng, dev: dict, data_path: str, data_source: str, flops: dict) -> dict:
    """What was measured, where and how (the start of the JSON), printed as two lines."""
    import keras

    from resnet_noBN.backends import cpu, registry
    from resnet_noBN.models.model import ModelConfig

    tensorflow = eng.name == "tensorflow"
    say(
        f"{dev['device_name']} ({dev['device']}); {eng.version}, Keras {keras.__version__}; "
        f"model {args.model}, batch {args.batch_size}, {args.precision}, "
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


def measure_input_pipeline(args, eng, data_path: str) -> dict:
    """Images/s of the training input alone (the backend's: tf.data on TensorFlow, the on-device
    batch maker on JAX), over --input_batches."""
    rate, how = eng.input_rate(data_path, args.input_batches)
    say(f"input alone: {rate:.1f} images/s ({how})")
    return {"input_images_per_s": round(rate, 1)}


def count_model(model) -> dict:
    """Parameter and layer counts, and the forward FLOPs per image read off the Keras layers."""
    from resnet_noBN.models.model import param_counts

    return {**param_counts(model), "keras_forward_flops_per_image": keras_model_flops(model)}


def measure_first_step(args, trainer, iterator) -> dict:
    """Seconds of the first step (trace + compile + one step); then the --warmup steps."""
    t0 = time.perf_counter()
    trainer.run_steps(iterator, 1)
    seconds = round(time.perf_counter() - t0, 3)
    say(f"first step (trace + compile + 1 step): {seconds} s")
    for _ in range(args.warmup):
        trainer.run_steps(iterator, 1)
    return {"first_step_s": seconds}


def time_steps(trainer, iterator, steps: int) -> tuple[list[float], list[float]]:
    """(wall, CPU) seconds of ``steps`` steps, each its own ``run_steps`` call, which returns
    the loss, so the step has finished; RuntimeError where the loss is not finite."""
    wall, cpu_seconds = [], []
    for _ in range(steps):
        c0, t0 = time.process_time(), time.perf_counter()
        loss_sum, _, _ = trainer.run_steps(iterator, 1)
        wall.append(time.perf_counter() - t0)
        cpu_seconds.append(time.process_time() - c0)
    if not math.isfinite(loss_sum):
        raise RuntimeError(f"the loss is {loss_sum}: the benchmark's training diverged")
    return wall, cpu_seconds


def measure_training(args, trainer, iterator, flops: dict) -> tuple[dict, list[float]]:
    """s/step (median and spread over --steps), images/s, FLOP/s and CPU s/step; and the times."""
    times, cpu_seconds = time_steps(trainer, iterator, args.steps)
    train = summarize(times)
    flops_per_s = flops["train_flops_per_image"] * args.batch_size / train["median"]
    result = {
        # CPU seconds of this process per step (all threads, spin-waiting included): less
        # sensitive than wall time to other processes on the machine, not a speed by itself.
        "train_cpu_s_per_step": round(statistics.median(cpu_seconds), 4),
        "train_s_per_step": _rounded(train),
        "train_images_per_s": round(args.batch_size / train["median"], 2),
        "train_flops_per_s": round(flops_per_s),
    }
    say(
        f"train: {train['median']:.4f} s/step median (p10 {train['p10']:.4f}, p90 "
        f"{train['p90']:.4f}, min {train['min']:.4f}, max {train['max']:.4f}; {args.steps} "
        f"steps after {args.warmup} warm-up); {result['train_images_per_s']} images/s; "
        f"{flops_per_s / 1e9:.1f} GFLOP/s; {result['train_cpu_s_per_step']} CPU s/step"
    )
    return result, times


def measure_chunk(args, trainer, iterator) -> dict:
    """s/step of --chunk_steps steps in one ``run_steps`` call (no host wake-up per step)."""
    t0 = time.perf_counter()
    trainer.run_steps(iterator, args.chunk_steps)
    per_step = (time.perf_counter() - t0) / args.chunk_steps
    result = {
        "chunk_steps": args.chunk_steps,
        "chunk_s_per_step": round(per_step, 5),
        "chunk_images_per_s": round(args.batch_size / per_step, 2),
    }
    say(
        f"train, {args.chunk_steps} steps in one call: {per_step:.4f} s/step, "
        f"{result['chunk_images_per_s']} images/s"
    )
    return result


def profile(args, eng, trainer, iterator) -> dict:
    """A profiler trace (tf.profiler or jax.profiler) of --profile_steps steps (one call) into
    --profile_dir."""
    with eng.profile(args.profile_dir):
        trainer.run_steps(iterator, args.profile_steps)
    say(
        f"profile of {args.profile_steps} steps: {args.profile_dir} "
        f"(tensorboard --logdir {args.profile_dir}, Profile tab)"
    )
    return {"profile_dir": args.profile_dir}


def measure_evaluation(args, eng, trainer, data_path: str, flops: dict) -> dict:
    """Images/s and FLOP/s of ``trainer.evaluate`` over --eval_batches, after one (the trace)."""
    trainer.evaluate(eng.eval_source(data_path, 1))  # trace
    source = eng.eval_source(data_path, args.eval_batches)
    t0 = time.perf_counter()
    images = trainer.evaluate(source)["test_examples"]
    seconds = time.perf_counter() - t0
    result = {
        "eval_images_per_s": round(images / seconds, 1),
        "eval_flops_per_s": round(flops["forward_flops_per_image"] * images / seconds),
    }
    say(
        f"eval: {result['eval_images_per_s']} images/s ({images} images in batches of "
        f"{args.eval_batch_size}); {result['eval_flops_per_s'] / 1e9:.1f} GFLOP/s"
    )
    return result


def measure_mfu(args, dev: dict, flops: dict, measured: dict) -> dict:
    """The training FLOP/s in ``measured`` as a fraction of the device's peak (MFU), of a timed
    matmul (--measure_matmul), and for the --chunk_steps call."""
    achieved = measured["train_flops_per_s"]
    peak, precision = dev["peak"], dev["peak_precision"]
    matmul_precision = precision if precision == "bfloat16" else "float32"
    result = {}
    if args.measure_matmul:
        rate = measure_matmul(matmul_precision, n=8192 if dev["device"] == "gpu" else 2048)
        result["matmul_flops_per_s"] = round(rate)
        result["mfu_vs_matmul"] = round(achieved / rate, 4)
    result.update(
        peak_flops_per_s=peak["flops_per_s"],
        peak_precision=precision,
        peak_source=peak["source"],
        mfu=round(achieved / peak["flops_per_s"], 4) if peak["flops_per_s"] else None,
    )
    if args.chunk_steps and peak["flops_per_s"]:  # the launcher's way: no host sync per step
        result["chunk_mfu"] = round(
            flops["train_flops_per_image"] * measured["chunk_images_per_s"] / peak["flops_per_s"], 4
        )
    say(
        f"achieved {achieved / 1e9:.1f} GFLOP/s training; peak "
        + (
            f"{peak['flops_per_s'] / 1e9:.1f} GFLOP/s ({peak['source']}): MFU {result['mfu']:.3f}"
            if peak["flops_per_s"]
            else f"unknown ({peak['source']})"
        )
        + (
            f"; measured {matmul_precision} matmul {result['matmul_flops_per_s'] / 1e9:.1f} "
            f"GFLOP/s (step = {result['mfu_vs_matmul']:.3f} of it)"
            if args.measure_matmul
            else ""
        )
        + (
            f"; {args.chunk_steps} steps in one call: MFU {result['chunk_mfu']:.3f}"
            if "chunk_mfu" in result
            else ""
        )
    )
    if dev["device"] == "cpu" and result["mfu"] and result["mfu"] > 1:
        say(
            "note: MFU > 1 against the stated peak: the cores run above the clock it assumes "
            "(boost); pass --cpu_clock_ghz with the real clock (bench/README.md)"
        )
    return result


def measure_memory(eng) -> dict:
    """Peak host RSS, and the GPU's peak memory where there is one (MiB)."""
    result = {
        "peak_host_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    }
    if eng.device == "gpu":
        result["peak_gpu_memory_mib"] = round(eng.gpu_peak_mib(), 1)
    say(
        f"peak host RSS {result['peak_host_rss_mib']} MiB"
        + (
            f"; peak GPU memory {result['peak_gpu_memory_mib']} MiB"
            if "peak_gpu_memory_mib" in result
            else ""
        )
    )
    return result


def compare(args, label: str, peer: str, run_peer, times: list[float], time_window) -> dict:
    """Ours against ``peer`` over --compare_rounds rounds, each a window of ours (the first: the
    ``times`` already taken; then ``time_window()``) and a fresh ``run_peer()`` (a subprocess's
    JSON result): the medians of both, their ratio, the rounds and the peer's last result."""
    ours, rounds = list(times), []
    for r in range(args.compare_rounds):
        window = time_window() if r else times
        ours += window if r else []
        result = run_peer()
        rounds.append(
            {
                "ours_median_s": round(statistics.median(window), 5),
                "peer_median_s": result["train_s_per_step"]["median"],
            }
        )
        if args.compare_rounds > 1:
            say(
                f"round {r + 1}: {label} {rounds[-1]['ours_median_s']:.4f} s/step, {peer} "
                f"{rounds[-1]['peer_median_s']:.4f} s/step"
            )
    our_median = statistics.median(ours)
    peer_median = statistics.median(r["peer_median_s"] for r in rounds)
    say(
        f"{label} {our_median:.4f} s/step vs {peer} {peer_median:.4f} s/step: {label} / {peer} = "
        f"{our_median / peer_median:.3f}"
    )
    return {
        "rounds": rounds,
        "ours_s_per_step": round(our_median, 5),
        "peer_s_per_step": round(peer_median, 5),
        "ours_over_peer": round(our_median / peer_median, 4),
        "peer_result": result,
    }


def compare_with_torch(args, eng, threads: int, times, time_window, trainable_params) -> dict:
    """This backend against the PyTorch twin on the same device (``compare``)."""
    label = eng.version.split()[0]
    if eng.input == "pipeline":
        say("(ours with its input pipeline, torch on one batch: --synthetic for compute only)")
    result = compare(
        args,
        label,
        "torch",
        lambda: run_torch_twin(args, threads, eng.device, say),
        times,
        time_window,
    )
    twin = result.pop("peer_result")
    return {
        "torch": twin,
        "compare": {
            **result,
            "ours": eng.name,
            "ours_input": eng.input,
            "torch_input": "synthetic (one cached batch)",
            "torch_trainable_params": twin["trainable_params"],
            "same_param_count": twin["trainable_params"] == trainable_params,
        },
    }


def run_other_backend(args, other: str) -> dict:
    """This benchmark's training timing on the ``other`` Keras backend (a subprocess with the
    same model, batch, steps, precision and data; nothing else measured): its JSON result."""
    cmd = [
        sys.executable,
        str(BENCH / "throughput.py"),
        f"--model={args.model}",
        f"--batch_size={args.batch_size}",
        f"--steps={args.steps}",
        f"--warmup={args.warmup}",
        f"--precision={args.precision}",
        f"--data_format={args.data_format}",
        f"--seed={args.seed}",
        "--eval_batches=0",
        "--input_batches=0",
        "--no-measure_matmul",
        *([f"--data_path={args.data_path}"] if args.data_path else []),
    ]
    proc = subprocess.run(
        cmd, capture_output=True, text=True, env=dict(os.environ, KERAS_BACKEND=other)
    )
    if proc.returncode:
        raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    lines = proc.stdout.strip().splitlines()
    for line in lines[:-1]:
        say(f"[{other}] {line}")
    return json.loads(lines[-1])


def compare_with_other_backend(args, eng, times, time_window) -> dict:
    """This backend against the other one (TensorFlow against JAX), same machine, same run."""
    other = "jax" if eng.name == "tensorflow" else "tensorflow"
    label, peer = eng.version.split()[0], "JAX" if other == "jax" else "TF"
    result = compare(args, label, peer, lambda: run_other_backend(args, other), times, time_window)
    peer_result = result.pop("peer_result")
    return {
        "backend_compare": {
            **result,
            "ours": eng.name,
            "peer": other,
            "peer_version": peer_result["framework_version"],
            "jax_over_tensorflow": round(
                result["ours_over_peer"] if eng.name == "jax" else 1 / result["ours_over_peer"],
                4,
            ),
        }
    }


def main(argv=None) -> dict:
    args = parse_args(argv)
    set_environment(args)
    from engines import engine

    eng = engine(args)
    dev = describe_device(args, eng)
    from resnet_noBN.models.model import ModelConfig

    flops = model_flops(**dataclasses.asdict(ModelConfig.preset(args.model)))
    with tempfile.TemporaryDirectory(prefix="throughput_") as tmp:
        data_path, data_source = training_data(args, Path(tmp))
        result = describe_run(args, eng, dev, data_path, data_source, flops)
        if args.input_batches:  # before the model exists: nothing else competes for the CPU
            result.update(measure_input_pipeline(args, eng, data_path))
        trainer, iterator = eng.trainer(data_path, tmp + "/model")
        result.update(count_model(trainer.model))
        result.update(measure_first_step(args, trainer, iterator))
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
        if args.compare_torch:
            result.update(
                compare_with_torch(
                    args,
                    eng,
                    eng.intra or dev["cores"],
                    times,
                    lambda: time_steps(trainer, iterator, args.steps)[0],
                    result["trainable_params"],
                )
            )
        if args.compare_backend:
            result.update(
                compare_with_other_backend(
                    args, eng, times, lambda: time_steps(trainer, iterator, args.steps)[0]
                )
            )
    result["load_average_at_end"] = list(os.getloadavg())
    line = json.dumps(result)
    if args.output:
        Path(args.output).parent.mkdir(parents=True, exist_ok=True)
        Path(args.output).write_text(line + "\n")
    print(line, flush=True)
    return result


if __name__ == "__main__":
    main()
