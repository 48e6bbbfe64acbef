"""ILSVRC 2012 input pipeline: tensorflow-datasets ``imagenet2012`` or TFRecord shards.

Two sources, the same elements (JPEG bytes, int32 label in 0..999), see :func:`read_records`:

* **tfds** (``data_dir``, the default): ``imagenet2012`` prepared by tensorflow-datasets. ImageNet
  is a *manual download*: tfds prepares it from ``ILSVRC2012_img_train.tar`` and
  ``ILSVRC2012_img_val.tar`` (https://image-net.org/download-images) placed in
  ``<data_dir>/downloads/manual/``; :func:`tfds_builder` names them in one line when they are
  missing, and prepares the data set (hours, ~150 GB) when they are there. Labels: tfds' 0..999.
* **TFRecord shards** (``data_path``): a folder of ``train-NNNNN-of-MMMMM`` and
  ``validation-NNNNN-of-MMMMM`` files (the layout of TF-slim's ``build_imagenet_data.py`` and
  the TPU ``imagenet_to_gcs.py`` converters: 1024 + 128 shards), ``tf.train.Example`` records
  with ``image/encoded`` (JPEG bytes) and ``image/class/label`` (int64). Those converters write
  labels **1..1000** (0 is TF-slim's "background"), hence ``label_offset=1`` (``--label_offset``)
  by default: label = stored - label_offset. Shards written 0-based need ``--label_offset=0``. A
  label outside 0..999 after the offset stops the run with a message naming ``--label_offset``
  (:func:`check_data_path` already samples the first shards for it before anything starts).

Both sources keep the JPEG bytes undecoded (tfds: ``SkipDecoding``) until the crop is known, so a
training image is decoded only inside its crop window (``decode_and_crop_jpeg``).

Preprocessing (the standard ResNet/Inception recipe; the paper says only "standard"):

* training (:func:`train_crop`): a random-resized crop in the ``sample_distorted_bounding_box``
  style -- area 8%..100% of the image, aspect ratio 3/4..4/3, 10 attempts, the whole image if
  none fits -- resized (bilinear) to ``image_size`` x ``image_size`` (224), then a random
  left-right flip;
* evaluation (:func:`eval_crop`): the shorter side resized to ``image_size * 256 / 224`` (256),
  then the central ``image_size`` x ``image_size`` crop;
* then :func:`normalize`: ``"per_image"`` (default) ``tf.image.per_image_standardization``,
  the paper's code base's only preprocessing (its CIFAR pipeline) and, without batch norm, a
  guarantee that every input has mean 0 and variance 1; ``"mean_std"`` subtracts the usual
  ImageNet RGB mean (0.485, 0.456, 0.406) x 255 and divides by the std (0.229, 0.224, 0.225)
  x 255.

Augmentation is stateless with one seed per element, so a seed repeats the batches exactly.

Sharding (multi-worker): with an ``input_context`` of n > 1 input pipelines (one per worker),
pipeline i reads files i, i+n, ... (TFRecords) or tfds' ``ReadConfig(input_context=...)``; both
are file-based and need at least n files per split: fewer is a :class:`DataError` naming the
counts. Evaluation shards the validation split the same way (the Trainer sums the pipelines'
counts, so every image is evaluated once).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import numpy as np
import tensorflow as tf
import tensorflow_datasets as tfds

from resnet_noBN.configs.data_config import DEFAULT_TFDS_DIR
from resnet_noBN.configs.data_config import (
    IMAGENET_MEAN_RGB as MEAN_RGB,
)
from resnet_noBN.configs.data_config import (
    IMAGENET_NORMALIZATIONS as NORMALIZATIONS,
)
from resnet_noBN.configs.data_config import (
    IMAGENET_SHUFFLE_BUFFER as SHUFFLE_BUFFER,
)
from resnet_noBN.configs.data_config import (
    IMAGENET_STDDEV_RGB as STDDEV_RGB,
)
from resnet_noBN.configs.data_config import (
    IMAGENET_TFDS_NAME as TFDS_NAME,
)
from resnet_noBN.configs.errors import DataError
from resnet_noBN.datasets.input_common import (
    check_split,
    pipeline_shard,
    require_files,
)

MANUAL_FILES = ("ILSVRC2012_img_train.tar", "ILSVRC2012_img_val.tar")
SPLITS = ("train", "validation")
NUM_CLASSES = 1000
IMAGE_SIZE = 224
EVAL_RESIZE = 256  # the shorter side before the central IMAGE_SIZE crop, at IMAGE_SIZE = 224
CROP_AREA = (0.08, 1.0)
CROP_ASPECT = (3 / 4, 4 / 3)
LABEL_ERROR = "ImageNet label out of range"  # marks the in-graph label check's error

_SHARD = re.compile(r"^(train|validation)-(\d+)-of-(\d+)$")
_FEATURES = {
    "image/encoded": tf.io.FixedLenFeature([], tf.string),
    "image/class/label": tf.io.FixedLenFeature([], tf.int64),
}

__all__ = [
    "DEFAULT_TFDS_DIR",
    "DataError",
    "build_dataset",
    "check_data_path",
    "eval_crop",
    "normalize",
    "read_records",
    "tfds_builder",
    "train_crop",
]


# ----------------------------------------------------------------------------- sources
def manual_dir(data_dir: str | os.PathLike) -> Path:
    """Where tfds looks for the two ImageNet tar files: ``<data_dir>/downloads/manual``."""
    return Path(data_dir) / "downloads" / "manual"


def _is_prepared(builder: tfds.core.DatasetBuilder) -> bool:
    return builder.is_prepared()


def tfds_builder(
    data_dir: str | os.PathLike | None = None, num_input_pipelines: int = 1
) -> tfds.core.DatasetBuilder:
    """The prepared ``imagenet2012`` builder in ``data_dir``, preparing it if the tars are there.

    Not prepared and a tar missing -> DataError, one line naming both files and the folder.
    A split with fewer files than ``num_input_pipelines`` -> DataError.
    """
    data_dir = Path(DEFAULT_TFDS_DIR if data_dir is None else data_dir)
    builder = tfds.builder(TFDS_NAME, data_dir=os.fspath(data_dir))
    if not _is_prepared(builder):
        _prepare(builder, data_dir)
    for split in SPLITS:
        if split in builder.info.splits:  # (absent under tfds.testing.mock_data)
            _check_shardable(
                builder.info.splits[split].num_shards,
                split,
                f"tfds {TFDS_NAME} in {data_dir}",
                num_input_pipelines,
            )
    return builder


def _prepare(builder: tfds.core.DatasetBuilder, data_dir: Path) -> None:
    manual = manual_dir(data_dir)
    require_files(
        manual,
        MANUAL_FILES,
        f"{TFDS_NAME} is not prepared in {data_dir}, and ImageNet is a manual download: "
        f"put {' and '.join(MANUAL_FILES)} (https://image-net.org/download-images) "
        "there, or pass --data_path (a folder of train-*-of-* / validation-*-of-* "
        "TFRecord shards)",
        where=f"{manual}/",
    )
    print(f"preparing {TFDS_NAME} in {data_dir} from {manual}/ (hours, ~150 GB) ...", flush=True)
    builder.download_and_prepare(
        download_config=tfds.download.DownloadConfig(manual_dir=os.fspath(manual))
    )


def shard_files(data_path: str | os.PathLike, split: str) -> list[str]:
    """The ``<split>-NNNNN-of-MMMMM`` shards of ``data_path``, in order; DataError if the
    folder is missing, holds none, or lacks some of the M shards their names promise."""
    check_split(split, SPLITS)
    root = Path(data_path)
    if not root.is_dir():
        raise DataError(
            f"--data_path {root} is not a folder: point it at the folder of "
            "train-NNNNN-of-MMMMM and validation-NNNNN-of-MMMMM TFRecord shards"
        )
    shards = sorted(
        (int(m[2]), int(m[3]), p.name)
        for p in root.iterdir()
        if (m := _SHARD.match(p.name)) and m[1] == split
    )
    if not shards:
        raise DataError(
            f"--data_path {root} holds no {split}-NNNNN-of-MMMMM files: it must be "
            "the folder of train-*-of-* and validation-*-of-* TFRecord shards"
        )
    totals = {total for _, total, _ in shards}
    indices = [index for index, _, _ in shards]
    if len(totals) > 1 or indices != list(range(max(totals))):
        raise DataError(
            f"--data_path {root} holds {len(shards)} {split} shards, not the "
            f"complete set of {split}-00000-of-{max(totals):05d} .. "
            f"{split}-{max(totals) - 1:05d}-of-{max(totals):05d}: copy the "
            "missing shards"
        )
    if any(os.path.getsize(root / name) == 0 for _, _, name in shards):
        raise DataError(f"--data_path {root} holds an empty {split} shard: copy it again")
    return [str(root / name) for _, _, name in shards]


def _check_shardable(num_files: int, split: str, where: str, num_pipelines: int) -> None:
    if num_files < num_pipelines:
        raise DataError(
            f"{where} has {num_files} {split} file(s) but the job runs {num_pipelines} input "
            f"pipelines (one per worker): file-based sharding needs at least one file per "
            f"pipeline; re-shard the {split} split into >= {num_pipelines} files or use fewer "
            "workers"
        )


def check_data_path(
    data_path: str | os.PathLike,
    num_input_pipelines: int = 1,
    label_offset: int = 1,
    sample: int = 500,
) -> dict[str, list[str]]:
    """Validates ``--data_path`` before anything runs; returns split -> shard files.

    Checks both splits' shards (:func:`shard_files`), that each has at least
    ``num_input_pipelines`` files, and the label convention on the first ``sample`` records of
    each split's first shard: a stored label outside ``label_offset .. label_offset + 999``
    (e.g. a 0 with the default, 1-based ``label_offset=1``) is a DataError naming the fix.
    """
    files = {split: shard_files(data_path, split) for split in SPLITS}
    for split in SPLITS:
        _check_shardable(len(files[split]), split, f"--data_path {data_path}", num_input_pipelines)
    for split in SPLITS:
        try:
            labels = [
                int(tf.io.parse_single_example(r, _FEATURES)["image/class/label"])
                for r in tf.data.TFRecordDataset(files[split][0]).take(sample)
            ]
        except tf.errors.OpError as e:
            raise DataError(
                f"{files[split][0]} is not a TFRecord file of tf.train.Examples with "
                f"image/encoded and image/class/label ({type(e).__name__})"
            ) from None
        bad = [label for label in labels if not label_offset <= label < label_offset + NUM_CLASSES]
        if bad:
            raise DataError(_label_message(bad[0], label_offset, files[split][0]))
    return files


def _label_message(label, label_offset: int, where: str) -> str:
    hint = (
        "the shards look 0-based: pass --label_offset=0"
        if label_offset == 1 and label == 0
        else "the shards look 1-based (TF-slim/TPU converters): pass --label_offset=1"
        if label_offset == 0 and label == NUM_CLASSES
        else "these are not ILSVRC 2012 class labels"
    )
    return (
        f"{LABEL_ERROR}: {where} holds label {label}, outside {label_offset}.."
        f"{label_offset + NUM_CLASSES - 1} (--label_offset={label_offset}); {hint}"
    )


def label_error(error: Exception, label_offset: int) -> DataError | None:
    """The one-line DataError for the in-graph label check's error, or None for another error."""
    match = re.search(re.escape(LABEL_ERROR) + r".*?\] \[(-?\d+)\]", str(error))
    if not match:
        return None
    return DataError(_label_message(int(match[1]), label_offset, "a --data_path shard"))


