"""The JAX backend: ``--strategy=default`` (one device), ``mirrored`` (every device of this host)
or ``multi_worker`` (every device of every process of a job, ``backends.jax_job``), each batch
split between them; ``trainers.jax_training.JaxTrainer``, batches made on the device from the
uint8 split kept there. Nothing of TensorFlow is imported, so it reads
--data_path only (tensorflow-datasets needs TensorFlow), and ImageNet (tf.data over TFRecords)
stays on TensorFlow."""

from __future__ import annotations

import os
import re
import traceback

import jax
import numpy as np

from resnet_noBN.backends import jax_job
from resnet_noBN.backends.base import Runtime
from resnet_noBN.backends.splits_in_memory import SplitsInMemory
from resnet_noBN.configs.choices import JAX_STRATEGIES
from resnet_noBN.configs.errors import InputError
from resnet_noBN.configs.runtime_config import RuntimeConfig
from resnet_noBN.host.cluster import ClusterError
from resnet_noBN.trainers import jax_agreed
from resnet_noBN.trainers.jax_training import JaxTrainer


class JaxBackend(SplitsInMemory):
    name = "jax"
    replicas_are = "devices"

    def refuse(self, cfg: RuntimeConfig, also: dict[str, object]) -> None:
        """A strategy other than default/mirrored/multi_worker, and any TensorFlow-only flag
        given (of ``cfg``, then ``also``: a launcher's own, None or False when not given)."""
        self.refuse_tensorflow_only(
            cfg, also, JAX_STRATEGIES, "JAX compiles every step with XLA and sets its own threads"
        )

    def open(self, cfg: RuntimeConfig) -> Runtime:
        """This host's first device or all of them; under ``multi_worker`` the job formed first
        (``jax_job.form``: InputError for a cluster it cannot form) and every process's devices,
        process 0 the chief."""
        if cfg.strategy == "multi_worker":
            try:
                processes = jax_job.form(cfg.cluster_resolver, cfg.peer_timeout_s)
            except ClusterError as e:
                raise InputError(str(e)) from None
            size_cpu_pool(processes * forced_cpu_devices())
            devices = tuple(jax.devices())
            return Runtime(
                None,
                jax.process_index() == 0,
                jax.process_count(),
                0,
                len(devices),
                devices,
            )
        if cfg.strategy == "mirrored":
            size_cpu_pool(forced_cpu_devices())
        local = jax.local_devices()
        devices = tuple(local if cfg.strategy == "mirrored" else local[:1])
        return Runtime(None, True, 1, 0, len(devices), devices)

    def agree_seed(self, runtime: Runtime, seed: int) -> int:
        """Process 0's seed on every process of a job (each may have drawn its own, or read
        another from its own config.json)."""
        return int(jax_agreed.from_process_0(np.int64(seed))) if jax_agreed.is_job() else seed

    def end_if_peer_lost(self, error: BaseException) -> None:
        """One line and PEER_LOST_EXIT where ``error`` is a collective that failed because a
        peer of the job is gone (``jax_job.end_if_peer_lost``)."""
        jax_job.end_if_peer_lost(error)

    def end_now_in_job(self, status: int, error: BaseException | None = None) -> None:
        """In a JAX job, ``jax_job.exit_now``: the peers' next gradient sum fails at once and
        they end on a lost peer (exit 5), where JAX's exit handler would keep them waiting
        for ``--peer_timeout_s`` and then abort this process, losing ``status``."""
        if jax.distributed.is_initialized():
            if error is not None:
                traceback.print_exception(error)
            jax_job.exit_now(status)

    def has_gpu(self, runtime: Runtime) -> bool:
        return runtime.devices[0].platform == "gpu"

    def set_float32_math(self, true_float32: bool) -> None:
        """XLA's precision of float32 dots and convolutions: "highest" is true float32; at its
        default (None) a GPU with TF32 uses it."""
        jax.config.update("jax_default_matmul_precision", "highest" if true_float32 else None)

    def float32_math(self) -> str:
        highest = jax.config.jax_default_matmul_precision in ("highest", "float32")
        return "true_float32" if highest else "tf32"

    def make_trainer(self, runtime: Runtime, build_model, cfg, model_dir: str, **kwargs):
        """``JaxTrainer`` on ``runtime``'s devices (``jit_compile``: refused by :meth:`refuse`
        when given; JAX compiles every step)."""
        kwargs.pop("jit_compile", None)
        return JaxTrainer(build_model, cfg, model_dir, devices=list(runtime.devices), **kwargs)

    def hardware(self, runtime: Runtime) -> dict:
        return {"devices": [str(d.device_kind) for d in runtime.devices]}

    def versions(self) -> dict:
        import jaxlib

        return {"jax": jax.__version__, "jaxlib": jaxlib.__version__}

    def where(self, report: dict) -> str:
        return f"devices {', '.join(report['devices'])}"


def forced_cpu_devices() -> int:
    """The CPU devices each process of this run has: ``jax_num_cpu_devices``, else XLA's
    ``--xla_force_host_platform_device_count``, else 1."""
    if jax.config.jax_num_cpu_devices >= 0:
        return jax.config.jax_num_cpu_devices
    forced = re.search(
        r"--xla_force_host_platform_device_count=(\d+)", os.environ.get("XLA_FLAGS", "")
    )
    return int(forced.group(1)) if forced else 1


def size_cpu_pool(devices: int) -> None:
    """Give XLA's CPU runtime max(cores, ``devices``) intra-op threads in every process of a run
    of ``devices`` CPU devices (PJRT_NPROC, which the CPU client reads when it is made: call this
    before the first ``jax.devices()``), unless the user set PJRT_NPROC or NPROC.

    Why: the pool has max(PJRT_NPROC or cores, this process's devices) threads, and a
    convolution's weight gradient splits its sum over the batch and the pixels by it. Left
    alone, on 2 cores one process of 4 CPU devices has 4 threads and each process of a
    2 x 2 job 2, so the same device's gradient differed in its last bits between the two
    layouts; sized by the whole run's devices, 1 x 4, 2 x 2 and 4 x 1 give the same weights
    bit for bit (tests/test_jax_multiprocess.py). A run whose devices do not outnumber the
    cores (every GPU run: the CPU client then holds one device) keeps XLA's default."""
    if not (os.environ.get("PJRT_NPROC") or os.environ.get("NPROC")):
        os.environ["PJRT_NPROC"] = str(max(len(os.sched_getaffinity(0)), devices))
