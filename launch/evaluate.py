"""Evaluate a run of ``launch/cifar.py`` again: its latest checkpoint (or every checkpoint it
keeps) on the whole test split of a --data_path, optionally with the first red pixel of every
image replaced (the probe of the original CIFAR-100 reader's label leak; see
resnet_noBN/trained/evaluation.py).

    python launch/evaluate.py --model_dir=runs/c100 --data_path=/data/cifar-100-jpeg
    python launch/evaluate.py --model_dir=runs/c100_2016 --data_path=/data/cifar-100-binary \\
        --first_red_pixel=wrong_label
    python launch/evaluate.py --model_dir=runs/c10 --data_path=/data/cifar-10-batches-bin \\
        --every_checkpoint --answers_to=runs/c10/answers.jsonl   # a run from before answers
    python launch/evaluate.py --model_dir=runs/lease/back/cifar10_paper \\
        --weights=runs/lease/back/cifar10_paper/weights-60000.npz \\
        --data_path=/data/cifar-10-batches-bin \\
        --compare_answers=runs/lease/back/cifar10_paper/answers.jsonl   # a GPU run, here
    python launch/evaluate.py --model=runs/c10.keras --data_path=/data/cifar-10-batches-bin

Runs on the backend the run trained on; prints one line of JSON per checkpoint evaluated. Writes
nothing into --model_dir but the file --answers_to names (which test images each evaluated
checkpoint got right, as a run writes them: resnet_noBN/trainers/answers.py), for the figures of
a run that predates them (launch/figures.py). ``--weights`` evaluates a weights file instead of
the checkpoints (a run's final weights as a GPU lease brings them back, no optimizer state), and
``--compare_answers`` counts the test images whose predicted class differs from the final
predictions in a run's answers file (the GPU's, image by image). ``--model`` evaluates a file of
launch/export.py instead, on any backend, its data read as the record beside it says.
"""

from __future__ import annotations

from resnet_noBN.host import cpu, stops

stops.install("while evaluating: nothing written", "rerun the same command")  # one line, exit 3
cpu.default_onednn()  # before anything loads TensorFlow: oneDNN on x86 (host/cpu.py)

import functools
import json
import os

import numpy as np
from absl import flags

from resnet_noBN.configs.choices import FIRST_RED_PIXEL
from resnet_noBN.configs.errors import InputError
from resnet_noBN.host import storage
from resnet_noBN.runs import cli  # no Keras: bad input answered first
from resnet_noBN.trained import model_paths
from resnet_noBN.trainers.answers import final_predictions

FLAGS = flags.FLAGS
flags.DEFINE_string("model_dir", None, "The run's folder (config.json and checkpoints).")
flags.DEFINE_string(
    "model",
    None,
    "A .keras file of launch/export.py, evaluated instead of a run folder (on any backend; its "
    "data read as the record beside it says).",
)
flags.DEFINE_string(
    "data_path", None, "The official binary files or an image folder of the run's data set."
)
flags.DEFINE_enum(
    "first_red_pixel",
    "as_read",
    list(FIRST_RED_PIXEL),
    "as_read: the images as the run's reader makes them; wrong_label / true_pixel (runs with "
    "--cifar100_layout=original_2016): that pixel, the leaked label, replaced by another "
    "class's label or by the image's real pixel.",
)
flags.DEFINE_bool(
    "every_checkpoint", False, "Evaluate every checkpoint the run keeps, oldest first."
)
flags.DEFINE_string(
    "answers_to",
    None,
    "Write each evaluated checkpoint's answers (a line of answers.jsonl; the last with its "
    "predicted classes) into this file, replaced whole.",
)
flags.DEFINE_string(
    "weights",
    None,
    "Evaluate this weights file (the model's arrays and the step, as a GPU lease brings a run's "
    "final weights back) instead of the run's checkpoints.",
)
flags.DEFINE_string(
    "compare_answers",
    None,
    "An answers.jsonl (a run's): also count the test images whose predicted class differs from "
    "its final predictions (predictions_differ).",
)
flags.mark_flags_as_required(["data_path"])
flags.mark_flags_as_mutual_exclusive(["model_dir", "model"], required=True)


def differing(path: str, answers) -> int:
    """How many of ``answers``' predicted classes differ from the final ones in ``path``;
    InputError where that file holds none or another number of images."""
    final = final_predictions(path)
    if final is None:
        raise InputError(f"--compare_answers {path} holds no final predictions")
    if answers is None or len(final.predicted) != len(answers.predicted):
        raise InputError(f"--compare_answers {path} is not of this test split")
    return int(np.sum(final.predicted != answers.predicted))


@cli.exit_codes
def main(argv):
    print_fn = functools.partial(print, flush=True)
    if FLAGS.model:
        if FLAGS.every_checkpoint or FLAGS.weights:
            raise InputError(
                "--every_checkpoint and --weights read a run folder; a --model file holds one step"
            )
        model_paths.check_keras_file(FLAGS.model)
        from resnet_noBN.trained.model_file import evaluate_file  # the backend loads now

        results = [evaluate_file(FLAGS.model, FLAGS.data_path, FLAGS.first_red_pixel, print_fn)]
    else:
        from resnet_noBN.trained.evaluation import evaluate_run  # the backend loads now

        results = evaluate_run(
            FLAGS.model_dir,
            FLAGS.data_path,
            FLAGS.first_red_pixel,
            print_fn,
            FLAGS.every_checkpoint,
            FLAGS.weights,
        )
    lines = []
    for result in results:
        lines.append((result["step"], result.pop("answers")))
        if FLAGS.compare_answers:
            result["predictions_differ"] = differing(FLAGS.compare_answers, lines[-1][1])
        print(json.dumps(result), flush=True)
    if FLAGS.answers_to:
        text = "".join(
            answers.line(step, final=i == len(lines) - 1) + "\n"
            for i, (step, answers) in enumerate(lines)
        )
        os.makedirs(os.path.dirname(os.path.abspath(FLAGS.answers_to)), exist_ok=True)
        storage.atomic_write(FLAGS.answers_to, lambda f: f.write(text.encode()))


if __name__ == "__main__":
    cli.run(main)
