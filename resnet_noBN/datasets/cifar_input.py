"""CIFAR-10/100 input for the TensorFlow backend: ``tf.data`` over the splits in memory.

A tf.data rewrite of the original tensorflow/models `resnet/cifar_input.py` (queue runners,
`FixedLengthRecordReader`), which the paper's experiments used (arXiv:1611.04231, Section 4).
One pipeline for both backends: the splits are uint8 arrays (`resnet_noBN.datasets.cifar_data`: the
official binary files or an image folder, no TensorFlow; or tensorflow-datasets, `load_arrays`),
and the training stream, its order, augmentation and standardisation, is `datasets.stream`,
which the JAX loop runs on the accelerator. What stays in tf.data: feeding
``tf.distribute`` (each input pipeline its shard and its own seed, prefetching, the dataset
function that parameter-server workers run as a graph) and tfds' download and preparation.

* Training: `build_dataset` maps `stream.training_batch` over a step counter from `start_step`:
  the batch of step s is a pure function of (seed, s), so a resumed run sees exactly the
  batches the uninterrupted run saw.
* Evaluation reads the WHOLE split once, in order, keeping the last partial batch (the original
  evaluated 50 batches of 100, half the test split, and logged the best over checkpoints).
* Sharding: with n > 1 input pipelines, pipeline i reads records i, i+n, ... of the split.
"""

from __future__ import annotations

import os
import random
import urllib.error
from pathlib import Path

import numpy as np
import requests
import tensorflow as tf
import tensorflow_datasets as tfds
from tensorflow_datasets.core.download.download_manager import NonMatchingChecksumError

from resnet_noBN.configs.data_config import check_layout
from resnet_noBN.configs.errors import DataError
from resnet_noBN.datasets import stream
from resnet_noBN.datasets.cifar_data import DATASETS as DATASETS
from resnet_noBN.datasets.cifar_data import (
    SPLITS,
    _spec,
    jpeg_reencode,
    load_split,
    original_2016_shift,
)
from resnet_noBN.datasets.cifar_data import check_data_path as check_data_path
from resnet_noBN.datasets.cifar_data import num_classes as num_classes
from resnet_noBN.datasets.input_common import (
    check_split,
    per_replica_dataset,
    pipeline_shard,
    require_files,
)

# What a failed download raises through tfds: requests' errors (ConnectionError when offline),
# tfds' DownloadError (HTTP status), urllib's (ftp) and the socket-level ones.
_DOWNLOAD_ERRORS = (
    requests.exceptions.RequestException,
    tfds.download.DownloadError,
    urllib.error.URLError,
    ConnectionError,
    TimeoutError,
)


def prepare_tfds(
    dataset: str,
    data_dir: str | os.PathLike | None = None,
    manual_dir: str | os.PathLike | None = None,
) -> tfds.core.DatasetBuilder:
    """Returns the tfds builder of `dataset`, downloading and preparing it first if needed.

    `data_dir`: the tfds data directory (None: tfds' default). `manual_dir`: a folder holding the
    official archive (`cifar-10-binary.tar.gz` / `cifar-100-binary.tar.gz`: tfds' DownloadManager
    takes `manual_dir / <the registered file name>` instead of downloading it), to prepare on a
    machine without internet. The archive's checksum is still verified against the one tfds
    registers. A failed download, a missing or wrong archive -> DataError (chained).
    """
    _spec(dataset)
    builder = tfds.builder(dataset, data_dir=None if data_dir is None else os.fspath(data_dir))
    download_config = None
    archives = [info.filename for info in builder.url_infos.values()]
    if manual_dir is not None:
        require_files(
            manual_dir,
            archives,
            f"put the official archive there, under that name ({builder.info.homepage})",
            where=f"--manual_dir {manual_dir}",
        )
        archives = [str(Path(manual_dir) / name) for name in archives]
        download_config = tfds.download.DownloadConfig(manual_dir=os.fspath(manual_dir))
    try:
        if manual_dir is None and not builder.is_prepared():
            _probe(builder.url_infos)
        builder.download_and_prepare(download_config=download_config)
    except NonMatchingChecksumError as e:
        raise DataError(
            f"{', '.join(archives)}: not the checksum tfds registers for the official {dataset} "
            f"archive (a truncated download or another file); download it again"
        ) from e
    except _DOWNLOAD_ERRORS as e:
        raise DataError(
            f"downloading {dataset} into {builder.data_dir_root} failed ({type(e).__name__}): "
            f"this machine appears offline; pass --data_path (a folder with the official binary "
            f"files) or --data_dir (a prepared tfds directory; see `python data/prepare.py "
            f"{dataset} --manual_dir DIR`)"
        ) from e
    return builder


