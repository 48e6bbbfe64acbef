"""What the CIFAR and ImageNet input pipelines share: the split and file checks, and which part
of a split each input pipeline reads (their default tfds folder is ``configs.data_config``'s
``DEFAULT_TFDS_DIR``)."""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from resnet_noBN.configs.errors import DataError

if TYPE_CHECKING:
    import tensorflow as tf


def check_split(split: str, splits: tuple[str, ...]) -> None:
    """DataError unless ``split`` is one of the data set's ``splits``."""
    if split not in splits:
        raise DataError(f"unknown split {split!r}; known: {', '.join(splits)}")


def require_files(
    folder: str | os.PathLike, names: Iterable[str], fix: str, where: str | None = None
) -> None:
    """DataError ``"<where> lacks a, b: <fix>"`` (one line) unless each of ``names`` is a file in
    ``folder``; ``where`` (default: the folder) names it the way the user gave it."""
    missing = [name for name in names if not (Path(folder) / name).is_file()]
    if missing:
        raise DataError(f"{folder if where is None else where} lacks {', '.join(missing)}: {fix}")


def pipeline_shard(input_context: tf.distribute.InputContext | None) -> tuple[int, int] | None:
    """(number of input pipelines, this one's index), or None when there is one pipeline."""
    if input_context is None or input_context.num_input_pipelines == 1:
        return None
    return input_context.num_input_pipelines, input_context.input_pipeline_id


def per_replica_dataset(build, *args, global_batch: int, **kwargs):
    """The ``dataset_fn(input_context)`` that ``distribute_datasets_from_function`` calls:
    ``build(*args, <per-replica batch>, input_context=..., **kwargs)``, each input pipeline
    building its share of ``global_batch`` (e.g. ``cifar_input.build_dataset``). Keywords given
    to ``dataset_fn`` (the trainer's ``start_step``) are passed on to ``build``."""

    def fn(input_context: tf.distribute.InputContext, **more):
        return build(
            *args,
            input_context.get_per_replica_batch_size(global_batch),
            input_context=input_context,
            **kwargs,
            **more,
        )

    return fn
