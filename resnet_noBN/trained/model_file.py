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

The weights are read into that one network from the files the run keeps (``trained.run_folder``: a
checkpoint, or a GPU lease's weights file), as its backend wrote them, with no trainer built and
no runtime started. Beside the file goes a short JSON record (:func:`export_run`;
``model_paths.record_path``).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import shutil
import zipfile

import keras
import numpy as np

from resnet_noBN.configs.data_config import DataConfig
from resnet_noBN.configs.errors import (
    CheckpointError,
    DataError,
    InputError,
    StorageError,
    first_line,
)
from resnet_noBN.configs.recipe_config import TrainConfig
from resnet_noBN.configs.run_config import RunConfig
from resnet_noBN.datasets import cifar_data
from resnet_noBN.datasets.normalization import LAYER_NAME, input_normalization
from resnet_noBN.host import storage
from resnet_noBN.progress import Progress
from resnet_noBN.runs import run_config, setup
from resnet_noBN.runs.record import CONFIG_FILE
from resnet_noBN.trained import evaluation, model_paths, run_folder
from resnet_noBN.trainers.loop import TrainLoop, weights_digest
from resnet_noBN.trainers.one_process import assign_checked, read_arrays
from resnet_noBN.trainers.recipe import top_classes
from resnet_noBN.trainers.run_log import read_metrics

FEATURES_LAYER = "global_pool"  # the pooled features, the fixed projection's input
PARTIAL = ".partial"  # what a model is written as first, beside its --output, then renamed


def served_model(run: RunConfig) -> keras.Model:
    """The network of ``run`` in float32 behind its input normalisation (raw pixels to logits),
    built once, its weights read next (:func:`read_weights`).

    Its layers' initialisers are zeros: ``keras.saving.load_model`` builds every layer, drawing
    its weights, before it reads the saved ones over them, and on JAX each random initialiser
    of a new shape is compiled first (the small network's first load: 9.4 s, 0.64 s with
    zeros). The file is the trained model; a network to train is ``models.networks``'."""
    normalization = getattr(run.data, "normalization", "per_image")  # CIFAR: per image
    build = setup.build_model(
        run.changed("runtime", precision="float32"), input_normalization(normalization)
    )
    model = build()
    for layer in model.layers:
        for name, value in list(vars(layer).items()):
            if isinstance(value, keras.initializers.Initializer):
                setattr(layer, name, keras.initializers.Zeros())
    return model


def copy_weights(network: keras.Model, model: keras.Model) -> None:
    """Each layer's weights of ``network`` (the run's network, as a trainer holds it) into the
    layer of the same name of ``model`` (its served model)."""
    for layer in network.layers:
        if layer.weights:
            model.get_layer(layer.name).set_weights(layer.get_weights())


def restored(kept: run_folder.KeptWeights) -> tuple[keras.Model, dict]:
    """The served model (:func:`served_model`) of the weights ``kept`` names, read as the run's
    backend wrote them (no trainer, no runtime started); and what the record says of the run and
    its weights (:func:`export_run`), the output's file and format aside."""
    run = run_config.from_record(kept.record)
    model = served_model(run)
    read_weights(model, kept.path)
    measured = {r["step"]: r for r in read_metrics(kept.model_dir)}.get(kept.step, {})
    data = kept.record.get("data", {})
    classes = cifar_data.DATASETS.get(data.get("dataset"))
    return model, {
        "experiment": run.experiment,
        "backend": kept.record.get("backend", "tensorflow"),
        "model_dir": os.path.abspath(kept.model_dir),
        "step": kept.step,
        "weights": os.path.abspath(kept.path),
        "weights_sha256": weights_digest(model.weights),
        "test_error": measured.get("test_error"),
        "test_examples": measured.get("test_examples"),
        "data": data,
        "recipe": kept.record.get("recipe", {}),
        "trained_precision": run.runtime.precision,
        **about(model),
        "classes": list(classes.class_names) if classes else None,
    }


def read_weights(model: keras.Model, path: str) -> None:
    """The weights ``path`` keeps (``run_folder.kept_steps``) into ``model`` (the served model of
    its run): a ``.npz`` checkpoint or a GPU lease's weights file by each variable's path
    (``trainers.one_process``), a TensorFlow checkpoint through the object graph its trainer
    saved. CheckpointError (one line) for a checkpoint that cannot be read; InputError (one
    line) for a weights file of another model."""
    if path.endswith(".npz"):
        _read_arrays(model, path)
        return
    import tensorflow as tf  # a TensorFlow checkpoint: its run trained on TensorFlow

    try:
        _trained_graph(model, tf).read(path).assert_existing_objects_matched().expect_partial()
    except (tf.errors.OpError, ValueError, IndexError, AssertionError) as e:
        raise _unreadable(path, e) from None


def _trained_graph(model: keras.Model, tf):
    """A checkpoint over ``model``'s layers in the object graph the trainer saved,
    ``tf.train.Checkpoint(model=network, optimizer=...)``: the network's operations by their
    place (``model/_operations/<i>/...``), the served model's normalisation, which the trained
    network has not, left out (the optimizer is not read)."""
    network = tf.Module()
    network._operations = [op for op in model._operations if op.name != LAYER_NAME]
    return tf.train.Checkpoint(model=network)


def _read_arrays(model: keras.Model, path: str) -> None:
    """The ``model/<variable path>`` arrays of a ``.npz`` file into ``model``, every array read
    and its shape checked before any is assigned (``one_process.read_arrays``,
    ``assign_checked``)."""
    variables = {
        f"model/{v.path}": v for v in [*model.trainable_variables, *model.non_trainable_variables]
    }
    try:
        assign_checked(variables, read_arrays(path, variables))
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile) as e:
        if run_folder.is_weights_file(path):
            raise InputError(f"{path} holds no weights of this run: {e}") from None
        raise _unreadable(path, e) from None


