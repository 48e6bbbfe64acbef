"""The plan of a lease: which runs, in which order, what each costs, what the GPU does while the
data travels, and the knobs.

The runs are named experiments (``configs.experiments``), each with its own flags: a lease run
``NAME`` is ``launch/cifar.py --experiment=NAME --seed=0``, ``NAME-sK`` the same with seed K.
The default order (:data:`DEFAULT_RUNS`) puts first what Table 2 of arXiv:1611.04231 (CIFAR-10
6.38%, CIFAR-100 24.64%) still lacks on the exact data. The lease of 2026-11-27 gave the paper's
CIFAR-10 (6.79%, seed 0, Keras' form of momentum, one H200; results/gpu_h200). The CIFAR-100
column is missing: every full-width CIFAR-100 run so far read a JPEG copy and diverged at lr 0.05
(bfloat16 at steps 7,500 and 9,400, TF32 at 19,000; results/gpu_h100). At a quarter of the width
with the rate held, the paper's network turned and diverged in one seed of two, while the 2016
code's network neither turned nor diverged and ended 18.76 points lower (results/cifar100_held):
the 2016 network may be where the paper's 24.64% came from. Every experiment trains in the 2016
code's form of momentum, ``momentum_2016``, since 2026-11-28.

1. ``cifar100_paper``: CIFAR-100 with the paper's recipe on the exact data, in bfloat16: does the
   divergence survive the exact data and the 2016 momentum? Its health is in train.jsonl and,
   where it diverges, every step of its last 300 before the NaN in divergence/train.jsonl (the
   CIFAR-100 experiments' ``--replay_divergence=300``: at most the 1,000 steps since the last
   checkpoint again, the last 400 or fewer one step a call; not in the projection), the record
   that showed the gradient norm climbing first on the CPU. A run that diverges ends early, and
   the plan projects again: each time the GPU is free, ``Supervisor.next_task``
   (ops/lease/supervisor.py) calls ``Supervisor.plan_runs``, which schedules the runs still
   pending in the GPU time left then, at the rates measured so far, and starts the first that
   fits;
2. ``cifar100_original_2016``: the 2016 code's network (leaky ReLU, pre-activation units, its
   trained head), batch norm removed, with the paper's recipe on CIFAR-100, the candidate for
   24.64% (at a quarter of the width, 8,000 steps with the drops, two seeds, it ended 5.46
   points below the paper's network: 43.23% against 48.69%, results/cifar100_original_2016_cpu);
3. ``cifar10_paper``: the paper's CIFAR-10 run in today's default, the 2016 code's momentum (the
   accumulator in gradient units, so each learning-rate drop shrinks the step at once), seed 0:
   the figure the README's main command gives, beside the 6.79% of Keras' form on the same seed
   and data;
4. ``cifar100_held_lr_wd_2016``: the paper's rate held with the 2016 code's weight decay
   (2e-4 * w), to step 12,000 (past both bfloat16 NaNs) where it fits: the quarter-width CPU
   runs show the weight norm growing all along and the loss turning near step 5,500 with the
   paper's decay, one of its two seeds diverging at step 6,799, its gradient norm climbing
   first, and neither of twice the decay's two seeds diverging in 8,000 steps, its weight norm
   growing less (two seeds each cannot tell those apart; results/cifar100_held); up to step
   30,000 run 1 is its arm with the paper's decay (the same run until its first drop). Whether
   the decay is what the paper's rate needs at Table 1's width;
5. ``cifar10_original_2016_wd``: the 2016 code the paper forked, whole (its network, its weight
   decay 2e-4 * w, its momentum), batch norm removed, on CIFAR-10;
6. seeds 1 and 2 of runs 1 to 5, in the same order (``-s1`` of each, then ``-s2``); last
   ``cifar100_true_float32`` (lr 0.05 in true float32 to 32,000 of its 60,000 steps: about
   1,650 s at the 2,558 images/s measured, so only in a longer grant).

Every later lease goes on from where the last one left off: a run whose results came back and
are kept in the repository is named, with its folder, in ``finished.txt`` beside this module
(:func:`finished`), and the default order leaves it out (:func:`default_runs`; ``LEASE_RUNS``
runs what it names). Within one lease, ``LEASE_BACK`` (:class:`Back`) keeps a lost machine from
redoing what came back. The 6.79% run is not in ``finished.txt``: it trained in Keras' form of
momentum, so it is not today's ``cifar10_paper``.

A run starts only where its projection (start-up and compile, the steps at the rate measured on
this machine or else :data:`PRIOR`, the whole-test evaluations) ends :data:`Knobs.margin_s`
before the lease's GPU time runs out, with the time to bring its weights back; one that does not
fit is skipped and the next tried. Projected at :data:`PRIOR`'s rates (one H100: a 60,000-step
run about 464 s, one H200 took 449 s; the held run's 12,000 steps about 135 s), with the default
900 s (15 minutes, the start included) and 90 s gone before the first projection (the start, the
first calls): run 1 fits, runs 2, 3 and 5 do not, run 4 and its seed 1 do in what run 1 leaves
(``cifar100_held_lr_wd_2016-s1``). Where run 1 ends within 286 s of GPU time (a divergence by
about step 34,000 at that rate, its replay aside), run 2 fits after it; within 151 s (by about
step 14,000), run 4 after run 2 too. ``LEASE_S=1100`` holds runs 1 and 2 and nothing after them
where run 1 starts with 988 s left (within 82 s of the first call); later, runs 1 and 4 and
seeds of run 4 instead.

While the first run's data travels, the GPU times candidate speed-ups of our step
(:data:`SPEED_TRIES`, each with its prediction written before its result) and the runs train
with the fastest whose loss at step 50 equals the baseline's within :data:`LOSS_RTOL`. Runs
train one at a time: two processes on one H200 reached x1.002 one run's images/s, and two runs
in one compiled step (a ``jax.vmap`` over two seeds, timed on one H200 on 2026-12-04) x0.380.
After the runs (or while a later run's data travels),
the probe's parts (:data:`PROBES`) that earlier leases did not measure.

Standard library and ``configs.experiments`` only: the plan starts before anything is unpacked.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shlex
import sys

from resnet_noBN.configs.experiments import EXPERIMENTS

FIRST_RUNS = (  # runs 1 to 5 of the module docstring, seed 0
    "cifar100_paper",
    "cifar100_original_2016",
    "cifar10_paper",
    "cifar100_held_lr_wd_2016",
    "cifar10_original_2016_wd",
)
DEFAULT_RUNS = (
    *FIRST_RUNS,
    *(f"{name}-s{seed}" for seed in (1, 2) for name in FIRST_RUNS),
    "cifar100_true_float32",
)
FINISHED = os.path.join(os.path.dirname(os.path.abspath(__file__)), "finished.txt")
# Runs stopped before their experiment's end, as a fraction of its steps (the learning-rate
# drops stay where the whole run has them): the true-float32 CIFAR-100 run to one evaluation
# past its first decay (32,000 of 60,000 steps); the held rate past the bfloat16 NaNs (12,000).
STOP_AT = {"cifar100_true_float32": 32_000 / 60_000, "cifar100_held_lr_wd_2016": 12_000 / 60_000}
PAPER_STEPS = 60_000  # the paper's run, the experiments' default
BATCH = 128  # the paper's
TEST_IMAGES = 10_000  # both data sets' test split, evaluated whole
EVAL_EVERY = 2_000  # the launcher's default

# Rates measured on one H100 80GB HBM3 by the leases of 2026-11-24 (results/gpu_h100/README.md),
# used until this machine's own are known: the JAX step in images/s by precision (300 steps in
# one call; float32 = TF32 convolutions, measured inside a run), the whole-test evaluation in
# images/s, the first step (compile) in s; true float32 (TF32 off) as the probe measured it on
# one H200 (2026-11-27, results/gpu_h200/README.md), where the bfloat16 step ran at 20,258.
PRIOR = {
    "mixed_bfloat16": 18_861.0,
    "float32": 10_762.0,
    "true_float32": 2_558.0,
    "eval": 68_733.0,
    "first_step_s": 17.1,
}
LOSS_RTOL = 0.02  # a speed-up passes where its loss at step 50 is the baseline's within 2%
SPEED_GAIN = 1.02  # and trains only where it is this much faster (the timing's noise)
LOSS_STEP = 50


@dataclasses.dataclass(frozen=True)
class SpeedTry:
    """A candidate speed-up of our JAX step: environment for the benchmark and the runs."""

    name: str
    prediction: str
    env: tuple[tuple[str, str], ...] = ()


SPEED_TRIES = (  # the baseline also traces 10 steps: the kernel-time summary (speed/kernels.txt)
    SpeedTry("baseline", "the launcher's step as it is: mixed_bfloat16, NHWC, XLA's defaults"),
    SpeedTry(
        "cudnn_runtime_fusion",
        "cuDNN's runtime fusion of a convolution with the ReLU after it (XLA_FLAGS="
        "--xla_gpu_use_runtime_fusion=true): each unit's first convolution and its ReLU in one "
        "kernel; expect 3 to 10% more images/s (measured on one H200: x1.005)",
        (("XLA_FLAGS", "--xla_gpu_use_runtime_fusion=true"),),
    ),
    SpeedTry(
        "command_buffers_all",
        "every kernel kind in CUDA graphs (XLA_FLAGS=--xla_gpu_enable_command_buffer=FUSION,"
        "CUBLAS,CUBLASLT,CUSTOM_CALL,CUDNN): about 400 kernels a 6.8 ms step, so launches may "
        "cost a few per cent; expect 0 to 5% (measured on one H200: x0.995)",
        (
            (
                "XLA_FLAGS",
                "--xla_gpu_enable_command_buffer=FUSION,CUBLAS,CUBLASLT,CUSTOM_CALL,CUDNN",
            ),
        ),
    ),
    SpeedTry(
        "latency_hiding",
        "XLA's latency-hiding scheduler (XLA_FLAGS=--xla_gpu_enable_latency_hiding_scheduler=true):"
        " a one-GPU step has little to overlap; expect within 2% (measured on one H200: x1.005)",
        (("XLA_FLAGS", "--xla_gpu_enable_latency_hiding_scheduler=true"),),
    ),
)


@dataclasses.dataclass(frozen=True)
class Probe:
    """A part of the probe: a benchmark in a subprocess with a time limit."""

    name: str
    limit_s: float
    what: str
    torch: bool = False  # needs torch


PROBES = (
    Probe(
        "torch_compile",
        180,
        "the PyTorch twin under torch.compile (channels_last, bfloat16 autocast), compile apart "
        "(measured on one H200: 8,158 images/s)",
        torch=True,
    ),
    Probe(
        "true_fp32",
        90,
        "our JAX step in true float32 (TF32 off), for cifar100_true_float32's projection "
        "(measured on one H200: 2,558 images/s)",
    ),
    Probe("torch_eager", 60, "the PyTorch twin, eager (measured: 6,087 images/s)", torch=True),
    Probe("tf32", 90, "our JAX step in float32 with TF32 (measured: 10,762 images/s)"),
)
DEFAULT_PROBES = ()  # every part measured on a lease before: each runs only where named


@dataclasses.dataclass(frozen=True)
class LeaseRun:
    """One run of a lease: an experiment of ``launch/cifar.py`` with a seed, its data set, the
    steps it trains and its precision."""

    name: str
    experiment: str
    seed: int
    dataset: str
    steps: int  # what it trains
    schedule_steps: int  # the run the learning-rate schedule is laid over
    precision: str
    about: str

    def flags(self, smoke: bool) -> list[str]:
        """Its launcher flags beyond the data, folder and time budget: the experiment, the seed,
        the precision, a stop before the schedule's end with the drops where the whole run
        has them; smoke: the small network with the steps and evaluations the plan gives."""
        flags = [f"--experiment={self.experiment}", f"--seed={self.seed}"]
        flags.append(f"--precision={self.precision}")
        if smoke or self.steps != self.schedule_steps:
            flags.append(f"--train_steps={self.steps}")
        if self.steps != self.schedule_steps:  # the experiment's drops, fractions of the whole
            flags.append(f"--schedule_steps={self.schedule_steps}")
        if smoke:
            flags += ["--model=small", f"--eval_every={max(1, self.steps // 2)}", "--log_every=10"]
        return flags

    def evaluations(self, eval_every: int) -> int:
        return self.steps // min(eval_every, self.steps) + 1


RUN_NAME = re.compile(r"^(?P<experiment>[A-Za-z0-9_.]+?)(-s(?P<seed>\d+))?$")


def lease_run(name: str, train_steps: int | None = None) -> LeaseRun:
    """The lease run ``name`` (``EXPERIMENT`` or ``EXPERIMENT-sK``); ``train_steps`` replaces
    the experiment's (a shrunk plan's). ValueError (one line) for a name that is no experiment of
    launch/cifar.py."""
    match = RUN_NAME.match(name)
    exp = EXPERIMENTS.get(match["experiment"]) if match else None
    if exp is None or exp.launcher != "cifar":
        raise ValueError(
            f"LEASE_RUNS names {name!r}: not EXPERIMENT or EXPERIMENT-sSEED of an experiment of "
            "launch/cifar.py (resnet_noBN/configs/experiments.py)"
        )
    schedule = train_steps or exp.recipe.get("train_steps", PAPER_STEPS)
    steps = round(STOP_AT.get(exp.name, 1.0) * schedule)
    precision = exp.runtime.get("precision", "mixed_bfloat16")
    return LeaseRun(
        name=name,
        experiment=exp.name,
        seed=int(match["seed"] or 0),
        dataset=exp.data.get("dataset", "cifar10"),
        steps=max(2, steps),
        schedule_steps=schedule,
        precision=precision,
        about=exp.about,
    )


def finished(path: str | None = None) -> dict[str, str]:
    """The lease runs an earlier lease finished whose results the repository keeps
    (``finished.txt``: ``RUN FOLDER`` a line, ``#`` a comment): {run: its folder}. ValueError
    (one line) for a line that is not a lease run and one folder."""
    done, path = {}, path or FINISHED
    with open(path) as f:
        for number, line in enumerate(f, 1):
            fields = line.split("#", 1)[0].split()
            if not fields:
                continue
            if len(fields) != 2:
                raise ValueError(
                    f"{path}:{number}: {line.strip()!r} is not RUN FOLDER (a lease run and the "
                    "folder under results/ that keeps its results)"
                )
            try:
                lease_run(fields[0])
            except ValueError:
                raise ValueError(
                    f"{path}:{number}: {fields[0]!r} is no lease run (EXPERIMENT or "
                    "EXPERIMENT-sSEED of an experiment of launch/cifar.py)"
                ) from None
            done[fields[0]] = fields[1]
    return done


def default_runs(done) -> tuple[str, ...]:
    """:data:`DEFAULT_RUNS` without the runs in ``done`` (:func:`finished`), in order."""
    return tuple(name for name in DEFAULT_RUNS if name not in done)


def refuse(line: str) -> None:
    """Bad input: one ``error:`` line on stderr, exit 2."""
    print(f"error: {line}", file=sys.stderr)
    raise SystemExit(2)


@dataclasses.dataclass(frozen=True)
class Knobs:
    """The plan's settings, from the environment (``LEASE_*``; README's lease section)."""

    smoke: bool  # LEASE_SMOKE=1: the plan shrunk for a CPU (small network, few steps)
    lease_s: float  # LEASE_S: the lease's GPU time, its machine starts included (900)
    start_s: float  # LEASE_START_S: a machine's start, counted once per machine (30)
    margin_s: float  # LEASE_MARGIN_S: left over at a run's projected end (60)
    return_s: float  # LEASE_RETURN_S: a call that brings a run's weights back (20)
    wait_s: float  # LEASE_WAIT_S: a call waits at most this long for news (540)
    run_start_s: float  # LEASE_RUN_START_S: a run's start-up beside its compile (15)
    speed_s: float  # LEASE_SPEED_S: at most this long timing speed-ups (150)
    runs: tuple[LeaseRun, ...]  # LEASE_RUNS, in order
    speed: tuple[str, ...]  # LEASE_SPEED: which SPEED_TRIES ("" none: the baseline's rate only)
    probes: tuple[str, ...]  # LEASE_PROBE: which PROBES after the runs
    python: str  # PYTHON (python3)
    finished: tuple[str, ...] = ()  # the default runs left out: finished.txt names them

    @classmethod
    def from_env(cls, env=os.environ) -> Knobs:
        smoke = env.get("LEASE_SMOKE", "0") == "1"
        steps = env.get("LEASE_TRAIN_STEPS") or ("40" if smoke else "")
        try:
            done = () if "LEASE_RUNS" in env else tuple(n for n in finished() if n in DEFAULT_RUNS)
            names = [r for r in env.get("LEASE_RUNS", ",".join(default_runs(done))).split(",") if r]
            runs = tuple(lease_run(name, int(steps) if steps else None) for name in names)
        except ValueError as e:
            refuse(str(e))
        if len(set(names)) != len(names):
            refuse(f"LEASE_RUNS names a run twice: {names}")
        speed = _names(env, "LEASE_SPEED", [t.name for t in SPEED_TRIES], DEFAULT_SPEED)
        probes = _names(env, "LEASE_PROBE", [p.name for p in PROBES], DEFAULT_PROBES)
        try:
            numbers = {
                key: float(env.get(name, default)) for key, (name, default) in NUMBERS.items()
            }
        except ValueError as e:
            refuse(f"a LEASE_ time is not a number: {e}")
        return cls(
            smoke=smoke,
            runs=runs,
            speed=speed,
            probes=probes,
            python=env.get("PYTHON", "python3"),
            finished=done,
            **numbers,
        )

    def run(self, name: str) -> LeaseRun:
        return next(r for r in self.runs if r.name == name)

    def datasets(self) -> list[str]:
        """The data sets of the runs, in the order they are first needed."""
        return list(dict.fromkeys(r.dataset for r in self.runs))


NUMBERS = {  # the knobs in seconds: {Knobs field: (its environment variable, its default)}
    "lease_s": ("LEASE_S", 900),
    "start_s": ("LEASE_START_S", 30),
    "margin_s": ("LEASE_MARGIN_S", 60),
    "return_s": ("LEASE_RETURN_S", 20),
    "wait_s": ("LEASE_WAIT_S", 540),
    "run_start_s": ("LEASE_RUN_START_S", 15),
    "speed_s": ("LEASE_SPEED_S", 150),
}
# the baseline alone (its rate, its kernel profile): every other try was timed on one H200
# (2026-11-27, 2026-12-04; results/gpu_h200, results/gpu_h200_cifar100) and runs only where named
DEFAULT_SPEED = ("baseline",)
KNOB_NAMES = (  # the environment a call passes on to the next
    "LEASE_SMOKE",
    "LEASE_RUNS",
    "LEASE_TRAIN_STEPS",
    "LEASE_SPEED",
    "LEASE_PROBE",
    *(name for name, _ in NUMBERS.values()),
)


def _names(env, key: str, known: list[str], default) -> tuple[str, ...]:
    names = tuple(n for n in env.get(key, ",".join(default)).split(",") if n)
    unknown = [n for n in names if n not in known]
    if unknown:
        refuse(f"{key} names {unknown}; the choices are {known}")
    return names


def projection(run: LeaseRun, rate: float, eval_rate: float, first_step_s: float, knobs) -> float:
    """Seconds of GPU time ``run`` takes at ``rate`` training images/s: its start-up and compile,
    the steps, the whole-test evaluations, and a call to bring its weights back."""
    evals = run.evaluations(EVAL_EVERY if not knobs.smoke else max(1, run.steps // 2))
    return (
        knobs.run_start_s
        + first_step_s
        + run.steps * BATCH / rate
        + evals * TEST_IMAGES / eval_rate
        + knobs.return_s
    )


def schedule(runs, left: float, estimate, margin: float) -> tuple[list[str], dict[str, str]]:
    """The runs that fit in ``left`` seconds, in order, each where the ones before it left room
    (``estimate(run)``: its projected seconds): (their names, {skipped one: why})."""
    fits, why = [], {}
    for run in runs:
        need = estimate(run)
        if need + margin <= left:
            fits.append(run.name)
            left -= need
        else:
            why[run.name] = (
                f"projected {need:,.0f} s + margin {margin:.0f} s > {left:,.0f} s of GPU time left"
            )
    return fits, why


@dataclasses.dataclass
class Back:
    """What has come back to the caller, as the caller's next command says it
    (``LEASE_BACK``): the lease's first call's start, the machines started, the speed-up chosen,
    and the items of replies received (a run's results:
    its name; its weights' parts: ``NAME.wI``). A call on a bare machine with it knows the
    machine was lost, and what not to redo."""

    since: float | None = None
    starts: int = 0
    speed: str | None = None
    items: tuple[str, ...] = ()

    @classmethod
    def parse(cls, text: str) -> Back:
        back = cls()
        for field in filter(None, text.split(",")):
            key, _, value = field.partition(":")
            if key == "since":
                back.since = float(value)
            elif key == "starts":
                back.starts = int(value)
            elif key == "speed":
                back.speed = value or None
            elif key == "back":
                back.items = tuple(filter(None, value.split("+")))
            else:
                raise ValueError(f"LEASE_BACK: unknown field {key!r} in {text!r}")
        return back

    def text(self) -> str:
        fields = [f"since:{self.since:.0f}", f"starts:{self.starts}"]
        if self.speed:
            fields.append(f"speed:{self.speed}")
        return ",".join([*fields, "back:" + "+".join(self.items)])


def next_command(env, back: Back) -> str:
    """The command of the next call: this call's LEASE_ knobs and the updated LEASE_BACK."""
    knobs = [f"{key}={shlex.quote(env[key])}" for key in KNOB_NAMES if key in env]
    return " ".join([*knobs, f"LEASE_BACK={back.text()}", "bash launch/gpu_lease.sh"])


def gpu_time(status: dict, now: float) -> tuple[float, float]:
    """(used, left) seconds of the lease's GPU time: since its first call, and a start per
    machine it started."""
    used = now - status["since"] + status["starts"] * status["start_s"]
    return used, status["lease_s"] - used
