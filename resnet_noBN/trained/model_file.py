"""A trained run in one file that every Keras backend loads: Keras 3's convention, one ``.keras``
file (``Model.save``, opened by ``keras.saving.load_model`` on TensorFlow, JAX and PyTorch, as
keras-hub's presets), or a TensorFlow SavedModel to serve (``Model.export``). Written from a run
folder (:func:`export_run`) or from such a file (:func:`export_file`), loaded (:func:`load`),
evaluated on a test split (:func:`evaluate_file`).

What the file holds (:func:`served_model`): the network the run's ``config.json`` records
(Table 1's, ``small``, the 2016 code's, the ImageNet ResNet-34, every block variant), its
trained weights and its fixed random head (arXiv:1611.04231, Section 4: the last layer "a fixed
random projection", a non-trainable weight, saved with the others), in float32, behind the input
pipeline's normalisation (``datasets.normalization``, layer ``standardize``): it takes images as
they are stored, uint8 or float in 0-255, RGB, [N, 32, 32, 3] for the CIFAR networks (ImageNet's:
the evaluation crop, [N, image_size, image_size, 3]), and gives logits. Its layers keep the
network's names: ``global_pool`` gives the features the projection maps to the logits.

The weights are read as ``trained.evaluation`` reads a run (its trainer, on the backend it trained
on, in float32): a checkpoint or a GPU lease's weights file (``trained.run_folder``). Beside the
file goes a short JSON record (:func:`export_run`; ``model_paths.record_path``).
"""

from __future__ import annotations

import json
import math
import os
import shutil

import keras
import numpy as np

from resnet_noBN.configs.errors import (
    CheckpointError,
    DataError,
    InputError,
    StorageError,
    first_line,
)
from resnet_noBN.configs.recipe_config import TrainConfig
from resnet_noBN.datasets import cifar_data
from resnet_noBN.datasets.data_config import DataConfig
from resnet_noBN.datasets.normalization import LAYER_NAME, input_normalization
from resnet_noBN.host import storage
from resnet_noBN.progress import Progress
from resnet_noBN.runs import setup
from resnet_noBN.runs.record import CONFIG_FILE
from resnet_noBN.runs.run_config import RunConfig
from resnet_noBN.trained import evaluation, model_paths, run_folder
from resnet_noBN.trainers.loop import TrainLoop, weights_digest
from resnet_noBN.trainers.recipe import top_classes
from resnet_noBN.trainers.run_log import read_metrics

FEATURES_LAYER = "global_pool"  # the pooled features, the fixed projection's input
PARTIAL = ".partial"  # what a model is written as first, beside its --output, then renamed


def served_model(run: RunConfig, trained: keras.Model) -> keras.Model:
    """The network of ``run`` in float32 behind its input normalisation (raw pixels to logits),
    each layer's weights those of the same layer of ``trained`` (the run's network, restored).

    Its layers' initialisers are zeros: ``keras.saving.load_model`` builds every layer, drawing
    its weights, before it reads the saved ones over them, and on JAX each random initialiser
    of a new shape is compiled first (the small network's first load: 9.4 s, 0.64 s with
    zeros). The file is the trained model; a network to train is ``models.networks``'."""
    normalization = getattr(run.data, "normalization", "per_image")  # CIFAR: per image
    build = setup.build_model(
        run.changed("runtime", precision="float32"), input_normalization(normalization)
    )
    model = build()
    for layer in trained.layers:
        if layer.weights:
            model.get_layer(layer.name).set_weights(layer.get_weights())
    for layer in model.layers:
        for name, value in list(vars(layer).items()):
            if name.endswith("_initializer") and isinstance(value, keras.initializers.Initializer):
                setattr(layer, name, keras.initializers.Zeros())
    return model


def restored(model_dir: str, step: int | None = None) -> tuple[keras.Model, dict]:
    """The served model (:func:`served_model`) of the weights ``model_dir`` keeps at ``step``
    (None: its latest), read on the backend the run trained on; and what the record says of the
    run and its weights (:func:`export_run`), the output's file and format aside."""
    step, path = run_folder.chosen_weights(model_dir, step)
    saved, run = evaluation.recorded_run(model_dir)
    trainer = evaluation.reading_trainer(saved, run, model_dir)
    read_into(trainer, path)
    model = served_model(run, trainer.model)
    measured = {r["step"]: r for r in read_metrics(model_dir)}.get(step, {})
    data = saved.get("data", {})
    classes = cifar_data.DATASETS.get(data.get("dataset"))
    return model, {
        "experiment": run.experiment,
        "backend": saved.get("backend", "tensorflow"),
        "model_dir": os.path.abspath(model_dir),
        "step": step,
        "weights": os.path.abspath(path),
        "weights_sha256": trainer.weights_digest(),
        "test_error": measured.get("test_error"),
        "test_examples": measured.get("test_examples"),
        "data": data,
        "recipe": saved.get("recipe", {}),
        "trained_precision": run.runtime.precision,
        **about(model),
        "classes": list(classes.class_names) if classes else None,
    }


