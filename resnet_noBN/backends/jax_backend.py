"""The JAX backend: ``--strategy=default`` (one device), ``mirrored`` (every device of this host)
or ``multi_worker`` (every device of every process of a job, ``backends.jax_job``), each batch
split between them; ``trainers.jax_training.JaxTrainer``, batches made on the device from the
uint8 split kept there. Nothing of TensorFlow is imported, so it reads
--data_path only (tensorflow-datasets needs TensorFlow), and ImageNet (tf.data over TFRecords)
stays on TensorFlow."""

from __future__ import annotations

import jax
import numpy as np

from resnet_noBN.backends import jax_job
from resnet_noBN.backends.base import LAUNCHERS, Runtime
from resnet_noBN.backends.cluster import ClusterError
from resnet_noBN.backends.splits_in_memory import SplitsInMemory
from resnet_noBN.configs.choices import JAX_STRATEGIES
from resnet_noBN.configs.errors import InputError
from resnet_noBN.configs.runtime_config import RuntimeConfig
from resnet_noBN.trainers import jax_agreed
from resnet_noBN.trainers.jax_training import JaxTrainer


class JaxBackend(SplitsInMemory):
    name = "jax"
    launchers = tuple(launcher for launcher in LAUNCHERS if launcher != "imagenet")
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
                jax_job.form(cfg.cluster_resolver, cfg.peer_timeout_s)
            except ClusterError as e:
                raise InputError(str(e)) from None
            devices = tuple(jax.devices())
            return Runtime(
                None,
                jax.process_index() == 0,
                jax.process_count(),
                0,
                len(devices),
                devices,
                precision=cfg.precision,
            )
        local = jax.local_devices()
        devices = tuple(local if cfg.strategy == "mirrored" else local[:1])
        return Runtime(None, True, 1, 0, len(devices), devices, precision=cfg.precision)

    def agree_seed(self, runtime: Runtime, seed: int) -> int:
        """Process 0's seed on every process of a job (each may have drawn its own, or read
        another from its own config.json)."""
        return int(jax_agreed.from_process_0(np.int64(seed))) if jax_agreed.is_job() else seed

    def end_if_peer_lost(self, error: BaseException) -> None:
        """One line and PEER_LOST_EXIT where ``error`` is a collective that failed because a
        peer of the job is gone (``jax_job.end_if_peer_lost``)."""
        jax_job.end_if_peer_lost(error)

    def has_gpu(self, runtime: Runtime) -> bool:
        return runtime.devices[0].platform == "gpu"

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
