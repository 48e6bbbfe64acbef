"""host.cpu: oneDNN on by default on x86, the user's setting kept, the bf16 warning."""

import json
import os
import subprocess
import sys

import pytest

from resnet_noBN.host import cpu

ZEN3 = {"sse2", "avx", "avx2", "fma"}  # AVX2 only: TensorFlow alone leaves oneDNN off
ZEN4 = ZEN3 | {"avx512f", "avx512_vnni", "avx512_bf16"}
SAPPHIRE_RAPIDS = ZEN4 | {"amx_tile", "amx_bf16", "amx_int8"}


def test_cpu_flags_reads_the_first_flags_line(tmp_path):
    info = tmp_path / "cpuinfo"
    info.write_text(
        "processor\t: 0\nmodel name\t: X\nflags\t\t: fpu avx2 fma\n\n"
        "processor\t: 1\nflags\t\t: fpu\n"
    )
    assert cpu.cpu_flags(info) == {"fpu", "avx2", "fma"}
    assert cpu.cpu_flags(tmp_path / "absent") == set()
    assert cpu.cpu_name(info) == "X (family ? model ?)"
    info.write_text("processor\t: 0\nmodel name\t: AMD EPYC\ncpu family\t: 26\nmodel\t\t: 2\n")
    assert cpu.cpu_name(info) == "AMD EPYC (family 26 model 2)"
    assert cpu.isa({"avx2", "fma"}) == {name: name in ("avx2", "fma") for name in cpu.ISA_FLAGS}


@pytest.mark.parametrize(
    "flags, tf_alone", [(ZEN3, False), (ZEN4, True), (SAPPHIRE_RAPIDS, True), (set(), False)]
)
def test_onednn_is_turned_on_on_every_x86_cpu(flags, tf_alone):
    value, reason = cpu.onednn_decision({}, flags, "x86_64", tensorflow_loaded=False)
    assert value == "1" and reason.startswith("resnet_noBN's default on x86")
    assert cpu.tf_would_enable_onednn(flags) is tf_alone
    assert ("TensorFlow would enable it too" in reason) is tf_alone


@pytest.mark.parametrize(
    "environ, machine, loaded, why",
    [
        (
            {"TF_ENABLE_ONEDNN_OPTS": "0"},
            "x86_64",
            False,
            "TF_ENABLE_ONEDNN_OPTS=0 set by the user",
        ),
        (
            {"TF_ENABLE_ONEDNN_OPTS": "1"},
            "x86_64",
            False,
            "TF_ENABLE_ONEDNN_OPTS=1 set by the user",
        ),
        ({}, "aarch64", False, "not an x86 CPU (aarch64): TensorFlow's default"),
        ({}, "x86_64", True, "TensorFlow was imported before resnet_noBN: TensorFlow's default"),
    ],
)
def test_the_users_setting_and_tensorflows_default_are_left_alone(environ, machine, loaded, why):
    assert cpu.onednn_decision(environ, ZEN3, machine, loaded) == (None, why)


def test_bf16_warning_only_where_bf16_is_emulated():
    assert cpu.bf16_warning(ZEN3).startswith("warning: this CPU has neither AVX512_BF16 nor AMX")
    assert cpu.bf16_warning(ZEN4) is None and cpu.bf16_warning(SAPPHIRE_RAPIDS) is None
    assert cpu.bf16_warning(ZEN3, has_gpu=True) is None


def _report(env_value):
    """runtime_report() of a fresh interpreter that starts as an entry point does (oneDNN's
    default, then TensorFlow) with the variable set so."""
    env = {k: v for k, v in os.environ.items() if k != cpu.ENV}
    if env_value is not None:
        env[cpu.ENV] = env_value
    code = (
        "import json, os, resnet_noBN.host.cpu as c; c.default_onednn(); import tensorflow; "
        "print(json.dumps({**c.runtime_report(), 'env': os.environ.get(c.ENV)}))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(env, TF_CPP_MIN_LOG_LEVEL="2"),
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(not cpu.is_x86(), reason="the default concerns x86 CPUs")
def test_tensorflow_really_runs_onednn_unless_the_user_says_0():
    default = _report(None)
    assert default["env"] == "1" and default["onednn"] is True
    assert default["onednn_reason"].startswith("resnet_noBN's default on x86")
    assert set(default["cpu_isa"]) <= set(cpu.ISA_FLAGS)
    off = _report("0")
    assert off["env"] == "0" and off["onednn"] is False
    assert off["onednn_reason"] == "TF_ENABLE_ONEDNN_OPTS=0 set by the user"


def test_importing_the_package_changes_no_environment_variable():
    env = {k: v for k, v in os.environ.items() if k != cpu.ENV}
    code = (
        "import os, resnet_noBN, resnet_noBN.runs.cli; "
        "print(os.environ.get('TF_ENABLE_ONEDNN_OPTS'))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip().splitlines()[-1] == "None"
