"""The launchers' data flags: CIFAR's (:class:`DataConfig`: which data set, where it is read
from, how a CIFAR-100 record is sliced, a JPEG re-encoding, and the crop padding of the training
stream) and ImageNet's (:class:`ImageNetData`). Declared with the other sections of a run's
config (``configs.flag_config``: each field is a flag, its help the flag's); ``launch/cifar.py``
defines them. Nothing here reads a file: ``datasets.cifar_data`` reads what a config names
(``read_split``) and counts its splits for a run's ``config.json`` (``data_record``)."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

from resnet_noBN.configs.errors import DataError
from resnet_noBN.configs.flag_config import check_at_least, check_choices

# --data_dir's default, where `python data/prepare.py` prepares tfds data sets: the repository's
# data/tensorflow_datasets (git-ignored; docs/data.md)
DEFAULT_TFDS_DIR = Path(__file__).resolve().parents[2] / "data" / "tensorflow_datasets"
# The CIFAR data sets, by the names --dataset and tfds give them (datasets.cifar_data.DATASETS
# holds what reading them needs)
CIFAR_TITLES = {"cifar10": "CIFAR-10", "cifar100": "CIFAR-100"}
# How a CIFAR-100 record is sliced (--cifar100_layout): "official", label byte 1 (fine) and
# pixels from byte 2; "original_2016", the original cifar_input.py before its July 2017 fix.
LAYOUTS = ("official", "original_2016")

# ImageNet's facts that its config records (datasets.imagenet_input reads them from here: this
# module imports no TensorFlow)
IMAGENET_TFDS_NAME = "imagenet2012"
IMAGENET_TRAIN_EXAMPLES = 1_281_167
IMAGENET_EVAL_EXAMPLES = 50_000
IMAGENET_NORMALIZATIONS = ("per_image", "mean_std")
# --normalization=mean_std: ImageNet's RGB channel means and standard deviations, in 0-255
IMAGENET_MEAN_RGB = (0.485 * 255, 0.456 * 255, 0.406 * 255)
IMAGENET_STDDEV_RGB = (0.229 * 255, 0.224 * 255, 0.225 * 255)
IMAGENET_SHUFFLE_BUFFER = 10_000  # JPEG records (~110 kB each: ~1.1 GB per worker)


def check_layout(dataset: str, layout: str) -> None:
    """DataError unless `layout` is one of LAYOUTS and means something for `dataset`."""
    if layout not in LAYOUTS:
        raise DataError(
            f"--cifar100_layout={layout} is unknown; choose one of {', '.join(LAYOUTS)}"
        )
    if layout != "official" and dataset != "cifar100":
        raise DataError(
            f"--cifar100_layout={layout} is for --dataset=cifar100 only (the original reader "
            f"read {CIFAR_TITLES.get(dataset, dataset)} correctly); drop the flag"
        )


@dataclasses.dataclass(frozen=True)
class DataConfig:
    """What a CIFAR run reads. ``"may_change"`` marks what a resumed run may change: another
    copy of the same data set (moved, or re-encoded) gives the same stream where its counts
    match, since the order and the crops are a function of (seed, step, count) only
    (``datasets.stream``); the counts are compared (``record``)."""

    dataset: str = dataclasses.field(
        default="cifar10", metadata={"choices": tuple(CIFAR_TITLES), "help": "Data set."}
    )
    data_path: str | None = dataclasses.field(
        default=None,
        metadata={
            "may_change": True,
            "help": "Folder of the official binary files (cifar-10-batches-bin/ or "
            "cifar-100-binary/, or their parent), or an image folder train/<class>/*.jpg "
            "and test/<class>/... (or its parent, e.g. where cifar-10-jpeg/ was "
            "unpacked). Default: read tensorflow-datasets (TensorFlow backend only).",
        },
    )
    data_dir: str = dataclasses.field(
        default=str(DEFAULT_TFDS_DIR),
        metadata={
            "may_change": True,
            "help": "tensorflow-datasets directory (see docs/data.md).",
        },
    )
    pad: int = dataclasses.field(
        default=2,
        metadata={
            "help": "Pixels of padding per side before the random 32x32 crop: 2 as "
            "the original cifar_data.py (36x36), 4 as He et al. (40x40), 0 for none."
        },
    )
    jpeg_quality: int | None = dataclasses.field(
        default=None,
        metadata={
            "help": "Re-encode every image (train and test) as a JPEG of this quality with 4:2:0 "
            "chroma when read, in the data set's own order: the lossy copies the project's "
            "earlier figures used (q75), for measuring what they cost. Default: the pixels "
            "as read."
        },
    )
    cifar100_layout: str = dataclasses.field(
        default="official",
        metadata={
            "choices": LAYOUTS,
            "help": "How a CIFAR-100 record is read: official (the fine label, then the pixels "
            "from byte 2), or original_2016: as the original cifar_data.py before its July 2017 "
            "fix, the pixels from byte 1, so the fine label is the first red pixel of every "
            "image (a label leak; see docs/data.md). For measuring what that did to the "
            "paper's figure, not for use.",
        },
    )

    def validate(self) -> None:
        """Raise ValueError (one line, naming the flag) for an impossible choice."""
        check_choices(self)
        check_at_least(self, ("pad",), 0, ">= 0")
        check_layout(self.dataset, self.cifar100_layout)
        if self.jpeg_quality is not None and not 1 <= self.jpeg_quality <= 95:
            raise ValueError(f"--jpeg_quality must be in 1..95 (Pillow's), got {self.jpeg_quality}")

    def record(self) -> dict:
        """Its fields as config.json records them, --data_path made absolute (the splits'
        counts beside them: ``datasets.cifar_data.data_record``)."""
        return {
            **dataclasses.asdict(self),
            "data_path": self.data_path and os.path.abspath(self.data_path),
        }


@dataclasses.dataclass(frozen=True)
class ImageNetData:
    """What an ImageNet run reads (``launch/imagenet.py``'s data flags; ``datasets.
    imagenet_input`` reads it): TFRecord shards or tensorflow-datasets, the label offset of the
    shards, the input normalisation, the shuffle buffer."""

    data_path: str | None = dataclasses.field(
        default=None,
        metadata={
            "may_change": True,
            "help": "Folder of TFRecord shards train-NNNNN-of-MMMMM / validation-NNNNN-of-MMMMM "
            "(image/encoded JPEG, image/class/label int64). Default: read tfds imagenet2012 "
            "from --data_dir.",
        },
    )
    data_dir: str = dataclasses.field(
        default=str(DEFAULT_TFDS_DIR),
        metadata={
            "may_change": True,
            "help": "tensorflow-datasets directory; an unprepared imagenet2012 is prepared from "
            "ILSVRC2012_img_train.tar and ILSVRC2012_img_val.tar in "
            "<data_dir>/downloads/manual/.",
        },
    )
    label_offset: int = dataclasses.field(
        default=1,
        metadata={
            "help": "--data_path only: label = image/class/label - label_offset. 1 for the "
            "TF-slim / TPU converters (labels 1..1000), 0 for 0-based shards."
        },
    )
    normalization: str = dataclasses.field(
        default="per_image",
        metadata={
            "choices": IMAGENET_NORMALIZATIONS,
            "help": "per_image: tf.image.per_image_standardization; mean_std: ImageNet RGB "
            "mean/std.",
        },
    )
    shuffle_buffer: int = dataclasses.field(
        default=IMAGENET_SHUFFLE_BUFFER,
        metadata={
            "may_change": True,
            "help": "Training records (JPEG bytes) in the shuffle buffer of each worker.",
        },
    )

    def validate(self) -> None:
        """Raise ValueError (one line, naming the flag) for an impossible choice."""
        check_choices(self)
        check_at_least(self, ("shuffle_buffer",), 1, ">= 1")

    def record(self) -> dict:
        """What config.json records: the fields, the data set and both splits' sizes."""
        return {
            "dataset": IMAGENET_TFDS_NAME,
            **dataclasses.asdict(self),
            "train_examples": IMAGENET_TRAIN_EXAMPLES,
            "test_examples": IMAGENET_EVAL_EXAMPLES,
        }
