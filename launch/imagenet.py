"""Train the paper's ImageNet network (Hardt & Ma 2016, Section 4: an all-convolutional ResNet-34).

    python launch/imagenet.py                                # tfds imagenet2012, the paper's recipe
    python launch/imagenet.py --data_path=/data/imagenet-tfrecords   # train-*/validation-* shards
    python launch/imagenet.py --strategy=multi_worker        # one process per machine (TF_CONFIG)
    python launch/imagenet.py --summary_only                 # layer table and parameter counts

The recipe (arXiv:1611.04231 Section 4): momentum SGD 0.9, global batch 256, learning rate 0.1
multiplied by 0.94 every 2 epochs (epoch = 1,281,167 / global batch steps), weight decay 1e-4
(the CIFAR value; the paper gives none for ImageNet), ~700,000 steps; top-1 and top-5 error on
the whole validation split every --eval_every steps and at the end. Architecture and input
choices: resnet_noBN/models/imagenet_model.py and resnet_noBN/datasets/imagenet_input.py.
Checkpoints resume from --model_dir. Ends by printing one line of JSON.
"""

from __future__ import annotations

from resnet_noBN.backends import cpu

cpu.default_onednn()  # first, before anything loads TensorFlow: oneDNN on x86 (backends/cpu.py)

from resnet_noBN.backends import registry

# ImageNet's input is tf.data over TFRecords: a backend without TensorFlow is refused here, with
# one line and exit 2, before anything of TensorFlow is imported or anything is written
registry.serving("imagenet")

from absl import flags

from resnet_noBN.configs.errors import InputError
from resnet_noBN.configs.flag_config import config_from_flags, define_flags
from resnet_noBN.configs.runtime_config import RuntimeConfig
from resnet_noBN.datasets import imagenet_input
from resnet_noBN.datasets.input_common import per_replica_dataset
from resnet_noBN.models.imagenet_model import ImageNetConfig, build_imagenet_model
from resnet_noBN.runs import cli
from resnet_noBN.trainers.recipe import TrainConfig, exponential_learning_rate_schedule

FLAGS = flags.FLAGS
flags.DEFINE_string(
    "data_path",
    None,
    "Folder of TFRecord shards train-NNNNN-of-MMMMM / validation-NNNNN-of-MMMMM "
    "(image/encoded JPEG, image/class/label int64). Default: read tfds "
    "imagenet2012 from --data_dir.",
)
flags.DEFINE_string(
    "data_dir",
    str(imagenet_input.DEFAULT_TFDS_DIR),
    "tensorflow-datasets directory; an unprepared imagenet2012 is prepared from "
    "ILSVRC2012_img_train.tar and ILSVRC2012_img_val.tar in "
    "<data_dir>/downloads/manual/.",
)
flags.DEFINE_integer(
    "label_offset",
    1,
    "--data_path only: label = image/class/label - label_offset. 1 for the "
    "TF-slim / TPU converters (labels 1..1000), 0 for 0-based shards.",
)
flags.DEFINE_enum(
    "normalization",
    "per_image",
    list(imagenet_input.NORMALIZATIONS),
    "per_image: tf.image.per_image_standardization; mean_std: ImageNet RGB mean/std.",
)
flags.DEFINE_integer(
    "shuffle_buffer",
    imagenet_input.SHUFFLE_BUFFER,
    "Training records (JPEG bytes) in the shuffle buffer of each worker.",
)
flags.DEFINE_float("epochs_per_decay", 2.0, "Epochs between learning-rate decays by --lr_decay.")
flags.DEFINE_string("model_dir", None, "Checkpoints, summaries, metrics. Default: runs/imagenet.")
# The architecture (ResNet-34's layout by default) and the paper's ablations, then the recipe.
define_flags(ImageNetConfig, exclude=("num_classes", "stem_kernel", "data_format"))
cli.define_train_flags(
    TrainConfig(
        train_steps=700_000,
        batch_size=256,
        learning_rate=0.1,
        lr_boundaries=(),
        lr_decay=0.94,
        momentum=0.9,
        weight_decay=1e-4,
        eval_every=10_000,
        checkpoint_every=5_000,
        log_every=100,
        eval_batch_size=256,
    )
)
cli.define_runtime_flags()


def summary(cfg: ImageNetConfig) -> None:
    cli.print_summary(build_imagenet_model(cfg))
    print(
        "paper: 35.7M trainable (a plain ResNet-34 has 21.8M); see "
        "resnet_noBN/models/imagenet_model.py"
    )


