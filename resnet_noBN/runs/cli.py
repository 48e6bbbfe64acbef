"""What every training launcher shares: the recipe's and the runtime's flags, the run's start,
its report, and the exit codes.

TensorFlow is imported only on the TensorFlow backend (:mod:`resnet_noBN.backends.backend`).

Exit status: 0 trained; 1 the loss diverged (the checkpoints stay intact); 2 bad input, one line
``error: ...`` on stderr, before anything is written; 3 preempted: SIGTERM or SIGINT arrived, a
checkpoint of the step reached was saved, and rerunning the same command resumes there.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import sys

from absl import app, flags, logging

from resnet_noBN.backends import backend
from resnet_noBN.backends.backend import Runtime, RuntimeConfig
from resnet_noBN.configs.errors import PREEMPTED_EXIT, DataError, InputError, Preempted
from resnet_noBN.configs.flag_config import config_from_flags, define_flags
from resnet_noBN.models.model import param_counts
from resnet_noBN.trainers import run_log
from resnet_noBN.trainers.loop import CheckpointError, TrainingDiverged, TrainLoop
from resnet_noBN.trainers.recipe import TrainConfig

flags.disclaim_key_flags()  # the flags defined here belong to the launcher calling define_*
FLAGS = flags.FLAGS


def print_summary(model) -> None:
    """The layer table, then ``name: count`` lines (trainable_params, non_trainable_params, ...)."""
    model.summary(line_length=110)
    for name, value in param_counts(model).items():
        print(f"{name}: {value}")


def define_train_flags(defaults: TrainConfig) -> None:
    """The flags of :class:`TrainConfig`, with the given defaults (the paper's recipe), and
    --scale_lr."""
    define_flags(defaults)
    flags.DEFINE_bool(
        "scale_lr",
        False,
        f"Linear scaling rule: multiply --learning_rate by --batch_size / "
        f"{defaults.batch_size} (the paper's batch), for a larger global batch. "
        "--train_steps and --lr_boundaries are not rescaled.",
    )


def define_cifar_data_flags() -> None:
    """--dataset, --data_path and --data_dir: which CIFAR and where it is read from (the CIFAR
    launchers' own)."""
    from resnet_noBN.datasets import cifar_data
    from resnet_noBN.datasets.input_common import DEFAULT_TFDS_DIR

    flags.DEFINE_enum("dataset", "cifar10", list(cifar_data.DATASETS), "Data set.")
    flags.DEFINE_string(
        "data_path",
        None,
        "Folder of the official binary files (cifar-10-batches-bin/ or "
        "cifar-100-binary/, or their parent), or an image folder train/<class>/*.jpg "
        "and test/<class>/... (or its parent, e.g. where cifar-10-jpeg/ was "
        "unpacked). Default: read tensorflow-datasets (TensorFlow backend only).",
    )
    flags.DEFINE_string(
        "data_dir", str(DEFAULT_TFDS_DIR), "tensorflow-datasets directory (see data/README.md)."
    )


def define_runtime_flags() -> None:
    """Where and how a launcher runs (:class:`RuntimeConfig`'s fields), and --summary_only."""
    define_flags(RuntimeConfig)
    flags.DEFINE_bool(
        "summary_only", False, "Print the layer table and parameter counts, and exit without data."
    )


def linear_scaling(cfg: TrainConfig, base_batch: int) -> TrainConfig:
    """``cfg`` with its learning rate multiplied by ``batch_size / base_batch`` (--scale_lr: the
    linear scaling rule, for a batch larger than the one the rate was tuned for)."""
    return dataclasses.replace(cfg, learning_rate=cfg.learning_rate * cfg.batch_size / base_batch)


def train_config_from_flags() -> TrainConfig:
    """The recipe of :func:`define_train_flags`' flags, --scale_lr applied against the
    launcher's default batch (the one its learning rate is tuned for)."""
    cfg = config_from_flags(TrainConfig)
    if FLAGS.scale_lr:
        cfg = linear_scaling(cfg, FLAGS["batch_size"].default)
    return cfg


def start_runtime(cfg: RuntimeConfig, train_cfg: TrainConfig, model_dir: str) -> Runtime:
    """The runtime ``cfg`` describes, on the Keras backend in use: TensorFlow's
    :func:`resnet_noBN.backends.distribute.start_runtime`, or :func:`backend.start_jax_runtime`.

    The seed: ``cfg.seed``; else, resuming, the one ``model_dir``'s config.json recorded (so a
    rerun continues the same data order); else drawn at random.
    """
    seed = cfg.seed
    if seed is None:
        seed = run_log.read_config(model_dir).get(run_log.SEED_KEY)
    batch_sizes = {name: getattr(train_cfg, name) for name in ("batch_size", "eval_batch_size")}
    if not backend.is_tensorflow():
        defaults = RuntimeConfig()
        return backend.start_jax_runtime(
            cfg.strategy,
            batch_sizes=batch_sizes,
            seed=seed,
            precision=cfg.precision,
            tensorflow_only={
                name: getattr(cfg, name)
                for name in (
                    "jit_compile",
                    "intra_op_threads",
                    "inter_op_threads",
                    "deterministic",
                    "cluster_resolver",
                )
                if getattr(cfg, name) != getattr(defaults, name)
            },
        )
    from resnet_noBN.backends import distribute

    return distribute.start_runtime(
        cfg.strategy,
        cfg.cluster_resolver,
        batch_sizes=batch_sizes,
        seed=seed,
        precision=cfg.precision,
        intra_op_threads=cfg.intra_op_threads,
        inter_op_threads=cfg.inter_op_threads,
        deterministic=cfg.deterministic,
    )


def make_trainer(
    runtime: Runtime,
    cfg: RuntimeConfig,
    build_model,
    train_cfg: TrainConfig,
    model_dir: str,
    **kwargs,
) -> TrainLoop:
    """:func:`backend.make_trainer` with ``cfg``'s jit_compile and time_budget_s."""
    return backend.make_trainer(
        runtime,
        build_model,
        train_cfg,
        model_dir,
        jit_compile=cfg.jit_compile,
        time_budget_s=cfg.time_budget_s,
        **kwargs,
    )


def begin_run(
    runtime: Runtime,
    label: str,
    train_cfg: TrainConfig,
    model_dir: str,
    run_config: dict,
) -> None:
    """The chief records ``run_config`` in ``model_dir``; every task prints where it runs.

    ``config.json`` also records the backend (a run resumes on the backend it started on: the
    checkpoint formats differ) and, under ``runtime``, where it computes (TensorFlow: oneDNN on
    or not, and why; JAX: the devices; the CPU's vector extensions), which a resumed run may
    change.
    """
    host = backend.report(runtime)
    if runtime.is_chief:
        run_log.record_config(
            model_dir, {**run_config, run_log.SEED_KEY: runtime.seed, run_log.RUNTIME_KEY: host}
        )
    print(
        f"{label}: {backend.name()} backend, {runtime.replicas} replica(s) x "
        f"{runtime.input_pipelines} input pipeline(s), global batch {train_cfg.batch_size}, "
        f"seed {runtime.seed}, model_dir {model_dir}",
        flush=True,
    )
    if host["backend"] == "tensorflow":
        where = f"oneDNN {'on' if host['onednn'] else 'off'}: {host['onednn_reason']}"
    else:
        where = f"devices {', '.join(host['devices'])}"
    print(f"{where}; CPU {', '.join(host['cpu_isa']) or 'extensions unknown'}", flush=True)


def check_backend(run_config: dict) -> dict:
    """``run_config`` with the backend, which a resumed run must share (InputError for a backend
    the launchers do not support)."""
    if backend.name() not in ("tensorflow", "jax"):
        raise InputError(f"KERAS_BACKEND={backend.name()} is not supported; use tensorflow or jax")
    return {**run_config, "backend": backend.name()}


def train_and_report(trainer: TrainLoop, train_fn, eval_fn, **report) -> dict:
    """Train, then print the run's one line of JSON (``report`` first); returns the result."""
    try:
        result = trainer.train(train_fn, eval_fn, print_fn=lambda line: print(line, flush=True))
    finally:
        trainer.close()
    print(json.dumps({**report, **result}), flush=True)
    return result


def run(main) -> None:
    """``app.run(main)``, with a bad flag reported as one line ``error: ...`` and exit 2."""

    def parse(argv):
        try:
            return FLAGS(argv)
        except flags.Error as e:
            print(f"error: {e}", file=sys.stderr)
            sys.exit(2)

    def quiet_tf_info(argv):  # absl's default verbosity shows TensorFlow's INFO chatter
        logging.set_verbosity(logging.WARNING)
        return main(argv)

    app.run(quiet_tf_info, flags_parser=parse)


def exit_codes(main):
    """Wrap an absl ``main``: bad input (stray arguments too) -> 'error: ...' and exit 2;
    divergence -> exit 1; preemption (checkpoint saved) -> exit 3."""

    @functools.wraps(main)
    def wrapped(argv):
        try:
            if len(argv) > 1:
                raise InputError(f"unexpected arguments {argv[1:]}; flags are written --name=value")
            return main(argv)
        except (InputError, DataError, CheckpointError) as e:
            print(f"error: {e}", file=sys.stderr)
            sys.exit(2)
        except TrainingDiverged as e:
            print(f"error: {e}", file=sys.stderr)
            sys.exit(1)
        except Preempted as e:
            print(str(e), file=sys.stderr, flush=True)
            sys.exit(PREEMPTED_EXIT)

    return wrapped