def _parse(record, label_offset: int):
    example = tf.io.parse_single_example(record, _FEATURES)
    stored = example["image/class/label"]
    label = stored - label_offset
    check = tf.debugging.Assert(
        tf.logical_and(label >= 0, label < NUM_CLASSES),
        [f"{LABEL_ERROR}: stored label minus --label_offset={label_offset} outside 0..999", stored],
    )
    with tf.control_dependencies([check]):
        return example["image/encoded"], tf.cast(label, tf.int32)


def read_records(
    split: str,
    *,
    data_path: str | os.PathLike | None = None,
    data_dir: str | os.PathLike | None = None,
    label_offset: int = 1,
    input_context: tf.distribute.InputContext | None = None,
    shuffle_files: bool = False,
    seed: int | None = None,
) -> tf.data.Dataset:
    """(JPEG bytes, int32 label 0..999) of one split ("train" / "validation"), unbatched.

    ``data_path``: the TFRecord shards (labels minus ``label_offset``); else tfds
    ``imagenet2012`` in ``data_dir`` (:func:`tfds_builder`). With n > 1 input pipelines, this
    pipeline's files only (DataError if the split has fewer than n files). ``shuffle_files``:
    the file order shuffled with ``seed`` (and again every epoch), files interleaved.
    """
    check_split(split, SPLITS)
    n, index = pipeline_shard(input_context) or (1, 0)
    if data_path is not None:
        files = shard_files(data_path, split)
        _check_shardable(len(files), split, f"--data_path {data_path}", n)
        files = files[index::n]
        names = tf.data.Dataset.from_tensor_slices(files)
        if shuffle_files:
            names = names.shuffle(len(files), seed=seed, reshuffle_each_iteration=True)
        records = names.interleave(
            lambda f: tf.data.TFRecordDataset(f, buffer_size=8 << 20),
            cycle_length=min(16, len(files)),
            num_parallel_calls=tf.data.AUTOTUNE,
        )
        return records.map(lambda r: _parse(r, label_offset), num_parallel_calls=tf.data.AUTOTUNE)
    builder = tfds_builder(data_dir, n)
    read_config = tfds.ReadConfig(
        shuffle_seed=seed, try_autocache=False, input_context=input_context if n > 1 else None
    )
    records = builder.as_dataset(
        split=split,
        as_supervised=True,
        shuffle_files=shuffle_files,
        decoders={"image": tfds.decode.SkipDecoding()},
        read_config=read_config,
    )
    return records.map(lambda image, label: (image, tf.cast(label, tf.int32)))


