"""bench/: the analytic FLOP count, the peak table, the PyTorch twin's equivalence with the
Keras model, and the benchmark end to end on a tiny network (correctness only: no timing is
asserted)."""

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from resnet_noBN.configs.choices import PRECISIONS
from resnet_noBN.configs.network_config import ModelConfig
from resnet_noBN.datasets import cifar_data
from resnet_noBN.models.networks import build_cifar_model, param_counts

REPO = Path(__file__).resolve().parents[1]
BENCH = REPO / "bench"
sys.path.insert(0, str(BENCH))

import flops  # noqa: E402  (bench/ is not a package)
import launchers  # noqa: E402
import peaks  # noqa: E402
import timing  # noqa: E402
from test_tensorflow_free_backends import backend_env  # noqa: E402

PAPER = ModelConfig()
SMALL = ModelConfig.preset("small")


def test_conv_flops_is_two_flops_per_multiply_add():
    # a 3x3 conv, 64 -> 64 channels, on a 32x32 output: 2 * 9 * 64 * 64 * 1024
    assert flops.conv_flops(3, 64, 64, 32, 32) == 75_497_472
    assert flops.conv_flops(1, 1, 1, 1, 1) == 2


def test_paper_model_flops():
    paper = flops.model_flops()
    # first conv 884,736 + stage 1 1,302,331,392 + stages 2 and 3 1,321,205,760 each + head 5,120
    assert paper["conv_flops_per_image"] == 3_945_627_648
    assert paper["head_flops_per_image"] == 2 * 256 * 10
    assert paper["forward_flops_per_image"] == 3_945_632_768  # ~3.95 GFLOP
    assert paper["train_flops_per_image"] == 3 * paper["forward_flops_per_image"]
    # the 1x1 projection shortcuts add 3 convs: 16->64 at 32x32, 64->128 and 128->256 strided
    projection = flops.model_flops(shortcut="projection")
    assert projection["conv_flops_per_image"] - paper["conv_flops_per_image"] == 2 * (
        16 * 64 * 1024 + 64 * 128 * 256 + 128 * 256 * 64
    )


@pytest.mark.parametrize(
    "cfg", [PAPER, SMALL, ModelConfig.preset("small", data_format="channels_first")]
)
def test_analytic_flops_match_the_keras_layers(cfg):
    model = build_cifar_model(cfg)
    assert (
        flops.keras_model_flops(model)
        == flops.model_flops(**dataclasses.asdict(cfg))["forward_flops_per_image"]
    )


def test_cpu_flops_per_cycle():
    zen4 = {"avx2", "fma", "avx512f", "avx512_bf16"}
    assert peaks.cpu_flops_per_cycle("AuthenticAMD", 0x19, zen4)[:2] == (32, 64)
    assert peaks.cpu_flops_per_cycle("AuthenticAMD", 0x1A, zen4)[:2] == (64, 128)
    assert peaks.cpu_flops_per_cycle("GenuineIntel", 6, {"avx2", "fma", "avx512f", "amx_bf16"})[
        :2
    ] == (64, 1024)
    assert peaks.cpu_flops_per_cycle("AuthenticAMD", 0x19, {"avx2", "fma"})[:2] == (32, 32)


def test_cpu_stated_peak_is_cores_times_flops_per_cycle_times_clock():
    peak = peaks.cpu_peak("float32", cores=2, clock_ghz=2.5)
    info = peaks.cpu_info()
    fp32, _, _ = peaks.cpu_flops_per_cycle(info["vendor"], info["family"], info["flags"])
    assert peak["flops_per_s"] == pytest.approx(2 * fp32 * 2.5e9)
    assert peak["source"].startswith("stated:")


def test_gpu_peak_table():
    assert peaks.gpu_peak("NVIDIA H100 80GB HBM3", "bfloat16")["flops_per_s"] == 989e12
    assert peaks.gpu_peak("NVIDIA H100 80GB HBM3", "float32")["flops_per_s"] == 67e12
    assert peaks.gpu_peak("NVIDIA H200", "tf32")["flops_per_s"] == 494.5e12
    assert peaks.gpu_peak("NVIDIA A100-SXM4-80GB", "bfloat16")["flops_per_s"] == 312e12
    assert peaks.gpu_peak("NVIDIA H100 PCIe", "bfloat16")["flops_per_s"] == 756e12
    assert peaks.gpu_peak("Tesla K40", "float32")["flops_per_s"] is None


def test_summarize():
    stats = timing.summarize([3.0, 1.0, 2.0, 5.0, 4.0])
    assert (stats["median"], stats["min"], stats["max"], stats["n"]) == (3.0, 1.0, 5.0, 5)
    assert stats["p10"] == pytest.approx(1.4) and stats["p90"] == pytest.approx(4.6)
    assert timing.summarize([2.0])["p90"] == 2.0


