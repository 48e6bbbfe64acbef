"""The lease plan: the paper's CIFAR runs (arXiv:1611.04231, Table 1 network, Section 4 recipe)
on a lent GPU machine held for at most 30 minutes, its start included, driven by
``bench/gpu_lease.sh``.

    python3 bench/lease_plan.py call        # what every call of the lease runs (gpu_lease.sh)
    python3 bench/lease_plan.py tarballs    # the data tarballs LEASE_RUNS needs (its prepare)

A call that finds no plan on the machine (a bare machine) checks the carried files, unpacks the
carried wheels into a scratch site and the JPEG folders, and starts the SUPERVISOR in a session of
its own (``setsid``: it outlives the call), then returns. Every later call waits (at most
``LEASE_WAIT_S``, or until the plan is done), copies what exists into ``$OUT`` (at most 8 files,
none over 16 MiB) and prints a short table last.

The supervisor runs the plan in order, each phase bounded, and rewrites ``status.json``
atomically as it goes (``phase``, ``done``, the GPU time left, the probe's figures, and per run its
state, step, images/s and test error so far); every decision, with the projection that made it,
goes to ``plan.log``:

1. the PROBE, at most ``LEASE_PROBE_S`` (180 s), each part a subprocess with its own time limit,
   a failure logged and skipped: ``bench/throughput.py`` on the JAX training step at batch 128 in
   mixed_bfloat16 (what trains; K steps in one call, the launcher's way: images/s, MFU, compile
   time, peak memory), two such processes side by side (their summed rate: do pairs pay?), the
   PyTorch twin (``bench/torch_twin.py``) on the same GPU, and the step in float32 (TF32);
2. the RUNS of LEASE_RUNS in their order (``RUNS``: on the JAX backend, seed 0,
   mixed_bfloat16; by default ``cifar10``, the paper's recipe on the CIFAR-10 JPEG q75 folder,
   then ``cifar100`` on the CIFAR-100 JPEG q90 folder; also ``cifar100_leaky``, ``cifar100_2016``
   with its leak probe, and ``claims``), each started only where projected to end
   ``LEASE_MARGIN_S`` (180 s) before the lease's GPU time runs out, the first two at once where
   the probe showed that a pair pays and both fit; a run that fails is logged and the next one
   starts;
3. where not even CIFAR-10 fits, the SPEED tries instead: each a benchmark run with one change
   (a profile, a layout, a persistent compilation cache, XLA flags, a larger batch), its
   prediction and result written down.

GPU time used counts from the lease's first call plus an assumed machine start
(``LEASE_START_S``). A call that finds a bare machine while the caller's copy of the last
``status.json`` (``.carry/status.json``, put there after each call) shows a plan of this lease
says that the machine was lost, and starts the plan over, counting GPU time from the lost
machine's start plus a second start.

Knobs (environment): LEASE_SMOKE=1 (the same plan shrunk for a CPU: the ``small`` preset, 40
steps, a shrunk probe), LEASE_S (1800), LEASE_START_S (180), LEASE_MARGIN_S (180), LEASE_WAIT_S
(540), LEASE_PROBE_S (180), LEASE_PROBE (parts: bf16,pair,torch,fp32), LEASE_PAIR_GAIN (1.15:
pairs pay where two side by side reach this times one alone), LEASE_RUNS (cifar10,cifar100;
any of ``RUNS``),
LEASE_TRAIN_STEPS (60000), LEASE_EVAL_EVERY (2000), LEASE_RUN_START_S (30: a run's start-up
beside the compile the probe measured), LEASE_SPEED_TRIES (how many speed tries at most),
LEASE_FLAGS (more ``launch/cifar.py`` flags for each run but the claims, after the plan's own so
that they win, e.g. ``--relu_leakiness=0.1`` or ``--seed=1``; the projection still assumes the
probe's bf16 rate), LEASE_WORK (runs/lease), LEASE_CARRY (.carry), PYTHON (python3).

Standard library only: it imports neither TensorFlow nor Keras nor this project.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shlex
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


@dataclasses.dataclass(frozen=True)
class Run:
    """One run a lease can hold, for the plan's N steps (LEASE_TRAIN_STEPS, the paper's 60,000):
    ``launch/cifar.py`` over ``fraction`` of N with the paper's learning-rate shape (x0.1 at 1/2
    and 5/6, as 30,000 and 50,000 of 60,000), or, where ``arms`` are named, ``launch/claims.py``:
    the paper's network and those arms (seed 0), each over N / (arms + 1) steps."""

    dataset: str
    folder: str  # the carried tarball's stem and its top folder
    label: str  # the data, for the figures
    what: str  # the run in words
    flags: tuple[str, ...] = ()  # its launcher's flags beyond the plan's
    fraction: float = 1.0
    arms: tuple[str, ...] = ()
    leak_probe: bool = False  # then launch/evaluate.py --first_red_pixel=wrong_label
    cost: float = 1.0  # its mean step time over the probe's (the paper's network's)
    returns: tuple[str, ...] = ("metrics.jsonl", "test_error.png")  # files of it into $OUT

    def trainings(self) -> int:
        return len(self.arms) + 1  # the paper's network and each arm; a cifar.py run: 1

    def steps(self, n: int) -> int:
        """The steps of each of its trainings."""
        return max(2, n // self.trainings() if self.arms else round(self.fraction * n))

    def recipe_flags(self, n: int, eval_every: int) -> list[str]:
        steps = self.steps(n)
        every = min(eval_every, steps)
        flags = [f"--train_steps={steps}", f"--eval_every={every}"]
        if self.arms:
            return [*flags, "--seeds=1", f"--arms={','.join(self.arms)}"]
        # resnet_noBN.trainers.recipe.paper_boundaries (this module imports nothing of the
        # project); launch/claims.py scales its own
        boundaries = sorted({max(1, steps // 2), max(2, 5 * steps // 6)})
        return [
            *flags,
            f"--checkpoint_every={every}",
            f"--lr_boundaries={','.join(map(str, boundaries))}",
        ]


CIFAR10 = ("cifar10", "cifar-10-jpeg", "CIFAR-10 (JPEG q75 re-encoding)")
CIFAR100 = ("cifar100", "cifar-100-jpeg", "CIFAR-100 (JPEG q90 re-encoding)")
RUNS = {
    "cifar10": Run(*CIFAR10, "the paper's recipe (Table 2)"),
    "cifar100": Run(*CIFAR100, "the paper's recipe (Table 2)"),
    "cifar100_leaky": Run(
        *CIFAR100,
        "the paper's recipe with the original code's leaky ReLU (slope 0.1)",
        ("--relu_leakiness=0.1",),
    ),
    "cifar100_2016": Run(
        *CIFAR100,
        "lr 0.02 over 0.8 of the steps (where lr 0.05 diverged), read as the original 2016 "
        "reader did (the fine label in the first red pixel), then the leak probe",
        ("--cifar100_layout=original_2016", "--learning_rate=0.02"),
        fraction=0.8,
        leak_probe=True,
    ),
    "claims": Run(
        *CIFAR10,
        "the paper's network against the trained head and against batch norm (Section 4), "
        "launch/claims.py",
        arms=("trainable_head", "batch_norm"),
        returns=("claims_curves.png",),
        # one H100, 2026-11-24: the paper's network 18,907 images/s, the trained head 18,710,
        # batch norm 12,552 (x1.51), so the three arms' mean step is x1.17 the probe's
        cost=1.17,
    ),
}
TEST_IMAGES = 10_000  # both data sets' test split, evaluated whole every --eval_every steps
BATCH = 128  # the paper's
OUT_FILES = 8  # what $OUT brings back
OUT_FILE_BYTES = 16 * 1024 * 1024
CALL_STARTED = time.time()  # the lease's GPU time counts from its first call's start


def refuse(line: str) -> None:
    """Bad input: one line on stderr, exit 2."""
    print(line, file=sys.stderr)
    raise SystemExit(2)


@dataclasses.dataclass(frozen=True)
class Knobs:
    """The plan's settings, from the environment (module docstring)."""

    smoke: bool
    lease_s: float
    start_s: float
    margin_s: float
    wait_s: float
    probe_s: float
    probe_parts: tuple[str, ...]
    pair_gain: float
    runs: tuple[str, ...]
    train_steps: int
    eval_every: int
    run_start_s: float
    speed_tries: int
    run_flags: tuple[str, ...]
    work: Path
    carry: Path
    python: str

    @classmethod
    def from_env(cls, env=os.environ) -> Knobs:
        smoke = env.get("LEASE_SMOKE", "0") == "1"
        runs = tuple(r for r in env.get("LEASE_RUNS", "cifar10,cifar100").split(",") if r)
        unknown = [r for r in runs if r not in RUNS]
        if unknown:
            refuse(f"error: LEASE_RUNS names {unknown}; the runs are {list(RUNS)}")
        parts = tuple(p for p in env.get("LEASE_PROBE", ",".join(PROBE_PARTS)).split(",") if p)
        if not set(parts) <= set(PROBE_PARTS):
            refuse(f"error: LEASE_PROBE names {parts}; the parts are {PROBE_PARTS}")
        return cls(
            smoke=smoke,
            lease_s=float(env.get("LEASE_S", 1800)),
            start_s=float(env.get("LEASE_START_S", 180)),
            margin_s=float(env.get("LEASE_MARGIN_S", 180)),
            wait_s=float(env.get("LEASE_WAIT_S", 540)),
            probe_s=float(env.get("LEASE_PROBE_S", 180)),
            probe_parts=parts,
            pair_gain=float(env.get("LEASE_PAIR_GAIN", 1.15)),
            runs=runs,
            train_steps=int(env.get("LEASE_TRAIN_STEPS", 40 if smoke else 60_000)),
            eval_every=int(env.get("LEASE_EVAL_EVERY", 20 if smoke else 2000)),
            run_start_s=float(env.get("LEASE_RUN_START_S", 30)),
            speed_tries=int(env.get("LEASE_SPEED_TRIES", 99)),
            run_flags=tuple(shlex.split(env.get("LEASE_FLAGS", ""))),
            work=ROOT / env.get("LEASE_WORK", "runs/lease"),
            carry=ROOT / env.get("LEASE_CARRY", ".carry"),
            python=env.get("PYTHON", "python3"),
        )

    def model_flags(self) -> list[str]:
        return ["--model=small"] if self.smoke else []


# ---- the probe: (part, time limit s, throughput.py / torch_twin.py flags for the GPU, for smoke)
_BENCH_SMOKE = ["--steps=3", "--warmup=1", "--chunk_steps=10", "--no-measure_matmul"]
PROBE = {
    "bf16": (
        100,
        ["--steps=20", "--warmup=3", "--chunk_steps=300", "--eval_batches=4"],
        [*_BENCH_SMOKE, "--eval_batches=1"],
    ),
    "pair": (
        90,
        ["--steps=5", "--warmup=2", "--chunk_steps=500", "--eval_batches=0", "--no-measure_matmul"],
        [*_BENCH_SMOKE, "--eval_batches=0"],
    ),
    "torch": (40, ["--steps=20", "--warmup=3", "--device=cuda"], ["--steps=3", "--warmup=1"]),
    "fp32": (
        60,
        [
            "--steps=10",
            "--warmup=2",
            "--chunk_steps=200",
            "--eval_batches=0",
            "--no-measure_matmul",
        ],
        [*_BENCH_SMOKE, "--eval_batches=0"],
    ),
}
PROBE_PARTS = tuple(PROBE)
PAIR_ENV = {"XLA_PYTHON_CLIENT_MEM_FRACTION": "0.45"}  # two JAX processes on one GPU

# ---- the speed tries, where not even CIFAR-10 fits: (name, prediction, flags, env, GPU only)
SPEED_TRIES = (
    (
        "profile",
        "a trace of 5 steps (jax.profiler) shows whether the convolutions or the gaps between "
        "kernels take the step; the step itself unchanged",
        ["--profile_dir={work}/speed/profile", "--profile_steps=5"],
        {},
        False,
    ),
    (
        "channels_first",
        "NCHW convolutions: cuDNN's bf16 kernels are NHWC-native on Hopper, so expect the same "
        "or slower (transposes)",
        ["--data_format=channels_first"],
        {},
        False,
    ),
    (
        "compilation_cache",
        "a persistent compilation cache (JAX_COMPILATION_CACHE_DIR; this try runs twice, timed "
        "the second): the first step drops to loading the executable; images/s unchanged",
        [],
        {"JAX_COMPILATION_CACHE_DIR": "{work}/speed/jax_cache"},
        False,
    ),
    (
        "xla_latency_hiding",
        "XLA_FLAGS=--xla_gpu_enable_latency_hiding_scheduler=true: overlaps independent kernels; "
        "a one-GPU step has little to overlap, expect within 5%",
        [],
        {"XLA_FLAGS": "--xla_gpu_enable_latency_hiding_scheduler=true"},
        True,
    ),
    (
        "batch_256",
        "batch 256 (not the paper's recipe: how far batch 128 leaves the GPU underfed): "
        "images/s up where the step is bound by launches rather than arithmetic",
        ["--batch_size=256"],
        {},
        False,
    ),
)


def gpu_time(status: dict, now: float | None = None) -> tuple[float, float]:
    """(used, left) seconds of the lease's GPU time: since the first call, plus the assumed
    machine start(s)."""
    now = time.time() if now is None else now
    used = now - status["started_at"] + status["start_s"]
    return used, status["lease_s"] - used


def write_json(path: Path, obj) -> None:
    """Write atomically: a reader sees the old file or the new one, never half of one."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(obj, indent=1))
    os.replace(tmp, path)


def read_json(path: Path):
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def read_jsonl(path: Path) -> list[dict]:
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return []
    out = []
    for line in lines:
        try:
            out.append(json.loads(line))
        except ValueError:
            pass  # a line being written
    return out


def last_json_line(text: str):
    """The last line of ``text`` that is a JSON object (the launcher's and benchmark's result)."""
    for line in reversed(text.splitlines()):
        if line.startswith("{"):
            try:
                return json.loads(line)
            except ValueError:
                return None
    return None


def failure_line(text: str) -> str:
    """Why a run failed, from its launcher's output: the last ``error:`` line (the launchers
    end on one: a diverged loss, bad input, a full disk), else the last line there is."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("error:")]
    return (errors or lines or ["no output"])[-1]


class Supervisor:
    """Runs the plan and keeps ``status.json`` and ``plan.log`` up to date."""

    def __init__(self, knobs: Knobs):
        self.k = knobs
        self.work = knobs.work
        self.status = read_json(self.work / "status.json")
        self.env = child_env(knobs)

    # -- bookkeeping
    def log(self, line: str) -> None:
        """One line of plan.log, stamped with the time and the GPU time used and left."""
        used, left = gpu_time(self.status)
        stamp = time.strftime("%H:%M:%S", time.gmtime())
        with open(self.work / "plan.log", "a") as f:
            f.write(f"{stamp} [GPU {used:5.0f} s used, {left:5.0f} s left] {line}\n")

    def save(self) -> None:
        """status.json, with each running run's progress read from its model_dir."""
        self.status["updated_at"] = time.time()
        for name, run in self.status["runs"].items():
            if run["state"] == "running":
                self._progress(name, run)
        write_json(self.work / "status.json", self.status)

    def _progress(self, name: str, run: dict) -> None:
        """Step and images/s (train.jsonl: the steps of all its trainings, the claims' arms
        too), test error so far (metrics.jsonl), and the end projected from the run's own wall
        rate between its first and latest step seen."""
        model_dir = self.work / name
        trains = [
            t
            for t in map(read_jsonl, sorted(model_dir.rglob("train.jsonl"), key=os.path.getmtime))
            if t
        ]
        evals = read_jsonl(model_dir / "metrics.jsonl")
        if trains:
            run["step"] = sum(t[-1]["step"] for t in trains)
            run["images_per_s"] = round(trains[-1][-1]["images_per_sec"], 1)
        if evals:
            run["test_error"] = evals[-1]["test_error"]
            run["test_error_step"] = evals[-1]["step"]
            run["best_test_error"] = min(e["test_error"] for e in evals)
        now = time.time()
        samples = run.setdefault("samples", [])  # (time, step): the run's wall rate, evals in
        if run.get("step") and (not samples or samples[-1][1] != run["step"]):
            samples[:] = [*samples[:1], [now, run["step"]]]
        if len(samples) == 2 and samples[1][1] > samples[0][1]:
            (t0, s0), (t1, s1) = samples
            steps_per_s = (s1 - s0) / (t1 - t0)
            run["projected_end_s"] = round((run["train_steps"] - s1) / steps_per_s - (now - t1))

    def wait(self, procs: list[subprocess.Popen], deadline: float) -> None:
        """Wait for ``procs``, saving the status every 2 s; past ``deadline`` (a time.time()),
        their process groups get SIGTERM, then SIGKILL 15 s later."""
        while any(p.poll() is None for p in procs):
            if time.time() > deadline:
                for p in procs:
                    if p.poll() is None:
                        os.killpg(p.pid, signal.SIGTERM)
                try:
                    for p in procs:
                        p.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    for p in procs:
                        if p.poll() is None:
                            os.killpg(p.pid, signal.SIGKILL)
                    for p in procs:
                        p.wait()
                break
            self.save()
            time.sleep(2)
        self.save()

    def spawn(self, cmd: list[str], log: Path, env: dict | None = None) -> subprocess.Popen:
        """Start ``cmd`` from the tree's root, its output (after the command line) to ``log``."""
        with open(log, "w") as f:
            f.write(" ".join(cmd) + "\n")
            f.flush()
            return subprocess.Popen(
                cmd,
                cwd=ROOT,
                env={**self.env, **(env or {})},
                stdout=f,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,  # its own process group: killed whole at its limit
            )

    # -- the plan
    def run(self) -> None:
        """The whole plan: the probe, then the runs (or the speed tries), then done."""
        self.log(
            f"plan started: runs {list(self.k.runs)}, {self.k.train_steps} steps each"
            + (f", with {shlex.join(self.k.run_flags)}" if self.k.run_flags else "")
        )
        self.probe()
        self.runs()
        self.status.update(phase="done", done=True)
        self.save()
        self.log("plan done")

    def bench_cmd(self, flags: list[str], precision: str = "mixed_bfloat16") -> list[str]:
        """bench/throughput.py on the CIFAR-10 JPEG folder (random records where it is absent)."""
        data = self.work / "data" / RUNS["cifar10"].folder
        return [
            self.k.python,
            "bench/throughput.py",
            f"--precision={precision}",
            "--input_batches=0",
            *([f"--data_path={data}"] if data.is_dir() else []),
            *self.k.model_flags(),
            *flags,
        ]

    def probe(self) -> None:
        self.status["phase"] = "probe"
        self.save()
        probe_dir = self.work / "probe"
        probe_dir.mkdir(exist_ok=True)
        end = time.time() + self.k.probe_s
        results = self.status["probe"]
        for part in self.k.probe_parts:
            limit, gpu_flags, smoke_flags = PROBE[part]
            flags = smoke_flags if self.k.smoke else gpu_flags
            limit = min(limit, end - time.time())
            if limit < 15:
                results[part] = {"skipped": f"the probe's {self.k.probe_s:.0f} s were spent"}
                self.log(f"probe {part}: skipped ({results[part]['skipped']})")
                continue
            t0 = time.time()
            if part == "torch":
                results[part] = self._probe_torch(flags, limit, probe_dir)
            else:
                results[part] = self._probe_jax(part, flags, limit, probe_dir)
            results[part]["wall_s"] = round(time.time() - t0, 1)
            self.log(f"probe {part}: {json.dumps(results[part])}")
            self.save()
        single = results.get("bf16", {}).get("images_per_s")
        pair = results.get("pair", {}).get("images_per_s")
        results["pair_pays"] = bool(single and pair and pair >= self.k.pair_gain * single)
        self.log(
            f"pairs pay: {results['pair_pays']} (two side by side {pair} images/s against one "
            f"{single}; they pay from {self.k.pair_gain} times one)"
        )
        self.save()

    def _probe_jax(self, part: str, flags: list[str], limit: float, probe_dir: Path) -> dict:
        precision = "float32" if part == "fp32" else "mixed_bfloat16"
        copies = 2 if part == "pair" else 1
        procs, outs = [], []
        for i in range(copies):
            out = probe_dir / f"{part}{i if copies > 1 else ''}.json"
            out.unlink(missing_ok=True)
            cmd = self.bench_cmd([*flags, f"--output={out}"], precision)
            env = PAIR_ENV if copies > 1 else None
            procs.append(self.spawn(cmd, out.with_suffix(".log"), env))
            outs.append(out)
        self.wait(procs, time.time() + limit)
        results = [read_json(o) for o in outs]
        if not all(results):
            codes = [p.returncode for p in procs]
            return {"failed": f"exit {codes} within {limit:.0f} s; see probe/{part}*.log"}
        rates = [r.get("chunk_images_per_s") or r["train_images_per_s"] for r in results]
        mfus = [r.get("chunk_mfu") or r.get("mfu") or 0 for r in results]
        first = results[0]
        summary = {  # a pair's images/s and MFU: the two processes' summed
            "images_per_s": round(sum(rates), 1),
            "mfu": round(sum(mfus), 4),
            "first_step_s": first.get("first_step_s"),
            "peak_gpu_memory_mib": first.get("peak_gpu_memory_mib"),
            "peak_host_rss_mib": first.get("peak_host_rss_mib"),
            "device": first.get("device"),
            "device_name": first.get("device_name"),
            "versions": f"{first.get('framework_version')}, Keras {first.get('keras_version')}",
            "precision": precision,
        }
        if "eval_images_per_s" in first:
            summary["eval_images_per_s"] = first["eval_images_per_s"]
        if copies > 1:
            summary["each_images_per_s"] = rates
        return summary

    def _probe_torch(self, flags: list[str], limit: float, probe_dir: Path) -> dict:
        has_torch = subprocess.run(
            [self.k.python, "-c", "import torch"], capture_output=True, env=self.env
        )
        if has_torch.returncode:
            return {"skipped": "torch is not importable here"}
        out = probe_dir / "torch.json"
        cmd = [
            self.k.python,
            "bench/torch_twin.py",
            "--precision=bfloat16",
            *self.k.model_flags(),
            *flags,
            f"--output={out}",
        ]
        self.wait([self.spawn(cmd, probe_dir / "torch.log")], time.time() + limit)
        result = read_json(out)
        if not result:
            return {"failed": f"no result within {limit:.0f} s; see probe/torch.log"}
        return {
            "images_per_s": result["train_images_per_s"],
            "mfu": result.get("mfu"),
            "versions": result.get("framework_version"),
        }

    # -- the runs
    def projection(self, name: str, rate: float, eval_rate: float | None) -> float:
        """Seconds the run ``name`` takes at ``rate`` training images/s: start-up
        (LEASE_RUN_START_S), and for each of its trainings the probe's compile, the steps and
        the whole-test evaluations."""
        run = RUNS[name]
        first = self.status["probe"].get("bf16", {}).get("first_step_s") or 0
        steps = run.steps(self.k.train_steps)
        evals = steps // min(self.k.eval_every, steps) + 1
        eval_rate = eval_rate or 3 * rate  # a forward pass: about a third of a training step
        return self.k.run_start_s + run.trainings() * (
            first + run.cost * steps * BATCH / rate + evals * TEST_IMAGES / eval_rate
        )

    def runs(self) -> None:
        probe = self.status["probe"]
        single = probe.get("bf16", {}).get("images_per_s")
        eval_rate = probe.get("bf16", {}).get("eval_images_per_s")
        todo = list(self.k.runs)
        if not single:
            self.log(
                "no measured rate (the bf16 probe failed): the runs start without a projection"
            )
        if single and probe.get("pair_pays") and len(todo) >= 2:
            pair_rate = probe["pair"]["images_per_s"] / 2
            need = max(
                self.projection(name, pair_rate, eval_rate and eval_rate / 2) for name in todo[:2]
            )
            left = gpu_time(self.status)[1]
            fits = need + self.k.margin_s <= left
            self.log(
                f"{todo[0]} and {todo[1]} side by side: projected {need:.0f} s each at "
                f"{pair_rate:.0f} images/s; {left:.0f} s left, margin {self.k.margin_s:.0f} s: "
                f"{'start both' if fits else 'does not fit'}"
            )
            if fits:
                self.start_runs(todo[:2], paired=True, projected=need)
                todo = todo[2:]
        for i, name in enumerate(todo):
            left = gpu_time(self.status)[1]
            need = self.projection(name, single, eval_rate) if single else 0
            fits = need + self.k.margin_s <= left
            self.log(
                f"{name} alone: projected {need:.0f} s at {single} images/s; {left:.0f} s left, "
                f"margin {self.k.margin_s:.0f} s: {'start' if fits else 'does not fit'}"
            )
            if fits:
                self.start_runs([name], paired=False, projected=need)
                continue
            for rest in todo[i:]:
                self.status["runs"][rest].update(
                    state="skipped",
                    why=f"projected {need:.0f} s + margin {self.k.margin_s:.0f} s > "
                    f"{left:.0f} s of GPU time left",
                )
            if name == self.k.runs[0]:
                self.speed()
            break

    def start_runs(self, names: list[str], paired: bool, projected: float) -> None:
        self.status["phase"] = "+".join(names)
        left = gpu_time(self.status)[1]
        procs = []
        for name in names:
            model_dir = self.work / name
            cmd = self.run_cmd(name, model_dir, left)
            model_dir.mkdir(parents=True, exist_ok=True)
            procs.append(self.spawn(cmd, model_dir / "launch.log", PAIR_ENV if paired else None))
            bf16 = self.status["probe"].get("bf16", {})
            self.status["runs"][name].update(
                state="running",
                data=RUNS[name].label,
                precision="mixed_bfloat16",
                device=bf16.get("device_name"),
                versions=bf16.get("versions"),
                started_at=time.time(),
                projected_s=round(projected),
                paired=paired,
                command=" ".join(cmd),
            )
        self.save()
        # the launcher stops itself at --time_budget_s with a checkpoint; this is the backstop
        self.wait(procs, time.time() + max(30, left - 30))
        for name, proc in zip(names, procs):
            run = self.status["runs"][name]
            self._progress(name, run)
            output = (self.work / name / "launch.log").read_text()
            final = last_json_line(output)
            if proc.returncode not in (0, 3):
                run["why"] = failure_line(output)
            run.update(
                exit=proc.returncode,
                wall_s=round(time.time() - run["started_at"]),
                final=final,
                state={0: "done", 3: "stopped at its time budget"}.get(proc.returncode, "failed"),
            )
            run.pop("projected_end_s", None)
            self.log(
                f"{name}: {run['state']} (exit {proc.returncode}) after {run['wall_s']} s: "
                f"{run.get('why') or json.dumps(final)}"
            )
        self.save()
        for name, proc in zip(names, procs):
            if RUNS[name].leak_probe and proc.returncode == 0:
                self.leak_probe(name)

    def run_cmd(self, name: str, model_dir: Path, left: float) -> list[str]:
        """The launcher's command line of the run ``name`` (seed 0, mixed_bfloat16); the
        cifar.py runs stop themselves with a checkpoint at the GPU time left less the margin."""
        run, k = RUNS[name], self.k
        data = [f"--dataset={run.dataset}", f"--data_path={self.work / 'data' / run.folder}"]
        recipe = run.recipe_flags(k.train_steps, k.eval_every)
        if run.arms:
            return [
                k.python,
                "launch/claims.py",
                *data,
                "--precision=mixed_bfloat16",
                f"--output_dir={model_dir}",
                f"--label={run.label}",
                f"--model={'small' if k.smoke else 'paper'}",
                *recipe,
            ]
        return [
            k.python,
            "launch/cifar.py",
            *data,
            "--precision=mixed_bfloat16",
            "--seed=0",
            f"--model_dir={model_dir}",
            *recipe,
            f"--time_budget_s={max(30, left - k.margin_s):.0f}",
            *(["--log_every=10"] if k.smoke else []),
            *k.model_flags(),
            *run.flags,
            *k.run_flags,
        ]

    def leak_probe(self, name: str) -> None:
        """The finished run ``name`` (read as the 2016 reader did) evaluated again with the
        leaked label in the first red pixel replaced by a wrong one (launch/evaluate.py)."""
        run = self.status["runs"][name]
        left = gpu_time(self.status)[1]
        if left < 60:
            run["leak_probe"] = {"skipped": f"{left:.0f} s of GPU time left"}
        else:
            cmd = [
                self.k.python,
                "launch/evaluate.py",
                f"--model_dir={self.work / name}",
                f"--data_path={self.work / 'data' / RUNS[name].folder}",
                "--first_red_pixel=wrong_label",
            ]
            log = self.work / name / "leak_probe.log"
            self.wait([self.spawn(cmd, log)], time.time() + min(300, left - 30))
            output = log.read_text()
            run["leak_probe"] = last_json_line(output) or {"failed": failure_line(output)}
        self.log(f"{name} leak probe: {json.dumps(run['leak_probe'])}")
        self.save()

    def speed(self) -> None:
        """Not even the first run fits: the lease goes to making the step faster."""
        self.status["phase"] = "speed"
        self.save()
        base = self.status["probe"].get("bf16", {})
        limit = PROBE["bf16"][0]
        speed_dir = self.work / "speed"
        speed_dir.mkdir(exist_ok=True)
        device = base.get("device")
        flags = PROBE["bf16"][2 if self.k.smoke else 1]
        tries = self.status["speed"]
        for name, prediction, extra, env, gpu_only in SPEED_TRIES[: self.k.speed_tries]:
            entry = {"try": name, "prediction": prediction}
            tries.append(entry)
            left = gpu_time(self.status)[1]
            repeats = 2 if name == "compilation_cache" else 1
            if gpu_only and device != "gpu":
                entry["result"] = f"not tried: a GPU flag, and the device is {device}"
            elif repeats * limit + self.k.margin_s > left:
                entry["result"] = f"not tried: {repeats * limit:.0f} s + margin > {left:.0f} s left"
            else:
                fill = {"work": self.work}
                extra = [f.format(**fill) for f in extra]
                env = {key: value.format(**fill) for key, value in env.items()}
                out = speed_dir / f"{name}.json"
                for _ in range(repeats):
                    out.unlink(missing_ok=True)
                    cmd = self.bench_cmd([*flags, *extra, f"--output={out}"])
                    self.wait([self.spawn(cmd, out.with_suffix(".log"), env)], time.time() + limit)
                r = read_json(out)
                if r:
                    rate = r.get("chunk_images_per_s") or r["train_images_per_s"]
                    entry.update(images_per_s=rate, first_step_s=r.get("first_step_s"))
                    entry["result"] = (
                        f"{rate} images/s against {base.get('images_per_s')} (x"
                        f"{rate / base['images_per_s']:.3f}); first step {r.get('first_step_s')} s "
                        f"against {base.get('first_step_s')}"
                        if base.get("images_per_s")
                        else f"{rate} images/s"
                    )
                else:
                    entry["result"] = f"failed or over {limit} s: see speed/{name}.log"
            self.log(f"speed try {name}: {entry['result']}")
            self.save()


def child_env(knobs: Knobs) -> dict:
    """The environment of the probe and the runs: the scratch site (the carried wheels) and this
    tree on PYTHONPATH (the project is not installed there), Keras on JAX."""
    site = knobs.work / "site"
    path = [str(site)] if site.is_dir() else []
    path += [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]
    return {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(path),
        "KERAS_BACKEND": "jax",
        "PYTHONUNBUFFERED": "1",
    }


# ---- a call of the lease


def call(knobs: Knobs) -> int:
    """One call of the lease: on a bare machine start the plan and return; else wait and
    report. Exit 0: done; 3: still running; 1: a run failed or the supervisor is gone; 2: a
    carried file is missing or JAX and Keras do not import."""
    work = knobs.work
    status = read_json(work / "status.json")
    first = status is None
    if first:
        rc = start(knobs)
        if rc:
            return rc
        for _ in range(40):  # the supervisor's first status.json
            time.sleep(0.5)
            if read_json(work / "status.json"):
                break
    return report(knobs, wait_s=0 if first else knobs.wait_s)


def data_folders(runs) -> list[str]:
    """The JPEG folders (carried tarballs' stems) that ``runs`` train on, each once."""
    return list(dict.fromkeys(RUNS[name].folder for name in runs))


def unpack(knobs: Knobs, tarballs: dict[str, Path]) -> str | None:
    """The carried wheels into the scratch site and the JPEG folders into the work folder; what
    is wrong with them, in one line (None: nothing)."""
    work, carry = knobs.work, knobs.carry
    work.mkdir(parents=True, exist_ok=True)
    wheels = sorted((carry / "wheels").glob("*.whl"))
    if wheels:
        pip = "-m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target"
        subprocess.run(
            [knobs.python, *pip.split(), str(work / "site"), *map(str, wheels)],
            check=True,
        )
    data = work / "data"
    data.mkdir(exist_ok=True)
    for name, tarball in tarballs.items():
        subprocess.run(["tar", "xzf", str(tarball), "-C", str(data)], check=True)
        if not (data / name / "test").is_dir():
            return f"{tarball.name} holds no {name}/test/ folder"
    return None


def check_imports(knobs: Knobs) -> str | None:
    """Whether JAX and Keras import as the runs will import them (printing their versions); the
    reason in one line where they do not."""
    check = subprocess.run(
        [
            knobs.python,
            "-c",
            "import jax, keras; print(f'JAX {jax.__version__} on "
            "{jax.devices()}, Keras {keras.__version__} from {keras.__file__}')",
        ],
        env=child_env(knobs),
        capture_output=True,
        text=True,
    )
    if check.returncode:
        why = check.stderr.strip().splitlines()[-1]
        return (
            f"JAX and Keras do not import: {why}; carry the keras, optree and namex wheels "
            "(.carry/wheels)"
        )
    print(check.stdout.strip())
    return None


def first_status(knobs: Knobs, lost: dict | None, now: float) -> dict:
    """The plan's status before anything ran; ``lost``: the carried status of a lost machine of
    this lease, whose start and GPU time the new plan goes on counting."""
    return {
        "phase": "starting",
        "done": False,
        "smoke": knobs.smoke,
        "started_at": lost["started_at"] if lost else now,
        "start_s": (lost["start_s"] if lost else 0) + knobs.start_s,
        "lease_s": knobs.lease_s,
        "margin_s": knobs.margin_s,
        "started_over": bool(lost),
        "probe": {},
        "runs": {
            name: {
                "state": "pending",
                "what": RUNS[name].what,
                "step": 0,
                "train_steps": RUNS[name].trainings() * RUNS[name].steps(knobs.train_steps),
            }
            for name in knobs.runs
        },
        "speed": [],
    }


def start(knobs: Knobs) -> int:
    """On a bare machine: check the carried files, unpack the wheels and data, start the
    supervisor in a session of its own."""
    work, carry = knobs.work, knobs.carry
    tarballs = {folder: carry / f"{folder}.tar.gz" for folder in data_folders(knobs.runs)}
    missing = [str(p.relative_to(ROOT)) for p in tarballs.values() if not p.is_file()]
    if missing:
        print(
            f"error: {', '.join(missing)} missing: run `bash bench/gpu_lease.sh prepare DATA_DIR` "
            "where the JPEG tarballs are, and carry .carry",
            file=sys.stderr,
        )
        return 2
    carried = read_json(carry / "status.json")
    now = CALL_STARTED
    lost = bool(
        carried and carried.get("started_at") and now - carried["started_at"] < carried["lease_s"]
    )
    if lost:
        print(
            f"the machine was lost: the last call's status (carried in {carry.name}/status.json: "
            f"phase {carried['phase']}, lease started {now - carried['started_at']:.0f} s ago) "
            "has nothing on this bare machine; starting the plan over from its beginning "
            f"(GPU time counted from the lost machine's start plus a second start of "
            f"{knobs.start_s:.0f} s)"
        )
    else:
        print(
            "a bare machine and no status of this lease carried: the lease's first call; "
            "starting the plan"
        )
    error = unpack(knobs, tarballs) or check_imports(knobs)
    if error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    status = first_status(knobs, carried if lost else None, now)
    write_json(work / "status.json", status)
    with open(work / "supervisor.log", "w") as log:
        proc = subprocess.Popen(
            [knobs.python, str(Path(__file__).resolve()), "supervise"],
            cwd=ROOT,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,  # setsid: it runs on after this call returns
        )
    (work / "supervisor.pid").write_text(str(proc.pid))
    return 0


def alive(pid: int) -> bool:
    """Whether the process ``pid`` runs (a zombie does not)."""
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] != "Z"
    except (OSError, IndexError):
        return True


def report(knobs: Knobs, wait_s: float) -> int:
    """Wait up to ``wait_s`` (or until done), copy what exists into $OUT, print the table."""
    work = knobs.work
    pid = int((work / "supervisor.pid").read_text())
    end = time.time() + wait_s
    while time.time() < end:
        status = read_json(work / "status.json") or {}
        if status.get("done") or not alive(pid):
            break
        time.sleep(3)
    status = read_json(work / "status.json")
    gone = not status["done"] and not alive(pid)
    out = os.environ.get("OUT")
    if out:
        collect(work, Path(out))
    print_table(status)
    if gone:
        print(
            f"the supervisor (pid {pid}) is gone before the plan was done: see "
            "supervisor.log in lease.tar.gz"
        )
        return 1
    if not status["done"]:
        return 3
    failed = [n for n, r in status["runs"].items() if r["state"] == "failed"]
    return 1 if failed else 0


def collect(work: Path, out: Path) -> None:
    """At most 8 files into ``out``, none over 16 MiB: status.json, plan.log, lease.tar.gz with
    everything small (each run's configs, metrics, train.jsonl and logs, the claims' tables, the
    probe's and speed tries' JSON and logs, the supervisor's log), then each run's ``returns``
    (metrics.jsonl and test_error.png; the claims' curves) while fewer than 8 are taken."""
    out.mkdir(parents=True, exist_ok=True)
    small = [work / "supervisor.log"]
    for sub in ("probe", "speed", *RUNS):
        if (work / sub).is_dir():
            small += sorted(
                p
                for p in (work / sub).rglob("*")
                if p.is_file() and p.suffix in (".json", ".jsonl", ".log", ".md")
            )
    with tarfile.open(work / "lease.tar.gz", "w:gz") as tar:
        for p in small:
            if p.is_file():
                tar.add(p, arcname=str(p.relative_to(work)))
    files = [(f, work / f) for f in ("status.json", "plan.log", "lease.tar.gz")]
    for name, run in RUNS.items():
        files += [(f"{name}/{f}", work / name / f) for f in run.returns]
    kept = 0
    for rel, src in files:
        if not src.is_file() or kept == OUT_FILES:
            continue
        if src.stat().st_size > OUT_FILE_BYTES:
            print(f"not brought back: {rel} is over 16 MiB")
            continue
        dest = out / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_bytes(src.read_bytes())
        kept += 1


def _fmt(x, spec=",.0f", none="-"):
    return none if x is None else format(x, spec)


def print_table(status: dict) -> None:
    """The short table a call prints last: phase, GPU time left, the probe, each run's state,
    step, images/s, test error so far and projected finish, the speed tries."""
    left = gpu_time(status)[1]
    state = "done" if status["done"] else "running: call again within 30 s"
    print(
        f"lease plan: phase {status['phase']}, {state}; GPU time left {left:,.0f} s of "
        f"{status['lease_s']:,.0f} (a start of {status['start_s']:.0f} s assumed)"
    )
    probe = status["probe"]
    bits = []
    for part, what in (
        ("bf16", "bf16"),
        ("pair", "two side by side"),
        ("torch", "torch twin"),
        ("fp32", "fp32"),
    ):
        p = probe.get(part)
        if p and "images_per_s" in p:
            bits.append(f"{what} {p['images_per_s']:,.0f} img/s (MFU {p.get('mfu')})")
        elif p:
            bits.append(f"{what} {'skipped' if 'skipped' in p else 'failed'}")
    if bits:
        print("probe: " + "; ".join(bits))
    print(
        f"{'run':14} {'state':12} {'step':>15} {'images/s':>9} {'test error':>10} "
        f"{'projected finish':>18}"
    )
    for name, run in status["runs"].items():
        if run["state"] == "running":
            end = run.get("projected_end_s")
            finish = "?" if end is None else f"in {end:,} s ({left - end:,.0f} left)"
        elif run["state"] == "pending":
            finish = "not started"
        else:
            finish = run["state"].split(" ")[0]
        step = f"{run.get('step', 0):,}/{run['train_steps']:,}"
        print(
            f"{name:14} {run['state'][:12]:12} {step:>15} {_fmt(run.get('images_per_s')):>9} "
            f"{_fmt(run.get('test_error'), '.4f'):>10} {finish:>18}"
        )
    for name, run in status["runs"].items():
        if run["state"] == "failed" and run.get("why"):
            print(f"{name}: {run['why']}")
        leak = run.get("leak_probe", {})
        if "test_error" in leak:
            print(
                f"{name}: leak probe (the first red pixel a wrong label): test error "
                f"{leak['test_error']:.4f} against {_fmt(run.get('test_error'), '.4f')} as read"
            )
        elif leak:
            print(f"{name}: leak probe {leak}")
    for entry in status["speed"]:
        print(f"speed {entry['try']}: {entry.get('result', 'running')}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("what", choices=("call", "supervise", "tarballs"))
    args = parser.parse_args(argv)
    knobs = Knobs.from_env()
    if args.what == "tarballs":  # what `gpu_lease.sh prepare` carries for LEASE_RUNS
        print("\n".join(f"{folder}.tar.gz" for folder in data_folders(knobs.runs)))
        return 0
    if args.what == "supervise":
        Supervisor(knobs).run()
        return 0
    return call(knobs)


if __name__ == "__main__":
    sys.exit(main())
