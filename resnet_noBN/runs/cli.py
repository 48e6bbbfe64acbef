"""What every training launcher shares: the recipe's and the runtime's flags, the run's start,
its report, and the exit codes.

What differs between the Keras backends is the backend object's (``backends.registry.current()``):
TensorFlow is imported only on the TensorFlow backend.

Exit status: 0 trained; 1 the loss diverged (the checkpoints stay intact); 2 bad input, one line
``error: ...`` on stderr, before anything is written; 3 preempted: SIGTERM or SIGINT arrived, a
checkpoint of the step reached was saved, and rerunning the same command resumes there; 4 a
write into the run's folder failed (no space left, any OSError): one line ``error: ...`` naming
the folder, the latest checkpoint whole and restorable, nothing half-written left; free space and
rerun to resume; 5 a peer of a multi-process job died or stopped answering for
``--peer_timeout_s``: one line ``error: ...`` naming it, nothing written damaged; rerun the job
to resume from its latest checkpoint (``configs.errors``).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import sys

from absl import app, flags, logging

from resnet_noBN.backends import cpu, registry
from resnet_noBN.backends.base import Runtime
from resnet_noBN.configs.errors import (
    PREEMPTED_EXIT,
    STORAGE_EXIT,
    DataError,
    InputError,
    Preempted,
    StorageError,
)
from resnet_noBN.configs.flag_config import config_from_flags, define_flags
from resnet_noBN.configs.runtime_config import RuntimeConfig
from resnet_noBN.datasets.data_config import DataConfig
from resnet_noBN.models.model import BlockConfig, param_counts
from resnet_noBN.runs import folder_claim, record
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


def define_cifar_data_flags(exclude: tuple[str, ...] = ()) -> None:
    """The flags of :class:`DataConfig` (but ``exclude``): which CIFAR, where it is read from,
    how (the CIFAR launchers' own)."""
    define_flags(DataConfig, exclude=exclude)


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
    """The runtime ``cfg`` describes, started by the backend in use (``Backend.start``), the
    global batches checked to split over its replicas.

    The seed: ``cfg.seed``; else, resuming, the one ``model_dir``'s config.json recorded (so a
    rerun continues the same data order); else drawn at random.
    """
    seed = cfg.seed
    if seed is None:
        seed = record.read_config(model_dir).get(record.SEED_KEY)
    batch_sizes = {name: getattr(train_cfg, name) for name in ("batch_size", "eval_batch_size")}
    return registry.current().start(cfg, batch_sizes, seed)


def make_trainer(
    runtime: Runtime,
    cfg: RuntimeConfig,
    build_model,
    train_cfg: TrainConfig,
    model_dir: str,
    **kwargs,
) -> TrainLoop:
    """The backend's trainer (``Backend.make_trainer``) with ``cfg``'s jit_compile and
    time_budget_s."""
    return registry.current().make_trainer(
        runtime,
        build_model,
        train_cfg,
        model_dir,
        jit_compile=cfg.jit_compile,
        time_budget_s=cfg.time_budget_s,
        **kwargs,
    )


# What a resumed run may change: the fields declared "may_change" (runs.record)
FREE_ON_RESUME = record.may_change(BlockConfig, TrainConfig, RuntimeConfig, DataConfig)


def checked_record(
    model_dir: str, network, recipe: TrainConfig, data: dict, precision: str, **recipe_extras
) -> dict:
    """The run's record (``runs.record.record``, on the backend in use), refused where
    ``model_dir`` holds a run this one cannot resume. A key an older config.json lacks stands
    for today's default where it is a switch added since: the network's fields, the recipe's
    optimizer, loss and label smoothing, the CIFAR-100 layout."""
    run = record.record(network, recipe, data, registry.current().name, precision, **recipe_extras)
    defaults = TrainConfig()
    absent = {
        "network": dataclasses.asdict(type(network)()),
        "recipe": {k: getattr(defaults, k) for k in ("optimizer", "loss", "label_smoothing")},
        "data": {"cifar100_layout": DataConfig().cifar100_layout},
    }
    record.check_resumable(model_dir, run, absent, FREE_ON_RESUME)
    return run


def claim_folder(runtime: Runtime, model_dir: str) -> folder_claim.Claim | None:
    """The chief's claim on ``model_dir`` for the rest of the process (``runs.folder_claim``:
    FolderBusy, exit 2, where another run holds it), taken before anything is written there;
    it stands for the whole job: other tasks claim nothing and write nothing there."""
    return folder_claim.claim(model_dir) if runtime.is_chief else None


def begin_run(
    runtime: Runtime,
    runtime_cfg: RuntimeConfig,
    label: str,
    train_cfg: TrainConfig,
    model_dir: str,
    run_record: dict,
) -> None:
    """The chief records ``run_record`` in ``model_dir``, with the seed and, under ``runtime``,
    where it computes (``Backend.report``: the strategy, the devices, the versions; TensorFlow:
    oneDNN on or not, and why), which a resumed run may change; every task prints where it
    runs."""
    backend = registry.current()
    host = backend.report(runtime, runtime_cfg.strategy)
    if runtime.is_chief:
        record.record_config(
            model_dir, {**run_record, record.SEED_KEY: runtime.seed, record.RUNTIME_KEY: host}
        )
    print(
        f"{label}: {backend.name} backend, {runtime.replicas} replica(s) x "
        f"{runtime.input_pipelines} input pipeline(s), global batch {train_cfg.batch_size}, "
        f"seed {runtime.seed}, model_dir {model_dir}",
        flush=True,
    )
    isa = ", ".join(host["cpu_isa"]) or "extensions unknown"
    print(f"{backend.where(host)}; CPU {isa}", flush=True)


# bench/README.md, "The levers": the paper model's step on an AMD Zen 4 CPU with AVX512_BF16,
# float32 6.920 s, mixed_bfloat16 3.868 s (same run)
CPU_BF16_SPEEDUP = 6.920 / 3.868


def faster_paths(runtime: Runtime, *more: str) -> str:
    """The faster paths a run projected to take over a day is told of, with the factor measured
    where there is one: a GPU (where it runs on a CPU), mixed_bfloat16 (where it runs float32 on
    a GPU or a CPU that computes bfloat16 natively), ``more`` (the launcher's own), fewer steps."""
    paths = []
    on_gpu = registry.current().has_gpu(runtime)
    if not on_gpu:
        paths.append("a GPU (bench/gpu_lease.sh runs the paper's recipe on a lent one)")
    if runtime.precision == "float32" and (on_gpu or cpu.has_native_bf16()):
        measured = (
            f", {CPU_BF16_SPEEDUP:.2f}x on a Zen 4 CPU with AVX512_BF16" if not on_gpu else ""
        )
        paths.append(f"--precision=mixed_bfloat16 (bfloat16 convolutions{measured})")
    paths += more
    paths.append("fewer --train_steps (the time is proportional to them)")
    return "; ".join(paths)


def train_and_report(trainer: TrainLoop, train_fn, eval_fn, faster: str = "", **report) -> dict:
    """Train, then print the run's one line of JSON (``report`` first); returns the result.
    ``faster``: the faster paths named where the run would take over a day
    (:func:`faster_paths`)."""
    try:
        result = trainer.train(
            train_fn, eval_fn, print_fn=lambda line: print(line, flush=True), faster=faster
        )
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
    divergence -> exit 1; preemption (checkpoint saved) -> exit 3; a failed write into the
    run's folder -> 'error: ...' and exit 4; a lost peer of a multi-process job -> 'error: ...'
    and exit 5 (the backend's ``end_if_peer_lost``)."""

    @functools.wraps(main)
    def wrapped(argv):
        try:
            if len(argv) > 1:
                raise InputError(f"unexpected arguments {argv[1:]}; flags are written --name=value")
            return main(argv)
        except (InputError, DataError, CheckpointError) as e:
            print(f"error: {e}", file=sys.stderr)
            exit_alone(2)
        except TrainingDiverged as e:
            print(f"error: {e}", file=sys.stderr)
            sys.exit(1)
        except Preempted as e:
            print(str(e), file=sys.stderr, flush=True)
            sys.exit(PREEMPTED_EXIT)
        except StorageError as e:
            print(f"error: {e}", file=sys.stderr, flush=True)
            exit_alone(STORAGE_EXIT)
        except Exception as e:
            backend = registry.current()
            backend.end_if_peer_lost(e)  # one line and exit 5, where it is one
            backend.end_now_in_job(1, e)
            raise

    return wrapped


def exit_alone(status: int) -> None:
    """``sys.exit(status)`` after a failure this process alone may have met (bad input, a
    failed write: only process 0 of a JAX job writes); in a job, at once, so that the peers
    waiting for it end too (``Backend.end_now_in_job``). Divergence and preemption are
    met by every process at the same step, and exit through JAX's shutdown as usual."""
    if registry.name() in registry.BACKENDS:
        registry.current().end_now_in_job(status)
    sys.exit(status)
