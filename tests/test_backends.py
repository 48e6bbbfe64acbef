"""backends: one object per Keras backend, chosen once; what each refuses, and ImageNet refused
on JAX and PyTorch with one line before Keras or its backend is imported or anything
written."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from resnet_noBN.backends import registry
from resnet_noBN.backends.jax_backend import JaxBackend
from resnet_noBN.configs.errors import InputError
from resnet_noBN.configs.runtime_config import RuntimeConfig

REPO = Path(__file__).resolve().parents[1]


def test_the_backend_is_chosen_once_from_keras():
    backend = registry.current()
    assert backend.name == "tensorflow" and registry.current() is backend
    assert set(registry.BACKENDS) == {"tensorflow", "jax", "torch"}
    assert registry.LAUNCHERS == {
        "cifar": ("tensorflow", "jax", "torch"),
        "evaluate": ("tensorflow", "jax", "torch"),
        "imagenet": ("tensorflow",),
    }
    for launcher in registry.LAUNCHERS:
        registry.check_serves(launcher, backend.name)


def test_jax_refuses_what_only_tensorflow_runs():
    jax = JaxBackend()
    with pytest.raises(InputError) as e:
        registry.check_serves("imagenet", jax.name)
    assert str(e.value) == (
        "launch/imagenet.py needs TensorFlow (its input is tf.data, which the jax backend "
        "cannot run); run it with KERAS_BACKEND=tensorflow"
    )
    with pytest.raises(InputError, match="^--strategy=parameter_server needs TensorFlow"):
        jax.refuse(RuntimeConfig(strategy="parameter_server"), {})
    jax.refuse(RuntimeConfig(strategy="multi_worker", cluster_resolver="slurm"), {})
    with pytest.raises(InputError) as e:
        jax.refuse(RuntimeConfig(jit_compile=True, inter_op_threads=2), {"synthetic": True})
    assert str(e.value) == (
        "--jit_compile, --inter_op_threads, --synthetic only apply on the TensorFlow backend "
        "(JAX compiles every step with XLA and sets its own threads); drop them or run with "
        "KERAS_BACKEND=tensorflow"
    )
    jax.refuse(RuntimeConfig(strategy="mirrored", precision="mixed_bfloat16"), {"onednn": None})


def test_torch_refuses_what_only_tensorflow_or_jax_runs():
    """One device: --strategy=mirrored refused as every TensorFlow strategy, and TensorFlow's own
    flags, each in one line naming the flag and the way out."""
    pytest.importorskip("torch")
    from resnet_noBN.backends.torch_backend import TorchBackend

    torch_backend = TorchBackend()
    with pytest.raises(InputError, match="^launch/imagenet.py needs TensorFlow"):
        registry.check_serves("imagenet", torch_backend.name)
    for launcher in ("cifar", "evaluate"):
        registry.check_serves(launcher, torch_backend.name)
    with pytest.raises(InputError) as e:
        torch_backend.refuse(RuntimeConfig(strategy="mirrored"), {})
    assert str(e.value) == (
        "--strategy=mirrored needs TensorFlow (the torch backend trains on one device: "
        "--strategy=default); run with KERAS_BACKEND=tensorflow"
    )
    with pytest.raises(InputError) as e:
        torch_backend.refuse(RuntimeConfig(deterministic=True), {})
    assert str(e.value) == (
        "--deterministic only applies on the TensorFlow backend (PyTorch runs each step eagerly "
        "and sets its own threads); drop it or run with KERAS_BACKEND=tensorflow"
    )
    torch_backend.refuse(RuntimeConfig(precision="mixed_bfloat16"), {"onednn": None})


def test_the_runtime_carries_the_seed():
    runtime = JaxBackend().start(RuntimeConfig(precision="mixed_bfloat16"), {"batch_size": 3}, 5)
    assert (runtime.seed, runtime.replicas) == (5, 1)


@pytest.mark.parametrize("backend", ["jax", "torch"])
def test_imagenet_without_tensorflow_is_one_line_and_exit_2(backend, tmp_path):
    """Refused before Keras or the backend's library is imported: nothing of either loaded."""
    pytest.importorskip(backend)
    loaded = tmp_path / "loaded.txt"
    # any import of TensorFlow fails; at the end, which of Keras and the backend were imported
    block_tensorflow = (
        "import runpy, sys\n"
        "sys.modules['tensorflow'] = None\n"
        f"sys.argv = ['launch/imagenet.py', '--model_dir={tmp_path / 'run'}']\n"
        "try:\n"
        "    runpy.run_path('launch/imagenet.py', run_name='__main__')\n"
        "finally:\n"
        f"    open({str(loaded)!r}, 'w').write(' '.join(\n"
        f"        m for m in ('keras', {backend!r}) if m in sys.modules))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", block_tensorflow],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=dict(os.environ, KERAS_BACKEND=backend),
        timeout=300,
    )
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert proc.stderr.strip().splitlines() == [
        f"error: launch/imagenet.py needs TensorFlow (its input is tf.data, which the {backend} "
        "backend cannot run); run it with KERAS_BACKEND=tensorflow"
    ]
    assert proc.stdout == "" and not (tmp_path / "run").exists()
    assert loaded.read_text() == ""


