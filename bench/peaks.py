"""The device's peak FLOP/s, against which a measured rate is a model FLOP utilisation (MFU):
NVIDIA's dense data-sheet figures for GPUs (``GPU_PEAKS``), and for a CPU the stated peak, cores x
FLOP/cycle x clock, the FLOP/cycle from its microarchitecture (``cpu_flops_per_cycle``).

Plain Python (``resnet_noBN.host.cpu`` reads /proc/cpuinfo without Keras): the PyTorch twin
(``torch_twin.py``) holds its step against the same peaks.
"""

from __future__ import annotations

import os
import re
import subprocess

# The arithmetic the convolutions of each --precision run in: the peak a run is held against
# (on a GPU that runs float32 as TF32, the TF32 peak: ``peak_precision``; true_float32 never
# does) and the PyTorch twin's --precision (torch.autocast to it).
COMPUTE_PRECISIONS = {"float32": "float32", "mixed_bfloat16": "bfloat16", "true_float32": "float32"}

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


def peak_precision(compute: str, float32_as_tf32: bool) -> str:
    """The precision of the peak a step computing in ``compute`` (a value of
    ``COMPUTE_PRECISIONS``) is held against: tf32 for float32 where the device runs it as TF32."""
    return "tf32" if compute == "float32" and float32_as_tf32 else compute


def cpu_info() -> dict:
    """vendor, family, model, flags, name and clock (MHz) of this CPU: the reading of
    /proc/cpuinfo by ``resnet_noBN.host.cpu``, with lscpu's max clock where the kernel
    exposes one."""
    from resnet_noBN.host import cpu

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


def mfu(flops_per_s: float, peak: dict) -> float | None:
    """``flops_per_s`` as a fraction of ``peak`` (a ``device_peak_flops`` result), to 4 digits;
    None where the peak is unknown."""
    return round(flops_per_s / peak["flops_per_s"], 4) if peak["flops_per_s"] else None
