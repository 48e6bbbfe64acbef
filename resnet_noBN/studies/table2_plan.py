"""The plan of Table 2 of arXiv:1611.04231 on one's own machine (``launch/table2.py``): the
paper's CIFAR-10 and CIFAR-100 runs (``configs.experiments``: ``cifar10_paper``,
``cifar100_paper``; the paper: 6.38% and 24.64% test error) from several seeds, each a
``launch/cifar.py`` run in its own folder (``studies.arm_runs``: ``<output_dir>/runs/<experiment>-
seed<k>``), one after the other: seed 0 of both data sets first, so the first answer of each
comes first.

:func:`build` checks everything before anything is written, each refusal one line
(``InputError``): the seeds, the flags given to every run, each data path holding its data set
(not the other's), the Keras backend, each run's config (``launch/cifar.py --print_config``)
against the ``config.json`` a folder already holds (its recipe whole, the steps included: a
table of runs of another recipe is no Table 2), and each run still to train as it would start
(``launch/cifar.py --check_only``). The device is read without loading a backend
(``nvidia-smi``): on a GPU the runs take the backend and precision measured on GPUs here (JAX,
bfloat16 convolutions: results/gpu_h200), on a CPU the default backend in float32.

:func:`measure` times the first run to train for a few steps in a throwaway folder (the run's
own progress records, ``trainers.loop``: the first call, which compiles, apart), and
:func:`describe` turns that rate into the plan's time: each run's steps left at that rate, its
evaluations at :data:`EVAL_SPEEDUP` times it, and its start-up.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

from resnet_noBN.backends import registry
from resnet_noBN.configs import experiments
from resnet_noBN.configs.errors import DataError, InputError
from resnet_noBN.datasets import cifar_data
from resnet_noBN.host import cpu, processes
from resnet_noBN.progress import DAY_S, clock, duration, finish_at
from resnet_noBN.runs import cli, record
from resnet_noBN.runs.run_config import FREE_ON_RESUME
from resnet_noBN.studies import arm_runs, study
from resnet_noBN.studies.arm_runs import checkpoint_step, read_result, run_dir

EXPERIMENTS = {"cifar10": "cifar10_paper", "cifar100": "cifar100_paper"}  # Table 2's CIFAR rows
DATA_FLAGS = {"cifar10": "--cifar10_path", "cifar100": "--cifar100_path"}
# what launch/table2.py gives every run itself, refused in --run_flags (with where it comes from)
OWN_FLAGS = {
    "experiment": "Table 2's experiments",
    "config": "Table 2's experiments",
    "dataset": "Table 2's experiments",
    "seed": "--seeds",
    "data_path": "--cifar10_path and --cifar100_path",
    "model_dir": "--output_dir",
    "precision": "--precision",
}
# a GPU's backend and precision: JAX with bfloat16 convolutions, the only backend measured on a
# GPU here (one H100, one H200: the paper's CIFAR-10 run in 449 s, results/gpu_h200)
GPU_BACKEND, GPU_PRECISION = "jax", "mixed_bfloat16"
# what a recipe may differ in from a run its folder holds: what a resumed run may change
# (runs.record), but the steps: a run of other length is not the paper's
TABLE_FREE = FREE_ON_RESUME - {"train_steps"}
# an evaluation image against a training one: the forward pass alone, about a third of a
# training step's FLOPs (bench/flops.py); one H100 evaluated 68,733 images/s against 18,861
# trained (ops/lease/plan.py, PRIOR)
EVAL_SPEEDUP = 3.0
# the timing run: progress records it is stopped after (the first, whose call compiled, and two
# timed), one every PROBE_LOG_EVERY steps (a GPU's calls long enough to time, a CPU's one step)
PROBE_RECORDS = 3
PROBE_LOG_EVERY = {"gpu": 100, "cpu": 1}
PROBE_STEPS = 1_000_000  # never reached: no evaluation, no checkpoint
PROBE_POLL_S = 0.2  # how often the timing run's records and config.json are read
MAX_SEEDS = 100  # --seeds: each seed is two runs of days on a CPU, hours on a GPU


def runs(seeds: int) -> list[tuple[str, int]]:
    """(experiment, seed) of every run, in the order they train: each seed of both data sets
    before the next seed (``study.runs``)."""
    return study.runs(tuple(EXPERIMENTS.values()), study.Budget(seeds=seeds))


def counted(n: int, thing: str) -> str:
    """``n`` things in words: "1 seed", "3 runs"."""
    return f"{n:,} {thing}{'' if n == 1 else 's'}"


def seeds_text(seeds: int) -> str:
    """``seeds`` in words: "1 seed", "3 seeds"."""
    return counted(seeds, "seed")


def dataset_of(experiment: str) -> str:
    """The data set of one of Table 2's experiments ("cifar10", "cifar100")."""
    return next(d for d, e in EXPERIMENTS.items() if e == experiment)


