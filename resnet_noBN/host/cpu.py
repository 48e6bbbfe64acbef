"""The host CPU's vector extensions, and oneDNN on by default on every x86 CPU.

TensorFlow 2.21's x86 build runs convolutions and their gradients through oneDNN only where
``TF_ENABLE_ONEDNN_OPTS`` allows it; left unset, TF turns oneDNN on only on CPUs with
AVX512_VNNI, AVX512_BF16, AVX-VNNI or AMX. Everywhere else (an AVX2 machine such as AMD Zen 3)
every convolution runs as Eigen's im2col and many small sgemm calls, ~1.5x slower than oneDNN on
the paper's network. :func:`default_onednn` therefore sets ``TF_ENABLE_ONEDNN_OPTS=1`` on x86
when the user has not set it; ``resnet_noBN/__init__.py`` calls it, so it runs before any module
of the package imports TensorFlow (the variable is read once, when TensorFlow loads).

This module must not import TensorFlow.
"""

from __future__ import annotations

import os
import platform
import sys
from pathlib import Path

ENV = "TF_ENABLE_ONEDNN_OPTS"
# Where TensorFlow itself turns oneDNN on when TF_ENABLE_ONEDNN_OPTS is unset (x86 Linux).
TF_ONEDNN_DEFAULT_FLAGS = (
    "avx512_vnni",
    "avx512_bf16",
    "avx_vnni",
    "amx_tile",
    "amx_bf16",
    "amx_int8",
)
# The extensions that decide TF's oneDNN default, bfloat16 arithmetic, and the FLOP rates.
ISA_FLAGS = ("avx2", "fma", "avx512f", *TF_ONEDNN_DEFAULT_FLAGS)
NATIVE_BF16_FLAGS = ("avx512_bf16", "amx_bf16")


def cpu_fields(cpuinfo: str | os.PathLike = "/proc/cpuinfo") -> dict[str, str]:
    """The first CPU's fields in ``/proc/cpuinfo`` (empty where there is none)."""
    try:
        text = Path(cpuinfo).read_text()
    except OSError:
        return {}
    fields = {}
    for line in text.split("\n\n")[0].splitlines():
        key, _, value = line.partition(":")
        if key.strip():
            fields.setdefault(key.strip(), value.strip())
    return fields


def cpu_flags(cpuinfo: str | os.PathLike = "/proc/cpuinfo") -> set[str]:
    """The first CPU's feature flags from ``/proc/cpuinfo`` (empty where there is none)."""
    return set(cpu_fields(cpuinfo).get("flags", "").split())


def cpu_name(cpuinfo: str | os.PathLike = "/proc/cpuinfo") -> str:
    """'<model name> (family F model M)': which CPU a figure was taken on."""
    fields = cpu_fields(cpuinfo)
    return (
        f"{fields.get('model name', 'unknown CPU')} (family {fields.get('cpu family', '?')} "
        f"model {fields.get('model', '?')})"
    )


def isa(flags: set[str] | None = None) -> dict[str, bool]:
    """{extension: present} for :data:`ISA_FLAGS` (what the benchmark and config.json record)."""
    flags = cpu_flags() if flags is None else flags
    return {name: name in flags for name in ISA_FLAGS}


def is_x86(machine: str | None = None) -> bool:
    return (machine or platform.machine()).lower() in ("x86_64", "amd64", "i386", "i686")


def tf_would_enable_onednn(flags: set[str]) -> bool:
    """Whether TensorFlow alone turns oneDNN on for a CPU with ``flags`` (x86, variable unset)."""
    return any(name in flags for name in TF_ONEDNN_DEFAULT_FLAGS)


def has_native_bf16(flags: set[str] | None = None) -> bool:
    """Whether the CPU computes bfloat16 natively (AVX512_BF16 or AMX); else it is emulated."""
    flags = cpu_flags() if flags is None else flags
    return any(name in flags for name in NATIVE_BF16_FLAGS)


def onednn_decision(
    environ: dict, flags: set[str], machine: str, tensorflow_loaded: bool
) -> tuple[str | None, str]:
    """(the value to give TF_ENABLE_ONEDNN_OPTS, or None to leave it; the reason, one phrase).

    The user's own setting always wins; so does TensorFlow's default off x86 and when
    TensorFlow is already loaded (too late to change it).
    """
    if ENV in environ:
        return None, f"{ENV}={environ[ENV]} set by the user"
    if not is_x86(machine):
        return None, f"not an x86 CPU ({machine}): TensorFlow's default"
    if tensorflow_loaded:
        return None, "TensorFlow was imported before resnet_noBN: TensorFlow's default"
    if tf_would_enable_onednn(flags):
        return "1", (
            "resnet_noBN's default on x86 (TensorFlow would enable it too: the CPU has "
            + ", ".join(n.upper() for n in TF_ONEDNN_DEFAULT_FLAGS if n in flags)
            + ")"
        )
    return "1", (
        "resnet_noBN's default on x86 (TensorFlow alone would not: the CPU has no "
        "AVX512_VNNI, AVX512_BF16, AVX-VNNI or AMX)"
    )


ONEDNN_REASON = ""


def default_onednn() -> str:
    """Set ``TF_ENABLE_ONEDNN_OPTS=1`` on x86 unless the user set it; returns the reason."""
    global ONEDNN_REASON
    value, ONEDNN_REASON = onednn_decision(
        os.environ, cpu_flags(), platform.machine(), "tensorflow" in sys.modules
    )
    if value is not None:
        os.environ[ENV] = value
    return ONEDNN_REASON


def onednn_enabled() -> bool:
    """Whether the loaded TensorFlow really runs its oneDNN ops (TF's own ``IsMklEnabled``)."""
    from tensorflow.python.util import _pywrap_util_port

    return bool(_pywrap_util_port.IsMklEnabled())


def runtime_report() -> dict:
    """What config.json and the run banner say about the CPU path: oneDNN on or not, and why."""
    return {
        "onednn": onednn_enabled(),
        "onednn_reason": ONEDNN_REASON,
        "cpu_isa": [name for name, present in isa().items() if present],
    }


def bf16_warning(flags: set[str] | None = None, has_gpu: bool = False) -> str | None:
    """One line for ``--precision=mixed_bfloat16`` on a CPU that must emulate bfloat16."""
    if has_gpu or has_native_bf16(flags):
        return None
    return (
        "warning: this CPU has neither AVX512_BF16 nor AMX, so bfloat16 is emulated: "
        "--precision=mixed_bfloat16 will be slower than float32 here"
    )