def _probe(url_infos: dict) -> None:
    """Fail within seconds where the download would fail after minutes of retries (offline)."""
    for url in url_infos:
        requests.head(url, timeout=10, allow_redirects=False)


def load_arrays(
    dataset: str,
    split: str,
    *,
    data_path: str | os.PathLike | None = None,
    data_dir: str | os.PathLike | None = None,
    layout: str = "official",
    jpeg_quality: int | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """One split as (uint8 images [N, 32, 32, 3], int32 labels [N]), in order: from
    `data_path` (`cifar_data.load_split`), else from tensorflow-datasets in `data_dir`
    (prepared, or downloaded now, by `prepare_tfds`). `layout` and `jpeg_quality` as in
    `cifar_data.load_split`."""
    if data_path is not None:
        return load_split(dataset, split, data_path, layout, jpeg_quality)
    check_split(split, SPLITS)
    check_layout(dataset, layout)
    builder = prepare_tfds(dataset, data_dir)
    whole = builder.as_dataset(split=split, as_supervised=True).batch(1 << 20)  # one batch
    images, labels = next(iter(tfds.as_numpy(whole)))
    labels = labels.astype(np.int32)
    if jpeg_quality is not None:
        images = jpeg_reencode(images, jpeg_quality)
    if layout != "official":
        images = original_2016_shift(images, labels)
    return images, labels


def _pipeline_arrays(
    dataset, split, data_path, data_dir, input_context, layout, jpeg_quality=None, numbered=False
):
    """`load_arrays` (and, where ``numbered``, each record's index in the split), then this
    input pipeline's records: i, i+n, ... of n pipelines."""
    arrays = load_arrays(
        dataset,
        split,
        data_path=data_path,
        data_dir=data_dir,
        layout=layout,
        jpeg_quality=jpeg_quality,
    )
    if numbered:
        arrays = (*arrays, np.arange(len(arrays[1]), dtype=np.int64))
    shard = pipeline_shard(input_context)
    return arrays if shard is None else tuple(a[shard[1] :: shard[0]] for a in arrays)


def read_records(
    dataset: str,
    split: str,
    *,
    data_path: str | os.PathLike | None = None,
    data_dir: str | os.PathLike | None = None,
    input_context: tf.distribute.InputContext | None = None,
    layout: str = "official",
) -> tf.data.Dataset:
    """The records of one split (`load_arrays`), unbatched, in order: (uint8 image [32, 32, 3],
    int32 label). With an `input_context` of n > 1 input pipelines, pipeline i reads records i,
    i+n, ...: the n parts are disjoint and cover the split."""
    return tf.data.Dataset.from_tensor_slices(
        _pipeline_arrays(dataset, split, data_path, data_dir, input_context, layout)
    )


def build_dataset(
    dataset: str,
    split: str,
    batch_size: int,
    *,
    data_path: str | os.PathLike | None = None,
    data_dir: str | os.PathLike | None = None,
    train: bool | None = None,
    pad: int = 2,
    seed: int | None = None,
    start_step: int = 0,
    input_context: tf.distribute.InputContext | None = None,
    layout: str = "official",
    jpeg_quality: int | None = None,
    drop_remainder: bool = False,
) -> tf.data.Dataset:
    """Batches (float32 images [B, 32, 32, 3], int32 labels [B]) of `split` ("train"/"test"),
    and for an evaluation each image's index in the split (int64 [B]).

    `batch_size` is per input pipeline (per replica under `distribute_datasets_from_function`:
    pass `input_context.get_per_replica_batch_size(global_batch)` and the `input_context`, which
    shards the records as in `read_records`). `data_path`: the official binary files or an
    image folder; else tfds from `data_dir` (None: tfds' default; the launcher's is
    configs.data_config.DEFAULT_TFDS_DIR). `layout`, `jpeg_quality`: see `cifar_data.load_split`.

    `train` (default: split == "train"): the endless stream of `stream.training_batch` from
    step `start_step` on (the first batch is the one a run from step 0 reaches at that step),
    keyed by `seed`; with several input pipelines each derives its own seed from it; None:
    drawn at random. Evaluation (train=False): one pass over the whole split (or this
    pipeline's shard) in order, standardised only, keeping the last partial batch unless
    `drop_remainder` (a benchmark's fixed shapes).
    """
    _spec(dataset)  # a known data set
    check_split(split, SPLITS)
    if batch_size < 1 or pad < 0:
        raise DataError(f"batch_size must be >= 1 and pad >= 0, got {batch_size} and {pad}")
    train = split == "train" if train is None else train
    if start_step < 0:
        raise DataError(f"start_step must be >= 0, got {start_step}")
    if not train:
        images, labels, index = _pipeline_arrays(
            dataset, split, data_path, data_dir, input_context, layout, jpeg_quality, numbered=True
        )
        return evaluation_dataset(images, labels, batch_size, drop_remainder, index)
    images, labels = _pipeline_arrays(
        dataset, split, data_path, data_dir, input_context, layout, jpeg_quality
    )
    if batch_size > len(images):
        raise DataError(
            f"a batch of {batch_size} exceeds the {len(images)} training images this input "
            "pipeline reads; use a smaller --batch_size"
        )
    shard = pipeline_shard(input_context)
    if seed is None:
        seed = random.randrange(2**31)
    if shard:  # each input pipeline its own order and augmentation
        seed = int(np.random.SeedSequence([seed, shard[1]]).generate_state(1)[0])
    images, labels = tf.constant(images), tf.constant(labels)
    return (
        tf.data.Dataset.counter(start_step)
        .map(
            tf.autograph.experimental.do_not_convert(
                lambda step: stream.training_batch(images, labels, seed, step, batch_size, pad)
            ),
            num_parallel_calls=tf.data.AUTOTUNE,
        )
        .prefetch(tf.data.AUTOTUNE)
    )


def evaluation_dataset(
    images: np.ndarray,
    labels: np.ndarray,
    batch_size: int,
    drop_remainder: bool = False,
    index: np.ndarray | None = None,
) -> tf.data.Dataset:
    """Batches of uint8 ``images`` [N, 32, 32, 3], their labels and their indices in the split
    (``index``; default 0..N-1), in order, standardised only (`stream.standardize`): what
    evaluation reads."""
    index = np.arange(len(labels), dtype=np.int64) if index is None else index
    return (
        tf.data.Dataset.from_tensor_slices((images, labels, index))
        .batch(batch_size, drop_remainder=drop_remainder)
        .map(
            tf.autograph.experimental.do_not_convert(lambda x, y, i: (stream.standardize(x), y, i)),
            num_parallel_calls=tf.data.AUTOTUNE,
        )
        .prefetch(tf.data.AUTOTUNE)
    )


def split_fns(dataset: str, **kwargs):
    """``fn(split, global_batch)``: the ``dataset_fn(input_context)`` of ``split`` that
    ``distribute_datasets_from_function`` calls, each input pipeline building its share of
    ``global_batch`` with `build_dataset` (``kwargs``: its data_path, data_dir, pad, seed and
    layout)."""

    def fn(split: str, global_batch: int):
        return per_replica_dataset(
            build_dataset, dataset, split, global_batch=global_batch, **kwargs
        )

    return fn