def _unreadable(path: str, error: Exception) -> CheckpointError:
    return CheckpointError(
        f"checkpoint {path} cannot be restored ({first_line(error)}); give another --step"
    )


def export_run(
    kept: run_folder.KeptWeights, output: str, format: str = "keras", command: str = ""
) -> dict:
    """Write the run's weights ``kept`` names (``run_folder.kept_weights``: the folder, its
    record and the step checked) to ``output`` in ``format`` (``configs.choices.EXPORT_FORMATS``;
    checked first, ``model_paths.check_output``), and beside it the record, which this returns:
    the experiment, the backend it trained on, the step, the weights read and their digest (the
    run's own ``weights_sha256`` at that step), the test error the run measured there (None
    where it did not evaluate that step), the data, the recipe, the precision it trained in (the
    file computes float32), the input, the features' layer, the class names, and ``command``,
    what made it."""
    model, about_run = restored(kept)
    record = {"file": os.path.abspath(output), "format": format, **about_run, "command": command}
    write(model, output, format, record)
    return record


def export_file(path: str, output: str, format: str = "keras", command: str = "") -> dict:
    """Write the model of the ``.keras`` file ``path`` (any backend's) to ``output`` in
    ``format`` (both checked first: ``model_paths.check_keras_file``, ``check_output``): on the
    TensorFlow backend, the SavedModel of a run trained on another. Its record is the file's
    (``model_paths.read_beside``), with the new file, format and command."""
    model = read_keras_file(path)
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
    then renamed: a write that fails (a full disk, a partial file left that cannot be removed)
    leaves what was there, and StorageError (one line, the first failure's reason)."""
    output = os.path.normpath(output)
    partial = output + PARTIAL + (model_paths.KERAS_SUFFIX if format == "keras" else "")
    try:
        remove(partial)  # left by a write cut short
        if format == "keras":
            model.save(partial)
        else:
            spec = keras.InputSpec(shape=(None, *model.input_shape[1:]), dtype="uint8")
            model.export(partial, format="tf_saved_model", input_signature=[spec], verbose=False)
            remove(output)
        os.replace(partial, output)
        text = json.dumps(record, indent=2) + "\n"
        storage.atomic_write(model_paths.record_path(output), lambda f: f.write(text.encode()))
    except OSError as e:
        with contextlib.suppress(OSError):  # the failure said is the first one
            remove(partial)
        raise StorageError(
            f"cannot write {output} ({storage.reason(e)}): free space there or name another "
            "--output"
        ) from None


def remove(path: str) -> None:
    """``path`` removed, a file or a folder, where it is; OSError where it cannot be."""
    if os.path.isdir(path):
        shutil.rmtree(path)
    elif os.path.lexists(path):
        os.remove(path)


def load(path: str) -> keras.Model:
    """The model in ``path``, on the Keras backend in use: a ``.keras`` file
    (``keras.saving.load_model``), or a run folder (its latest weights, :func:`restored`).
    InputError (one line, naming the path as ``--model``) for anything else."""
    if os.path.isdir(path) and os.path.isfile(os.path.join(path, CONFIG_FILE)):
        return restored(run_folder.kept_weights(path))[0]
    model_paths.check_keras_file(path)
    return read_keras_file(path)


def read_keras_file(path: str) -> keras.Model:
    """The model of the Keras file ``path`` (``model_paths.check_keras_file`` checked it);
    InputError (one line) where Keras cannot load it."""
    try:
        return keras.saving.load_model(path)
    except (OSError, ValueError, TypeError, KeyError) as e:
        raise InputError(f"--model {path} cannot be loaded ({first_line(e)})") from None


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
