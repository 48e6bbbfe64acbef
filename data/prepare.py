"""Prepares CIFAR-10 / CIFAR-100 as tensorflow-datasets data sets, online or offline.

    python data/prepare.py cifar10 [--data_dir DIR] [--manual_dir DIR]

Runs tfds' download_and_prepare into --data_dir (default: data/tensorflow_datasets, the
launcher's default --data_dir; `configs.data_config.DEFAULT_TFDS_DIR`). On a machine without
internet, --manual_dir names a folder holding the official archive under its official name
(cifar-10-binary.tar.gz / cifar-100-binary.tar.gz, https://www.cs.toronto.edu/~kriz/cifar.html):
tfds takes it from there instead of downloading it, and still checks its checksum.
Prints one line with what was prepared and where; an error prints one line `error: ...` on
stderr and exits with status 2. See docs/data.md.
"""

from __future__ import annotations

import sys

from absl import app, flags

from resnet_noBN.configs.data_config import DEFAULT_TFDS_DIR
from resnet_noBN.configs.errors import DataError
from resnet_noBN.datasets.cifar_data import num_classes

FLAGS = flags.FLAGS
flags.DEFINE_string("data_dir", str(DEFAULT_TFDS_DIR), "tfds data directory to prepare into.")
flags.DEFINE_string(
    "manual_dir",
    None,
    "Folder holding the official archive (cifar-10-binary.tar.gz / cifar-100-binary.tar.gz) "
    "to prepare from without downloading.",
)


def prepare(dataset: str, data_dir: str, manual_dir: str | None = None) -> str:
    """Prepares `dataset` into `data_dir`; returns the line saying what and where."""
    num_classes(dataset)  # an unknown data set: DataError, before tfds and TensorFlow load
    from resnet_noBN.datasets.cifar_input import prepare_tfds

    builder = prepare_tfds(dataset, data_dir, manual_dir)
    splits = builder.info.splits
    counts = ", ".join(f"{name}: {splits[name].num_examples}" for name in splits)
    return f"prepared {dataset} ({counts} examples) in {builder.data_dir}"


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        raise app.UsageError(
            "usage: prepare.py {cifar10,cifar100} [--data_dir DIR] [--manual_dir DIR]"
        )
    try:
        print(prepare(argv[1], FLAGS.data_dir, FLAGS.manual_dir))
    except DataError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    app.run(main)
