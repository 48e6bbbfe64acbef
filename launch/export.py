"""Export a trained run of ``launch/cifar.py`` (or ``launch/imagenet.py``) to one file that every
Keras backend loads, or to a TensorFlow SavedModel to serve (resnet_noBN/trained/model_file.py):

    python launch/export.py --model_dir=runs/cifar10 --output=runs/cifar10.keras
    python launch/export.py --model_dir=runs/cifar10 --step=30000 --output=c10_30k.keras
    KERAS_BACKEND=jax python launch/export.py --model_dir=runs/lease/back/cifar10_paper \\
        --output=cifar10_paper.keras          # a GPU lease's weights-<step>.npz
    python launch/export.py --model_dir=runs/cifar10 --format=tf_saved_model \\
        --output=runs/cifar10_serving         # uint8 images (N, 32, 32, 3) to logits
    python launch/export.py --model=cifar10_paper.keras --format=tf_saved_model \\
        --output=cifar10_paper_serving        # the SavedModel of a JAX or PyTorch run

The file holds the network the run's config.json records, its trained weights (the run's latest,
or those of --step) and its fixed random head, behind the input's normalisation: it takes images
as they are stored (uint8 or float in 0-255). Runs on the backend the run trained on (a SavedModel
is written on TensorFlow). Beside it goes FILE.json (DIR.json for a SavedModel): the experiment,
data, recipe, step, the test error the run measured there, the weights' digest and this command;
printed as one line of JSON too. Bad input is one line and exit 2, before anything is written.
"""

from __future__ import annotations

from resnet_noBN.host import cpu

cpu.default_onednn()  # first, before anything loads TensorFlow: oneDNN on x86 (host/cpu.py)

import json
import os
import shlex
import sys

from absl import flags

from resnet_noBN.configs.choices import EXPORT_FORMATS
from resnet_noBN.configs.errors import InputError
from resnet_noBN.runs import cli  # no Keras: bad input answered first
from resnet_noBN.trained import model_paths, run_folder

FLAGS = flags.FLAGS
flags.DEFINE_string("model_dir", None, "The run's folder (config.json and its checkpoints).")
flags.DEFINE_string(
    "model",
    None,
    "A .keras file of this launcher to write again in --format (on TensorFlow: the SavedModel "
    "of a run trained on another backend), instead of --model_dir.",
)
flags.DEFINE_integer(
    "step", None, "The step whose weights to export (one the run keeps); default: its latest."
)
flags.DEFINE_string("output", None, "FILE.keras, or the SavedModel's folder.")
flags.DEFINE_enum(
    "format",
    "keras",
    list(EXPORT_FORMATS),
    "keras: one .keras file every Keras backend loads (Model.save); tf_saved_model: a "
    "TensorFlow SavedModel serving uint8 images (Model.export).",
)
flags.mark_flag_as_required("output")
flags.mark_flags_as_mutual_exclusive(["model_dir", "model"], required=True)


def command() -> str:
    """This command as a user would type it again (the Keras backend's variable where set)."""
    backend = os.environ.get("KERAS_BACKEND")
    return " ".join(
        [*([f"KERAS_BACKEND={backend}"] if backend else []), "python", shlex.join(sys.argv)]
    )


@cli.exit_codes
def main(argv):
    model_paths.check_output(FLAGS.output, FLAGS.format)
    if FLAGS.model:
        if FLAGS.step is not None:
            raise InputError("--step picks a run's checkpoint; a --model file holds one step")
        model_paths.check_keras_file(FLAGS.model)
    else:
        kept = run_folder.kept_weights(FLAGS.model_dir, FLAGS.step)
    from resnet_noBN.trained import model_file  # the backend loads now

    if FLAGS.model:
        record = model_file.export_file(FLAGS.model, FLAGS.output, FLAGS.format, command())
    else:
        record = model_file.export_run(kept, FLAGS.output, FLAGS.format, command())
    print(json.dumps(record), flush=True)


if __name__ == "__main__":
    cli.run(main)
