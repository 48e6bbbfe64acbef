"""Evaluating a finished run of ``launch/cifar.py`` again: its latest checkpoint on a test split
of any --data_path (another copy of the data, e.g. the JPEG one), and the probe of the label
leak of the original CIFAR-100 reader (arXiv:1611.04231, Section 4's CIFAR-100 figure).

The original ``cifar_input.py`` (before its July 2017 fix; ``--cifar100_layout=original_2016``)
put each image's fine label in its first red pixel, in training and test images alike. A network
trained that way may read the label there. The probe evaluates it on the same test images with
that pixel replaced (``FIRST_RED_PIXEL``):

* ``as_read``: unchanged (the leak in place): the run's own test error;
* ``wrong_label``: another class's label, drawn uniformly among the other 99 (seeded);
* ``true_pixel``: the image's real first red pixel (the byte the original reader dropped there).

If the error jumps under ``wrong_label`` the network reads the leaked label.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from resnet_noBN.backends import registry
from resnet_noBN.configs.errors import InputError
from resnet_noBN.configs.runtime_config import RuntimeConfig
from resnet_noBN.datasets import cifar_data
from resnet_noBN.models.model import ModelConfig, build_cifar_model
from resnet_noBN.progress import Progress
from resnet_noBN.runs import record
from resnet_noBN.trainers.recipe import TrainConfig

FIRST_RED_PIXEL = ("as_read", "wrong_label", "true_pixel")


def model_config(saved: dict) -> ModelConfig:
    """The ModelConfig a run's config.json records (any version's; lists back to tuples)."""
    fields = {f.name for f in dataclasses.fields(ModelConfig)}
    network = record.section(saved, "network")
    return ModelConfig(
        **{k: tuple(v) if isinstance(v, list) else v for k, v in network.items() if k in fields}
    )


def probed_test_split(
    dataset: str, data_path: str, layout: str, first_red_pixel: str = "as_read", seed: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    """The test split as the run's reader makes it (uint8 images, int32 labels), the first red
    pixel of every image replaced as ``first_red_pixel`` says (not "as_read": only for a run
    with the original 2016 layout, whose first red pixel is the leaked label)."""
    if first_red_pixel not in FIRST_RED_PIXEL:
        raise InputError(
            f"--first_red_pixel={first_red_pixel} is unknown; choose one of "
            f"{', '.join(FIRST_RED_PIXEL)}"
        )
    images, labels = cifar_data.load_split(dataset, "test", data_path, layout)
    if first_red_pixel == "as_read":
        return images, labels
    if layout != "original_2016":
        raise InputError(
            f"--first_red_pixel={first_red_pixel} probes the label leak of the original 2016 "
            f"reader, but this run read {dataset} with layout {layout}; use a run trained with "
            "--cifar100_layout=original_2016"
        )
    images = images.copy()
    if first_red_pixel == "wrong_label":
        classes = cifar_data.num_classes(dataset)
        offsets = np.random.default_rng(seed).integers(1, classes, len(labels))
        images[:, 0, 0, 0] = (labels + offsets) % classes
    else:
        official, _ = cifar_data.load_split(dataset, "test", data_path, "official")
        images[:, 0, 0, 0] = official[:, 0, 0, 0]
    return images, labels


def evaluate_run(
    model_dir: str, data_path: str, first_red_pixel: str = "as_read", print_fn=print
) -> dict:
    """The latest checkpoint of the run in ``model_dir`` evaluated on the whole test split of
    ``data_path`` (read with the run's layout, probed as ``first_red_pixel`` says), on the backend
    the run trained on: its step, errors and counts. Writes nothing into ``model_dir``."""
    saved = record.read_config(model_dir)
    if not saved:
        raise InputError(
            f"--model_dir {model_dir} has no config.json: not a run of launch/cifar.py; name the "
            "folder a run wrote"
        )
    backend = registry.current()
    if saved.get("backend", "tensorflow") != backend.name:
        raise InputError(
            f"--model_dir {model_dir} was trained on {saved.get('backend', 'tensorflow')} and its "
            f"checkpoints are read there; run with KERAS_BACKEND={saved.get('backend')}"
        )
    data = record.section(saved, "data")
    dataset, layout = data["dataset"], data.get("cifar100_layout", "official")
    cifar_data.check_data_path(dataset, data_path)
    images, labels = probed_test_split(dataset, data_path, layout, first_red_pixel)
    cfg = model_config(saved)
    train_cfg = TrainConfig()
    runtime = backend.start(
        RuntimeConfig(), {"eval_batch_size": train_cfg.eval_batch_size}, saved.get("seed", 0)
    )
    trainer = backend.make_trainer(
        runtime, lambda: build_cifar_model(cfg, runtime.precision), train_cfg, model_dir
    )
    step = trainer.restore(print_fn)
    if step == 0:
        raise InputError(f"--model_dir {model_dir} holds no checkpoint; train it first")
    batch = train_cfg.eval_batch_size
    result = trainer.evaluate(
        backend.evaluation_source(images, labels, batch),
        Progress(math.ceil(len(labels) / batch)),
        print_fn,
    )
    return {
        "model_dir": model_dir,
        "step": step,
        "dataset": dataset,
        "layout": layout,
        "data_path": str(data_path),
        "first_red_pixel": first_red_pixel,
        **result,
    }
