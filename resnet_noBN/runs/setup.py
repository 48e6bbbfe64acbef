"""One run set up, the same way for every launcher and an evaluation, in the order that keeps a
bad input from writing anything (the original ``resnet_main.py``'s start, made safe to resume):

1. the runtime started from the run config (``Backend.start``: the flags the backend cannot
   take refused, the devices or strategy, the batches checked against them, the seed: the
   config's, or the one ``config.json`` recorded where the run resumes, or drawn);
2. the data prepared and checked once (``inputs.CifarInputs.prepare``), before anything is
   written;
3. the folder locked (one run per folder), the record checked against the run it holds and
   written (``run_config.checked_record``), the banner printed;
4. the sources and the trainer built.

What differs between launchers is the data (``runs.inputs``: CIFAR's and ImageNet's, chosen by
the run's launcher) and the trainer's schedule and top-5; :func:`start` takes those.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable

from resnet_noBN.backends import registry
from resnet_noBN.backends.base import Runtime
from resnet_noBN.configs.run_config import RunConfig
from resnet_noBN.models.imagenet_model import build_imagenet_model
from resnet_noBN.models.networks import build_cifar_model
from resnet_noBN.runs import folder_lock, record, run_config
from resnet_noBN.runs.inputs import inputs_of
from resnet_noBN.trainers.loop import TrainLoop

ORIGINAL_2016_WARNING = (
    "warning: --cifar100_layout=original_2016 reads CIFAR-100 as the original 2016 code did: "
    "every image shifted one byte, its fine label in the first red pixel (a label leak); use it "
    "only to measure that bug"
)


@dataclasses.dataclass
class Run:
    """A run set up: its config and folder, the runtime, the trainer and its two sources, and
    its record (what ``config.json`` holds: the data's counts among it)."""

    config: RunConfig
    model_dir: str
    runtime: Runtime
    trainer: TrainLoop
    train_source: object
    eval_source: object
    record: dict


def start_runtime(config: RunConfig, model_dir: str | None = None) -> Runtime:
    """The runtime of ``config`` started by the backend in use (``Backend.start``), its global
    batches checked to split over the replicas, with the seed it takes
    (``run_config.resumed_seed``)."""
    seed = run_config.resumed_seed(config, model_dir)
    recipe = config.recipe
    sizes = {"batch_size": recipe.batch_size, "eval_batch_size": recipe.eval_batch_size}
    return registry.current().start(config.runtime, sizes, seed)


def build_model(config: RunConfig, preprocess=None) -> Callable:
    """What builds the run's network, in its precision (the trainer calls it in its scope);
    ``preprocess``: a layer the network applies to its input first (an exported model's
    normalisation of raw pixels, ``trained.model_file``)."""
    build = build_imagenet_model if config.launcher == "imagenet" else build_cifar_model
    return lambda: build(config.network, config.runtime.precision, preprocess)


def make_trainer(
    config: RunConfig, runtime: Runtime, model_dir: str, title: str = "", **kwargs
) -> TrainLoop:
    """The backend's trainer of ``config`` on ``runtime`` (``kwargs``: the schedule, top5)."""
    return registry.current().make_trainer(
        runtime,
        build_model(config),
        config.recipe,
        model_dir,
        jit_compile=config.runtime.jit_compile,
        time_budget_s=config.runtime.time_budget_s,
        title=title,
        **kwargs,
    )


def begin(config: RunConfig, runtime: Runtime, model_dir: str, label: str) -> dict:
    """The chief records the run in ``model_dir`` (refused where the folder holds another:
    ``run_config.checked_record``), with where it computes (``Backend.report``); every task
    prints where it runs. Returns the record."""
    backend = registry.current()
    host = backend.report(runtime, config.runtime.strategy)
    saved = run_config.checked_record(config, model_dir, backend.name, runtime.seed, host)
    if runtime.is_chief:
        record.record_config(model_dir, saved)
    print(
        f"{label}: {backend.name} backend, {runtime.replicas} replica(s) x "
        f"{runtime.input_pipelines} input pipeline(s), global batch {config.recipe.batch_size}, "
        f"seed {runtime.seed}, model_dir {model_dir}",
        flush=True,
    )
    isa = ", ".join(host["cpu_isa"]) or "extensions unknown"
    print(f"{backend.where(host)}; CPU {isa}", flush=True)
    return saved


def start(config: RunConfig, model_dir: str, title: str = "", **kwargs) -> Run:
    """A whole run set up in ``model_dir`` (the module's order), ready to train: the runtime,
    the data checked, the folder locked for the rest of the process (``runs.folder_lock``:
    exit 2 where another run holds it), the record written, the sources and the trainer
    (``kwargs``: its schedule, top5). Nothing is written before the inputs are checked."""
    config = run_config.resumed(config, model_dir)
    inputs = inputs_of(config)
    runtime = start_runtime(config, model_dir)
    inputs.prepare(config, runtime)
    # the whole job's lock: other tasks write nothing there; a run refused before it writes
    # (the folder holds another run) leaves the folder as it found it
    lock = folder_lock.lock(model_dir) if runtime.is_chief else None
    try:
        saved = begin(config, runtime, model_dir, inputs.label(config))
    except BaseException:  # refused, or stopped (``host.stops``), before it wrote anything
        if lock is not None:
            lock.withdraw()
        raise
    if getattr(config.data, "cifar100_layout", "official") == "original_2016":
        print(ORIGINAL_2016_WARNING, file=sys.stderr, flush=True)
    train_source, eval_source = inputs.sources(config, runtime)
    trainer = make_trainer(config, runtime, model_dir, title, **kwargs)
    return Run(config, model_dir, runtime, trainer, train_source, eval_source, saved)
