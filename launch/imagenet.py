"""Train the paper's ImageNet network (Hardt & Ma 2016, Section 4: an all-convolutional ResNet-34).

    python launch/imagenet.py                                # tfds imagenet2012, the paper's recipe
    python launch/imagenet.py --data_path=/data/imagenet-tfrecords   # train-*/validation-* shards
    python launch/imagenet.py --strategy=multi_worker        # one process per machine (TF_CONFIG)
    python launch/imagenet.py --summary_only                 # layer table and parameter counts

The recipe (arXiv:1611.04231 Section 4; the experiment ``imagenet_paper``): momentum SGD 0.9,
global batch 256, learning rate 0.1 multiplied by 0.94 every 2 epochs (epoch = 1,281,167 /
global batch steps), weight decay 1e-4 (the CIFAR value; the paper gives none for ImageNet),
~700,000 steps; top-1 and top-5 error on the whole validation split every --eval_every steps and
at the end. Architecture and input choices: resnet_noBN/models/imagenet_model.py and
resnet_noBN/datasets/imagenet_input.py. Checkpoints resume from --model_dir. Ends by printing one
line of JSON.
"""

from __future__ import annotations

from resnet_noBN.host import cpu

cpu.default_onednn()  # first, before anything loads TensorFlow: oneDNN on x86 (host/cpu.py)

from resnet_noBN.backends import registry

# ImageNet's input is tf.data over TFRecords: a backend without TensorFlow is refused here, with
# one line and exit 2, before Keras or its backend is imported and before anything is written
registry.serving("imagenet")

from absl import flags

from resnet_noBN.configs.data_config import IMAGENET_TRAIN_EXAMPLES
from resnet_noBN.datasets import imagenet_input
from resnet_noBN.models.imagenet_model import build_imagenet_model
from resnet_noBN.models.networks import print_summary
from resnet_noBN.runs import cli, run_config, setup
from resnet_noBN.trainers.recipe import exponential_learning_rate_schedule

FLAGS = flags.FLAGS
run_config.define("imagenet")
flags.DEFINE_string("model_dir", None, "Checkpoints, summaries, metrics. Default: runs/imagenet.")
flags.DEFINE_bool(
    "summary_only", False, "Print the layer table and parameter counts, and exit without data."
)


@cli.exit_codes
def main(argv):
    config = run_config.from_flags("imagenet")
    if FLAGS.summary_only:
        print_summary(build_imagenet_model(config.network))
        print(
            "paper: 35.7M trainable (a plain ResNet-34 has 21.8M); see "
            "resnet_noBN/models/imagenet_model.py"
        )
        return
    import tensorflow as tf

    recipe = config.recipe
    schedule = exponential_learning_rate_schedule(
        recipe.batch_size,
        IMAGENET_TRAIN_EXAMPLES,
        recipe.learning_rate,
        recipe.lr_decay,
        recipe.epochs_per_decay,
    )
    run = setup.start(
        config,
        FLAGS.model_dir or "runs/imagenet",
        title="ImageNet, Hardt & Ma ResNet-34 (no BN)",
        schedule=schedule,
        top5=True,
    )
    try:
        cli.train_and_report(
            run,
            faster=cli.faster_paths(run.runtime, config.runtime.precision),
            dataset="imagenet2012",
        )
    except tf.errors.InvalidArgumentError as e:
        error = imagenet_input.label_error(e, config.data.label_offset)  # the in-graph check
        if error is None:
            raise
        raise error from None


if __name__ == "__main__":
    cli.run(main)
