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

import dataclasses
import sys

from absl import flags

from resnet_noBN.backends import backend
from resnet_noBN.backends.backend import RuntimeConfig
from resnet_noBN.backends.cifar_sources import sources
from resnet_noBN.configs import presets
from resnet_noBN.configs.errors import InputError
from resnet_noBN.configs.flag_config import config_from_flags, define_flags
from resnet_noBN.datasets import cifar_data
from resnet_noBN.models.model import ModelConfig, build_cifar_model
from resnet_noBN.runs import cli
from resnet_noBN.trainers import run_log
from resnet_noBN.trainers.recipe import TrainConfig, objective_fields

FLAGS = flags.FLAGS
cli.define_cifar_data_flags()
flags.DEFINE_string("model_dir", None, "Checkpoints, summaries, metrics. Default: runs/<dataset>.")
flags.DEFINE_integer(
    "pad",
    2,
    "Pixels of padding per side before the random 32x32 crop: 2 as "
    "the original cifar_data.py (36x36), 4 as He et al. (40x40), 0 for none.",
)
flags.DEFINE_enum(
    "cifar100_layout",
    "official",
    list(cifar_data.LAYOUTS),
    "How a CIFAR-100 record is read: official (the fine label, then the pixels from byte 2), "
    "or original_2016: as the original cifar_data.py before its July 2017 fix, the pixels "
    "from byte 1, so the fine label is the first red pixel of every image (a label leak; "
    "see data/README.md). For measuring what that did to the paper's figure, not for use.",
)
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


def checked_run_config(model_cfg: ModelConfig, train_cfg: TrainConfig, model_dir: str) -> dict:
    """What config.json records, refused where ``model_dir`` holds a run of other settings (a
    key an older config.json lacks stands for its default)."""
    run_config = cli.check_backend(
        {
            "dataset": FLAGS.dataset,
            "cifar100_layout": FLAGS.cifar100_layout,
            **dataclasses.asdict(model_cfg),
            **objective_fields(train_cfg),
        }
    )
    run_config.pop("data_format")  # a layout, not a different model: checkpoints carry over
    run_log.check_resumable(
        model_dir,
        run_config,
        absent={
            "cifar100_layout": "official",
            "backend": "tensorflow",
            **dataclasses.asdict(ModelConfig()),
            **objective_fields(TrainConfig()),
        },
    )
    return run_config


@cli.exit_codes
def main(argv):
    model_cfg = model_config()
    if FLAGS.summary_only:
        return cli.print_summary(build_cifar_model(model_cfg))
    train_cfg = cli.train_config_from_flags()
    runtime_cfg = config_from_flags(RuntimeConfig)
    if FLAGS.pad < 0:
        raise InputError(f"--pad must be >= 0, got {FLAGS.pad}")
    cifar_data.check_layout(FLAGS.dataset, FLAGS.cifar100_layout)
    if FLAGS.data_path:
        cifar_data.check_data_path(FLAGS.dataset, FLAGS.data_path)
    model_dir = FLAGS.model_dir or f"runs/{FLAGS.dataset}"
    run_config = checked_run_config(model_cfg, train_cfg, model_dir)

    runtime = cli.start_runtime(runtime_cfg, train_cfg, model_dir)  # before tfds: that runs TF ops
    if not FLAGS.data_path and backend.is_tensorflow():
        # download / verify the tfds data set now, before anything is written
        from resnet_noBN.datasets import cifar_input

        cifar_input.prepare_tfds(FLAGS.dataset, FLAGS.data_dir)
    cli.begin_run(runtime, FLAGS.dataset, train_cfg, model_dir, run_config)
    if FLAGS.cifar100_layout == "original_2016":
        print(ORIGINAL_2016_WARNING, file=sys.stderr, flush=True)

    train_source, test_source = sources(
        FLAGS.dataset,
        train_cfg.batch_size,
        train_cfg.eval_batch_size,
        seed=runtime.seed,
        data_path=FLAGS.data_path,
        data_dir=FLAGS.data_dir,
        pad=FLAGS.pad,
        layout=FLAGS.cifar100_layout,
    )
    trainer = cli.make_trainer(
        runtime,
        runtime_cfg,
        lambda: build_cifar_model(model_cfg),
        train_cfg,
        model_dir,
        title=f"{FLAGS.dataset}, Hardt & Ma ResNet (no BN)",
    )
    cli.train_and_report(trainer, train_source, test_source, dataset=FLAGS.dataset)


if __name__ == "__main__":
    cli.run(main)
