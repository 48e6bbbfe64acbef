"""The CIFAR sources of the backends that train without TensorFlow (JAX, PyTorch): the uint8
splits read whole from --data_path (``datasets.cifar_data.load_split``), the training split a
``datasets.stream.TrainSplit`` its trainer makes each batch from, on the device."""

from __future__ import annotations

import sys

from resnet_noBN.backends.base import Backend
from resnet_noBN.configs.data_config import DataConfig
from resnet_noBN.configs.errors import DataError
from resnet_noBN.datasets import cifar_data
from resnet_noBN.datasets.stream import TrainSplit


class SplitsInMemory(Backend):
    """:class:`Backend`'s data methods for a trainer taking a ``TrainSplit`` and the test split
    as (uint8 images, int32 labels)."""

    def start(self, cfg, batch_sizes, seed=None):
        """:meth:`Backend.start`, TensorFlow first made unimportable in this process where
        nothing imported it yet. These backends never use it, but where it is installed (the
        Docker image, a TensorFlow user's venv) two libraries import it on their own:
        ``keras.utils.set_random_seed`` (to seed tf.random for tf.data) and tensorboard's
        summary writer (for tf.io.gfile; it falls back to its own stub without TensorFlow).
        That import cost a short run about 1.8 s and 470 MB on JAX and on PyTorch alike, and
        printed TensorFlow's CUDA probing (docs/speed.md, "Start-up"); the tests run these
        backends the same way."""
        sys.modules.setdefault("tensorflow", None)
        return super().start(cfg, batch_sizes, seed)

    def prepare_tfds(self, data: DataConfig) -> None:
        """DataError: tensorflow-datasets needs TensorFlow."""
        raise DataError(
            f"reading tensorflow-datasets needs TensorFlow: on the {self.name} backend pass "
            "--data_path (the official binary files or an image folder; see docs/data.md)"
        )

    def cifar_sources(self, data: DataConfig, train_batch: int, eval_batch: int, seed: int):
        """A ``TrainSplit`` and the test split's arrays."""
        train = TrainSplit(*cifar_data.read_split(data, "train"), seed=seed, pad=data.pad)
        return train, cifar_data.read_split(data, "test")

    def evaluation_source(self, images, labels, batch: int):
        return images, labels
