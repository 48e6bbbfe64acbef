"""A data set stored as an image folder: ``<root>/<split>/<class name>/<image>`` (JPEG or PNG).

The layout of the public JPEG re-encoding of CIFAR-10 (``cifar-10-jpeg/{train,test}/<class>/``),
of CINIC-10, and of a user's own export of CIFAR. Class folders are matched to the data set's
label ids BY NAME (``CifarSpec.class_names``, the official label order), so a tree whose folders
are listed in another order still gets the right labels; a tree whose classes differ is refused.

Listing and checks are plain file-system work (:func:`list_split`). The images are decoded ONCE,
by pillow in a pool of threads (:func:`decode`), into one uint8 array kept in memory (50,000 CIFAR
images: 150 MB); training then reads from memory, as fast as from the official binary files. A
file that cannot be decoded, or is not 32x32, is named. No TensorFlow: this module and its imports
run where Keras 3 has another backend.

Pillow decodes a JPEG with libjpeg's defaults (the accurate integer IDCT, fancy chroma
upsampling): the pixels of ``tf.io.decode_jpeg(..., dct_method="INTEGER_ACCURATE")``, not those of
``tf.io.decode_image``, which uses the fast integer IDCT (on the JPEG re-encodings of CIFAR-10 and
CIFAR-100, 65% and 67% of the bytes differ, by 1 on average and 10 at most). PNG is lossless: the
same bytes either way.
"""

from __future__ import annotations

import concurrent.futures
import functools
import os
import struct
from pathlib import Path

import numpy as np
from PIL import Image

from resnet_noBN.configs.errors import DataError

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png")
SPLITS = ("train", "test")
_DECODE_CHUNK = 256  # files one thread decodes in a row


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

    Pillow, converting each image to RGB, in a pool of threads (pillow's decoders release the
    GIL), chunks of files in file order. Kept for the process (read-only arrays), so a process that
    reads a split twice (a test's runs) decodes it once. DataError naming the first file (in file
    order) that is unreadable, not an image, or not size x size.
    """
    images = np.empty([len(paths), image_size, image_size, 3], np.uint8)

    def fill(start: int) -> None:
        for i in range(start, min(start + _DECODE_CHUNK, len(paths))):
            images[i] = _read(paths[i], image_size)

    with concurrent.futures.ThreadPoolExecutor() as pool:
        try:
            # results in chunk order: the first error raised is the first bad file
            for _ in pool.map(fill, range(0, len(paths), _DECODE_CHUNK)):
                pass
        except BaseException:
            pool.shutdown(cancel_futures=True)
            raise
    labels = np.asarray(labels, np.int32)
    images.flags.writeable = labels.flags.writeable = False
    return images, labels


def _read(path: str, image_size: int) -> np.ndarray:
    """One image file as uint8 [size, size, 3] (RGB); DataError (one line) naming the file."""
    try:
        with Image.open(path) as image:
            pixels = np.asarray(image.convert("RGB"))
    except Image.DecompressionBombError as e:  # far more pixels than size x size
        raise _bad(path, f"not {image_size}x{image_size}") from e
    except (OSError, SyntaxError, ValueError, EOFError, struct.error) as e:
        raise _bad(path, "not a readable JPEG or PNG image") from e
    if pixels.shape != (image_size, image_size, 3):
        raise _bad(path, f"not {image_size}x{image_size}")
    return pixels


def _bad(path: str, why: str) -> DataError:
    return DataError(f"{path}: {why}; replace or remove the file")
