"""The CIFAR sources of the backends that train without TensorFlow (JAX, PyTorch): the uint8
splits read whole from --data_path (``datasets.cifar_data.load_split``), the training split a
``datasets.stream.TrainSplit`` its trainer makes each batch from, on the device."""

from __future__ import annotations

from resnet_noBN.backends.base import Backend
from resnet_noBN.configs.errors import DataError
from resnet_noBN.datasets.cifar_data import load_split
from resnet_noBN.datasets.data_config import DataConfig
from resnet_noBN.datasets.stream import TrainSplit


class SplitsInMemory(Backend):
    """:class:`Backend`'s data methods for a trainer taking a ``TrainSplit`` and the test split
    as (uint8 images, int32 labels)."""

    def prepare_tfds(self, data: DataConfig) -> None:
        """DataError: tensorflow-datasets needs TensorFlow."""
        raise DataError(
            f"reading tensorflow-datasets needs TensorFlow: on the {self.name} backend pass "
            "--data_path (the official binary files or an image folder; see data/README.md)"
        )

    def cifar_sources(self, data: DataConfig, train_batch: int, eval_batch: int, seed: int):
        """A ``TrainSplit`` and the test split's arrays."""
        train = load_split(data.dataset, "train", data.data_path, data.cifar100_layout)
        test = load_split(data.dataset, "test", data.data_path, data.cifar100_layout)
        return TrainSplit(*train, seed=seed, pad=data.pad), test

    def evaluation_source(self, images, labels, batch: int):
        return images, labels
