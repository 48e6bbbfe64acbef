"""CIFAR-10/100 input pipeline: the official binary files, an image folder, or tensorflow-datasets.

A tf.data rewrite of the original tensorflow/models `resnet/cifar_input.py` (queue runners,
`FixedLengthRecordReader`), which the paper's experiments used (arXiv:1611.04231, Section 4):

* Records: as in the original, the official binary files are read as fixed-length records of
  label byte(s) + 3,072 pixel bytes, depth-major [3, 32, 32], transposed to [32, 32, 3]; CIFAR-100
  records carry (coarse, fine) labels and the FINE label is used (`decode_record`).
* Training augmentation, "standard data augmentation" (Section 4): as in the original,
  `resize_with_crop_or_pad` to (32 + 2·pad)² (pad=2: the original's 36×36; He et al. use 4),
  a random 32×32 crop, a random left-right flip, then `per_image_standardization`; evaluation:
  per-image standardisation only. Unlike the original, augmentation works on whole batches
  (each image its own crop and flip: the same distribution, ~5x the images/s of a per-image
  map) with stateless random ops, so the same `seed` gives the same batches (`augment`).
* Evaluation reads the WHOLE split once, in order, keeping the last partial batch (the original
  evaluated 50 batches of 100, half the test split, and logged the best over checkpoints).
* Shuffling: the original's `RandomShuffleQueue` held 16 batches; here every epoch is a fresh
  permutation of the whole training split (50,000 uint8 images, 150 MB in memory), keyed by
  (seed, epoch), and batch s is augmented with the seed (seed, s): the training stream is a pure
  function of (seed, step), so a run resumed at any step sees exactly the batches the
  uninterrupted run saw (`build_dataset`'s `start_step`).

Three sources, the same elements (uint8 image [32, 32, 3], int32 label), see `read_records`:
`data_path` (the official binary files, or an image folder `split/class/image` decoded once into
memory: `resnet_noBN.image_folder`; both validated by `check_data_path`) or tensorflow-datasets
(`data_dir`, prepared by `prepare_tfds` or `python data/prepare.py`). See data/README.md.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import random
import urllib.error
from pathlib import Path

import numpy as np
import requests
import tensorflow as tf
import tensorflow_datasets as tfds
from tensorflow_datasets.core.download.download_manager import NonMatchingChecksumError

from resnet_noBN import distribute, image_folder
from resnet_noBN.errors import DataError
from resnet_noBN.input_common import DEFAULT_TFDS_DIR as DEFAULT_TFDS_DIR  # the launchers' default
from resnet_noBN.input_common import check_split, pipeline_shard, require_files

IMAGE_SIZE = 32
IMAGE_BYTES = 3 * IMAGE_SIZE * IMAGE_SIZE
SPLITS = ("train", "test")
# How a CIFAR-100 record is sliced (--cifar100_layout): "official", label byte 1 (fine) and
# pixels from byte 2; "original_2016", the original cifar_input.py before its July 2017 fix.
LAYOUTS = ("official", "original_2016")


@dataclasses.dataclass(frozen=True)
class CifarSpec:
    """What the pipeline needs to know about one data set (tfds names it the same)."""

    title: str
    num_classes: int
    # Label bytes in front of the pixels of a binary record; the last one is the label used
    # (CIFAR-100: coarse, then fine).
    label_bytes: int
    folder: str  # the folder the official binary archive unpacks to
    files: dict[str, tuple[str, ...]]  # split -> record files, in the official order
    class_names: tuple[str, ...]  # label id -> name (batches.meta.txt / fine_label_names.txt)
    train_examples: int = 50_000

    @property
    def record_bytes(self) -> int:
        return self.label_bytes + IMAGE_BYTES


DATASETS = {
    "cifar10": CifarSpec(
        title="CIFAR-10",
        num_classes=10,
        label_bytes=1,
        folder="cifar-10-batches-bin",
        files={
            "train": tuple(f"data_batch_{i}.bin" for i in range(1, 6)),
            "test": ("test_batch.bin",),
        },
        class_names=(
            "airplane",
            "automobile",
            "bird",
            "cat",
            "deer",
            "dog",
            "frog",
            "horse",
            "ship",
            "truck",
        ),
    ),
    "cifar100": CifarSpec(
        title="CIFAR-100",
        num_classes=100,
        label_bytes=2,
        folder="cifar-100-binary",
        files={"train": ("train.bin",), "test": ("test.bin",)},
        class_names=tuple(
            "apple aquarium_fish baby bear beaver bed bee beetle bicycle bottle bowl boy bridge "
            "bus butterfly camel can castle caterpillar cattle chair chimpanzee clock cloud "
            "cockroach couch crab crocodile cup dinosaur dolphin elephant flatfish forest fox "
            "girl hamster house kangaroo keyboard lamp lawn_mower leopard lion lizard lobster man "
            "maple_tree motorcycle mountain mouse mushroom oak_tree orange orchid otter palm_tree "
            "pear pickup_truck pine_tree plain plate poppy porcupine possum rabbit raccoon ray "
            "road rocket rose sea seal shark shrew skunk skyscraper snail snake spider squirrel "
            "streetcar sunflower sweet_pepper table tank telephone television tiger tractor "
            "train trout tulip turtle wardrobe whale willow_tree wolf woman worm".split()
        ),
    ),
}

# What a failed download raises through tfds: requests' errors (ConnectionError when offline),
# tfds' DownloadError (HTTP status), urllib's (ftp) and the socket-level ones.
_DOWNLOAD_ERRORS = (
    requests.exceptions.RequestException,
    tfds.download.DownloadError,
    urllib.error.URLError,
    ConnectionError,
    TimeoutError,
)


def _spec(dataset: str) -> CifarSpec:
    if dataset not in DATASETS:
        raise DataError(f"unknown data set {dataset!r}; known: {', '.join(DATASETS)}")
    return DATASETS[dataset]


def num_classes(dataset: str) -> int:
    """Number of classes of `dataset` ("cifar10": 10, "cifar100": 100, fine labels)."""
    return _spec(dataset).num_classes


def _binary_files(dataset: str, data_path: str | os.PathLike) -> dict[str, list[str]]:
    """Validates `data_path` without touching TensorFlow; returns split -> record files."""
    spec = _spec(dataset)
    root = Path(data_path)
    if not root.is_dir():
        raise DataError(
            f"--data_path {root} is not a folder: point it at the {spec.title} binary files "
            f"(the official archive unpacked: {spec.folder}/) or at their parent"
        )
    folder = root / spec.folder if (root / spec.folder).is_dir() else root
    expected = [name for split in SPLITS for name in spec.files[split]]
    require_files(
        folder,
        expected,
        f"--data_path must be the folder holding the {spec.title} binary files "
        f"({', '.join(expected)}) or its parent holding {spec.folder}/, or an image folder "
        "holding train/ and test/ (one folder per class)",
    )
    for name in expected:
        size = (folder / name).stat().st_size
        if size == 0 or size % spec.record_bytes:
            raise DataError(
                f"{folder / name} is {size} bytes, not a whole number (>= 1) of "
                f"{spec.record_bytes}-byte {spec.title} records: the file is truncated or not "
                f"{spec.title}; unpack the official archive again"
            )
    return {split: [str(folder / name) for name in spec.files[split]] for split in SPLITS}


def _image_files(dataset: str, data_path: str | os.PathLike, split: str):
    """(paths, labels) of `split` when `data_path` is an image folder, else None."""
    root = image_folder.find_root(data_path)
    if root is None:
        return None
    spec = _spec(dataset)
    return image_folder.list_split(root, split, spec.class_names, spec.title)


def check_data_path(dataset: str, data_path: str | os.PathLike) -> list[str]:
    """Validates a --data_path for `dataset`; returns its files (train, then test).

    `data_path` is one of two layouts, told apart by what it holds:
    * the official binary files (CIFAR-10: data_batch_1..5.bin, test_batch.bin; CIFAR-100:
      train.bin, test.bin), or their parent holding `cifar-10-batches-bin/` /
      `cifar-100-binary/`: one file per record batch;
    * an image folder `train/<class>/*.jpg|png`, `test/<class>/...` (or the one folder inside
      `data_path` that holds them, e.g. `cifar-10-jpeg/`), classes named as the data set's
      (`resnet_noBN.image_folder`): one file per image.
    Raises DataError for a missing path, a wrong layout (naming the expected files and where), a
    binary file that is empty or not a whole number of records, a missing split, class folders
    that are not the data set's, or an empty class. Plain file-system checks: no TensorFlow.
    """
    if image_folder.find_root(data_path) is not None:
        return [path for split in SPLITS for path in _image_files(dataset, data_path, split)[0]]
    files = _binary_files(dataset, data_path)
    return [path for split in SPLITS for path in files[split]]


def num_records(dataset: str, data_path: str | os.PathLike, split: str) -> int:
    """Examples in one split of a --data_path (either layout)."""
    images = _image_files(dataset, data_path, split)
    if images is not None:
        return len(images[0])
    return (
        sum(os.path.getsize(f) for f in _binary_files(dataset, data_path)[split])
        // _spec(dataset).record_bytes
    )


def decode_record(record: tf.Tensor, dataset: str) -> tuple[tf.Tensor, tf.Tensor]:
    """One official binary record -> (uint8 image [32, 32, 3], int32 label).

    As in the original `cifar_input.py`: label byte(s), then depth-major [3, 32, 32] pixels
    transposed to [32, 32, 3]. CIFAR-100 records hold (coarse, fine): the fine label is returned.
    """
    spec = _spec(dataset)
    raw = tf.io.decode_raw(record, tf.uint8)
    label = tf.cast(raw[spec.label_bytes - 1], tf.int32)
    depth_major = tf.reshape(raw[spec.label_bytes :], [3, IMAGE_SIZE, IMAGE_SIZE])
    return tf.transpose(depth_major, [1, 2, 0]), label


def original_2016_shift(image: tf.Tensor, label: tf.Tensor) -> tf.Tensor:
    """The image the original `cifar_input.py` (before its July 2017 fix) made of a CIFAR-100
    record: it sliced the 3,072 pixel bytes from byte 1 of the 3,074-byte record (coarse, fine,
    R, G, B planes) instead of byte 2, so the fine label became the first red pixel and every
    byte moved one place on (the last red pixel starts the green plane, the last green the blue
    plane; the last blue pixel is lost). The label itself was read correctly.

    `image`: the correctly decoded uint8 [32, 32, 3]; `label`: its fine label. Works on any
    source (the binary files, an image folder, tfds): only the fine label and the pixels enter.
    """
    depth_major = tf.reshape(tf.transpose(image, [2, 0, 1]), [IMAGE_BYTES])
    shifted = tf.concat([tf.cast(label, tf.uint8)[None], depth_major[:-1]], axis=0)
    return tf.transpose(tf.reshape(shifted, [3, IMAGE_SIZE, IMAGE_SIZE]), [1, 2, 0])


def check_layout(dataset: str, layout: str) -> None:
    """DataError unless `layout` is one of LAYOUTS and means something for `dataset`."""
    if layout not in LAYOUTS:
        raise DataError(
            f"--cifar100_layout={layout} is unknown; choose one of {', '.join(LAYOUTS)}"
        )
    if layout != "official" and dataset != "cifar100":
        raise DataError(
            f"--cifar100_layout={layout} is for --dataset=cifar100 only (the original reader "
            f"read {_spec(dataset).title} correctly); drop the flag"
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


def read_records(
    dataset: str,
    split: str,
    *,
    data_path: str | os.PathLike | None = None,
    data_dir: str | os.PathLike | None = None,
    input_context: tf.distribute.InputContext | None = None,
    layout: str = "official",
) -> tf.data.Dataset:
    """The records of one split: (uint8 image [32, 32, 3], int32 label), unbatched.

    `data_path` given: the official binary files (`check_data_path`), read in order with
    `FixedLengthRecordDataset` as in the original; or an image folder, every image decoded once
    (`image_folder.decode`) and served from memory. Otherwise tensorflow-datasets from `data_dir`
    (prepared, or downloaded now, by `prepare_tfds`). Always in order: `build_dataset` shuffles
    the whole split, keyed by its seed.

    With an `input_context` of n > 1 input pipelines, pipeline i reads a disjoint part, the n
    parts covering the split: by file (files i, i+n, ...; tfds: `ReadConfig(input_context)`)
    when the split has at least n files, else by record (records i, i+n, ...: `Dataset.shard`;
    tfds: `tfds.even_splits(split, n)[i]`, contiguous ranges). CIFAR-10's 5 training files give
    file sharding up to 5 pipelines; its test split and CIFAR-100 have one file per split. An
    image folder is sharded by image, before decoding.

    `layout` "original_2016" (CIFAR-100 only): every image as the original reader made it,
    `original_2016_shift`.
    """
    check_split(split, SPLITS)
    check_layout(dataset, layout)
    records = _read_records(dataset, split, data_path, data_dir, input_context)
    if layout == "original_2016":
        records = records.map(lambda image, label: (original_2016_shift(image, label), label))
    return records


def _read_records(dataset, split, data_path, data_dir, input_context) -> tf.data.Dataset:
    shard = pipeline_shard(input_context)
    if data_path is not None and (images := _image_files(dataset, data_path, split)):
        paths, labels = images
        if shard:
            paths, labels = paths[shard[1] :: shard[0]], labels[shard[1] :: shard[0]]
        return tf.data.Dataset.from_tensor_slices(
            image_folder.decode(tuple(paths), tuple(labels), IMAGE_SIZE)
        )
    if data_path is not None:
        spec = _spec(dataset)
        files = _binary_files(dataset, data_path)[split]
        by_file = shard and len(files) >= shard[0]
        if by_file:
            files = files[shard[1] :: shard[0]]
        records = tf.data.FixedLengthRecordDataset(files, spec.record_bytes)
        if shard and not by_file:
            records = records.shard(*shard)
        return records.map(
            functools.partial(decode_record, dataset=dataset), num_parallel_calls=tf.data.AUTOTUNE
        )
    builder = prepare_tfds(dataset, data_dir)
    by_file = shard and builder.info.splits[split].num_shards >= shard[0]
    if shard and not by_file:
        split = tfds.even_splits(split, shard[0])[shard[1]]
    read_config = tfds.ReadConfig(
        try_autocache=False, input_context=input_context if by_file else None
    )
    images = builder.as_dataset(split=split, as_supervised=True, read_config=read_config)
    return images.map(lambda image, label: (image, tf.cast(label, tf.int32)))


def augment(images: tf.Tensor, seed: tf.Tensor, pad: int = 2) -> tf.Tensor:
    """Training augmentation of a uint8 batch [B, 32, 32, 3], before standardisation.

    As in the original (Section 4, "standard data augmentation"), for EACH image: zero-pad to
    (32 + 2·pad)², a random 32×32 crop (offsets uniform in 0..2·pad), a random left-right flip;
    pad=0: the flip only. The crop
    and flip are one gather of rows and (maybe reversed) columns per image: TF's
    `stateless_random_crop` would crop the whole batch at one offset. Stateless: the same `seed`
    (int [2]) gives the same output.
    """
    crop_seed, flip_seed = tf.unstack(tf.random.experimental.stateless_split(seed, 2))
    batch = tf.shape(images)[0]
    offsets = tf.random.stateless_uniform(
        [batch, 2], crop_seed, minval=0, maxval=2 * pad + 1, dtype=tf.int32
    )
    flips = tf.random.stateless_uniform([batch, 1], flip_seed, minval=0, maxval=2, dtype=tf.int32)
    pixels = tf.range(IMAGE_SIZE)
    rows = offsets[:, :1] + pixels  # [B, 32]
    cols = offsets[:, 1:] + tf.where(flips == 1, IMAGE_SIZE - 1 - pixels, pixels)
    padded = tf.pad(images, [[0, 0], [pad, pad], [pad, pad], [0, 0]])
    return tf.gather(tf.gather(padded, rows, axis=1, batch_dims=1), cols, axis=2, batch_dims=1)


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
    cache: bool = True,
    drop_remainder: bool | None = None,
    layout: str = "official",
) -> tf.data.Dataset:
    """Batches (float32 images [B, 32, 32, 3], int32 labels [B]) of `split` ("train"/"test").

    `batch_size` is per input pipeline (per replica under `distribute_datasets_from_function`:
    pass `input_context.get_per_replica_batch_size(global_batch)` and the `input_context`, which
    shards the records as in `read_records`). `data_path`: the official binary files; else tfds
    from `data_dir` (None: tfds' default; the launcher's is DEFAULT_TFDS_DIR).

    `train` (default: split == "train"): batches of an endless stream of epochs, each a fresh
    permutation of the split (or this pipeline's shard) keyed by (seed, epoch), augmented
    (`augment` with `pad`, batch s with the seed (seed, s)) and standardised. The stream is a
    pure function of (seed, step): `start_step` s makes the first batch the one a run from step 0
    reaches at step s, which is how a resumed run continues the same data order. Evaluation
    (train=False): one pass over the whole split (or this pipeline's shard) in order,
    standardised only, keeping the last partial batch. `drop_remainder` overrides that choice.
    `seed`: with several input pipelines each derives its own from it; None: drawn at random.
    `cache`: keep the decoded uint8 records in memory
    (before augmentation). `layout`: see `read_records`.
    """
    _spec(dataset)  # a known data set
    check_split(split, SPLITS)
    if batch_size < 1 or pad < 0:
        raise DataError(f"batch_size must be >= 1 and pad >= 0, got {batch_size} and {pad}")
    train = split == "train" if train is None else train
    drop_remainder = train if drop_remainder is None else drop_remainder
    if start_step < 0:
        raise DataError(f"start_step must be >= 0, got {start_step}")
    shard = pipeline_shard(input_context)
    if seed is None:
        seed = random.randrange(2**31)
    if shard:  # each input pipeline its own shuffle and augmentation
        seed = int(np.random.SeedSequence([seed, shard[1]]).generate_state(1)[0])
    records = read_records(
        dataset,
        split,
        data_path=data_path,
        data_dir=data_dir,
        input_context=input_context,
        layout=layout,
    )
    if cache:
        records = records.cache()
    if train:
        examples = _epochs(records, seed, start_example=start_step * batch_size)
        batches = examples.batch(batch_size, drop_remainder=drop_remainder)
        seeds = tf.data.Dataset.counter(start_step).map(lambda step: tf.stack([seed, step]))
        examples = tf.data.Dataset.zip((batches, seeds)).map(
            lambda batch, batch_seed: (
                tf.image.per_image_standardization(augment(batch[0], batch_seed, pad)),
                batch[1],
            ),
            num_parallel_calls=tf.data.AUTOTUNE,
        )
    else:
        examples = records.batch(batch_size, drop_remainder=drop_remainder).map(
            lambda images, labels: (tf.image.per_image_standardization(images), labels),
            num_parallel_calls=tf.data.AUTOTUNE,
        )
    return examples.prefetch(tf.data.AUTOTUNE)


def split_fns(dataset: str, **kwargs):
    """``fn(split, global_batch)``: the ``dataset_fn(input_context)`` of ``split`` that
    ``distribute_datasets_from_function`` calls, each input pipeline building its share of
    ``global_batch`` with `build_dataset` (``kwargs``: its data_path, data_dir, pad, seed and
    layout)."""

    def fn(split: str, global_batch: int):
        return distribute.per_replica_dataset(
            build_dataset, dataset, split, global_batch=global_batch, **kwargs
        )

    return fn


def _epochs(records: tf.data.Dataset, seed: int, start_example: int = 0) -> tf.data.Dataset:
    """`records` repeated forever, epoch e permuted by `stateless_shuffle` with the seed
    (seed, e), from the example at position `start_example` of that stream. Each epoch gathers
    the (cached) split into one tensor and permutes it: stateless, so no tf.data seed is
    involved and the order is the same on every machine and every rerun."""
    # tensors, not Python numbers: under parameter servers this function is traced
    size = records.reduce(tf.constant(0, tf.int64), lambda count, _: count + 1)
    first_epoch, offset = start_example // size, start_example % size
    whole = records.batch(size)

    def epoch(e):
        order = tf.random.experimental.stateless_shuffle(
            tf.range(size), seed=tf.stack([tf.constant(seed, tf.int64), e])
        )
        return whole.map(
            lambda images, labels: (tf.gather(images, order), tf.gather(labels, order))
        ).unbatch()

    return tf.data.Dataset.counter(first_epoch).flat_map(epoch).skip(offset)
