"""Evaluate a run of ``launch/cifar.py`` again: its latest checkpoint on the whole test split of
a --data_path, optionally with the first red pixel of every image replaced (the probe of the
original CIFAR-100 reader's label leak; see resnet_noBN/runs/evaluation.py).

    python launch/evaluate.py --model_dir=runs/c100 --data_path=/data/cifar-100-jpeg
    python launch/evaluate.py --model_dir=runs/c100_2016 --data_path=/data/cifar-100-binary \
        --first_red_pixel=wrong_label

Runs on the backend the run trained on; writes nothing into --model_dir; prints one line of JSON.
"""

from __future__ import annotations

from resnet_noBN.backends import cpu

cpu.default_onednn()  # first, before anything loads TensorFlow: oneDNN on x86 (backends/cpu.py)

import json

from absl import flags

from resnet_noBN.runs import cli
from resnet_noBN.runs.evaluation import FIRST_RED_PIXEL, evaluate_run

FLAGS = flags.FLAGS
flags.DEFINE_string("model_dir", None, "The run's folder (config.json and checkpoints).")
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
flags.mark_flags_as_required(["model_dir", "data_path"])


@cli.exit_codes
def main(argv):
    result = evaluate_run(
        FLAGS.model_dir,
        FLAGS.data_path,
        FLAGS.first_red_pixel,
        lambda line: print(line, flush=True),
    )
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    cli.run(main)
