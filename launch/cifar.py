"""Train the paper's CIFAR-10/100 network (arXiv:1611.04231, Section 4, Table 1).

    python launch/cifar.py                          # CIFAR-10 from tfds, the paper's recipe
    python launch/cifar.py --dataset=cifar100
    python launch/cifar.py --data_path=/data/cifar-10-batches-bin   # the official binary files
    python launch/cifar.py --data_path=/data/cifar-10-jpeg          # an image folder
    python launch/cifar.py --summary_only                    # layer table and parameter counts
    python launch/cifar.py --model=quarter                   # Table 1 at a quarter of the width

The counterpart of the original ``resnet_main.py``: trains, evaluates on the whole test split
every --eval_every steps and at the end, checkpoints every --checkpoint_every steps, and resumes
from --model_dir. Ends by printing one line of JSON.
"""

from __future__ import annotations

from resnet_noBN.backends import cpu

cpu.default_onednn()  # first, before anything loads TensorFlow: oneDNN on x86 (backends/cpu.py)

import sys

from absl import flags

from resnet_noBN.backends import registry
from resnet_noBN.configs import presets
from resnet_noBN.configs.flag_config import config_from_flags, define_flags
from resnet_noBN.configs.runtime_config import RuntimeConfig
from resnet_noBN.datasets import cifar_data
from resnet_noBN.datasets.data_config import DataConfig
from resnet_noBN.models.model import ModelConfig, build_cifar_model
from resnet_noBN.runs import cli
from resnet_noBN.trainers.recipe import TrainConfig

FLAGS = flags.FLAGS
cli.define_cifar_data_flags()
flags.DEFINE_string("model_dir", None, "Checkpoints, summaries, metrics. Default: runs/<dataset>.")
# The architecture (arXiv:1611.04231 Table 1 by default), the paper's ablations, the recipe.
flags.DEFINE_enum(
    "model",
    "paper",
    list(presets.MODELS),
    "The architecture to start from (resnet_noBN/configs/presets.py): paper (Table 1), quarter "
    "(its widths / 4: the CPU long runs), small (1 block per stage: tests); the model flags "
    "given on the command line override it.",
)
define_flags(ModelConfig, exclude=("num_classes", "stage_strides"))
cli.define_train_flags(TrainConfig())
cli.define_runtime_flags()


ORIGINAL_2016_WARNING = (
    "warning: --cifar100_layout=original_2016 reads CIFAR-100 as the original 2016 code did: "
    "every image shifted one byte, its fine label in the first red pixel (a label leak); use it "
    "only to measure that bug"
)


def model_config() -> ModelConfig:
    return config_from_flags(
        ModelConfig,
        base=ModelConfig.preset(FLAGS.model),
        num_classes=cifar_data.num_classes(FLAGS.dataset),
    )


QUARTER_HINT = "--model=quarter (a quarter of the widths: 1/16 of the FLOPs, the CPU runs' network)"


@cli.exit_codes
def main(argv):
    model_cfg = model_config()
    if FLAGS.summary_only:
        return cli.print_summary(build_cifar_model(model_cfg))
    train_cfg = cli.train_config_from_flags()
    runtime_cfg = config_from_flags(RuntimeConfig)
    data_cfg = config_from_flags(DataConfig)
    if data_cfg.data_path:
        cifar_data.check_data_path(data_cfg.dataset, data_cfg.data_path)
    model_dir = FLAGS.model_dir or f"runs/{data_cfg.dataset}"

    runtime = cli.start_runtime(runtime_cfg, train_cfg, model_dir)  # before tfds: that runs TF ops
    backend = registry.current()
    backend.prepare_data(data_cfg)  # tfds verified, or the files read, before anything is written
    cli.claim_folder(runtime, model_dir)  # one run per folder, held until the process ends
    run_record = cli.checked_record(
        model_dir, model_cfg, train_cfg, data_cfg.record(), runtime_cfg.precision
    )
    cli.begin_run(runtime, runtime_cfg, data_cfg.dataset, train_cfg, model_dir, run_record)
    if data_cfg.cifar100_layout == "original_2016":
        print(ORIGINAL_2016_WARNING, file=sys.stderr, flush=True)
    train_source, test_source = backend.cifar_sources(
        data_cfg, train_cfg.batch_size, train_cfg.eval_batch_size, runtime.seed
    )
    trainer = cli.make_trainer(
        runtime,
        runtime_cfg,
        lambda: build_cifar_model(model_cfg, runtime.precision),
        train_cfg,
        model_dir,
        title=f"{data_cfg.dataset}, Hardt & Ma ResNet (no BN)",
    )
    smaller = () if FLAGS.model != "paper" else (QUARTER_HINT,)
    cli.train_and_report(
        trainer,
        train_source,
        test_source,
        faster=cli.faster_paths(runtime, *smaller),
        dataset=data_cfg.dataset,
    )


if __name__ == "__main__":
    cli.run(main)
