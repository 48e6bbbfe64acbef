"""Measure the paper's empirical claims (arXiv:1611.04231, Section 4) as seeded comparisons.

    python launch/claims.py --data_path=/data/cifar-10-jpeg \
        --label="CIFAR-10 (JPEG q75 re-encoding)"        # the full sweep (46 min to ~2 h, 2 cores)
    python launch/claims.py                                          # CIFAR-10 from tfds
    python launch/claims.py --quick --data_path=/data/cifar-10-batches-bin   # minutes
    python launch/claims.py --model=paper --precision=mixed_bfloat16 --train_steps=20000 \
        --eval_every=2000 --seeds=1 --arms=trainable_head,batch_norm \
        --data_path=...                                              # Table 1's width, a GPU

Eight arms (``resnet_noBN/runs/claims.py``): the paper's network and seven one-change variants (init
standard / he, trained head, no identity shortcuts, leaky ReLU, conv biases, batch norm), each
trained from the same seeds at the paper's full depth (9 blocks per stage) with stage widths
16/32/64, for 300 steps of batch 128 with the paper's learning-rate shape, and evaluated on the
whole test split. Writes into --output_dir: ``claims.md`` (the table, with the verdict per claim),
``claims.json``, ``claims_curves.png`` and ``runs/<arm>-seed<k>/`` (curves, checkpoints). Ends with
one line of JSON. Interrupted, it reruns only what is missing: a finished run (diverged or not)
is kept, an unfinished one resumes from its checkpoint.
"""

from __future__ import annotations

from resnet_noBN.host import cpu

cpu.default_onednn()  # first, before anything loads TensorFlow: oneDNN on x86 (host/cpu.py)

import dataclasses
import datetime
import json
import os
import shlex
import sys
import time

from absl import flags

from resnet_noBN.backends import registry
from resnet_noBN.configs import presets
from resnet_noBN.configs.errors import InputError
from resnet_noBN.configs.flag_config import config_from_flags, define_flags, validated
from resnet_noBN.configs.runtime_config import RuntimeConfig
from resnet_noBN.datasets import cifar_data
from resnet_noBN.datasets.data_config import DataConfig
from resnet_noBN.progress import Progress
from resnet_noBN.runs import arm_runs, claims, cli, folder_lock, record, run_config

FLAGS = flags.FLAGS
define_flags(DataConfig, exclude=("pad", "cifar100_layout", "jpeg_quality"))
flags.DEFINE_string("output_dir", "results/claims", "Where the table, plots and runs go.")
flags.DEFINE_string(
    "label",
    None,
    "What the data is, for the table and plots (default: the data set's name and --data_path).",
)
_QUICK = claims.QUICK
flags.DEFINE_bool(
    "quick",
    False,
    f"A smoke sweep in minutes: the {_QUICK.model} network (resnet_noBN/configs/presets.py), "
    f"{_QUICK.recipe.train_steps} steps of batch {_QUICK.recipe.batch_size}, {_QUICK.seeds} seeds.",
)
flags.DEFINE_list("arms", list(claims.ARM_NAMES), "Arms to run (the baseline is always run).")
flags.DEFINE_enum(
    "model",
    None,
    list(presets.MODELS),
    f"The network preset of every arm (default {claims.Sweep().model}; --quick {_QUICK.model}); "
    "`paper` is Table 1's full width, for a GPU.",
)
define_flags(RuntimeConfig, only=("precision",))  # --precision, declared once (RuntimeConfig)
flags.DEFINE_integer(
    "seeds", None, f"Seeds per arm (default {claims.Sweep().seeds}; --quick {_QUICK.seeds})."
)
flags.DEFINE_integer(
    "train_steps",
    None,
    f"Steps per run (default {claims.Sweep().recipe.train_steps}; --quick "
    f"{_QUICK.recipe.train_steps}); the learning rate drops 10x at 1/2 and 5/6 of them, as the "
    "paper's 30k and 50k of 60k.",
)
flags.DEFINE_integer(
    "eval_every",
    None,
    f"Evaluate on the whole test split and checkpoint every N steps (default "
    f"{claims.Sweep().recipe.eval_every}, at most --train_steps; a run of 20,000 steps on a GPU "
    "wants 2,000: each evaluation and checkpoint costs time).",
)
flags.DEFINE_float(
    "learning_rate",
    None,
    f"Initial learning rate (default the paper's {claims.Sweep().recipe.learning_rate}).",
)