def configs_from_flags() -> tuple[TrainConfig, RuntimeConfig]:
    """The recipe and runtime of the flags, checked for what the ImageNet recipe refuses."""
    train_cfg = cli.train_config_from_flags()
    if train_cfg.lr_boundaries:
        raise InputError(
            "--lr_boundaries is not used by the ImageNet recipe (exponential "
            "decay): set --lr_decay and --epochs_per_decay instead"
        )
    if not FLAGS.epochs_per_decay > 0:
        raise InputError(f"--epochs_per_decay must be positive, got {FLAGS.epochs_per_decay}")
    if FLAGS.shuffle_buffer < 1:
        raise InputError(f"--shuffle_buffer must be >= 1, got {FLAGS.shuffle_buffer}")
    return train_cfg, config_from_flags(RuntimeConfig)


def data_record() -> dict:
    """The ``data`` of config.json: what the run reads, how, and the splits' sizes."""
    return {
        "dataset": imagenet_input.TFDS_NAME,
        "data_path": FLAGS.data_path,
        "data_dir": FLAGS.data_dir,
        "label_offset": FLAGS.label_offset,
        "normalization": FLAGS.normalization,
        "shuffle_buffer": FLAGS.shuffle_buffer,
        "train_examples": imagenet_input.TRAIN_EXAMPLES,
        "test_examples": imagenet_input.EVAL_EXAMPLES,
    }


def checked_record(model_dir: str, model_cfg, train_cfg, runtime_cfg) -> dict:
    """config.json's record of this run (``runs.record``), refused where ``model_dir`` holds a
    run it cannot resume."""
    return cli.checked_record(
        model_dir,
        model_cfg,
        train_cfg,
        data_record(),
        runtime_cfg.precision,
        epochs_per_decay=FLAGS.epochs_per_decay,
    )


def split_fn(model_cfg, seed: int):
    """``fn(split, global_batch)``: the ``dataset_fn`` of that split's per-replica pipelines."""

    def dataset_fn(split, global_batch):
        return per_replica_dataset(
            imagenet_input.build_dataset,
            split,
            global_batch=global_batch,
            data_path=FLAGS.data_path,
            data_dir=FLAGS.data_dir,
            label_offset=FLAGS.label_offset,
            image_size=model_cfg.image_size,
            normalization=FLAGS.normalization,
            seed=seed,
            shuffle_buffer=FLAGS.shuffle_buffer,
        )

    return dataset_fn


@cli.exit_codes
def main(argv):
    model_cfg = config_from_flags(ImageNetConfig)
    if FLAGS.summary_only:
        return summary(model_cfg)
    train_cfg, runtime_cfg = configs_from_flags()
    model_dir = FLAGS.model_dir or "runs/imagenet"

    import tensorflow as tf

    # before the data checks: they run TF ops
    runtime = cli.start_runtime(runtime_cfg, train_cfg, model_dir)
    # file-based sharding needs a file per input pipeline: checked before anything is written
    if FLAGS.data_path:
        imagenet_input.check_data_path(FLAGS.data_path, runtime.input_pipelines, FLAGS.label_offset)
    else:
        imagenet_input.tfds_builder(FLAGS.data_dir, runtime.input_pipelines)
    dataset = "tfrecords" if FLAGS.data_path else imagenet_input.TFDS_NAME
    cli.claim_folder(runtime, model_dir)  # one run per folder, held until the process ends
    run_record = checked_record(model_dir, model_cfg, train_cfg, runtime_cfg)
    cli.begin_run(runtime, runtime_cfg, f"imagenet ({dataset})", train_cfg, model_dir, run_record)
    schedule = exponential_learning_rate_schedule(
        train_cfg.batch_size,
        imagenet_input.TRAIN_EXAMPLES,
        train_cfg.learning_rate,
        train_cfg.lr_decay,
        FLAGS.epochs_per_decay,
    )
    trainer = cli.make_trainer(
        runtime,
        runtime_cfg,
        lambda: build_imagenet_model(model_cfg, runtime.precision),
        train_cfg,
        model_dir,
        title="ImageNet, Hardt & Ma ResNet-34 (no BN)",
        schedule=schedule,
        top5=True,
    )
    dataset_fn = split_fn(model_cfg, runtime.seed)
    train = dataset_fn("train", train_cfg.batch_size)
    validation = dataset_fn("validation", train_cfg.eval_batch_size)
    try:
        cli.train_and_report(
            trainer,
            train,
            validation,
            faster=cli.faster_paths(runtime),
            dataset="imagenet2012",
        )
    except tf.errors.InvalidArgumentError as e:
        error = imagenet_input.label_error(e, FLAGS.label_offset)  # the in-graph label check
        if error is None:
            raise
        raise error from None


if __name__ == "__main__":
    cli.run(main)
