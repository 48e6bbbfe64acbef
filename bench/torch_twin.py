"""A PyTorch twin of the paper's CIFAR network, timed the way ``bench/throughput.py`` times TF.

    python bench/torch_twin.py                       # paper model, batch 128, float32, 2 threads
    python bench/torch_twin.py --autocast=bfloat16   # CPU bf16 autocast
    python bench/torch_twin.py --model=small --steps=2 --warmup=1
    python bench/torch_twin.py --device=cuda --autocast=bfloat16 --compile    # torch.compile

The same layers as ``resnet_noBN.models.networks.build_cifar_model`` (arXiv:1611.04231, Section 4,
Table 1): a 3x3 conv 3->16 (He init), 3 stages x N blocks ``x + C2(ReLU(C1 x))`` (sigma = 1/(k^2 c),
no conv biases unless ``conv_bias``, TF's SAME padding, stride 2 in C1 of stages 2 and 3), shortcuts
by average pooling (kernel = stride) and zero channels (half on each side), global average pool, and
a fixed random projection (a buffer, not a parameter). The same recipe step: SGD, momentum 0.9,
cross-entropy plus ``1e-4 * sum ||W||^2 / 2`` over the conv kernels as an explicit loss term. Eager,
or with ``--compile`` the network under ``torch.compile`` (what a PyTorch user would run: the
first step then holds the compilation, reported apart as ``compile_s``); channels-last
(``torch.channels_last``), ``torch.set_num_threads``. Inputs are one cached random batch (compute
only, like ``throughput.py --synthetic``).

Benchmark only: torch is never a dependency of the ``resnet_noBN`` package (bench/requirements.txt).
Its LAST stdout line is a JSON object, which ``throughput.py --compare_torch`` reads.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import statistics
import sys
import time
from pathlib import Path

# resnet_noBN without installing it; its configs/ are plain Python, as are the bench modules read
# here (bench/, this script's folder, is on the path): timing torch never imports TensorFlow.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from flops import model_flops  # noqa: E402
from peaks import COMPUTE_PRECISIONS, device_peak_flops, mfu, peak_precision  # noqa: E402
from timing import rounded, summarize, time_each  # noqa: E402
from torch import nn  # noqa: E402

from resnet_noBN.configs.presets import MODELS  # noqa: E402

# resnet_noBN.models.layers.INIT_STDDEVS, restated so that timing torch never imports TensorFlow.
STDDEVS = {
    "hardt_ma": lambda k, c: 1.0 / (k * k * c),
    "standard": lambda k, c: 1.0 / (k * math.sqrt(c)),
    "he": lambda k, c: math.sqrt(2.0 / (k * k * c)),
}


class SameConv(nn.Conv2d):
    """A k x k conv with TensorFlow's SAME padding (asymmetric for an even input and stride 2:
    the extra row/column goes at the bottom/right, as TF does)."""

    def __init__(self, cin: int, cout: int, k: int, stride: int, bias: bool, stddev: float):
        super().__init__(cin, cout, k, stride=stride, padding=0, bias=bias)
        self.k = k
        nn.init.normal_(self.weight, 0.0, stddev)
        if self.bias is not None:
            nn.init.zeros_(self.bias)

    def forward(self, x):
        size = x.shape[-1]
        stride = self.stride[0]
        out = -(-size // stride)
        total = max((out - 1) * stride + self.k - size, 0)
        before = total // 2
        if before == total - before:  # symmetric: let the conv pad (no copy)
            return F.conv2d(x, self.weight, self.bias, self.stride, before)
        x = F.pad(x, (before, total - before, before, total - before))
        return F.conv2d(x, self.weight, self.bias, self.stride, 0)


class Block(nn.Module):
    """x + C2(ReLU(C1 x)); a shape-changing shortcut is avg-pool (kernel = stride) + zero
    channels, half in front, half behind."""

    def __init__(self, cin: int, cout: int, stride: int, bias: bool, init: str):
        super().__init__()
        std = STDDEVS[init](3, cout)
        self.conv1 = SameConv(cin, cout, 3, stride, bias, std)
        self.conv2 = SameConv(cout, cout, 3, 1, bias, std)
        self.stride = stride
        self.pad = ((cout - cin) // 2, cout - cin - (cout - cin) // 2)

    def forward(self, x):
        y = self.conv2(F.relu(self.conv1(x)))
        if self.stride > 1:
            x = F.avg_pool2d(x, self.stride, self.stride)
        if self.pad[0] or self.pad[1]:
            # F.pad returns a contiguous (NCHW) tensor: keep channels-last, or every later op
            # of the stage would reorder.
            x = F.pad(x, (0, 0, 0, 0) + self.pad).contiguous(memory_format=x_format(x))
        return x + y


def x_format(x):
    return (
        torch.channels_last
        if x.is_contiguous(memory_format=torch.channels_last)
        else torch.contiguous_format
    )


class HardtMaNet(nn.Module):
    """The CIFAR network of arXiv:1611.04231 Table 1 (default: the paper model)."""

    def __init__(
        self,
        num_classes: int = 10,
        num_residual_units: int = 9,
        init_filters: int = 16,
        stage_widths=(64, 128, 256),
        stage_strides=(1, 2, 2),
        conv_bias: bool = False,
        init: str = "hardt_ma",
        projection_seed: int = 0,
    ):
        super().__init__()
        self.init_conv = SameConv(3, init_filters, 3, 1, conv_bias, STDDEVS["he"](3, init_filters))
        blocks, cin = [], init_filters
        for width, stride in zip(stage_widths, stage_strides):
            for unit in range(num_residual_units):
                blocks.append(Block(cin, width, stride if unit == 0 else 1, conv_bias, init))
                cin = width
        self.blocks = nn.Sequential(*blocks)
        gen = torch.Generator().manual_seed(projection_seed)
        # The fixed random projection: a buffer (saved, moved with .to(), never trained).
        self.register_buffer(
            "projection", torch.randn(cin, num_classes, generator=gen) / math.sqrt(cin)
        )

    def forward(self, x):
        x = self.blocks(self.init_conv(x))
        return x.mean(dim=(2, 3)) @ self.projection.to(x.dtype)

    def decayed_weights(self):
        """The conv kernels (the fixed head is a buffer: not decayed, as in the TF model)."""
        return [m.weight for m in self.modules() if isinstance(m, nn.Conv2d)]


def param_count(model: nn.Module) -> int:
    """Trainable parameters (the projection buffer is not one)."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def make_train_step(
    model: HardtMaNet,
    lr: float = 0.05,
    momentum: float = 0.9,
    weight_decay: float = 1e-4,
    precision: str = "float32",
    device: str = "cpu",
    compile: bool = False,
):
    """One recipe step: cross-entropy + weight_decay * sum ||W||^2 / 2, SGD with momentum; the
    network's forward (and so its backward) under ``torch.compile`` where ``compile``.

    (torch's SGD momentum, buf = m buf + g, w -= lr buf, equals Keras' v = m v - lr g,
    w += v at a constant learning rate.)
    """
    optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=momentum)
    decayed = model.decayed_weights()
    forward = torch.compile(model) if compile else model

    def step(images, labels):
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast(device, dtype=torch.bfloat16, enabled=precision == "bfloat16"):
            logits = forward(images)
        loss = F.cross_entropy(logits.float(), labels)
        loss = loss + weight_decay * sum(w.pow(2).sum() for w in decayed) / 2
        loss.backward()
        optimizer.step()
        return loss.detach()

    return step