def read_into(trainer: TrainLoop, path: str) -> None:
    """The weights ``path`` keeps (``run_folder.chosen_weights``: a checkpoint, or a GPU lease's
    weights file) into ``trainer``; CheckpointError (one line) for a checkpoint that cannot be
    restored."""
    if run_folder.is_weights_file(path):
        evaluation.read_weights(trainer, path)
        return
    try:
        trainer.read_checkpoint(path)
    except trainer.unreadable as e:
        raise CheckpointError(
            f"checkpoint {path} cannot be restored ({first_line(e)}); give another --step"
        ) from None


def export_run(
    model_dir: str, output: str, step: int | None = None, format: str = "keras", command: str = ""
) -> dict:
    """Write the run in ``model_dir`` (its weights at ``step``, None: its latest) to ``output``
    in ``format`` (``configs.choices.EXPORT_FORMATS``), and beside it the record, which this
    returns: the experiment, the backend it trained on, the step, the weights read and their
    digest (the run's own ``weights_sha256`` at that step), the test error the run measured
    there (None where it did not evaluate that step), the data, the recipe, the precision it
    trained in (the file computes float32), the input, the features' layer, the class names, and
    ``command``, what made it. InputError before anything is written for bad input
    (``model_paths.check_output``, ``run_folder.chosen_weights``)."""
    model_paths.check_output(output, format)
    model, about_run = restored(model_dir, step)
    record = {"file": os.path.abspath(output), "format": format, **about_run, "command": command}
    write(model, output, format, record)
    return record


def export_file(path: str, output: str, format: str = "keras", command: str = "") -> dict:
    """Write the model of the ``.keras`` file ``path`` (any backend's) to ``output`` in
    ``format``: on the TensorFlow backend, the SavedModel of a run trained on another. Its
    record is the file's (``model_paths.read_beside``), with the new file, format and command."""
    model_paths.check_output(output, format)
    model = load(path)
    record = {
        **model_paths.read_beside(path),
        "file": os.path.abspath(output),
        "format": format,
        "exported_from": os.path.abspath(path),
        "command": command,
    }
    write(model, output, format, record)
    return record


def about(model: keras.Model) -> dict:
    """What a user feeds the model and where its features are, for the record."""
    return {
        "input": {
            "shape": list(model.input_shape),
            "pixels": f"RGB, uint8 or float in 0-255 (normalised inside: layer {LAYER_NAME!r})",
        },
        "features": {
            "layer": FEATURES_LAYER,
            "width": model.get_layer(FEATURES_LAYER).output.shape[-1],
        },
    }


def write(model: keras.Model, output: str, format: str, record: dict) -> None:
    """``model`` to ``output`` (``Model.save``, or ``Model.export`` with a serving signature from
    uint8 images to logits), then ``record`` beside it, each under a temporary name first and
    then renamed: a write that fails (a full disk) leaves what was there, and StorageError (one
    line)."""
    output = os.path.normpath(output)
    partial = output + PARTIAL + (model_paths.KERAS_SUFFIX if format == "keras" else "")
    remove(partial)  # left by a write cut short
    try:
        if format == "keras":
            model.save(partial)
        else:
            spec = keras.InputSpec(shape=(None, *model.input_shape[1:]), dtype="uint8")
            model.export(partial, format="tf_saved_model", input_signature=[spec], verbose=False)
            shutil.rmtree(output, ignore_errors=True)
        os.replace(partial, output)
        text = json.dumps(record, indent=2) + "\n"
        storage.atomic_write(model_paths.record_path(output), lambda f: f.write(text.encode()))
    except OSError as e:
        remove(partial)
        raise StorageError(
            f"cannot write {output} ({storage.reason(e)}): free space there or name another "
            "--output"
        ) from None


def remove(path: str) -> None:
    """``path`` removed, a file or a folder, where it is."""
    if os.path.isdir(path):
        shutil.rmtree(path, ignore_errors=True)
    elif os.path.lexists(path):
        os.remove(path)