def sweep_from_flags() -> claims.Sweep:
    """The sweep of --quick, with --seeds, --train_steps, --eval_every and --learning_rate where
    given."""
    sweep = claims.QUICK if FLAGS.quick else claims.Sweep()
    recipe = sweep.recipe
    if FLAGS.learning_rate is not None:
        recipe = dataclasses.replace(recipe, learning_rate=FLAGS.learning_rate)
    if FLAGS.train_steps is not None:
        if FLAGS.train_steps < 2:
            raise InputError(f"--train_steps must be >= 2, got {FLAGS.train_steps}")
    if FLAGS.eval_every is not None and FLAGS.eval_every < 1:
        raise InputError(f"--eval_every must be >= 1, got {FLAGS.eval_every}")
    if FLAGS.train_steps is not None or FLAGS.eval_every is not None:
        recipe = claims.scaled_recipe(
            recipe, FLAGS.train_steps or recipe.train_steps, FLAGS.eval_every
        )
    sweep = dataclasses.replace(sweep, recipe=validated(recipe))
    if FLAGS.seeds is not None:
        sweep = dataclasses.replace(sweep, seeds=FLAGS.seeds)
    if FLAGS.model is not None:
        sweep = dataclasses.replace(sweep, model=FLAGS.model)
    if sweep.seeds < 1:
        raise InputError(f"--seeds must be >= 1, got {sweep.seeds}")
    return sweep


def arms_from_flags() -> list[claims.Arm]:
    unknown = sorted(set(FLAGS.arms) - set(claims.ARM_NAMES))
    if unknown:
        raise InputError(
            f"--arms: unknown arm(s) {', '.join(unknown)}; choose from {','.join(claims.ARM_NAMES)}"
        )
    return [arm for arm in claims.ARMS if arm.name in FLAGS.arms or arm.name == claims.BASELINE]


def machine(host: dict) -> str:
    """CPU model, cores, ISA, and where the backend computes (``host``: ``Backend.report``):
    where the figures were taken."""
    return (
        f"{cpu.cpu_name()}, {len(os.sched_getaffinity(0))} cores "
        f"({', '.join(host['cpu_isa'])}), {host['backend']}: {registry.current().where(host)}"
    )


def run_configs(runs, sweep, data: DataConfig) -> dict:
    """{model_dir: (its run config, the record of its run)}, each checked against a folder
    already there (a folder of other settings is refused before anything is written)."""
    backend, configs = registry.current().name, {}
    for arm, seed in runs:
        model_dir = arm_runs.run_dir(FLAGS.output_dir, arm.name, seed)
        config = claims.arm_config(arm, sweep, data, FLAGS.precision)
        configs[model_dir] = config, run_config.checked_record(config, model_dir, backend, seed)
    return configs


def report_header(label: str, sweep, data: DataConfig, host: dict) -> str:
    """The head of claims.md: the budget, the recipe, the machine, the date and the command."""
    command = "python launch/claims.py " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    model, recipe = claims.arm_config(claims.ARMS[0], sweep, data).network, sweep.recipe
    return (
        f"# The paper's claims, measured: {label}\n\n"
        f"{model.num_residual_units} blocks per stage, stage widths "
        f"{'/'.join(map(str, model.stage_widths))}, {recipe.train_steps} steps of batch "
        f"{recipe.batch_size} (lr {recipe.learning_rate}, x0.1 at steps "
        f"{', '.join(map(str, recipe.boundary_steps()))}), {sweep.seeds} seeds per arm, "
        f"{FLAGS.precision}; "
        f"test error on the whole test split after the last step.\n"
        f"This invocation: {machine(host)}, {datetime.date.today().isoformat()}.\n"
        f"Command: `{command}`\n"
    )