def model_kwargs(name: str) -> dict:
    """The HardtMaNet arguments of the preset ``name`` (resnet_noBN/configs/presets.py; a preset
    field the twin lacks is a TypeError, not ignored), for CIFAR-10."""
    return {"num_classes": 10, **MODELS[name]}


def start_threads(threads: int | None, flush_denormal: bool) -> int:
    """torch's thread pools: ``threads`` intra-op threads (0 or None: one per available core)
    and one inter-op thread; denormals flushed to zero if asked. Returns the intra-op count."""
    threads = threads or len(os.sched_getaffinity(0))
    torch.set_num_threads(threads)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:  # already set in this process
        pass
    if flush_denormal:
        torch.set_flush_denormal(True)
    return threads


def build(model: str, batch_size: int, channels_last: bool, seed: int, device: str):
    """(the preset ``model``'s network, one random batch of images and of labels) on ``device``,
    from ``seed``, channels-last where asked."""
    torch.manual_seed(seed)
    kwargs = model_kwargs(model)
    net = HardtMaNet(**kwargs, projection_seed=seed)
    fmt = torch.channels_last if channels_last else torch.contiguous_format
    net = net.to(device, memory_format=fmt)
    images = torch.randn(batch_size, 3, 32, 32).contiguous(memory_format=fmt).to(device)
    labels = torch.randint(0, kwargs["num_classes"], (batch_size,)).to(device)
    return net, images, labels


def time_training(step, warmup: int, steps: int):
    """``step()``, which returns the loss as a float (so the step has finished): once, timed;
    ``warmup - 1`` more times; then ``steps`` times, each timed. Returns (the first call's
    seconds, the timed calls' wall and CPU seconds, the last loss); RuntimeError where the loss
    is not finite."""
    t0 = time.perf_counter()
    step()
    first = time.perf_counter() - t0
    for _ in range(max(warmup - 1, 0)):
        step()
    times, cpu_times, loss = time_each(step, steps)
    if not math.isfinite(loss):
        raise RuntimeError(f"torch twin: loss is {loss}")
    return first, times, cpu_times, loss


