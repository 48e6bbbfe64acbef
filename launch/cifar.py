"""Train the paper's CIFAR-10/100 network (arXiv:1611.04231, Section 4, Table 1).

    python launch/cifar.py                                   # the paper's CIFAR-10 run (tfds)
    python launch/cifar.py --experiment=cifar100_paper       # a named experiment
    python launch/cifar.py --experiment=demo --data_path=/data/cifar-10-batches-bin   # minutes
    python launch/cifar.py --data_path=/data/cifar-10-jpeg   # an image folder
    python launch/cifar.py --summary_only                    # layer table and parameter counts
    python launch/cifar.py --experiment=demo --print_config  # the run config, as JSON
    python launch/cifar.py --model=quarter                   # Table 1 at a quarter of the width

The counterpart of the original ``resnet_main.py``: trains, evaluates on the whole test split
every --eval_every steps and at the end, checkpoints every --checkpoint_every steps, and resumes
from --model_dir. A run is an experiment (``resnet_noBN/configs/experiments.py``; default
``cifar10_paper``) with the flags given on the command line over it. Ends by printing one line
of JSON.
"""

from __future__ import annotations

from resnet_noBN.host import cpu, stops

stops.install("before training: nothing lost")  # a stop at any moment: one line, exit 3
cpu.default_onednn()  # before anything loads TensorFlow: oneDNN on x86 (host/cpu.py)

import json

from absl import flags

from resnet_noBN.runs import cli, preflight, run_config  # no Keras: bad input answered in a second

FLAGS = flags.FLAGS
run_config.define("cifar")
flags.DEFINE_string("model_dir", None, "Checkpoints, summaries, metrics. Default: runs/<dataset>.")
flags.DEFINE_bool(
    "summary_only", False, "Print the layer table and parameter counts, and exit without data."
)
flags.DEFINE_bool(
    "print_config",
    False,
    "Print the run config the experiment and flags make (config.json's sections, without the "
    "data's counts) as JSON, and exit without data.",
)
flags.DEFINE_bool(
    "check_only",
    False,
    "Check the run as it would start (the flags, the data, the Keras backend, what --model_dir "
    "holds) and exit 0 without writing anything: what launch/study.py asks of each run first.",
)

QUARTER_HINT = "--model=quarter (a quarter of the widths: 1/16 of the FLOPs, the CPU runs' network)"


@cli.exit_codes
def main(argv):
    config = run_config.from_flags("cifar")
    if FLAGS.print_config:
        return print(json.dumps(config.sections(), indent=1))
    # the flags hold: the network and the backend load now (TensorFlow's import: seconds)
    if FLAGS.summary_only:
        from resnet_noBN.models.networks import build_cifar_model, print_summary

        return print_summary(build_cifar_model(config.network))
    preflight.check(config)  # the cluster and the data, before the backend loads too
    model_dir = FLAGS.model_dir or f"runs/{config.data.dataset}"
    if FLAGS.check_only:
        return preflight.check_folder(config, model_dir)
    from resnet_noBN.runs import setup

    title = f"{config.data.dataset}, Hardt & Ma ResNet (no BN)"
    run = setup.start(config, model_dir, title=title)
    paper_width = config.network.stage_widths == (64, 128, 256)
    faster = cli.faster_paths(
        run.runtime, config.runtime.precision, *((QUARTER_HINT,) if paper_width else ())
    )
    if note := cli.measured_gpu_path(run.runtime):
        print(note, flush=True)
    train_examples = run.record["data"]["train_examples"]
    cli.train_and_report(
        run, faster=faster, dataset=config.data.dataset, train_examples=train_examples
    )


if __name__ == "__main__":
    cli.run(main)
