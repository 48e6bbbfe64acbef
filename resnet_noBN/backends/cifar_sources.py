"""What a CIFAR run trains and evaluates on, for the Keras backend in use (no TensorFlow imported
on JAX): the same splits (`datasets.cifar_data`) and the same stream (`datasets.stream`)
either way, handed to the trainer in the form its loop takes."""

from __future__ import annotations

import dataclasses
import os

import numpy as np

from resnet_noBN.backends import backend
from resnet_noBN.configs.errors import DataError


@dataclasses.dataclass(frozen=True)
class TrainSplit:
    """The JAX trainer's training source: the split in memory (uint8 images [N, 32, 32, 3], int32
    labels [N]), the run's seed and the crop padding of `stream.training_batch`."""

    images: np.ndarray
    labels: np.ndarray
    seed: int
    pad: int = 2


def sources(
    dataset: str,
    train_batch: int,
    eval_batch: int,
    *,
    seed: int,
    data_path: str | os.PathLike | None = None,
    data_dir: str | os.PathLike | None = None,
    pad: int = 2,
    layout: str = "official",
):
    """(training source, test source) of a run: on TensorFlow, the ``dataset_fn``s of
    `cifar_input.split_fns` for global batches ``train_batch`` and ``eval_batch``; on JAX, a
    :class:`TrainSplit` and the test split's arrays. tensorflow-datasets (no ``data_path``)
    needs TensorFlow: DataError on JAX."""
    if backend.is_tensorflow():
        from resnet_noBN.datasets import cifar_input

        fn = cifar_input.split_fns(
            dataset, data_path=data_path, data_dir=data_dir, pad=pad, seed=seed, layout=layout
        )
        return fn("train", train_batch), fn("test", eval_batch)
    if data_path is None:
        raise DataError(
            "reading tensorflow-datasets needs TensorFlow: on the JAX backend pass --data_path "
            "(the official binary files or an image folder; see data/README.md)"
        )
    from resnet_noBN.datasets.cifar_data import load_split

    train = TrainSplit(*load_split(dataset, "train", data_path, layout), seed=seed, pad=pad)
    return train, load_split(dataset, "test", data_path, layout)


def evaluation_source(images: np.ndarray, labels: np.ndarray, batch: int):
    """What the trainer of the backend in use evaluates from, for given arrays (uint8 images
    [N, 32, 32, 3], int32 labels [N]) and one process: the arrays themselves on JAX, on
    TensorFlow a ``dataset_fn`` of `cifar_input.evaluation_dataset`."""
    if not backend.is_tensorflow():
        return images, labels
    from resnet_noBN.datasets import cifar_input

    return lambda input_context: cifar_input.evaluation_dataset(images, labels, batch)