def test_time_each_times_every_call_and_returns_the_last_result():
    calls = iter(range(3))
    wall, cpu_seconds, last = timing.time_each(lambda: next(calls), 3)
    assert (len(wall), len(cpu_seconds), last) == (3, 3, 2)
    assert min(wall) >= 0 and min(cpu_seconds) >= 0


def test_peak_precision_of_each_keras_precision():
    assert peaks.COMPUTE_PRECISIONS == {
        "float32": "float32",
        "mixed_bfloat16": "bfloat16",
        "true_float32": "float32",
    }
    assert set(peaks.COMPUTE_PRECISIONS) == set(PRECISIONS)  # every --precision has its peak
    assert peaks.peak_precision("float32", float32_as_tf32=True) == "tf32"
    assert peaks.peak_precision("float32", float32_as_tf32=False) == "float32"
    assert peaks.peak_precision("bfloat16", float32_as_tf32=True) == "bfloat16"
    assert peaks.mfu(50e12, {"flops_per_s": 989e12}) == 0.0506
    assert peaks.mfu(50e12, {"flops_per_s": None}) is None


def test_bench_modules_load_no_backend():
    """The script and its parts import Keras, TensorFlow and JAX only inside functions: --onednn
    is set before TensorFlow loads, and the PyTorch twin reads the FLOPs, peaks and timing
    without either."""
    code = (
        "import sys; import throughput, compare, measure, flops, peaks, timing; "
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'keras', 'tensorflow', 'jax'}))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=BENCH, timeout=60
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip() == "[]"


# ------------------------------------------------------------------ the PyTorch twin
@pytest.fixture(scope="module")
def twin():
    pytest.importorskip("torch")
    import torch_twin

    return torch_twin


@pytest.mark.parametrize("name, cfg", [("paper", PAPER), ("small", SMALL)])
def test_torch_twin_has_the_keras_parameter_count(twin, name, cfg):
    net = twin.HardtMaNet(**twin.model_kwargs(name))
    counts = param_counts(build_cifar_model(cfg))
    assert twin.param_count(net) == counts["trainable_params"]
    assert len(net.decayed_weights()) == counts["convolutions"]
    # the head is a fixed buffer, as the Keras head is a non-trainable weight
    assert [n for n, _ in net.named_buffers()] == ["projection"]
    assert net.projection.numel() == counts["non_trainable_params"]


def test_torch_twin_computes_the_keras_function(twin):
    """With the Keras model's weights copied in, the twin gives the same logits (SAME padding,
    stride-2 alignment, pool + zero-channel shortcuts, global pool, head)."""
    import keras
    import torch

    keras.utils.set_random_seed(0)
    cfg = ModelConfig.preset("small", init="he", conv_bias=True)
    model = build_cifar_model(cfg)
    net = twin.HardtMaNet(**twin.model_kwargs("small"), init="he", conv_bias=True)
    keras_convs = [layer for layer in model.layers if isinstance(layer, keras.layers.Conv2D)]
    torch_convs = [m for m in net.modules() if isinstance(m, torch.nn.Conv2d)]
    assert [c.name for c in keras_convs][:3] == [
        "init_conv",
        "stage1_unit0_conv1",
        "stage1_unit0_conv2",
    ]
    with torch.no_grad():
        for k, t in zip(keras_convs, torch_convs, strict=True):
            t.weight.copy_(torch.from_numpy(np.transpose(k.kernel.numpy(), (3, 2, 0, 1))))
            t.bias.copy_(torch.from_numpy(k.bias.numpy() + 0.01 * np.arange(k.filters)))
            k.bias.assign(t.bias.numpy())
        net.projection.copy_(torch.from_numpy(model.get_layer("projection").kernel.numpy()))
    images = np.random.default_rng(0).normal(size=(4, 32, 32, 3)).astype(np.float32)
    expected = model(images).numpy()
    for fmt in (torch.contiguous_format, torch.channels_last):
        net = net.to(memory_format=fmt)
        x = torch.from_numpy(images).permute(0, 3, 1, 2).contiguous(memory_format=fmt)
        with torch.no_grad():
            got = net(x).numpy()
        np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4 * np.abs(expected).max())


def test_torch_twin_step_trains_and_keeps_the_head_fixed(twin):
    import torch

    torch.manual_seed(0)
    net = twin.HardtMaNet(**twin.model_kwargs("small")).to(memory_format=torch.channels_last)
    head = net.projection.clone()
    conv = net.init_conv.weight.detach().clone()
    step = twin.make_train_step(net)
    images = torch.randn(8, 3, 32, 32).contiguous(memory_format=torch.channels_last)
    labels = torch.randint(0, 10, (8,))
    losses = [float(step(images, labels)) for _ in range(3)]
    assert all(np.isfinite(losses))
    assert not torch.equal(net.init_conv.weight, conv)
    assert torch.equal(net.projection, head)


