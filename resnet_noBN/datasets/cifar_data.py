"""CIFAR-10/100 read into numpy: the data sets, their checks, and whole splits as uint8 arrays.

No TensorFlow anywhere in this module's imports (numpy, pillow through `datasets.image_folder`,
and the package's plain modules only), so the CIFAR input runs on a machine with another Keras 3
backend and no TensorFlow; `datasets.cifar_input` builds its tf.data pipeline on top of it.

* `DATASETS`: what the pipeline needs to know about CIFAR-10 and CIFAR-100 (tfds names them the
  same): classes, label bytes, the official binary files.
* `check_data_path`, `num_records`: a --data_path checked with plain file-system work, every
  problem one line (`DataError`); a --cifar100_layout is checked by `configs.data_config`'s
  `check_layout`.
* `load_split`: one split, (uint8 images [N, 32, 32, 3], int32 labels [N]), from the official
  binary files or an image folder, read once per process (cached) as read-only arrays;
  `read_split`, the same for a run's `DataConfig`; `data_record`, its config.json entry.
* `write_random`: random records in the official layout (the tests' and the benchmark's data).

The binary records are read as the original tensorflow/models `resnet/cifar_input.py` read them
(arXiv:1611.04231, Section 4): label byte(s), then 3,072 pixel bytes, depth-major [3, 32, 32],
transposed to [32, 32, 3]; CIFAR-100 records carry (coarse, fine) labels and the FINE label is
used. `original_2016_shift` restates the one-byte slip of that reader on CIFAR-100 before its
July 2017 fix (--cifar100_layout=original_2016).
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import functools
import io
import os
from pathlib import Path

import numpy as np
from PIL import Image

from resnet_noBN.configs.data_config import CIFAR_TITLES, DataConfig, check_layout
from resnet_noBN.configs.errors import DataError
from resnet_noBN.datasets import image_folder
from resnet_noBN.datasets.input_common import check_split, require_files

IMAGE_SIZE = 32
IMAGE_BYTES = 3 * IMAGE_SIZE * IMAGE_SIZE
SPLITS = ("train", "test")


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
    train_examples: int = 50_000  # the official splits' sizes (tensorflow-datasets' too)
    test_examples: int = 10_000

    @property
    def record_bytes(self) -> int:
        return self.label_bytes + IMAGE_BYTES


DATASETS = {
    "cifar10": CifarSpec(
        title=CIFAR_TITLES["cifar10"],
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
        title=CIFAR_TITLES["cifar100"],
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
      (`datasets.image_folder`): one file per image.
    Raises DataError for a missing path, a wrong layout (naming the expected files and where), a
    binary file that is empty or not a whole number of records, a missing split, class folders
    that are not the data set's, or an empty class. Plain file-system checks: no TensorFlow.
    """
    if image_folder.find_root(data_path) is not None:
        return [path for split in SPLITS for path in _image_files(dataset, data_path, split)[0]]
    files = _binary_files(dataset, data_path)
    return [path for split in SPLITS for path in files[split]]


def num_records(dataset: str, data_path: str | os.PathLike | None, split: str) -> int:
    """Examples in one split of a --data_path (either layout; None: tensorflow-datasets', the
    official split)."""
    if data_path is None:
        spec = _spec(dataset)
        return spec.train_examples if split == "train" else spec.test_examples
    images = _image_files(dataset, data_path, split)
    if images is not None:
        return len(images[0])
    return (
        sum(os.path.getsize(f) for f in _binary_files(dataset, data_path)[split])
        // _spec(dataset).record_bytes
    )