def device_peak(device: str, precision: str) -> dict:
    """The peak the step is held against: a GPU's data sheet on CUDA, where cuDNN runs float32
    convolutions as TF32 by default; else the CPU's stated peak."""
    if device == "cuda":
        name = torch.cuda.get_device_name()
        return device_peak_flops("gpu", peak_precision(precision, True), name)
    return device_peak_flops("cpu", precision)


def run(
    model: str = "paper",
    batch_size: int = 128,
    steps: int = 10,
    warmup: int = 2,
    threads: int | None = None,
    precision: str = "float32",
    channels_last: bool = True,
    flush_denormal: bool = False,
    seed: int = 0,
    device: str = "cpu",
    compile: bool = False,
    print_fn=print,
) -> dict:
    """Warm-up steps, then ``steps`` individually timed steps; returns the result dict."""
    threads = start_threads(threads, flush_denormal)
    net, images, labels = build(model, batch_size, channels_last, seed, device)
    step = make_train_step(net, precision=precision, device=device, compile=compile)
    first, times, cpu_times, loss = time_training(
        lambda: step(images, labels).item(), warmup, steps
    )
    flops = model_flops(**model_kwargs(model))
    stats = summarize(times)
    train_flops_per_s = flops["train_flops_per_image"] * batch_size / stats["median"]
    peak = device_peak(device, precision)
    result = {
        "framework": "torch",
        "torch_version": torch.__version__,
        "model": model,
        "batch_size": batch_size,
        "precision": precision,
        "device": device,
        "threads": threads,
        "channels_last": channels_last,
        "compiled": compile,
        "flush_denormal": flush_denormal,
        "trainable_params": param_count(net),
        "warmup_steps": warmup,
        "timed_steps": steps,
        "first_step_s": round(first, 4),
        # torch.compile's tracing and code generation: the first step less a compiled one
        "compile_s": round(first - stats["median"], 3) if compile else None,
        "train_s_per_step": rounded(stats),
        "train_images_per_s": round(batch_size / stats["median"], 2),
        "train_cpu_s_per_step": round(statistics.median(cpu_times), 4),
        "train_flops_per_s": round(train_flops_per_s, 0),
        "peak_flops_per_s": peak["flops_per_s"],
        "peak_source": peak["source"],
        "mfu": mfu(train_flops_per_s, peak),
        "peak_host_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "last_loss": round(loss, 5),
    }
    print_fn(
        f"torch {model} batch {batch_size} {precision}: {stats['median']:.4f} s/step median "
        f"(p10 {stats['p10']:.4f}, p90 {stats['p90']:.4f}, min {stats['min']:.4f}, max "
        f"{stats['max']:.4f}); {result['train_images_per_s']} images/s; "
        f"{train_flops_per_s / 1e9:.1f} GFLOP/s; {result['train_cpu_s_per_step']} CPU "
        f"s/step; first step {first:.3f} s"
    )
    return result


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", choices=list(MODELS), default="paper")
    parser.add_argument("--batch_size", type=int, default=128)
    parser.add_argument("--steps", type=int, default=10, help="timed steps")
    parser.add_argument("--warmup", type=int, default=2, help="untimed steps first (>= 1)")
    parser.add_argument("--threads", type=int, default=0, help="0: one per available core")
    parser.add_argument(
        "--autocast",
        choices=tuple(COMPUTE_PRECISIONS.values()),  # what each Keras precision computes in
        default="float32",
        help="the dtype the convolutions compute in: bfloat16 is torch.autocast(device, "
        "bfloat16), the twin of --precision=mixed_bfloat16 (the launchers' flag)",
    )
    parser.add_argument(
        "--device", choices=("cpu", "cuda"), default="cpu", help="where the step runs"
    )
    parser.add_argument("--channels_last", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument(
        "--flush_denormal",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="torch.set_flush_denormal(True) (TF flushes denormals by default)",
    )
    parser.add_argument(
        "--compile",
        action="store_true",
        help="the network under torch.compile (its compilation in the first step: compile_s)",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--output", default=None, help="also write the JSON here")
    args = parser.parse_args(argv)
    if args.steps < 1 or args.warmup < 1 or args.batch_size < 1:
        parser.error("--steps, --warmup and --batch_size must be >= 1")
    result = run(
        args.model,
        args.batch_size,
        args.steps,
        args.warmup,
        args.threads,
        args.autocast,
        args.channels_last,
        args.flush_denormal,
        args.seed,
        args.device,
        args.compile,
    )
    line = json.dumps(result)
    if args.output:
        Path(args.output).write_text(line + "\n")
    print(line, flush=True)
    return result


if __name__ == "__main__":
    main()