def train_run(arm, seed: int, config, model_dir: str, runtime) -> str:
    """One arm's seed trained (or resumed) in ``model_dir``: the outcome, in words."""
    from resnet_noBN.runs import claim_run  # the backend, loaded by main once the flags hold

    tag = os.path.basename(model_dir)
    result = claim_run.train_one(
        arm,
        seed,
        config,
        model_dir,
        runtime,
        print_fn=lambda line: print(f"  [{tag}] {line}", flush=True),
    )
    if result["diverged"]:
        return f"diverged at step {result['final_step']}"
    return f"test error {100 * result['test_error']:.2f}% in {result['wall_time_s']:.0f} s"


def summary_line(summary: dict, runs: int, ran: int, seconds: float) -> str:
    """The last line: the sweep's result as JSON."""
    arms = {
        name: {k: s[k] for k in ("mean", "sd", "diverged", "seeds")}
        | {"verdict": s["verdict"]["text"]}
        for name, s in summary.items()
    }
    return json.dumps(
        {
            "output_dir": FLAGS.output_dir,
            "runs": runs,
            "ran": ran,
            "wall_time_s": round(seconds, 1),
            "arms": arms,
        }
    )


@cli.exit_codes
def main(argv):
    sweep, arms = sweep_from_flags(), arms_from_flags()
    data = config_from_flags(DataConfig)
    num_classes = cifar_data.num_classes(data.dataset)
    where = data.data_path or "tensorflow-datasets"
    label = FLAGS.label or f"{data.dataset} ({where})"
    runs = [(arm, seed) for seed in range(sweep.seeds) for arm in arms]  # every arm's seed 0 first
    # one runtime for every run (each reseeds it): one process, one device, one precision
    backend, runtime_cfg = registry.current(), config_from_flags(RuntimeConfig)
    recipe = sweep.recipe
    runtime = backend.start(
        runtime_cfg, {"batch_size": recipe.batch_size, "eval_batch_size": recipe.eval_batch_size}
    )
    backend.prepare_data(data)
    # one sweep per --output_dir, held until the process ends; each run's folder checked
    folder_lock.lock(FLAGS.output_dir, "--output_dir")
    configs = run_configs(runs, sweep, data)
    host = backend.report(runtime, runtime_cfg.strategy)
    header = report_header(label, sweep, data, host)
    start = time.perf_counter()
    todo = [r for r in runs if arm_runs.read_result(FLAGS.output_dir, r[0].name, r[1]) is None]
    print(
        f"claims: {len(runs)} runs ({len(arms)} arms x {sweep.seeds} seeds), "
        f"{len(runs) - len(todo)} already finished; {label}; {machine(host)}",
        flush=True,
    )
    progress = Progress(len(todo), every_units=1)
    for i, (arm, seed) in enumerate(todo, 1):
        print(f"[{i}/{len(todo)}] {arm.name}, seed {seed}: {arm.what}", flush=True)
        model_dir = arm_runs.run_dir(FLAGS.output_dir, arm.name, seed)
        config, saved = configs[model_dir]
        runtime_section = {**saved[record.RUNTIME_KEY], **host}
        record.record_config(model_dir, {**saved, record.RUNTIME_KEY: runtime_section})
        run_start = time.perf_counter()
        outcome = train_run(arm, seed, config, model_dir, runtime)
        progress.add(1, time.perf_counter() - run_start)
        print(
            f"[{i}/{len(todo)}] {arm.name}, seed {seed}: {outcome}; {i} of {len(todo)} runs "
            f"done, {progress.text()}",
            flush=True,
        )
        claims.write_report(FLAGS.output_dir, sweep, num_classes, header, label)
    summary = claims.write_report(FLAGS.output_dir, sweep, num_classes, header, label)
    print(claims.markdown_table(summary, sweep), flush=True)
    print(summary_line(summary, len(runs), len(todo), time.perf_counter() - start), flush=True)


if __name__ == "__main__":
    cli.run(main)