def original_2016_shift(images: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """The images the original `cifar_input.py` (before its July 2017 fix) made of CIFAR-100
    records: it sliced the 3,072 pixel bytes from byte 1 of the 3,074-byte record (coarse, fine,
    R, G, B planes) instead of byte 2, so the fine label became the first red pixel and every
    byte moved one place on (the last red pixel starts the green plane, the last green the blue
    plane; the last blue pixel is lost). The label itself was read correctly.

    `images`: the correctly decoded uint8 [N, 32, 32, 3]; `labels`: their fine labels [N].
    Returns a new uint8 [N, 32, 32, 3] array. Works on any source (the binary files, an image
    folder, tfds): only the fine labels and the pixels enter.
    """
    images = np.asarray(images, np.uint8)
    n = len(images)
    depth_major = images.transpose(0, 3, 1, 2).reshape(n, IMAGE_BYTES)
    label_bytes = np.asarray(labels).astype(np.uint8).reshape(n, 1)
    shifted = np.concatenate([label_bytes, depth_major[:, :-1]], axis=1)
    return np.ascontiguousarray(shifted.reshape(n, 3, IMAGE_SIZE, IMAGE_SIZE).transpose(0, 2, 3, 1))


def jpeg_reencode(images: np.ndarray, quality: int) -> np.ndarray:
    """Every image encoded as a baseline JPEG of ``quality`` with 4:2:0 chroma subsampling
    (Pillow's libjpeg, the encoder and setting of the public CIFAR JPEG copies), then decoded:
    what a run on such a copy reads, in the split's own order (``--jpeg_quality``). uint8
    [N, 32, 32, 3], read-only."""

    def one(image: np.ndarray) -> np.ndarray:
        encoded = io.BytesIO()
        Image.fromarray(image).save(encoded, "JPEG", quality=quality, subsampling="4:2:0")
        return np.asarray(Image.open(encoded).convert("RGB"))

    with concurrent.futures.ThreadPoolExecutor() as pool:
        out = np.stack(list(pool.map(one, images, chunksize=256)))
    out.flags.writeable = False
    return out


def load_split(
    dataset: str,
    split: str,
    data_path: str | os.PathLike,
    layout: str = "official",
    jpeg_quality: int | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """One split of a --data_path: (uint8 images [N, 32, 32, 3], int32 labels [N]), in order.

    `data_path`: the official binary files (records in file order, the files in the official
    order) or an image folder (class by class in label order, files sorted; every image decoded
    once by `image_folder.decode`), validated as `check_data_path` does. `layout`
    "original_2016" (CIFAR-100 only): every image as the original reader made it,
    `original_2016_shift`. `jpeg_quality`: every image re-encoded as a JPEG of that quality first
    (`jpeg_reencode`: the lossy copies earlier figures were measured on, in the official order).

    The arrays are read-only and kept for the process, keyed by (dataset, split, data_path,
    layout, jpeg_quality): a process that reads a split twice (a test's runs) reads it once. Files
    changed on disk after a split was read are not read again. DataError (one line) for everything
    `check_data_path` refuses, an unknown split or layout, a binary file holding a label outside
    the data set's classes, and an image that cannot be decoded or is not 32x32 (named).
    """
    return _load_split(dataset, split, str(data_path), layout, jpeg_quality)


@functools.lru_cache(maxsize=4)  # a training and a test split, in either layout
def _load_split(dataset: str, split: str, data_path: str, layout: str, jpeg_quality=None):
    _spec(dataset)
    check_split(split, SPLITS)
    check_layout(dataset, layout)
    if jpeg_quality is not None:
        images, labels = _load_split(dataset, split, data_path, "official")
        images = jpeg_reencode(images, jpeg_quality)
        if layout != "official":
            images = original_2016_shift(images, labels)
            images.flags.writeable = False
        return images, labels
    if layout != "official":
        images, labels = _load_split(dataset, split, data_path, "official")
        images = original_2016_shift(images, labels)
        images.flags.writeable = False
        return images, labels
    found = _image_files(dataset, data_path, split)
    if found is not None:
        return image_folder.decode(tuple(found[0]), tuple(found[1]), IMAGE_SIZE)
    spec = _spec(dataset)
    records = np.concatenate(
        [_read_records(spec, path) for path in _binary_files(dataset, data_path)[split]]
    )
    labels = records[:, spec.label_bytes - 1].astype(np.int32)
    images = np.ascontiguousarray(
        records[:, spec.label_bytes :].reshape(-1, 3, IMAGE_SIZE, IMAGE_SIZE).transpose(0, 2, 3, 1)
    )
    images.flags.writeable = labels.flags.writeable = False
    return images, labels


def _read_records(spec: CifarSpec, path: str) -> np.ndarray:
    """The records of one binary file, uint8 [N, record bytes]; DataError naming the file where
    a label (the last label byte) is outside the data set's classes."""
    records = np.fromfile(path, np.uint8).reshape(-1, spec.record_bytes)
    labels = records[:, spec.label_bytes - 1]
    outside = np.flatnonzero(labels >= spec.num_classes)
    if outside.size:
        first = int(outside[0])
        raise DataError(
            f"{path}: record {first} has label {labels[first]} ({outside.size} record(s) with "
            f"labels outside {spec.title}'s 0-{spec.num_classes - 1}): the file is damaged or "
            f"not {spec.title}; unpack the official archive again"
        )
    return records


def write_random(
    folder: str | os.PathLike, dataset: str, records_per_file: int, seed: int = 0
) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Random records in the official binary layout of ``dataset`` (CIFAR-100: coarse = fine
    // 5), ``records_per_file`` in each of its files, written into ``folder``: data for the tests
    and the benchmark. Returns {split: (uint8 images [N, 32, 32, 3], int labels [N])}, in file
    order."""
    spec = _spec(dataset)
    rng = np.random.default_rng(seed)
    Path(folder).mkdir(parents=True, exist_ok=True)
    written = {}
    for split, names in spec.files.items():
        n = records_per_file * len(names)
        images = rng.integers(0, 256, (n, IMAGE_SIZE, IMAGE_SIZE, 3), dtype=np.uint8)
        labels = rng.integers(0, spec.num_classes, n)
        label_bytes = np.stack([labels // 5, labels] if spec.label_bytes == 2 else [labels], 1)
        records = np.concatenate(
            [label_bytes.astype(np.uint8), images.transpose(0, 3, 1, 2).reshape(n, -1)], 1
        )
        for name, file_records in zip(names, np.split(records, len(names)), strict=True):
            Path(folder, name).write_bytes(file_records.tobytes())
        written[split] = images, labels
    return written


def clear_cache() -> None:
    """Forget every split read (and every image folder decoded) in this process."""
    _load_split.cache_clear()
    image_folder.decode.cache_clear()


def read_split(data: DataConfig, split: str) -> tuple[np.ndarray, np.ndarray]:
    """``split`` of ``data``'s --data_path as that config reads it (`load_split`)."""
    return load_split(data.dataset, split, data.data_path, data.cifar100_layout, data.jpeg_quality)


def data_record(data: DataConfig) -> dict:
    """The ``data`` of a run's config.json: the config's fields and the counts of both splits
    read."""
    return {
        **data.record(),
        **{
            f"{split}_examples": num_records(data.dataset, data.data_path, split)
            for split in SPLITS
        },
    }
