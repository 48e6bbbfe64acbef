"""How far each residual block of a trained network is from the identity (arXiv:1611.04231,
Section 2, Theorem 2.1: an optimum with every layer within O(1/ℓ) of it), trained and at
initialisation (resnet_noBN/trained/near_identity.py):

    python launch/near_identity.py --model_dir=runs/demo              # its latest weights
    python launch/near_identity.py --model_dir=runs/demo --step=4000 --data_path=/data/cifar10
    python launch/near_identity.py --model=runs/demo.keras --data_path=/data/cifar10
    python launch/near_identity.py --summarize=results/near_identity  # the study, by depth

For each block: its branch's size against the stream it joins on the test images, ‖h(x)‖/‖s(x)‖
(mean and largest over images), and a bound on the branch's Lipschitz constant, ‖C2‖₂·‖C1‖₂
(each convolution's spectral norm on its real input, by power iteration). Writes
``near_identity.json`` into the run folder (beside a ``.keras`` file: FILE.near_identity.json),
prints a table a row a block, then one line of JSON. A run is read on the backend it trained on
(a GPU lease's ``weights-<step>.npz`` too); ``--data_path`` defaults to the run's own.
``--summarize`` reads the ``near_identity.json`` of a study's runs (launch/study.py
--study=near_identity) and writes ``summary.json`` and ``near_identity.png`` there: each measure
against depth on log-log axes with its fitted slope (resnet_noBN/studies/near_identity_study.py).
"""

from __future__ import annotations

from resnet_noBN.host import cpu, stops

stops.install("while measuring: nothing written", "rerun the same command")  # one line, exit 3
cpu.default_onednn()  # before anything loads TensorFlow: oneDNN on x86 (host/cpu.py)

import functools
import json
import os

from absl import flags

from resnet_noBN.configs.errors import InputError
from resnet_noBN.runs import cli  # no Keras: bad input answered first
from resnet_noBN.trained import model_paths, run_folder

FLAGS = flags.FLAGS
flags.DEFINE_string("model_dir", None, "The run's folder (config.json and its weights).")
flags.DEFINE_string("model", None, "A .keras file of launch/export.py, instead of a run folder.")
flags.DEFINE_integer("step", None, "The step whose weights to measure (default: the latest kept).")
flags.DEFINE_string(
    "data_path",
    None,
    "The test split's data (the official binary files or an image folder); default: the run's.",
)
flags.DEFINE_string(
    "summarize",
    None,
    "A study's folder (launch/study.py --study=near_identity): its runs' near_identity.json, "
    "summarised by depth into summary.json and near_identity.png; nothing measured.",
)
flags.mark_flags_as_mutual_exclusive(["model_dir", "model", "summarize"], required=True)


def checked() -> None:
    """InputError (one line) for bad input, before a backend loads: a folder without weights or
    without the step, a file that is not a Keras file, a .keras file with --step or without
    --data_path."""
    if FLAGS.model_dir:
        run_folder.read_record(FLAGS.model_dir)
        run_folder.chosen_weights(FLAGS.model_dir, FLAGS.step)
        return
    model_paths.check_keras_file(FLAGS.model)
    if FLAGS.step is not None:
        raise InputError("--step picks a run folder's weights; a --model file holds one step")
    if not FLAGS.data_path:
        raise InputError(f"--model {FLAGS.model}: give --data_path, the test split to measure on")


@cli.exit_codes
def main(argv):
    print_fn = functools.partial(print, flush=True)
    if FLAGS.summarize:
        from resnet_noBN.studies import near_identity_study

        near_identity_study.summarize(FLAGS.summarize, print_fn)
        print(json.dumps({"summary": os.path.join(FLAGS.summarize, near_identity_study.SUMMARY)}))
        return
    checked()
    from resnet_noBN.trained import near_identity  # the backend loads now

    if FLAGS.model_dir:
        record = near_identity.measure_run(FLAGS.model_dir, FLAGS.step, FLAGS.data_path, print_fn)
    else:
        record = near_identity.measure_file(FLAGS.model, FLAGS.data_path, print_fn)
    path = model_paths.near_identity_path(FLAGS.model_dir, FLAGS.model)
    stops.doing("while writing the record: it is replaced whole")
    near_identity.write(record, path)
    print(near_identity.table(record), flush=True)
    keys = ("largest_ratio", "mean_ratio", "largest_lipschitz", "mean_lipschitz")
    line = {"near_identity": path, "step": record["step"]}
    for when in ("trained", "initialisation"):
        if record[when]:
            line[when] = {key: record[when][key] for key in keys}
    print(json.dumps(line), flush=True)


if __name__ == "__main__":
    cli.run(main)