# ----------------------------------------------------------------------------- preprocessing
def sample_crop(image_shape: tf.Tensor, seed: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    """A random-resized crop window of an image of ``image_shape`` [h, w, c]: (offset [2], size
    [2]) with area 8%..100% and aspect ratio (w/h) 3/4..4/3, or the whole image if 10 attempts
    fail (``sample_distorted_bounding_box``, the whole image as the "object")."""
    begin, size, _ = tf.image.stateless_sample_distorted_bounding_box(
        image_shape,
        bounding_boxes=tf.constant([0.0, 0.0, 1.0, 1.0], shape=[1, 1, 4]),
        seed=seed,
        min_object_covered=0.0,
        aspect_ratio_range=CROP_ASPECT,
        area_range=CROP_AREA,
        max_attempts=10,
        use_image_if_no_bounding_boxes=True,
    )
    return begin[:2], size[:2]


def train_crop(jpeg: tf.Tensor, seed: tf.Tensor, image_size: int = IMAGE_SIZE) -> tf.Tensor:
    """Training augmentation of one JPEG: random-resized crop to ``image_size``², random flip.

    float32 [image_size, image_size, 3] in 0..255; stateless: the same ``seed`` (int [2]) gives
    the same output. Only the crop window is decoded.
    """
    crop_seed, flip_seed = tf.unstack(tf.random.experimental.stateless_split(seed, 2))
    offset, size = sample_crop(tf.image.extract_jpeg_shape(jpeg), crop_seed)
    window = tf.concat([offset, size], 0)
    image = tf.image.decode_and_crop_jpeg(jpeg, window, channels=3)
    image = tf.image.resize(image, [image_size, image_size], method="bilinear")
    return tf.image.stateless_random_flip_left_right(image, seed=flip_seed)


def eval_crop(jpeg: tf.Tensor, image_size: int = IMAGE_SIZE) -> tf.Tensor:
    """Evaluation view of one JPEG: shorter side to image_size*256/224, central crop.

    float32 [image_size, image_size, 3] in 0..255.
    """
    resize = round(image_size * EVAL_RESIZE / IMAGE_SIZE)
    image = tf.image.decode_jpeg(jpeg, channels=3)
    shape = tf.cast(tf.shape(image)[:2], tf.float32)
    scale = resize / tf.reduce_min(shape)
    new = tf.maximum(tf.cast(tf.round(shape * scale), tf.int32), image_size)
    image = tf.image.resize(image, new, method="bilinear")
    top, left = (new[0] - image_size) // 2, (new[1] - image_size) // 2
    return tf.ensure_shape(
        image[top : top + image_size, left : left + image_size], [image_size, image_size, 3]
    )


def normalize(image: tf.Tensor, normalization: str = "per_image") -> tf.Tensor:
    """``per_image``: mean 0, variance 1 per image; ``mean_std``: ImageNet channel statistics."""
    if normalization == "per_image":
        return tf.image.per_image_standardization(image)
    if normalization == "mean_std":
        return (image - tf.constant(MEAN_RGB)) / tf.constant(STDDEV_RGB)
    raise DataError(
        f"--normalization={normalization} is unknown; choose one of {', '.join(NORMALIZATIONS)}"
    )


def build_dataset(
    split: str,
    batch_size: int,
    *,
    data_path: str | os.PathLike | None = None,
    data_dir: str | os.PathLike | None = None,
    label_offset: int = 1,
    image_size: int = IMAGE_SIZE,
    normalization: str = "per_image",
    train: bool | None = None,
    seed: int | None = None,
    start_step: int = 0,
    input_context: tf.distribute.InputContext | None = None,
    shuffle_buffer: int = SHUFFLE_BUFFER,
) -> tf.data.Dataset:
    """Batches (float32 images [B, S, S, 3], int32 labels [B]) of ``split``.

    ``batch_size`` is per input pipeline (pass ``input_context.get_per_replica_batch_size``).
    ``train`` (default: split == "train"): files shuffled, records shuffled in a buffer of
    ``shuffle_buffer``, repeated forever, :func:`train_crop`, last partial batch dropped.
    Evaluation: one pass over the split (this pipeline's files, interleaved in a fixed order),
    :func:`eval_crop`, the last partial batch kept. Both end with :func:`normalize`.
    ``start_step`` > 0 (a resumed run) keys the order by (seed, start_step), so a resumed run
    does not replay the first batches of step 0; unlike CIFAR's it is not the order the
    uninterrupted run would have seen (that would need the 10,000-image shuffle buffer saved).
    """
    check_split(split, SPLITS)
    if batch_size < 1 or shuffle_buffer < 1:
        raise DataError(
            f"batch_size and shuffle_buffer must be >= 1, got {batch_size} and {shuffle_buffer}"
        )
    if normalization not in NORMALIZATIONS:
        normalize(tf.zeros([1, 1, 3]), normalization)  # raises the DataError
    train = split == "train" if train is None else train
    if train and start_step and seed is not None:
        seed = int(np.random.SeedSequence([seed, start_step]).generate_state(1)[0])
    records = read_records(
        split,
        data_path=data_path,
        data_dir=data_dir,
        label_offset=label_offset,
        input_context=input_context,
        shuffle_files=train,
        seed=seed,
    )
    if train:
        records = records.shuffle(shuffle_buffer, seed=seed, reshuffle_each_iteration=True)
        seeds = tf.data.Dataset.random(seed=seed).batch(2)
        examples = tf.data.Dataset.zip((records.repeat(), seeds)).map(
            lambda record, element_seed: (
                normalize(train_crop(record[0], element_seed, image_size), normalization),
                record[1],
            ),
            num_parallel_calls=tf.data.AUTOTUNE,
        )
    else:
        examples = records.map(
            lambda jpeg, label: (normalize(eval_crop(jpeg, image_size), normalization), label),
            num_parallel_calls=tf.data.AUTOTUNE,
        )
    return examples.batch(batch_size, drop_remainder=train).prefetch(tf.data.AUTOTUNE)
