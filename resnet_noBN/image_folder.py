"""A data set stored as an image folder: ``<root>/<split>/<class name>/<image>`` (JPEG or PNG).

The layout of the public JPEG re-encoding of CIFAR-10 (``cifar-10-jpeg/{train,test}/<class>/``),
of CINIC-10, and of a user's own export of CIFAR. Class folders are matched to the data set's
label ids BY NAME (``CifarSpec.class_names``, the official label order), so a tree whose folders
are listed in another order still gets the right labels; a tree whose classes differ is refused.

Listing and checks are plain file-system work (:func:`list_split`, no TensorFlow). The images
are decoded ONCE, by tf.data with ``tf.io.decode_image`` (:func:`decode`), into one uint8 array
kept in memory (50,000 CIFAR images: 150 MB); training then reads from memory, as fast as from
the official binary files. A file that cannot be decoded, or is not 32x32, is named.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path

import numpy as np

from resnet_noBN.errors import DataError

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png")
SPLITS = ("train", "test")
_DECODE_BATCH = 1024


def find_root(data_path: str | os.PathLike) -> Path | None:
    """The folder holding ``train/`` and ``test/``: ``data_path`` itself or its only child that
    holds them (an unpacked archive's top folder); None where neither looks like an image tree."""
    root = Path(data_path)
    if not root.is_dir():
        return None
    if any((root / split).is_dir() for split in SPLITS):
        return root
    children = [c for c in root.iterdir() if c.is_dir() and (c / SPLITS[0]).is_dir()]
    return children[0] if len(children) == 1 else None


def list_split(
    root: Path, split: str, class_names: tuple[str, ...], title: str
) -> tuple[list[str], list[int]]:
    """(image paths, label ids) of one split, class by class in label order, files sorted.

    DataError (one line) for a missing split folder, class folders that are not the data set's
    classes, or a class folder without images.
    """
    folder = root / split
    if not folder.is_dir():
        raise DataError(
            f"image folder {root} lacks {split}/: an image-folder --data_path holds "
            f"{'/ and '.join(SPLITS)}/, each with one folder per class"
        )
    found = {c.name for c in folder.iterdir() if c.is_dir()}
    unknown, missing = sorted(found - set(class_names)), [c for c in class_names if c not in found]
    if unknown or missing:
        raise DataError(
            f"{folder} has class folders that are not {title}'s"
            + (
                f" (unknown: {', '.join(unknown[:5])}{'...' if len(unknown) > 5 else ''})"
                if unknown
                else ""
            )
            + (
                f" (missing: {', '.join(missing[:5])}{'...' if len(missing) > 5 else ''})"
                if missing
                else ""
            )
            + f"; name them as {title}'s classes ({', '.join(class_names[:3])}, ...) or pick "
            "the matching --dataset"
        )
    paths, labels = [], []
    for label, name in enumerate(class_names):
        files = sorted(
            str(f)
            for f in (folder / name).iterdir()
            if f.suffix.lower() in IMAGE_SUFFIXES and f.is_file()
        )
        if not files:
            raise DataError(
                f"{folder / name} holds no image ({', '.join(IMAGE_SUFFIXES)}): "
                "every class needs at least one"
            )
        paths += files
        labels += [label] * len(files)
    return paths, labels


@functools.lru_cache(maxsize=2)  # a training and a test split
def decode(
    paths: tuple[str, ...], labels: tuple[int, ...], image_size: int
) -> tuple[np.ndarray, np.ndarray]:
    """(uint8 images [N, size, size, 3], int32 labels [N]): every file decoded once, in order.

    Kept for the process (read-only arrays), so runs in one process (``launch/claims.py``)
    decode a split once. DataError naming the first file that is unreadable, not an image, or
    not size x size.
    """
    import tensorflow as tf

    def read(path):
        image = tf.io.decode_image(tf.io.read_file(path), channels=3, expand_animations=False)
        tf.debugging.assert_equal(
            tf.shape(image)[:2], [image_size, image_size], message="wrong image size"
        )
        return tf.ensure_shape(image, [image_size, image_size, 3])

    dataset = (
        tf.data.Dataset.from_tensor_slices(list(paths))
        .map(read, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
        .batch(_DECODE_BATCH)
    )
    images, iterator = [], iter(dataset)
    while True:
        try:
            images.append(next(iterator).numpy())
        except StopIteration:
            break
        except (tf.errors.InvalidArgumentError, tf.errors.NotFoundError) as e:
            start = len(images) * _DECODE_BATCH
            raise _first_bad_file(paths[start : start + _DECODE_BATCH], read, image_size) from e
    images = (
        np.concatenate(images) if images else np.zeros([0, image_size, image_size, 3], np.uint8)
    )
    labels = np.asarray(labels, np.int32)
    images.flags.writeable = labels.flags.writeable = False
    return images, labels


def _first_bad_file(paths: list[str], read, image_size: int) -> DataError:
    """The DataError for the first of ``paths`` that ``read`` fails on (one file at a time)."""
    import tensorflow as tf

    for path in paths:
        try:
            read(tf.constant(path))
        except (tf.errors.InvalidArgumentError, tf.errors.NotFoundError) as e:
            why = (
                "not " + f"{image_size}x{image_size}"
                if "wrong image size" in str(e)
                else "not a readable JPEG or PNG image"
            )
            return DataError(f"{path}: {why}; replace or remove the file")
    return DataError(f"one of {paths[0]} ... {paths[-1]} could not be decoded")
