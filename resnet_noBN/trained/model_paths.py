"""Where an exported model goes and what lies beside it, checked without Keras (a launcher
answers bad input before its backend loads): the ``--output`` of ``launch/export.py`` (its folder,
its suffix), the short JSON record written beside the model (:func:`record_path`), where
``launch/near_identity.py`` writes its record (:func:`near_identity_path`), and whether a file is
a Keras file at all (``Model.save``'s ``.keras``: a zip of ``config.json``, ``metadata.json`` and
the weights)."""

from __future__ import annotations

import json
import os
import zipfile

from resnet_noBN.backends import registry
from resnet_noBN.configs.choices import EXPORT_FORMATS
from resnet_noBN.configs.errors import InputError

KERAS_SUFFIX = ".keras"
KERAS_MEMBERS = ("config.json", "metadata.json")  # what every file of Model.save holds
NEAR_IDENTITY_FILE = "near_identity.json"  # a run's record of trained.near_identity


def record_path(output: str) -> str:
    """The record beside an exported model: ``FILE.json`` for ``FILE.keras``, ``DIR.json`` for
    a SavedModel folder ``DIR``."""
    output = os.path.normpath(output)
    return (output.removesuffix(KERAS_SUFFIX) if output.endswith(KERAS_SUFFIX) else output) + (
        ".json"
    )


def near_identity_path(model_dir: str | None, model: str | None) -> str:
    """Where ``launch/near_identity.py``'s record goes: the run folder's ``near_identity.json``;
    beside a ``.keras`` file, ``FILE.near_identity.json``."""
    if model_dir:
        return os.path.join(model_dir, NEAR_IDENTITY_FILE)
    return model.removesuffix(KERAS_SUFFIX) + "." + NEAR_IDENTITY_FILE


def check_output(output: str, format: str) -> None:
    """InputError (one line) for an ``--output`` that ``format`` cannot be written to: its
    folder missing, a Keras file not named ``.keras``, a SavedModel (a folder) over a file or on
    another Keras backend than TensorFlow (``Model.export`` writes it there)."""
    if format not in EXPORT_FORMATS:
        raise InputError(f"--format={format} is unknown; choose one of {', '.join(EXPORT_FORMATS)}")
    folder = os.path.dirname(os.path.abspath(output))
    if not os.path.isdir(folder):
        raise InputError(
            f"--output {output}: its folder {folder} does not exist; create it or name another"
        )
    if format == "keras" and not output.endswith(KERAS_SUFFIX):
        raise InputError(
            f"--output {output} must end in {KERAS_SUFFIX} (the Keras file format), or give "
            "--format=tf_saved_model for a SavedModel folder"
        )
    if format == "tf_saved_model" and os.path.isfile(output):
        raise InputError(f"--output {output} is a file; a SavedModel is a folder: name another")
    backend = registry.check_chosen()
    if format == "tf_saved_model" and backend != "tensorflow":
        raise InputError(
            f"--format=tf_saved_model is written on the TensorFlow backend, not {backend}: "
            "export --output=FILE.keras here, then run python launch/export.py "
            f"--model=FILE.keras --format=tf_saved_model --output={output}"
        )


def check_keras_file(path: str) -> None:
    """InputError (one line, naming the file as ``--model``) unless ``path`` is a Keras file."""
    if os.path.isdir(path):
        raise InputError(
            f"--model {path} is a folder, not a Keras file (a SavedModel opens with "
            "tf.saved_model.load); give a .keras file of launch/export.py"
        )
    if not os.path.isfile(path):
        raise InputError(f"--model {path} does not exist; give a .keras file of launch/export.py")
    try:
        with zipfile.ZipFile(path) as archive:
            names = set(archive.namelist())
    except (OSError, zipfile.BadZipFile):
        names = set()
    if not set(KERAS_MEMBERS) <= names:
        raise InputError(
            f"--model {path} is not a Keras file (a zip holding {' and '.join(KERAS_MEMBERS)}, "
            "as Model.save writes); give a .keras file of launch/export.py"
        )


def read_beside(path: str) -> dict:
    """The record ``launch/export.py`` wrote beside the model ``path`` ({} where there is
    none)."""
    try:
        with open(record_path(path), encoding="utf-8") as f:
            saved = json.load(f)
    except (OSError, ValueError):
        return {}
    return saved if isinstance(saved, dict) else {}
