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
from resnet_noBN.configs.choices import FIRST_RED_PIXEL
from resnet_noBN.configs.data_config import DataConfig
from resnet_noBN.configs.errors import InputError
from resnet_noBN.configs.recipe_config import TrainConfig
from resnet_noBN.configs.run_config import RunConfig
from resnet_noBN.configs.runtime_config import RuntimeConfig
from resnet_noBN.datasets import cifar_data
from resnet_noBN.progress import Progress
from resnet_noBN.runs import run_config, setup
from resnet_noBN.trained import run_folder
from resnet_noBN.trainers.loop import TrainLoop, unreadable_checkpoint_line


def probed_test_split(
    data: DataConfig, first_red_pixel: str = "as_read", seed: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    """The test split as the run's reader makes it (``data``: uint8 images, int32 labels), the
    first red pixel of every image replaced as ``first_red_pixel`` says (not "as_read": only for
    a run with the original 2016 layout, whose first red pixel is the leaked label)."""
    if first_red_pixel not in FIRST_RED_PIXEL:
        raise InputError(
            f"--first_red_pixel={first_red_pixel} is unknown; choose one of "
            f"{', '.join(FIRST_RED_PIXEL)}"
        )
    images, labels = cifar_data.read_split(data, "test")
    if first_red_pixel == "as_read":
        return images, labels
    if data.cifar100_layout != "original_2016":
        raise InputError(
            f"--first_red_pixel={first_red_pixel} probes the label leak of the original 2016 "
            f"reader, but this run read {data.dataset} with layout {data.cifar100_layout}; use a "
            "run trained with --cifar100_layout=original_2016"
        )
    images = images.copy()
    if first_red_pixel == "wrong_label":
        classes = cifar_data.num_classes(data.dataset)
        offsets = np.random.default_rng(seed).integers(1, classes, len(labels))
        images[:, 0, 0, 0] = (labels + offsets) % classes
    else:
        official, _ = cifar_data.read_split(
            dataclasses.replace(data, cifar100_layout="official"), "test"
        )
        images[:, 0, 0, 0] = official[:, 0, 0, 0]
    return images, labels


def recorded_run(model_dir: str) -> tuple[dict, RunConfig]:
    """The run ``model_dir`` holds: its ``config.json`` as recorded and as a run config;
    InputError (one line) where the folder holds no run, or one trained on another backend than
    the one in use (``run_folder.read_record``)."""
    saved = run_folder.read_record(model_dir)
    return saved, run_config.from_record(saved)


def reading_trainer(saved: dict, run: RunConfig, model_dir: str) -> TrainLoop:
    """A trainer of the run (:func:`recorded_run`) in float32 that reads its checkpoints and
    trains nothing: today's recipe with the run's optimizer (a JAX or PyTorch checkpoint names
    its variables after it), its own length, drops and intervals do not matter."""
    recipe = TrainConfig(optimizer=run.recipe.optimizer, momentum=run.recipe.momentum)
    config = run.replace(runtime=RuntimeConfig(seed=saved.get("seed", 0)), recipe=recipe)
    return setup.make_trainer(config, setup.start_runtime(config), model_dir)


def read_weights(trainer: TrainLoop, path: str) -> None:
    """The weights file ``path`` (a run's final weights without its optimizer, as a GPU lease
    brings them back) into ``trainer``; InputError (one line) where its backend reads no such
    file or the file holds another model's."""
    if not hasattr(trainer, "read_weights"):
        raise InputError(
            f"{path} is a weights file, read on the JAX and PyTorch backends, not "
            f"{registry.current().name}"
        )
    try:
        trainer.read_weights(path)
    except (OSError, ValueError, KeyError) as e:
        raise InputError(f"{path} holds no weights of this run: {e}") from None


def evaluate_run(
    model_dir: str,
    data_path: str,
    first_red_pixel: str = "as_read",
    print_fn=print,
    every_checkpoint: bool = False,
    weights: str | None = None,
):
    """The run in ``model_dir`` evaluated on the whole test split of ``data_path`` (read as the
    run read its data: ``config.json``'s data section, its folder replaced; probed as
    ``first_red_pixel`` says), in float32, on the backend the run trained on: for its latest
    checkpoint, or for each it keeps (``every_checkpoint``, oldest first), or for the weights
    file ``weights`` (a run's final weights without its optimizer, as a GPU lease brings them
    back), the step, errors and counts, the weights' digest and the answers
    (``trainers.answers.Answers``, under ``"answers"``). Yields one result per checkpoint.
    Writes nothing into ``model_dir``."""
    saved, run = recorded_run(model_dir)
    data = dataclasses.replace(run.data, data_path=str(data_path))
    cifar_data.check_data_path(data.dataset, data.data_path)
    images, labels = probed_test_split(data, first_red_pixel)
    trainer = reading_trainer(saved, run, model_dir)
    if weights:
        read_weights(trainer, weights)
    elif trainer.restore(print_fn) == 0:
        raise InputError(f"--model_dir {model_dir} holds no checkpoint; train it first")
    batch = trainer.cfg.eval_batch_size
    source = registry.current().evaluation_source(images, labels, batch)
    paths = trainer.checkpoints() if every_checkpoint else [trainer.restored_from]
    for path in [weights] if weights else paths:
        if not weights:
            try:
                trainer.read_checkpoint(path)
            except trainer.unreadable as e:  # damaged: skipped here as a resume skips it
                print_fn(unreadable_checkpoint_line(path, e, "skipped"))
                continue
        result = trainer.evaluate(source, Progress(math.ceil(len(labels) / batch)), print_fn)
        yield {
            "model_dir": model_dir,
            "checkpoint": path,
            "step": trainer.step,
            "dataset": data.dataset,
            "layout": data.cifar100_layout,
            "data_path": str(data_path),
            "first_red_pixel": first_red_pixel,
            "weights_sha256": trainer.weights_digest(),
            **result,
        }