# ------------------------------------------------------------------ end to end
def chosen(keras_backend: str) -> dict:
    """``keras_backend`` chosen as a user chooses it, for ``launchers.run``'s ``env``: the
    default (TensorFlow) by leaving KERAS_BACKEND unset, JAX or PyTorch on the CPU as the other
    TensorFlow-free launches run (``backend_env``). So each launch forks from a warm process
    other files use too. The JAX peer that TensorFlow's ``--compare_backend`` starts cold keys
    its compiles as the JAX launches do (tests/cold_jax), so the JAX benchmark reads the step
    the peer compiled."""
    if keras_backend == "tensorflow":
        return {"KERAS_BACKEND": None}
    return backend_env(keras_backend)


def _run_bench(args, tmp_path, keras_backend="tensorflow"):
    out = tmp_path / "result.json"
    proc = launchers.run(
        "bench/throughput.py",
        "--model=small",
        "--batch_size=8",
        "--steps=2",
        "--warmup=1",
        f"--output={out}",
        *args,
        env=chosen(keras_backend),
        timeout=600,
        cwd=REPO,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    last = json.loads(proc.stdout.strip().splitlines()[-1])
    assert json.loads(out.read_text()) == last
    return last


INPUTS = {
    "tensorflow": "pipeline",
    "jax": "on the device, inside the step",
    "torch": "on the device, each eager step",
}
# what each profiler writes into --profile_dir: TensorBoard's Profile tab reads them
TRACES = {
    "tensorflow": "plugins/profile/*/*.xplane.pb",
    "jax": "plugins/profile/*/*.xplane.pb",
    "torch": "*.pt.trace.json",
}


def _end_to_end(tmp_path, keras_backend, *more):
    """The benchmark on random records in the official binary layout, with every measurement
    but the matmul (and ``more``): its JSON result."""
    cifar_data.write_random(tmp_path / "cifar-10-batches-bin", "cifar10", records_per_file=16)
    return _run_bench(
        [
            f"--data_path={tmp_path / 'cifar-10-batches-bin'}",
            "--chunk_steps=2",
            "--eval_batches=1",
            "--eval_batch_size=16",
            "--input_batches=2",
            "--no-measure_matmul",
            f"--profile_dir={tmp_path / 'profile'}",
            "--profile_steps=1",
            f"--kernel_summary={tmp_path / 'kernels.txt'}",
            "--loss_at_step=4",
            *more,
        ],
        tmp_path,
        keras_backend,
    )


@pytest.fixture(scope="module")
def tensorflow_run(tmp_path_factory):
    """One TensorFlow run for two tests: the end to end one, the JAX backend compared in it
    (--compare_backend adds a JAX subprocess after every measurement of ours, and changes none
    of them: one round times no window of ours again); (its result, its folder)."""
    folder = tmp_path_factory.mktemp("tensorflow_run")
    return _end_to_end(folder, "tensorflow", "--compare_backend"), folder


@pytest.mark.parametrize("keras_backend", list(INPUTS))
def test_benchmark_end_to_end_with_the_input_pipeline(tmp_path, keras_backend, request):
    """Every measurement on the given backend, its profiler's trace and (JAX) its kernel summary:
    TensorFlow's is the run ``tensorflow_run`` shares with the backend comparison."""
    pytest.importorskip(keras_backend)
    if keras_backend == "tensorflow":
        result, folder = request.getfixturevalue("tensorflow_run")
    else:
        result, folder = _end_to_end(tmp_path, keras_backend), tmp_path
    profile = folder / "profile"
    assert result["framework"] == keras_backend
    assert result["input"] == INPUTS[keras_backend]
    traces = list(profile.glob(TRACES[keras_backend]))
    assert len(traces) == 1 and traces[0].stat().st_size > 0
    assert result["profile_dir"] == str(profile)
    assert result["loss_step"] == 4 and np.isfinite(result["loss_at_step"])
    if keras_backend == "jax":  # its trace viewer file, summed by kernel (bench/kernels.py)
        summary = (folder / "kernels.txt").read_text().splitlines()
        assert "1 steps traced" in summary[0] and len(summary) > 3
        assert result["kernel_summary"]["top"][0][1] > 0  # ms a step of the top kernel
    assert result["model"] == "small" and result["batch_size"] == 8
    assert result["train_s_per_step"]["n"] == 2
    assert (
        result["train_s_per_step"]["min"]
        <= result["train_s_per_step"]["median"]
        <= result["train_s_per_step"]["max"]
    )
    for key in (
        "train_images_per_s",
        "chunk_s_per_step",
        "eval_images_per_s",
        "input_images_per_s",
        "first_step_s",
        "peak_host_rss_mib",
        "train_flops_per_s",
    ):
        assert result[key] > 0, key
    assert result["keras_forward_flops_per_image"] == result["forward_flops_per_image"]
    assert result["trainable_params"] == param_counts(build_cifar_model(SMALL))["trainable_params"]
    assert result["data_source"] == "--data_path" and not result["synthetic"]
    if result["peak_flops_per_s"]:
        # both rounded to 4 decimals
        assert result["mfu"] == pytest.approx(
            result["train_flops_per_s"] / result["peak_flops_per_s"], rel=1e-3, abs=5e-5
        )
        assert result["chunk_mfu"] == pytest.approx(
            result["train_flops_per_image"]
            * result["chunk_images_per_s"]
            / result["peak_flops_per_s"],
            rel=1e-3,
            abs=5e-5,
        )


def test_benchmark_compares_the_two_keras_backends_in_one_run(tensorflow_run):
    """TensorFlow's end-to-end run (``tensorflow_run``) timed JAX's training in a subprocess
    on the same records, and gives both s/step and their ratio."""
    result, _ = tensorflow_run
    compare = result["backend_compare"]
    assert (compare["ours"], compare["peer"]) == ("tensorflow", "jax")
    assert compare["peer_version"].startswith("JAX ")
    assert len(compare["rounds"]) == 1
    assert compare["ours_s_per_step"] == pytest.approx(result["train_s_per_step"]["median"], 1e-3)
    assert compare["ours_over_peer"] == pytest.approx(
        compare["ours_s_per_step"] / compare["peer_s_per_step"], rel=2e-2
    )
    assert compare["jax_over_tensorflow"] == pytest.approx(1 / compare["ours_over_peer"], 1e-3)


@pytest.mark.parametrize(
    "keras_backend, flags, error",
    [
        (
            "jax",
            ["--intra_op_threads=2"],
            "error: --intra_op_threads, --synthetic only apply on the TensorFlow backend (JAX "
            "compiles every step with XLA and sets its own threads); drop them or run with "
            "KERAS_BACKEND=tensorflow",
        ),
        (
            "torch",
            [],
            "error: --synthetic only applies on the TensorFlow backend (PyTorch runs each step "
            "eagerly and sets its own threads); drop it or run with KERAS_BACKEND=tensorflow",
        ),
    ],
)
def test_benchmark_refuses_what_a_backend_cannot_run(keras_backend, flags, error):
    pytest.importorskip(keras_backend)
    proc = launchers.run(
        "bench/throughput.py", "--synthetic", *flags, env=chosen(keras_backend), cwd=REPO
    )
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines()[-1] == error
    assert proc.stdout == ""


def test_benchmark_synthetic_compared_with_torch(tmp_path):
    pytest.importorskip("torch")
    result = _run_bench(
        ["--synthetic", "--compare_torch", "--eval_batches=0", "--input_batches=0"], tmp_path
    )
    assert result["synthetic"] and "eval_images_per_s" not in result
    assert result["matmul_flops_per_s"] > 0
    compare = result["compare"]
    assert compare["same_param_count"]
    assert compare["ours"] == "tensorflow"
    assert compare["ours_over_peer"] == pytest.approx(
        compare["ours_s_per_step"] / compare["peer_s_per_step"], rel=2e-2
    )
    assert result["torch"]["timed_steps"] == 2 and result["torch"]["batch_size"] == 8


def test_torch_twin_inits_are_the_models(twin):
    from resnet_noBN.models.layers import INIT_STDDEVS

    assert set(twin.STDDEVS) == set(INIT_STDDEVS)
    for name, stddev in INIT_STDDEVS.items():
        for k, c in ((3, 16), (3, 64), (1, 256)):
            assert twin.STDDEVS[name](k, c) == pytest.approx(stddev(k, c), rel=1e-12)


def test_the_health_cost_benchmark_times_the_trainer_with_and_without_it(tmp_path):
    """bench/health_cost.py: the trainer with the run's health against the same without its
    gradient and weight norms, pair by pair (correctness only: each pair's ratio of the two
    s/step, the median last). Its trainers' folder is gone from TMPDIR when it ends."""
    proc = launchers.run(
        "bench/health_cost.py",
        "--model=small",
        "--pairs=2",
        "--chunk=1",
        timeout=600,
        env={"TMPDIR": str(tmp_path)},
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert not list(tmp_path.iterdir())
    lines = proc.stdout.strip().splitlines()
    assert [line.split(":")[0] for line in lines[:2]] == ["pair 1", "pair 2"]
    result = json.loads(lines[-1])
    assert (result["model"], result["chunk"], len(result["ratios"])) == ("small", 1, 2)
    assert result["median_ratio"] == pytest.approx(np.median(result["ratios"]), abs=1e-4)
