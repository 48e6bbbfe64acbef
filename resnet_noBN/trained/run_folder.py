"""What a finished run's folder holds, read without Keras (a launcher answers bad input before its
backend loads): its record (``config.json``, on the backend it trained on) and the weights it
keeps, by step: TensorFlow's checkpoints ``ckpt-<step>`` (``.index`` and ``.data-*`` files),
JAX's and PyTorch's ``ckpt-<step>.npz``, and the ``weights-<step>.npz`` a GPU lease brings back
(the model's arrays of the run's last checkpoint and its step, ``ops/lease/collect.py``)."""

from __future__ import annotations

import dataclasses
import os
import re

from resnet_noBN.backends import registry
from resnet_noBN.configs.errors import InputError
from resnet_noBN.runs import record

KEPT = re.compile(r"(ckpt|weights)-(\d+)(\.index|\.npz)")  # the file each kept step is read from
WEIGHTS_PREFIX = "weights-"  # a weights file: the model's arrays and the step, no optimizer


def read_record(model_dir: str) -> dict:
    """``model_dir``'s ``config.json``; InputError (one line) where the folder holds none, or a
    run trained on another Keras backend than the one chosen (its checkpoints are read there)."""
    saved = record.read_config(model_dir)
    if not saved:
        raise InputError(
            f"--model_dir {model_dir} has no config.json: not a run of launch/cifar.py; name the "
            "folder a run wrote"
        )
    trained_on = saved.get(record.BACKEND_KEY, "tensorflow")
    if trained_on != registry.check_chosen():
        raise InputError(
            f"--model_dir {model_dir} was trained on {trained_on} and its checkpoints are read "
            f"there; run with KERAS_BACKEND={trained_on}"
        )
    return saved


def kept_steps(model_dir: str) -> dict[int, str]:
    """The steps whose weights ``model_dir`` keeps, oldest first, each with the path a trainer
    reads: a TensorFlow checkpoint's prefix, a ``.npz`` checkpoint, or a weights file (the
    checkpoint, where a step has both)."""
    found = {}
    for name in sorted(os.listdir(model_dir)):
        match = KEPT.fullmatch(name)
        if not match or (match[1], match[3]) == ("weights", ".index"):
            continue
        step = int(match[2])
        if match[1] == "ckpt" or step not in found:
            found[step] = os.path.join(model_dir, name.removesuffix(".index"))
    return dict(sorted(found.items()))


def is_weights_file(path: str) -> bool:
    """Whether ``path`` (of :func:`kept_steps`) is a weights file rather than a checkpoint."""
    return os.path.basename(path).startswith(WEIGHTS_PREFIX)


def chosen_weights(model_dir: str, step: int | None = None) -> tuple[int, str]:
    """(step, path) of the weights ``model_dir`` keeps at ``step`` (None: its latest);
    InputError (one line) where it keeps none, or none of that step."""
    kept = kept_steps(model_dir)
    if not kept:
        raise InputError(
            f"--model_dir {model_dir} holds no checkpoint (ckpt-<step>) and no weights file "
            "(weights-<step>.npz); train it first, or name the folder that holds them"
        )
    if step is None:
        step = max(kept)
    if step not in kept:
        raise InputError(
            f"--step={step}: {model_dir} keeps the weights of step{'s' if len(kept) > 1 else ''} "
            f"{', '.join(map(str, kept))} only; give one of them"
        )
    return step, kept[step]


@dataclasses.dataclass(frozen=True)
class KeptWeights:
    """The weights of a run chosen to read: its folder, its record (``config.json``), the step
    and the file (:func:`kept_steps`' path)."""

    model_dir: str
    record: dict
    step: int
    path: str


def kept_weights(model_dir: str, step: int | None = None) -> KeptWeights:
    """The run in ``model_dir`` (:func:`read_record`) and its weights at ``step`` (None: its
    latest; :func:`chosen_weights`), each checked once, before a backend loads."""
    saved = read_record(model_dir)
    step, path = chosen_weights(model_dir, step)
    return KeptWeights(model_dir, saved, step, path)
