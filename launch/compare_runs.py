"""Runs of ``launch/cifar.py`` side by side: their test-error curves in one PNG and, as one line
of JSON, each run's last and best evaluation.

    python launch/compare_runs.py --run="correct reader=results/cifar100_cpu/official_seed0" \
        --run="original 2016 reader=results/cifar100_cpu/original_2016_seed0" \
        --output=results/cifar100_cpu/test_error.png --title="CIFAR-100, exact data"

Reads each run's metrics.jsonl (a run still going shows its evaluations so far); writes only
--output.
"""

from __future__ import annotations

from resnet_noBN.host import cpu

cpu.default_onednn()  # first, before anything loads TensorFlow: oneDNN on x86 (host/cpu.py)

import json

from absl import flags

from resnet_noBN.configs.errors import InputError
from resnet_noBN.runs import cli
from resnet_noBN.trainers import run_log

FLAGS = flags.FLAGS
flags.DEFINE_multi_string("run", [], "NAME=MODEL_DIR of a run, once per run, in legend order.")
flags.DEFINE_string("output", None, "The PNG to write.")
flags.DEFINE_string("title", "test error", "The plot's title.")
flags.mark_flags_as_required(["output"])


def runs_from_flags() -> dict[str, list[dict]]:
    """{name: the run's evaluations}, InputError (one line) for a malformed --run or a folder
    without evaluations."""
    if not FLAGS.run:
        raise InputError("no --run given: name each run as --run=NAME=MODEL_DIR")
    runs = {}
    for spec in FLAGS.run:
        name, sep, model_dir = spec.partition("=")
        if not sep or not name or not model_dir:
            raise InputError(
                f"--run={spec} is not NAME=MODEL_DIR; write e.g. --run=baseline=runs/a"
            )
        records = run_log.read_metrics(model_dir)
        if not records:
            raise InputError(
                f"--run {name}: {model_dir} has no {run_log.METRICS_FILE} (no evaluation yet); "
                "name a folder launch/cifar.py has evaluated in"
            )
        runs[name] = records
    return runs


@cli.exit_codes
def main(argv):
    runs = runs_from_flags()
    run_log.plot_error_curves(runs, FLAGS.output, FLAGS.title)
    summary = {
        name: {
            "last_step": records[-1]["step"],
            "last_test_error": records[-1]["test_error"],
            "best_test_error": min(r["test_error"] for r in records),
        }
        for name, records in runs.items()
    }
    print(json.dumps({"output": FLAGS.output, "runs": summary}), flush=True)


if __name__ == "__main__":
    cli.run(main)
