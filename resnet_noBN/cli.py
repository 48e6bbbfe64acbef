"""What every training launcher shares: the recipe's flags, input errors, and the exit codes.

Bad input ends a launcher with one line ``error: ...`` on stderr and exit status 2, before
anything is written; a run that diverges ends with status 1 and its checkpoints intact.
"""

from __future__ import annotations

import functools
import json
import os
import sys

from absl import flags

from resnet_noBN.training import TrainConfig, TrainingDiverged

FLAGS = flags.FLAGS
CONFIG_FILE = "config.json"


class InputError(ValueError):
    """Bad command-line input; its message is one line naming the problem and the fix."""


def int_list(flag_name: str, text: str) -> tuple[int, ...]:
    """'30000,50000' -> (30000, 50000), or InputError naming the flag."""
    try:
        return tuple(int(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise InputError(f"--{flag_name} must be comma-separated integers, got '{text}'") from None


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


def train_config_from_flags() -> TrainConfig:
    """The validated :class:`TrainConfig` the flags describe (InputError otherwise)."""
    cfg = TrainConfig(
        train_steps=FLAGS.train_steps, batch_size=FLAGS.batch_size,
        learning_rate=FLAGS.learning_rate,
        lr_boundaries=int_list("lr_boundaries", FLAGS.lr_boundaries), lr_decay=FLAGS.lr_decay,
        momentum=FLAGS.momentum, weight_decay=FLAGS.weight_decay, eval_every=FLAGS.eval_every,
        checkpoint_every=FLAGS.checkpoint_every, log_every=FLAGS.log_every,
        max_checkpoints=FLAGS.max_checkpoints, eval_batch_size=FLAGS.eval_batch_size)
    try:
        cfg.validate()
    except ValueError as e:
        raise InputError(str(e)) from None
    return cfg


def check_resumable(model_dir: str, run_config: dict) -> None:
    """InputError if ``model_dir`` holds a run of another architecture or data set.

    ``run_config`` holds what must match for a checkpoint to be resumed; it is written to
    ``config.json`` by :func:`record_config` when a run starts.
    """
    path = os.path.join(model_dir, CONFIG_FILE)
    if not os.path.exists(path):
        return
    with open(path, encoding="utf-8") as f:
        saved = json.load(f)
    changed = [f"{k}={saved.get(k)!r} there, {v!r} now" for k, v in run_config.items()
               if saved.get(k) != v]
    if changed:
        raise InputError(f"--model_dir {model_dir} holds a run of another model "
                         f"({'; '.join(changed)}); use a new --model_dir or the same flags")


def record_config(model_dir: str, run_config: dict) -> None:
    """Write ``config.json`` (what :func:`check_resumable` compares) into ``model_dir``."""
    os.makedirs(model_dir, exist_ok=True)
    with open(os.path.join(model_dir, CONFIG_FILE), "w", encoding="utf-8") as f:
        json.dump(run_config, f, indent=2, sort_keys=True)


def exit_codes(main):
    """Wrap an absl ``main``: bad input -> 'error: ...' and exit 2; divergence -> exit 1."""

    @functools.wraps(main)
    def wrapped(argv):
        from resnet_noBN.cifar_input import DataError

        try:
            return main(argv)
        except (InputError, DataError) as e:
            print(f"error: {e}", file=sys.stderr)
            sys.exit(2)
        except TrainingDiverged as e:
            print(f"error: {e}", file=sys.stderr)
            sys.exit(1)

    return wrapped
