"""Train the paper's CIFAR-10/100 network (Hardt & Ma 2016, Section 4, Table 1).

    python launch/cifar.py                                   # CIFAR-10 from tfds, the paper's recipe
    python launch/cifar.py --dataset=cifar100
    python launch/cifar.py --data_path=/data/cifar-10-batches-bin   # the official binary files
    python launch/cifar.py --summary_only                    # layer table and parameter counts

The counterpart of the original ``resnet_main.py``: trains, evaluates on the whole test split
every --eval_every steps and at the end, checkpoints every --checkpoint_every steps, and resumes
from --model_dir. Ends by printing one line of JSON.
"""

from __future__ import annotations

import dataclasses
import json
import random

from absl import app, flags

from resnet_noBN import cifar_input, cli, distribute
from resnet_noBN.model import HEADS, INITS, SHORTCUTS, ModelConfig, build_cifar_model, param_counts
from resnet_noBN.training import TrainConfig, Trainer

FLAGS = flags.FLAGS
flags.DEFINE_enum("dataset", "cifar10", list(cifar_input.DATASETS), "Data set.")
flags.DEFINE_string("data_path", None,
                    "Folder of the official binary files (cifar-10-batches-bin/ or "
                    "cifar-100-binary/, or their parent). Default: read tensorflow-datasets.")
flags.DEFINE_string("data_dir", str(cifar_input.DEFAULT_TFDS_DIR),
                    "tensorflow-datasets directory (see data/README.md).")
flags.DEFINE_string("model_dir", None, "Checkpoints, summaries, metrics. Default: runs/<dataset>.")
flags.DEFINE_integer("pad", 2, "Pixels of padding per side before the random 32x32 crop: 2 as "
                     "the original cifar_input.py (36x36), 4 as He et al. (40x40), 0 for none.")
flags.DEFINE_integer("seed", None, "Seed of the weights, data order and augmentation.")
flags.DEFINE_enum("strategy", "default", list(distribute.STRATEGIES),
                  "tf.distribute strategy (see README: batch semantics).")
flags.DEFINE_bool("summary_only", False,
                  "Print the layer table and parameter counts, and exit without data.")
# The architecture (PAPER.md Table 1 by default) and the paper's ablations.
flags.DEFINE_integer("num_residual_units", 9, "Residual blocks per stage.")
flags.DEFINE_string("stage_widths", "64,128,256", "Channels of each stage.")
flags.DEFINE_integer("init_filters", 16, "Channels of the first, standard convolution.")
flags.DEFINE_enum("init", "hardt_ma", list(INITS),
                  "Residual conv init: hardt_ma sigma=1/(k^2 c), standard sqrt(2/(k^2 c)).")
flags.DEFINE_enum("head", "random", list(HEADS), "Last layer: fixed random projection or trained.")
flags.DEFINE_enum("shortcut", "pool_pad", list(SHORTCUTS),
                  "Shape-changing shortcuts: avg-pool + zero channels, or 1x1 projection.")
flags.DEFINE_bool("conv_bias", True, "A bias on every convolution (the paper's 13.59M count).")
cli.define_train_flags(TrainConfig())


def model_config() -> ModelConfig:
    widths = cli.int_list("stage_widths", FLAGS.stage_widths)
    cfg = ModelConfig(
        num_classes=cifar_input.num_classes(FLAGS.dataset),
        num_residual_units=FLAGS.num_residual_units, init_filters=FLAGS.init_filters,
        stage_widths=widths, stage_strides=(1,) + (2,) * (len(widths) - 1), init=FLAGS.init,
        head=FLAGS.head, shortcut=FLAGS.shortcut, conv_bias=FLAGS.conv_bias)
    try:
        cfg.validate()
    except ValueError as e:
        raise cli.InputError(str(e)) from None
    return cfg


def summary(cfg: ModelConfig) -> None:
    model = build_cifar_model(cfg)
    model.summary(line_length=110)
    for name, value in param_counts(model).items():
        print(f"{name}: {value}")


@cli.exit_codes
def main(argv):
    if len(argv) > 1:
        raise cli.InputError(f"unexpected arguments {argv[1:]}; flags are written --name=value")
    model_cfg = model_config()
    if FLAGS.summary_only:
        return summary(model_cfg)
    train_cfg = cli.train_config_from_flags()
    if FLAGS.pad < 0:
        raise cli.InputError(f"--pad must be >= 0, got {FLAGS.pad}")
    if FLAGS.data_path:
        cifar_input.check_data_path(FLAGS.dataset, FLAGS.data_path)
    else:  # download / verify the tfds data set now, before anything is written
        cifar_input.prepare_tfds(FLAGS.dataset, FLAGS.data_dir)
    model_dir = FLAGS.model_dir or f"runs/{FLAGS.dataset}"
    seed = FLAGS.seed if FLAGS.seed is not None else random.randrange(2**31)
    run_config = {"dataset": FLAGS.dataset, **dataclasses.asdict(model_cfg)}
    cli.check_resumable(model_dir, run_config)

    import keras

    strategy = distribute.make_strategy(FLAGS.strategy)
    replicas = strategy.num_replicas_in_sync
    for name in ("batch_size", "eval_batch_size"):
        if getattr(train_cfg, name) % replicas:
            raise cli.InputError(f"--{name}={getattr(train_cfg, name)} is not divisible by the "
                                 f"{replicas} replicas; use a multiple of {replicas}")
    keras.utils.set_random_seed(seed)
    is_chief = distribute.is_chief(strategy)
    if is_chief:
        cli.record_config(model_dir, run_config)
    print(f"{FLAGS.dataset}: {replicas} replica(s), global batch {train_cfg.batch_size}, "
          f"seed {seed}, model_dir {model_dir}", flush=True)

    def dataset_fn(split, global_batch):
        def fn(input_context):
            return cifar_input.build_dataset(
                FLAGS.dataset, split, input_context.get_per_replica_batch_size(global_batch),
                data_path=FLAGS.data_path, data_dir=FLAGS.data_dir, pad=FLAGS.pad, seed=seed,
                input_context=input_context)
        return fn

    trainer = Trainer(strategy, lambda: build_cifar_model(model_cfg), train_cfg, model_dir,
                      is_chief=is_chief, title=f"{FLAGS.dataset}, Hardt & Ma ResNet (no BN)")
    try:
        result = trainer.train(dataset_fn("train", train_cfg.batch_size),
                               dataset_fn("test", train_cfg.eval_batch_size),
                               print_fn=lambda line: print(line, flush=True))
    finally:
        trainer.close()
    print(json.dumps({"dataset": FLAGS.dataset, **result}), flush=True)


if __name__ == "__main__":
    app.run(main)
