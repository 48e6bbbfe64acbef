"""The JAX backend: one host, ``--strategy=default`` (one device) or ``mirrored`` (every local
device, each batch split between them), ``trainers.jax_training.JaxTrainer``, batches made on
the device from the uint8 split kept there (``splits_in_memory``). Nothing of TensorFlow is
imported, so it reads --data_path only (tensorflow-datasets needs TensorFlow), and ImageNet
(tf.data over TFRecords) stays on TensorFlow."""

from __future__ import annotations

import jax

from resnet_noBN.backends.base import LAUNCHERS, Runtime
from resnet_noBN.backends.splits_in_memory import SplitsInMemory
from resnet_noBN.configs.choices import JAX_STRATEGIES
from resnet_noBN.configs.runtime_config import RuntimeConfig
from resnet_noBN.trainers.jax_training import JaxTrainer


class JaxBackend(SplitsInMemory):
    name = "jax"
    launchers = tuple(launcher for launcher in LAUNCHERS if launcher != "imagenet")
    replicas_are = "devices"

    def refuse(self, cfg: RuntimeConfig, also: dict[str, object]) -> None:
        """A strategy other than default/mirrored, and any TensorFlow-only flag given (of
        ``cfg``, then ``also``: a launcher's own, None or False when not given)."""
        self.refuse_tensorflow_only(
            cfg, also, JAX_STRATEGIES, "JAX compiles every step with XLA and sets its own threads"
        )

    def open(self, cfg: RuntimeConfig) -> Runtime:
        local = jax.local_devices()
        devices = tuple(local if cfg.strategy == "mirrored" else local[:1])
        return Runtime(None, True, 1, 0, len(devices), devices, precision=cfg.precision)

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