def gpus() -> list[str]:
    """The GPUs ``nvidia-smi -L`` lists, by name; none without the tool or a GPU. No backend
    loads (a GPU machine may have JAX and no TensorFlow)."""
    tool = shutil.which("nvidia-smi")
    if tool is None:
        return []
    try:
        proc = subprocess.run([tool, "-L"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return []
    if proc.returncode != 0:
        return []
    return re.findall(r"^GPU \d+: (.+?)(?: \(UUID: [^)]*\))?$", proc.stdout, re.MULTILINE)


def check_run_flags(run_flags: list[str]) -> None:
    """InputError (one line) for a flag of every run that launch/table2.py sets itself."""
    for flag in run_flags:
        name = flag.lstrip("-").split("=", 1)[0]
        if name in OWN_FLAGS:
            raise InputError(
                f"--run_flags: {flag} is set for every run by launch/table2.py (from "
                f"{OWN_FLAGS[name]}); drop it"
            )


def check_data(dataset: str, path: str, flag: str) -> int:
    """The test images of ``path``, checked to hold ``dataset`` (``cifar_data.check_data_path``);
    InputError, one line naming ``flag``, where it does not, and where it holds the other data
    set's files instead."""
    spec = cifar_data.DATASETS[dataset]
    try:
        cifar_data.check_data_path(dataset, path)
    except DataError as e:
        other = next(d for d in EXPERIMENTS if d != dataset)
        try:
            cifar_data.check_data_path(other, path)
        except DataError:
            said = str(e)
            raise InputError(
                said.replace("--data_path", flag) if "--data_path" in said else f"{flag}: {said}"
            ) from None
        raise InputError(
            f"{flag}={path} holds {cifar_data.DATASETS[other].title}'s files, not "
            f"{spec.title}'s: point {flag} at the {spec.title} binary files ({spec.folder}/) or "
            f"their parent, and {DATA_FLAGS[other]} at these"
        ) from None
    return cifar_data.num_records(dataset, path, "test")


@dataclasses.dataclass(frozen=True)
class RunState:
    """Where one run of the table stands: ``kind`` "ended", "diverged", "stopped" (a checkpoint
    to resume from) or "to do"; ``step``: its last step, the step its loss turned non-finite, or
    its checkpoint's."""

    experiment: str
    seed: int
    folder: str
    kind: str
    step: int

    @property
    def to_train(self) -> bool:
        return self.kind in ("stopped", "to do")


def state(output_dir: str, experiment: str, seed: int) -> RunState:
    """Where the run ``experiment``, ``seed`` of ``output_dir`` stands (its result.json, else its
    checkpoints)."""
    folder = run_dir(output_dir, experiment, seed)
    result = read_result(output_dir, experiment, seed)
    if result is None:
        step = checkpoint_step(folder)
        return RunState(experiment, seed, folder, "stopped" if step else "to do", step)
    if result.get("diverged"):
        step = result.get("diverged_at") or result.get("final_step", 0)
        return RunState(experiment, seed, folder, "diverged", step)
    return RunState(experiment, seed, folder, "ended", result["final_step"])


@dataclasses.dataclass(frozen=True)
class Plan:
    """What one invocation runs: the folder, the seeds, each data set's path and test images,
    the GPUs seen, the backend and precision (None: the experiments', float32) with why, the
    flags given to every run, and each experiment's config (``--print_config``)."""

    output_dir: str
    seeds: int
    data: dict[str, str]
    test_images: dict[str, int]
    gpus: list[str]
    backend: str
    backend_why: str
    precision: str | None
    precision_why: str
    run_flags: list[str]
    configs: dict[str, dict] = dataclasses.field(default_factory=dict)

    def command(self, experiment: str, seed: int) -> list[str]:
        """The run's ``launch/cifar.py`` command: the experiment, seeded, on its data, in its
        folder; the divergence replay where the experiment has none (a diverged run of the
        table brings its last steps), the precision, then the flags of every run."""
        replay = experiments.DIVERGENCE_REPLAY["replay_divergence"]
        has_replay = "replay_divergence" in experiments.EXPERIMENTS[experiment].recipe
        return [
            sys.executable,
            study.LAUNCHER,
            f"--experiment={experiment}",
            f"--seed={seed}",
            f"--data_path={self.data[dataset_of(experiment)]}",
            f"--model_dir={run_dir(self.output_dir, experiment, seed)}",
            *([] if has_replay else [f"--replay_divergence={replay}"]),
            *([f"--precision={self.precision}"] if self.precision else []),
            *self.run_flags,
        ]

    def env(self) -> dict:
        """The runs' environment: this one's, with the Keras backend chosen."""
        return {**os.environ, "KERAS_BACKEND": self.backend}

    def states(self) -> list[RunState]:
        return [state(self.output_dir, e, s) for e, s in runs(self.seeds)]

    @property
    def device_kind(self) -> str:
        return "gpu" if self.gpus else "cpu"

    def device(self) -> str:
        """The machine in words: its GPUs, else its CPU and cores."""
        if self.gpus:
            return ", ".join(self.gpus)
        cores = len(os.sched_getaffinity(0))
        return f"CPU: {cpu.cpu_name()}, {cores} cores (no GPU: nvidia-smi lists none)"


def choose(backend: str | None, precision: str | None, gpu_names: list[str]):
    """(backend, why, precision, why): ``backend`` and ``precision`` where given; else on a GPU
    :data:`GPU_BACKEND` and :data:`GPU_PRECISION`, on a CPU the Keras backend chosen
    (``KERAS_BACKEND``, else TensorFlow) in the experiments' float32. InputError (one line)
    for a backend that is not installed (on a GPU without JAX: naming its GPU build)."""
    if backend:
        backend_why = "--backend"
    elif gpu_names:
        backend, backend_why = GPU_BACKEND, "the only backend measured on a GPU here (H100, H200)"
        if importlib.util.find_spec(GPU_BACKEND) is None:
            raise InputError(
                f"nvidia-smi lists {', '.join(gpu_names)}, where the runs take JAX (the only "
                f"backend measured on a GPU here), and JAX is not installed: "
                f"{registry.GPU_INSTALL}; or pass --backend=tensorflow"
            )
    else:
        backend = registry.check_chosen()
        backend_why = "KERAS_BACKEND" if os.environ.get("KERAS_BACKEND") else "the default on a CPU"
    registry.check_chosen({"KERAS_BACKEND": backend})
    if precision:
        precision_why = "--precision"
    elif gpu_names:
        precision, precision_why = GPU_PRECISION, "bfloat16 convolutions: the default on a GPU"
    else:
        precision_why = "the paper's"
    return backend, backend_why, precision, precision_why


def print_config(plan: Plan, experiment: str) -> dict:
    """The experiment's config as its runs take it (``launch/cifar.py --print_config``, the
    flags of every run given); InputError with its line where the flags are refused."""
    command = [*plan.command(experiment, 0), "--print_config"]
    proc = subprocess.run(command, capture_output=True, text=True, env=plan.env())
    if proc.returncode != 0:
        said = (proc.stderr.strip().splitlines() or [arm_runs.ended_by(proc.returncode)])[-1]
        flags = f" with --run_flags={','.join(plan.run_flags)}" if plan.run_flags else ""
        raise InputError(f"{experiment}{flags}: {said.removeprefix('error: ')}")
    return json.loads(proc.stdout)


def check_folder(run: RunState, config: dict) -> None:
    """InputError (one line) where ``run``'s folder holds a run of another recipe than
    ``config`` (``record.changes``; the precision, intervals and data's copy may differ, not the
    steps), or of another experiment."""
    saved = record.read_config(run.folder)
    if not saved:
        return
    now = {**config, record.BACKEND_KEY: saved.get(record.BACKEND_KEY, "tensorflow")}
    changed = record.changes(saved, now, {}, TABLE_FREE)
    if saved.get("experiment", config["experiment"]) != config["experiment"]:
        changed.insert(0, f"experiment={saved['experiment']!r} there, {config['experiment']!r} now")
    if changed:
        raise InputError(
            f"--output_dir holds a run of another recipe in {run.folder} ({'; '.join(changed)}): "
            "use a new --output_dir, or the --run_flags it was started with"
        )


def build(
    output_dir: str,
    seeds: int,
    data: dict[str, str],
    run_flags: list[str],
    backend: str | None = None,
    precision: str | None = None,
    gpu_names: list[str] | None = None,
) -> Plan:
    """The plan, every check made first (the module's docstring), nothing written; InputError
    (one line) for the first refusal. ``gpu_names``: the GPUs (default: :func:`gpus`)."""
    if not 1 <= seeds <= MAX_SEEDS:
        raise InputError(f"--seeds must be 1 to {MAX_SEEDS}, got {seeds:,}")
    check_run_flags(run_flags)
    test_images = {d: check_data(d, path, DATA_FLAGS[d]) for d, path in data.items()}
    gpu_names = gpus() if gpu_names is None else gpu_names
    chosen = choose(backend, precision, gpu_names)
    plan = Plan(output_dir, seeds, data, test_images, gpu_names, *chosen, run_flags)
    for experiment in EXPERIMENTS.values():
        plan.configs[experiment] = print_config(plan, experiment)
    states = plan.states()
    for run in states:
        check_folder(run, plan.configs[run.experiment])
    arm_runs.check(
        {
            f"{run.experiment}, seed {run.seed}": plan.command(run.experiment, run.seed)
            for run in states
            if run.to_train
        },
        env=plan.env(),
    )
    return plan


TIMING_PREFIX = "table2-timing-"  # the timing run's folder: this prefix, the launcher's pid, "-"


@dataclasses.dataclass(frozen=True)
class Measured:
    """The timing run's rate (images/s over its timed steps), its start-up to its first
    progress record (imports, data, the compiled first step), its timed steps and where it
    computed (its config.json's devices)."""

    images_per_s: float
    startup_s: float
    timed_steps: int
    devices: tuple[str, ...]


def _records(path: str) -> list[dict]:
    """The whole lines of a train.jsonl being written."""
    if not os.path.exists(path):
        return []
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.endswith("\n")]


def remove_left_timing_folders() -> list[str]:
    """Remove the throwaway folders of timing runs whose launcher was killed (``kill -9``: its
    ``finally`` never ran), found in the temporary folder by the launcher's process id in their
    name; those of a launcher still running are kept. Returns the paths removed."""
    removed = []
    for name in sorted(os.listdir(tempfile.gettempdir())):
        pid = name.removeprefix(TIMING_PREFIX).split("-")[0]
        if name.startswith(TIMING_PREFIX) and pid.isdigit() and not processes.running(int(pid)):
            path = os.path.join(tempfile.gettempdir(), name)
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    return removed


@dataclasses.dataclass(frozen=True)
class Timing:
    """What one timing run left: its whole progress records, the seconds to its first, its
    config.json ({} where it wrote none), its exit code, its output's lines, and whether it was
    stopped at its config.json for naming the CPU (:func:`_timing_run`)."""

    records: list[dict]
    first_s: float | None
    config: dict
    returncode: int
    lines: list[str]
    stopped_on_cpu: bool


def _timing_run(plan: Plan, run: RunState, log_every: int) -> Timing:
    """``run``'s command in a throwaway folder (no evaluation, no checkpoint, a progress record
    every ``log_every`` steps), stopped after :data:`PROBE_RECORDS` records; stopped at its
    config.json (written before its first step) where that names the CPU and ``log_every`` is
    a GPU's, whose steps on a CPU would take minutes to an hour at Table 1's width. The
    folder is removed, however this ends (one a killed launcher left, at the next timing run:
    :func:`remove_left_timing_folders`)."""
    folder = tempfile.mkdtemp(prefix=f"{TIMING_PREFIX}{os.getpid()}-")
    model_dir = os.path.join(folder, "run")
    command = [
        *plan.command(run.experiment, run.seed),
        f"--model_dir={model_dir}",
        f"--train_steps={PROBE_STEPS}",
        f"--eval_every={PROBE_STEPS}",
        f"--checkpoint_every={PROBE_STEPS}",
        f"--log_every={log_every}",
        "--replay_divergence=0",
    ]
    watch_cpu = log_every > PROBE_LOG_EVERY["cpu"]
    began, first_s, records, config = time.monotonic(), None, [], {}
    try:
        with open(os.path.join(folder, "launch.log"), "w") as log:  # killed with this process
            proc = arm_runs.popen(command, signal.SIGKILL, stdout=log, stderr=log, env=plan.env())
        try:
            while len(records) < PROBE_RECORDS and proc.poll() is None:
                time.sleep(PROBE_POLL_S)
                records = _records(os.path.join(model_dir, "train.jsonl"))
                if records and first_s is None:
                    first_s = time.monotonic() - began
                config = config or record.read_config(model_dir)
                if watch_cpu and config and arm_runs.on_cpu(config["runtime"]["devices"]):
                    break
            stopped_on_cpu = len(records) < PROBE_RECORDS and proc.poll() is None
        finally:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
        with open(os.path.join(folder, "launch.log")) as log:
            lines = log.read().strip().splitlines() or [arm_runs.ended_by(proc.returncode)]
        config = record.read_config(model_dir)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return Timing(records, first_s, config, proc.returncode, lines, stopped_on_cpu)


def measure(plan: Plan, run: RunState) -> tuple[Measured | None, str]:
    """``run`` timed (:func:`_timing_run`): on a GPU a record every
    ``PROBE_LOG_EVERY["gpu"]`` steps, again every CPU step where the run computes on the CPU
    (JAX without CUDA on a machine whose ``nvidia-smi`` lists a GPU: :func:`describe` warns).
    Returns (the measurement, its line), or (None, why) where the run ended first (a
    divergence, a failure: its last line); InputError where it refused its input."""
    remove_left_timing_folders()
    timing = _timing_run(plan, run, PROBE_LOG_EVERY[plan.device_kind])
    if timing.stopped_on_cpu:
        timing = _timing_run(plan, run, PROBE_LOG_EVERY["cpu"])
    records, name = timing.records, f"{run.experiment}, seed {run.seed}"
    if len(records) < PROBE_RECORDS:
        if timing.returncode == 2:
            raise InputError(f"{name}: {timing.lines[-1].removeprefix('error: ')}")
        step = records[-1]["step"] if records else 0
        why = f"{arm_runs.ended_by(timing.returncode)} at step {step}: {timing.lines[-1]}"
        return None, f"the timing run of {name} ended before a timed step ({why})"
    devices = tuple(timing.config["runtime"]["devices"])
    steps = records[-1]["step"] - 1  # the first call, one step, compiled
    measured = Measured(records[-1]["images_per_sec"], timing.first_s, steps, devices)
    return measured, (
        f"{measured.images_per_s:,.1f} images/s training ({steps} timed steps of {name} on "
        f"{' + '.join(devices)}, in a throwaway folder; start-up {duration(timing.first_s)})"
    )


def evaluations(start: int, end: int, every: int) -> int:
    """The evaluations of a run from step ``start`` to ``end``: every ``every`` steps and the
    last."""
    return end // every - start // every + (1 if end % every else 0)


def seconds(run: RunState, config: dict, test_images: int, measured: Measured) -> float:
    """The run's time left at the measured rate: its start-up, its steps left, its evaluations
    (the whole test split each, at :data:`EVAL_SPEEDUP` times the rate)."""
    recipe = config["recipe"]
    steps_left = recipe["train_steps"] - run.step
    eval_s = test_images / (EVAL_SPEEDUP * measured.images_per_s)
    evals = evaluations(
        run.step, recipe["train_steps"], min(recipe["eval_every"], recipe["train_steps"])
    )
    return (
        measured.startup_s
        + steps_left * recipe["batch_size"] / measured.images_per_s
        + evals * eval_s
    )


def projected(plan: Plan, measured: Measured | None) -> float | None:
    """The time the runs still to train take at the measured rate (:func:`seconds`, each as
    its folder stands now); None where no rate was measured."""
    if measured is None:
        return None
    return sum(
        seconds(r, plan.configs[r.experiment], plan.test_images[dataset_of(r.experiment)], measured)
        for r in plan.states()
        if r.to_train
    )


def _run_line(plan: Plan, run: RunState) -> str:
    recipe = plan.configs[run.experiment]["recipe"]
    steps, every = recipe["train_steps"], min(recipe["eval_every"], recipe["train_steps"])
    name = f"{run.experiment} seed {run.seed}"
    if run.kind == "ended":
        result = read_result(plan.output_dir, run.experiment, run.seed)
        said = f"ended at step {run.step:,}: test error {100 * result['test_error']:.2f}%"
    elif run.kind == "diverged":
        said = f"diverged at step {run.step:,}"
    elif run.kind == "stopped":
        said = f"resumes at step {run.step:,}: {steps - run.step:,} steps to train"
    else:
        said = f"to train: {steps:,} steps, {evaluations(0, steps, every)} evaluations"
    return f"    {name:<22} {said}"


def describe(plan: Plan, measured: Measured | None, measured_line: str, now: float) -> str:
    """The plan in words: the runs (each ended, diverged, resuming or to train), the data, the
    device, backend and precision, the rate measured, the time projected and the finish, and on
    a machine where that is over a day, the faster paths."""
    states = plan.states()
    todo = [r for r in states if r.to_train]
    data = "; ".join(
        f"{cifar_data.DATASETS[d].title} {path} ({plan.test_images[d]:,} test images)"
        for d, path in plan.data.items()
    )
    precision = plan.precision or "float32"
    lines = [
        f"Table 2 of arXiv:1611.04231 (CIFAR-10 {experiments.TABLE2_ERRORS['cifar10_paper']}%, "
        f"CIFAR-100 {experiments.TABLE2_ERRORS['cifar100_paper']}%): {len(states)} runs, "
        f"{seeds_text(plan.seeds)}, into {plan.output_dir}",
        f"  data: {data}",
        f"  device: {plan.device()}",
        f"  backend: {plan.backend} ({plan.backend_why}); precision {precision} "
        f"({plan.precision_why})",
        f"  flags of every run: {' '.join(plan.run_flags) or 'none'}",
        "  runs, in order (each launch/cifar.py --experiment=E --seed=K in "
        f"{run_dir(plan.output_dir, 'E', 'K')}):",
        *(_run_line(plan, run) for run in states),
    ]
    if not todo:
        return "\n".join([*lines, "  nothing to train: every run has ended"])
    lines.append(f"  measured: {measured_line}")
    if measured is None:
        return "\n".join([*lines, "  projected: unknown (no rate measured)"])
    if plan.gpus and arm_runs.on_cpu(measured.devices):
        gpu_build = (
            registry.GPU_INSTALL
            if plan.backend == GPU_BACKEND
            else f"{registry.INSTALL[plan.backend]} with CUDA"
        )
        lines.append(
            f"  warning: nvidia-smi lists {', '.join(plan.gpus)}, but the {plan.backend} backend "
            f"computes on the CPU: install its GPU build ({gpu_build}), or pass --backend"
        )
    total = projected(plan, measured)
    lines.append(
        f"  projected: {duration(total)} for the {counted(len(todo), 'run')} to train (each "
        f"run's steps at that rate, its evaluations at {EVAL_SPEEDUP:g}x it, its start-up), "
        f"finish {clock(finish_at(total, now), now)}"
    )
    if total > DAY_S:
        faster = [f"a GPU, where this command runs {cli.MEASURED_GPU_PATH}"]
        if precision == "float32" and cpu.has_native_bf16() and not plan.gpus:
            faster.append(
                f"--precision=mixed_bfloat16 ({cli.CPU_BF16_SPEEDUP:.2f}x on a Zen 4 CPU with "
                "AVX512_BF16)"
            )
        lines.append(f"  faster: {'; '.join(faster)}")
    return "\n".join(lines)