def test_the_time_budget_is_refused_where_workers_would_not_stop_together():
    """A JAX job stops at process 0's clock; TensorFlow's multi-worker workers would each stop at
    their own, and parameter servers have no time budget on either backend."""
    from resnet_noBN.backends.tensorflow_backend import TensorFlowBackend

    job = RuntimeConfig(strategy="multi_worker", time_budget_s=60)
    JaxBackend().refuse(job, {})
    with pytest.raises(InputError, match=r"^--time_budget_s=60 needs .* multi_worker on JAX\)"):
        TensorFlowBackend().refuse(job, {})
    with pytest.raises(ValueError, match="^--time_budget_s=60 needs a positive value"):
        RuntimeConfig(strategy="parameter_server", time_budget_s=60).validate()


GPU_NOTE = (
    "note: this project has never run the tensorflow backend on a GPU; the path measured on "
    "one: KERAS_BACKEND=jax with --precision=mixed_bfloat16 (the paper's CIFAR-10 run: "
    "60,000 steps in 449 s on one H200, results/gpu_h200; also run on an H100); JAX's GPU "
    "build: pip install -e '.[cuda13]' (or '.[cuda12]' where the NVIDIA driver predates "
    "CUDA 13)"
)
# launch/cifar.py run as a user runs it, its backend told it sees a GPU (no TensorFlow loaded
# first: the launcher sets oneDNN before TensorFlow loads)
SEEING_A_GPU = """
import runpy, sys
from resnet_noBN.backends import registry
current = registry.current
def seeing_a_gpu():
    backend = current()
    backend.has_gpu = lambda runtime: True
    return backend
registry.current = seeing_a_gpu
sys.argv[0] = "launch/cifar.py"
runpy.run_path("launch/cifar.py", run_name="__main__")
"""


def test_a_tensorflow_run_that_sees_a_gpu_names_the_path_measured_on_one(monkeypatch):
    """TensorFlow has never run on a GPU in this project: a run whose device list holds one (faked
    here) is told the measured path, JAX with bfloat16 convolutions; one without, or on JAX, is
    told nothing; PyTorch on a GPU is told its measured rate beside JAX's."""
    import tensorflow as tf

    from resnet_noBN.runs import cli

    backend = registry.current()
    assert backend.name == "tensorflow" and cli.measured_gpu_path(None) is None  # no GPU here
    gpu = tf.config.PhysicalDevice(name="/physical_device:GPU:0", device_type="GPU")
    monkeypatch.setattr(
        tf.config, "list_physical_devices", lambda kind=None: [gpu] if kind == "GPU" else []
    )
    assert backend.has_gpu(None)
    assert cli.measured_gpu_path(None) == GPU_NOTE

    class JaxOnAGpu(JaxBackend):
        def has_gpu(self, runtime):
            return True

    monkeypatch.setattr(registry, "current", JaxOnAGpu)
    assert cli.measured_gpu_path(None) is None

    class TorchOnAGpu(JaxOnAGpu):  # PyTorch ran 300 steps on one H200: its rate is named
        name = "torch"

    monkeypatch.setattr(registry, "current", TorchOnAGpu)
    assert cli.measured_gpu_path(None) == GPU_NOTE.replace(
        "this project has never run the tensorflow backend on a GPU",
        "the torch backend ran 300 steps on one H200 here, at 1,408 images/s against JAX's "
        "20,018 (0.070 of it) (results/gpu_h200_backends)",
    )


def test_the_launcher_names_the_measured_path_where_tensorflow_sees_a_gpu(tmp_path, write_cifar):
    """launch/cifar.py on TensorFlow, its backend seeing a GPU (faked: ``has_gpu``; it computes
    on the CPU): the run prints the note once, before its first step, and trains to its end."""
    write_cifar(tmp_path / "data" / "cifar-10-batches-bin", "cifar10", 8)
    flags = [
        f"--data_path={tmp_path / 'data'}",
        "--model=small",
        "--batch_size=8",
        "--train_steps=2",
        "--log_every=1",
        "--eval_every=2",
        "--checkpoint_every=2",
        f"--model_dir={tmp_path / 'run'}",
    ]
    proc = subprocess.run(
        [sys.executable, "-c", SEEING_A_GPU, *flags],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        env=dict(os.environ, KERAS_BACKEND="tensorflow", TF_CPP_MIN_LOG_LEVEL="2"),
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = proc.stdout.splitlines()
    assert lines.count(GPU_NOTE) == 1, proc.stdout[-2000:]
    first_step = next(i for i, line in enumerate(lines) if line.startswith("step "))
    assert lines.index(GPU_NOTE) < first_step
    assert json.loads(lines[-1])["final_step"] == 2