def load(path: str, flag: str = "--model") -> keras.Model:
    """The model in ``path``, on the Keras backend in use: a ``.keras`` file
    (``keras.saving.load_model``), or a run folder (its latest weights, :func:`restored`).
    InputError (one line, ``flag`` naming the path) for anything else."""
    if os.path.isdir(path) and os.path.isfile(os.path.join(path, CONFIG_FILE)):
        return restored(path)[0]
    model_paths.check_keras_file(path, flag)
    try:
        return keras.saving.load_model(path)
    except (OSError, ValueError, TypeError, KeyError) as e:
        raise InputError(f"{flag} {path} cannot be loaded ({first_line(e)})") from None


class _Evaluated(TrainLoop):
    """A loaded model evaluated as a trainer evaluates (``TrainLoop.evaluate``: the same errors,
    answers and progress lines), in batches of ``batch``."""

    def __init__(self, model: keras.Model, batch: int):
        self.model, self.batch = model, batch

    def eval_batches(self, eval_source):
        images, labels = eval_source
        for begin in range(0, len(images), self.batch):
            end = min(begin + self.batch, len(images))
            logits = self.model.predict_on_batch(images[begin:end])
            top = keras.ops.convert_to_numpy(top_classes(logits))
            yield labels[begin:end], top, np.arange(begin, end)


def evaluate_file(path: str, data_path: str, first_red_pixel: str = "as_read", print_fn=print):
    """The model of the ``.keras`` file ``path`` evaluated on the whole test split of
    ``data_path``, read as the run read its data where the record beside the file says how (its
    data set, CIFAR-100 layout, JPEG re-encoding), probed as ``first_red_pixel`` says
    (``evaluation.probed_test_split``): the result ``evaluation.evaluate_run`` gives for a run
    folder (the step, errors and counts, the weights' digest, ``"answers"``). InputError (one
    line) where the model's classes are not those of the data set ``data_path`` holds."""
    model, recorded = load(path), model_paths.read_beside(path)
    read = file_data(path, model, recorded, data_path)
    images, labels = evaluation.probed_test_split(read, first_red_pixel)
    batch = TrainConfig().eval_batch_size  # as trained.evaluation's trainer
    evaluated = _Evaluated(model, batch)
    result = evaluated.evaluate(
        (images, labels), Progress(math.ceil(len(labels) / batch)), print_fn
    )
    return {
        "model": path,
        "step": recorded.get("step"),
        "dataset": read.dataset,
        "layout": read.cifar100_layout,
        "data_path": str(data_path),
        "first_red_pixel": first_red_pixel,
        "weights_sha256": weights_digest(model.weights),
        **result,
    }


def file_data(path: str, model: keras.Model, recorded: dict, data_path: str) -> DataConfig:
    """How the test split of ``data_path`` is read for the model of the ``.keras`` file ``path``:
    as the run read its data where ``recorded`` (the record beside the file) says how (its data
    set, CIFAR-100 layout, JPEG re-encoding), else the CIFAR data set of the model's classes.
    InputError (one line) where the model's classes are not those of the data set ``data_path``
    holds."""
    classes = int(model.output_shape[-1])
    data = dict(recorded.get("data") or {})
    expected = data.get("dataset") or next(
        (name for name, spec in cifar_data.DATASETS.items() if spec.num_classes == classes), None
    )
    if expected not in cifar_data.DATASETS:
        raise InputError(
            f"--model {path} gives {classes} classes: no CIFAR data set has as many; evaluate it "
            "on its own data"
        )
    dataset = held_dataset(data_path, expected)
    spec = cifar_data.DATASETS[dataset]
    if spec.num_classes != classes:
        raise InputError(
            f"--model {path} gives {classes} classes, but --data_path {data_path} holds "
            f"{spec.title} ({spec.num_classes} classes): evaluate it on a copy of its own data set"
        )
    return DataConfig(
        dataset,
        data_path=str(data_path),
        cifar100_layout=data.get("cifar100_layout", "official")
        if dataset == expected
        else "official",
        jpeg_quality=data.get("jpeg_quality") if dataset == expected else None,
    )


def held_dataset(data_path: str, expected: str) -> str:
    """The CIFAR data set ``data_path`` holds: ``expected`` where it does, else another it holds;
    ``expected``'s DataError (one line) where it holds none."""
    try:
        cifar_data.check_data_path(expected, data_path)
        return expected
    except DataError as error:
        for other in cifar_data.DATASETS:
            try:
                cifar_data.check_data_path(other, data_path)
                return other
            except DataError:
                continue
        raise error from None
