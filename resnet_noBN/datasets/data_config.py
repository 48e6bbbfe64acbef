"""The CIFAR launchers' data flags (:class:`DataConfig`): which data set, where it is read from,
how a CIFAR-100 record is sliced, and the crop padding of the training stream. Declared once
here, as the other configs (``configs.flag_config``: each field is a flag, its help the flag's);
``launch/cifar.py`` and ``launch/claims.py`` define them, and :meth:`DataConfig.record` is the
``data`` of a run's ``config.json``."""

from __future__ import annotations

import dataclasses
import os

from resnet_noBN.configs.flag_config import check_at_least, check_choices
from resnet_noBN.datasets.cifar_data import DATASETS, LAYOUTS, check_layout, num_records
from resnet_noBN.datasets.input_common import DEFAULT_TFDS_DIR


@dataclasses.dataclass(frozen=True)
class DataConfig:
    """What a CIFAR run reads. ``"may_change"`` marks what a resumed run may change: another
    copy of the same data set (moved, or re-encoded) gives the same stream where its counts
    match, since the order and the crops are a function of (seed, step, count) only
    (``datasets.stream``); the counts are compared (``record``)."""

    dataset: str = dataclasses.field(
        default="cifar10", metadata={"choices": tuple(DATASETS), "help": "Data set."}
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

    def record(self) -> dict:
        """What config.json records: the fields (--data_path made absolute), and the counts of
        both splits read."""
        return {
            **dataclasses.asdict(self),
            "data_path": self.data_path and os.path.abspath(self.data_path),
            "train_examples": num_records(self.dataset, self.data_path, "train"),
            "test_examples": num_records(self.dataset, self.data_path, "test"),
        }
