"""What every training launcher shares: the recipe's flags, input errors, and the exit codes.

Exit status: 0 trained; 1 the loss diverged (the checkpoints stay intact); 2 bad input, one line
``error: ...`` on stderr, before anything is written; 3 preempted: SIGTERM or SIGINT arrived, a
checkpoint of the step reached was saved, and rerunning the same command resumes there.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import random
import sys

from absl import app, flags, logging

from resnet_noBN import cpu, distribute, speed
from resnet_noBN.cifar_input import DataError
from resnet_noBN.model import HEADS, INITS, SHORTCUTS, param_counts
from resnet_noBN.preemption import Preempted
from resnet_noBN.training import (CheckpointError, TrainConfig, Trainer,
                                  TrainingDiverged, trainer_for)

FLAGS = flags.FLAGS
CONFIG_FILE = "config.json"
RUNTIME_KEY = "runtime"  # where the run ran (config.json); not compared on resume
SEED_KEY = "seed"  # config.json: the run's seed, which a rerun without --seed reuses
PREEMPTED = 3  # the exit status after a preemption's checkpoint: rerun to resume


class InputError(ValueError):
    """Bad command-line input; its message is one line naming the problem and the fix."""


def int_list(flag_name: str, text: str) -> tuple[int, ...]:
    """'30000,50000' -> (30000, 50000), or InputError naming the flag."""
    try:
        return tuple(int(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise InputError(f"--{flag_name} must be comma-separated integers, got '{text}'") from None


def validated(cfg):
    """``cfg`` after ``cfg.validate()``; its ValueError becomes an InputError."""
    try:
        cfg.validate()
    except ValueError as e:
        raise InputError(str(e)) from None
    return cfg


def print_summary(model) -> None:
    """The layer table, then ``name: count`` lines (trainable_params, non_trainable_params, ...)."""
    model.summary(line_length=110)
    for name, value in param_counts(model).items():
        print(f"{name}: {value}")


def define_train_flags(defaults: TrainConfig) -> None:
    """The flags of :class:`TrainConfig`, with the given defaults (the paper's recipe)."""
    flags.DEFINE_integer("train_steps", defaults.train_steps, "Number of updates to train for.")
    flags.DEFINE_integer("batch_size", defaults.batch_size,
                         "GLOBAL batch size, split evenly over all replicas of all workers.")
    flags.DEFINE_float("learning_rate", defaults.learning_rate, "Initial learning rate.")
    flags.DEFINE_string("lr_boundaries", ",".join(map(str, defaults.lr_boundaries)),
                        "Steps at which the learning rate is multiplied by --lr_decay.")
    flags.DEFINE_float("lr_decay", defaults.lr_decay, "Learning-rate factor at each boundary.")
    flags.DEFINE_float("momentum", defaults.momentum, "Momentum of SGD.")
    flags.DEFINE_float("weight_decay", defaults.weight_decay,
                       "Decay rate r of the loss term r * sum ||W||^2 / 2 over conv kernels.")
    flags.DEFINE_integer("eval_every", defaults.eval_every,
                         "Evaluate on the whole test split every this many steps (and at the end).")
    flags.DEFINE_integer("checkpoint_every", defaults.checkpoint_every,
                         "Write a checkpoint every this many steps (and at the end).")
    flags.DEFINE_integer("log_every", defaults.log_every, "Print progress every this many steps.")
    flags.DEFINE_integer("max_checkpoints", defaults.max_checkpoints, "Checkpoints kept.")
    flags.DEFINE_integer("eval_batch_size", defaults.eval_batch_size,
                         "GLOBAL batch size of the evaluation.")


    flags.DEFINE_bool("scale_lr", False,
                      f"Linear scaling rule: multiply --learning_rate by --batch_size / "
                      f"{defaults.batch_size} (the paper's batch), for a larger global batch. "
                      "--train_steps and --lr_boundaries are not rescaled.")


def define_ablation_flags() -> None:
    """The paper's claims as switches: init, head, shortcut, conv biases (defaults: the paper)."""
    flags.DEFINE_enum("init", "hardt_ma", list(INITS),
                      "Residual conv init: hardt_ma sigma=1/(k^2 c) (the paper), standard "
                      "1/(k sqrt(c)) (the paper's comparison point), he sqrt(2/(k^2 c)) (the "
                      "original code's).")
    flags.DEFINE_enum("head", "random", list(HEADS),
                      "Last layer: fixed random projection or trained.")
    flags.DEFINE_enum("shortcut", "pool_pad", list(SHORTCUTS),
                      "Shape-changing shortcuts: avg-pool + zero channels, or 1x1 projection.")
    flags.DEFINE_bool("conv_bias", False,
                      "A bias on every convolution (Table 1 has none; with projection shortcuts "
                      "it gives the 13.59M of the paper's text).")


def define_runtime_flags() -> None:
    """Where and how a launcher runs: strategy, cluster, seed, precision, XLA, threads."""
    flags.DEFINE_enum("strategy", "default", list(distribute.STRATEGIES),
                      "tf.distribute strategy; see resnet_noBN/distribute.py and the README "
                      "(batch semantics).")
    flags.DEFINE_enum("cluster_resolver", "tf_config", list(distribute.RESOLVERS),
                      "Where multi_worker / parameter_server find the cluster: TF_CONFIG or the "
                      "SLURM step's variables.")
    flags.DEFINE_integer("seed", None, "Seed of the weights, data order and augmentation "
                         "(default: the seed of the run being resumed, recorded in its "
                         "config.json, else drawn at random; printed either way).")
    flags.DEFINE_bool("summary_only", False,
                      "Print the layer table and parameter counts, and exit without data.")
    flags.DEFINE_enum("precision", "float32", list(speed.PRECISIONS),
                      "mixed_bfloat16: bfloat16 compute, float32 weights and updates.")
    flags.DEFINE_bool("jit_compile", False, "Compile each replica's forward/backward with XLA.")
    flags.DEFINE_integer("intra_op_threads", None,
                         "Threads within an op (default: all cores on a CPU-only host, else TF's).")
    flags.DEFINE_integer("inter_op_threads", None,
                         "Ops run at once (default: 1 on a CPU-only host, else TF's).")
    flags.DEFINE_bool("deterministic", False,
                      "tf.config.experimental.enable_op_determinism(): bit-identical reruns on "
                      "GPUs too (slower there; a CPU run is deterministic without it).")


def train_config_from_flags() -> TrainConfig:
    """The validated :class:`TrainConfig` the flags describe (InputError otherwise)."""
    learning_rate = FLAGS.learning_rate
    if FLAGS.scale_lr:
        # the launcher's default batch is the paper's, which its learning rate is tuned for
        learning_rate *= FLAGS.batch_size / FLAGS["batch_size"].default
    return validated(TrainConfig(
        train_steps=FLAGS.train_steps, batch_size=FLAGS.batch_size,
        learning_rate=learning_rate,
        lr_boundaries=int_list("lr_boundaries", FLAGS.lr_boundaries), lr_decay=FLAGS.lr_decay,
        momentum=FLAGS.momentum, weight_decay=FLAGS.weight_decay, eval_every=FLAGS.eval_every,
        checkpoint_every=FLAGS.checkpoint_every, log_every=FLAGS.log_every,
        max_checkpoints=FLAGS.max_checkpoints, eval_batch_size=FLAGS.eval_batch_size))


@dataclasses.dataclass(frozen=True)
class Runtime:
    """The strategy a launcher trains under, and what follows from it."""

    strategy: object
    is_chief: bool
    input_pipelines: int
    seed: int


def start_runtime(train_cfg: TrainConfig, model_dir: str) -> Runtime:
    """Threads and precision, then the strategy (before any other TensorFlow op), then seeds.

    The seed: --seed; else, resuming, the one ``model_dir``'s config.json recorded (so a
    rerun continues the same data order); else drawn at random.

    InputError for a bad cluster or a batch the replicas cannot split evenly. A worker or
    parameter server of a parameter-server job never returns: it serves the chief.
    """
    import keras

    default_intra, default_inter = speed.default_threads()
    speed.configure(FLAGS.precision,
                    default_intra if FLAGS.intra_op_threads is None else FLAGS.intra_op_threads,
                    default_inter if FLAGS.inter_op_threads is None else FLAGS.inter_op_threads)
    try:
        strategy, resolver = distribute.make_strategy(FLAGS.strategy, FLAGS.cluster_resolver)
    except distribute.ClusterError as e:
        raise InputError(str(e)) from None
    replicas = strategy.num_replicas_in_sync
    for name in ("batch_size", "eval_batch_size"):
        if getattr(train_cfg, name) % replicas:
            raise InputError(f"--{name}={getattr(train_cfg, name)} is not divisible by the "
                             f"{replicas} replicas; use a multiple of {replicas}")
    seed = FLAGS.seed if FLAGS.seed is not None else _recorded(model_dir).get(SEED_KEY)
    seed = random.randrange(2**31) if seed is None else seed
    chief = distribute.is_chief(resolver)
    seed = distribute.chief_seed(strategy, seed, chief)
    keras.utils.set_random_seed(seed)
    if FLAGS.deterministic:
        import tensorflow as tf

        tf.config.experimental.enable_op_determinism()
    return Runtime(strategy, chief,
                   distribute.input_pipelines(strategy, resolver), seed)


def begin_run(runtime: Runtime, label: str, train_cfg: TrainConfig, model_dir: str,
              run_config: dict) -> None:
    """The chief records ``run_config`` in ``model_dir``; every task prints where it runs.

    ``config.json`` also records, under ``runtime``, the CPU path (oneDNN on or not, and why;
    the CPU's vector extensions), which a resumed run may change.
    """
    host = cpu.runtime_report()
    if runtime.is_chief:
        record_config(model_dir, {**run_config, SEED_KEY: runtime.seed, RUNTIME_KEY: host})
    print(f"{label}: {runtime.strategy.num_replicas_in_sync} replica(s) x "
          f"{runtime.input_pipelines} input pipeline(s), global batch {train_cfg.batch_size}, "
          f"seed {runtime.seed}, model_dir {model_dir}", flush=True)
    print(f"oneDNN {'on' if host['onednn'] else 'off'}: {host['onednn_reason']}; CPU "
          f"{', '.join(host['cpu_isa']) or 'extensions unknown'}", flush=True)


def make_trainer(runtime: Runtime, build_model, train_cfg: TrainConfig, model_dir: str,
                 **kwargs) -> Trainer:
    """A :class:`Trainer` for this runtime (XLA as --jit_compile says)."""
    return trainer_for(runtime.strategy, build_model, train_cfg, model_dir,
                       is_chief=runtime.is_chief, jit_compile=FLAGS.jit_compile, **kwargs)


def train_and_report(trainer: Trainer, train_fn, eval_fn, **report) -> dict:
    """Train, then print the run's one line of JSON (``report`` first); returns the result."""
    try:
        result = trainer.train(train_fn, eval_fn, print_fn=lambda line: print(line, flush=True))
    finally:
        trainer.close()
    print(json.dumps({**report, **result}), flush=True)
    return result


def check_resumable(model_dir: str, run_config: dict, absent: dict | None = None) -> None:
    """InputError if ``model_dir`` holds a run of another architecture or data set.

    ``run_config`` holds what must match for a checkpoint to be resumed; it is written to
    ``config.json`` by :func:`record_config` when a run starts. ``absent``: the value a key
    missing from an older ``config.json`` stands for (what that run used before the switch
    existed: today's default).
    """
    absent = absent or {}
    saved = _recorded(model_dir)
    if not saved:
        return
    run_config = json.loads(json.dumps(run_config))  # as saved: tuples are lists
    changed = [f"{k}={saved.get(k, absent.get(k))!r} there, {v!r} now"
               for k, v in run_config.items()
               if k not in (RUNTIME_KEY, SEED_KEY) and saved.get(k, absent.get(k)) != v]
    if changed:
        raise InputError(f"--model_dir {model_dir} holds a run of another model "
                         f"({'; '.join(changed)}); use a new --model_dir or the same flags")


def _recorded(model_dir: str) -> dict:
    """``model_dir``'s config.json ({} when there is none yet)."""
    path = os.path.join(model_dir, CONFIG_FILE)
    if not os.path.exists(path):
        return {}
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def record_config(model_dir: str, run_config: dict) -> None:
    """Write ``config.json`` (what :func:`check_resumable` compares) into ``model_dir``;
    InputError where the folder cannot be created or written."""
    try:
        os.makedirs(model_dir, exist_ok=True)
        with open(os.path.join(model_dir, CONFIG_FILE), "w", encoding="utf-8") as f:
            json.dump(run_config, f, indent=2, sort_keys=True)
    except OSError as e:
        raise InputError(f"--model_dir {model_dir} cannot be written ({e.strerror}); pick a "
                         "writable folder") from None


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
                raise InputError(f"unexpected arguments {argv[1:]}; flags are written "
                                 "--name=value")
            return main(argv)
        except (InputError, DataError, CheckpointError) as e:
            print(f"error: {e}", file=sys.stderr)
            sys.exit(2)
        except TrainingDiverged as e:
            print(f"error: {e}", file=sys.stderr)
            sys.exit(1)
        except Preempted as e:
            print(str(e), file=sys.stderr, flush=True)
            sys.exit(PREEMPTED)

    return wrapped
