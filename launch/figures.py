"""A run's test-error figures from its folder alone: the whole-test final and best errors, and
the figure the original 2016 code would have logged (the best precision over successive
5,000-image windows of the test split, one window per evaluation, and the same with either
window: resnet_noBN/studies/original_eval.py), from the answers each evaluation kept.

    python launch/figures.py --model_dir=runs/cifar10
    python launch/figures.py --model_dir=results/table2_small/runs/cifar10_paper-seed0

Reads ``answers.jsonl`` (or --answers), or a committed run's ``figures.json`` where it has one (a
thinned run keeps its last evaluation's answers only: resnet_noBN/studies/thinned.py); writes
nothing; prints one line of JSON (errors in %). No Keras, no backend: it runs in a second. A
run from before answers were kept: write them with ``launch/evaluate.py --every_checkpoint
--answers_to=...`` first.
"""

from __future__ import annotations

import json
import os
import sys

from absl import app, flags

FLAGS = flags.FLAGS
flags.DEFINE_string("model_dir", None, "The run's folder.")
flags.DEFINE_string("answers", None, "The answers file (default: <model_dir>/answers.jsonl).")
flags.mark_flag_as_required("model_dir")


def main(argv):
    from resnet_noBN.studies import thinned
    from resnet_noBN.studies.original_eval import figures
    from resnet_noBN.trainers.answers import ANSWERS_FILE, read_answers

    path = FLAGS.answers or os.path.join(FLAGS.model_dir, ANSWERS_FILE)
    if not os.path.exists(path):
        print(
            f"error: {path} does not exist: the run kept no answers (a run from before them, or "
            "not a run's folder); write them with launch/evaluate.py --every_checkpoint "
            f"--answers_to={path}",
            file=sys.stderr,
        )
        sys.exit(2)
    # a run's folder: its figures.json where it was thinned (studies.thinned), else its answers
    result = figures(read_answers(path)) if FLAGS.answers else thinned.figures(FLAGS.model_dir)
    print(json.dumps({"model_dir": FLAGS.model_dir, **result}))


if __name__ == "__main__":
    app.run(main)
