"""The PyTorch backend: one device (the CPU, or the CUDA GPU Keras' torch backend places its
tensors on), ``--strategy=default`` only, ``trainers.torch_training.TorchTrainer``, batches made
on the device from the uint8 split kept there (``splits_in_memory``). Nothing of TensorFlow is
imported, so it reads --data_path only, and ImageNet (tf.data over TFRecords) stays on
TensorFlow. PyTorch is an optional extra: ``pip install -e '.[torch]'``."""

from __future__ import annotations

import torch
from keras import ops

from resnet_noBN.backends.base import Runtime
from resnet_noBN.backends.splits_in_memory import SplitsInMemory
from resnet_noBN.configs.runtime_config import RuntimeConfig
from resnet_noBN.trainers.torch_training import TorchTrainer

STRATEGIES = ("default",)  # one device: torch.distributed is not wired in


class TorchBackend(SplitsInMemory):
    name = "torch"
    replicas_are = "devices"

    def refuse(self, cfg: RuntimeConfig, also: dict[str, object]) -> None:
        """A strategy other than default, and any TensorFlow-only flag given (of ``cfg``, then
        ``also``: a launcher's own, None or False when not given)."""
        self.refuse_tensorflow_only(
            cfg, also, STRATEGIES, "PyTorch runs each step eagerly and sets its own threads"
        )

    def open(self, cfg: RuntimeConfig) -> Runtime:
        """Keras' torch device (a CUDA GPU where torch sees one, else the CPU)."""
        device = ops.convert_to_tensor(0).device
        return Runtime(None, True, 1, 0, 1, (device,))

    def has_gpu(self, runtime: Runtime) -> bool:
        return runtime.devices[0].type == "cuda"

    def set_float32_math(self, true_float32: bool) -> None:
        """cuDNN's convolutions and CUDA's matmuls: TF32 allowed (``float32``, as TensorFlow and
        JAX on such a GPU) or not."""
        torch.backends.cudnn.allow_tf32 = not true_float32
        torch.backends.cuda.matmul.allow_tf32 = not true_float32

    def float32_math(self) -> str:
        tf32 = torch.backends.cudnn.allow_tf32 or torch.backends.cuda.matmul.allow_tf32
        return "tf32" if tf32 else "true_float32"

    def make_trainer(self, runtime: Runtime, build_model, cfg, model_dir: str, **kwargs):
        """``TorchTrainer`` on Keras' torch device (``jit_compile``: refused by :meth:`refuse`
        when given)."""
        kwargs.pop("jit_compile", None)
        return TorchTrainer(build_model, cfg, model_dir, **kwargs)

    def hardware(self, runtime: Runtime) -> dict:
        device = runtime.devices[0]
        name = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU"
        return {"devices": [name], "torch_threads": torch.get_num_threads()}

    def versions(self) -> dict:
        return {"torch": torch.__version__}

    def where(self, report: dict) -> str:
        return f"device {report['devices'][0]}, {report['torch_threads']} torch threads"
