"""The lease's supervisor: the detached process (``setsid``: it outlives the call that started
it) that keeps the GPU busy with the plan (``lease.plan``) while the calls come and go.

One GPU task at a time, each a subprocess in a process group of its own with a deadline, chosen
every :data:`POLL_S` seconds from what is known then:

1. the speed tries (``plan.SPEED_TRIES``: ``bench/throughput.py`` on random records, each with
   its prediction written first, its images/s and its loss at step 50 after), while GPU time is
   spare beyond the runs that fit and at most ``LEASE_SPEED_S`` in all; then the fastest that
   passes the loss check is chosen for the runs;
2. the next run of ``LEASE_RUNS`` that fits (``plan.schedule``) whose data is restored
   (``carry.restore``, done here as soon as a data set's last part arrives): a run whose data
   is complete starts while later parts still travel; a finished run's final weights are cut
   out of its last checkpoint (the model's variables, no optimizer state) and split into parts
   under 16 MiB for the calls to bring back (``collect``);
3. the probe's parts (``plan.PROBES``) where they fit, after the runs or while a run's data
   travels.

Its state is ``status.json`` (written atomically; the calls read it) and every decision, with
the numbers that made it, a line of ``plan.log``. Standard library only.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

from ops.lease import carry, collect, plan

POLL_S = 0.5  # a poll reads a few small files: a call's news comes back within it
WORK = Path("runs/lease")  # under the tree's root; ignored by git, never carried
STORE = WORK / "store"  # the parts that arrived
DATA = WORK / "data"  # the restored data sets
OWN = WORK / "base"  # parts.json and the unpack tool, kept at the start (carry.keep)


def write_json(path: Path, obj) -> None:
    """Atomically: a reader sees the old file or the new one, never half of one."""
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
    """The last line of ``text`` that is a JSON object (a launcher's or benchmark's result)."""
    for line in reversed(text.splitlines()):
        if line.startswith("{"):
            try:
                return json.loads(line)
            except ValueError:
                return None
    return None


def failure_line(text: str) -> str:
    """Why a process failed, from its output: the last ``error:`` line, else the last line."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("error:")]
    return (errors or lines or ["no output"])[-1]


def child_env(root: Path) -> dict:
    """The environment of everything the lease runs: the carried wheels' scratch site and this
    tree on PYTHONPATH (nothing is installed there), Keras on JAX."""
    site = root / WORK / "site"
    path = [str(site)] if site.is_dir() else []
    path += [str(root), *filter(None, [os.environ.get("PYTHONPATH")])]
    return {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(path),
        "KERAS_BACKEND": "jax",
        "PYTHONUNBUFFERED": "1",
    }


class Task:
    """A GPU task running: its process (its own group), kind, name (a run's: the lease run's),
    deadline and files."""

    def __init__(
        self,
        kind: str,
        name: str,
        cmd: list[str],
        log: Path,
        env: dict,
        limit: float,
    ):
        self.kind, self.name, self.log = kind, name, log
        self.started = time.time()
        self.deadline = self.started + limit
        log.parent.mkdir(parents=True, exist_ok=True)
        with open(log, "w") as f:
            f.write(" ".join(cmd) + "\n")
            f.flush()
            self.proc = subprocess.Popen(
                cmd,
                env=env,
                stdout=f,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,  # its own process group: killed whole at its deadline
            )

    def stop(self) -> None:
        """SIGTERM to its group (a run checkpoints and exits 3), SIGKILL 20 s later."""
        for sig, wait in ((signal.SIGTERM, 20), (signal.SIGKILL, None)):
            try:
                os.killpg(self.proc.pid, sig)
            except ProcessLookupError:
                return
            try:
                self.proc.wait(timeout=wait)
                return
            except subprocess.TimeoutExpired:
                continue

    def output(self) -> str:
        try:
            return self.log.read_text()
        except OSError:
            return ""


class Supervisor:
    def __init__(self, knobs: plan.Knobs, root: Path):
        self.k, self.root = knobs, root
        self.work = root / WORK
        self.status = read_json(self.work / "status.json")
        self.manifest = carry.load_manifest(root / OWN) or {"datasets": {}, "parts": {}}
        self.task: Task | None = None
        self.helpers: list[subprocess.Popen] = []  # the lease's curves, drawn beside the GPU
        self.env = child_env(root)

    # ---- bookkeeping
    def now_left(self) -> float:
        return plan.gpu_time(self.status, time.time())[1]

    def log(self, line: str) -> None:
        used, left = plan.gpu_time(self.status, time.time())
        stamp = time.strftime("%H:%M:%S", time.gmtime())
        with open(self.work / "plan.log", "a") as f:
            f.write(f"{stamp} [GPU {used:4.0f} s used, {left:4.0f} s left] {line}\n")

    def save(self) -> None:
        if self.task and self.task.kind == "run":
            self.progress(self.task.name)
        self.status["updated_at"] = time.time()
        write_json(self.work / "status.json", self.status)

    def progress(self, name: str) -> None:
        """A run's step, images/s and test error so far, and its end projected from its own
        rate between the first and latest steps seen."""
        run = self.status["runs"][name]
        folder = self.work / name
        trains = read_jsonl(folder / "train.jsonl")
        evals = read_jsonl(folder / "metrics.jsonl")
        if trains:
            run["step"] = trains[-1]["step"]
            run["images_per_s"] = round(trains[-1]["images_per_sec"], 1)
        if evals:
            run["test_error"] = evals[-1]["test_error"]
            run["best_test_error"] = min(e["test_error"] for e in evals)
        samples = run.setdefault("samples", [])
        now = time.time()
        if run.get("step") and (not samples or samples[-1][1] != run["step"]):
            samples[:] = [*samples[:1], [now, run["step"]]]
        if len(samples) == 2 and samples[1][1] > samples[0][1]:
            (t0, s0), (t1, s1) = samples
            rate = (s1 - s0) / (t1 - t0)
            run["projected_end_s"] = round((run["steps"] - s1) / rate - (now - t1))

    # ---- the data
    def restore_data(self) -> None:
        """Every data set whose parts are all here, restored (in the runs' order)."""
        store = self.root / STORE
        for dataset, entry in self.status["data"].items():
            if entry["state"] != "travelling" or not carry.complete(store, self.manifest, dataset):
                continue
            entry["state"] = "restoring"
            self.save()
            t0 = time.time()
            try:
                path = carry.restore(
                    self.root / OWN, store, self.manifest, dataset, self.root / DATA, self.k.python
                )
            except (ValueError, OSError) as e:
                entry.update(state="failed", why=str(e))
                self.log(f"{dataset}: restoring failed: {e}")
                continue
            entry.update(state="restored", path=str(path.relative_to(self.root)))
            self.log(
                f"{dataset}: all {len(entry['parts'])} parts here; official files restored and "
                f"their SHA-256 checked in {time.time() - t0:.0f} s ({entry['label']})"
            )
            self.save()

    # ---- the rates the projections use
    def rates(self) -> dict:
        """Measured on this machine where known (a run's own rate, else the speed tries' or
        the probe's), else plan.PRIOR; with where each came from."""
        rates = {key: (value, "prior") for key, value in plan.PRIOR.items()}
        chosen = self.status["speed"].get("chosen")
        tries = {t["name"]: t for t in self.status["speed"]["tries"]}
        if chosen in tries and tries[chosen].get("images_per_s"):
            t = tries[chosen]
            rates["mixed_bfloat16"] = (t["images_per_s"], f"speed try {chosen}")
            for key, field in (("first_step_s", "first_step_s"), ("eval", "eval_images_per_s")):
                if t.get(field):
                    rates[key] = (t[field], f"speed try {chosen}")
        for probe, precision in (("true_fp32", "true_float32"), ("tf32", "float32")):
            rate = self.status["probe"].get(probe, {}).get("images_per_s")
            if rate:
                rates[precision] = (rate, f"probe {probe}")
        for name, run in self.status["runs"].items():  # a run's own rate, the launcher's way
            if run.get("images_per_s") and run.get("step", 0) >= 1000:
                rates[run["precision"]] = (run["images_per_s"], f"run {name}")
        return rates

    def estimate(self, rates: dict):
        """Seconds of GPU time of a run (``plan.projection``) at ``rates``."""

        def projected(run) -> float:
            return plan.projection(
                run, rates[run.precision][0], rates["eval"][0], rates["first_step_s"][0], self.k
            )

        return projected

    # ---- choosing the next GPU task
    def plan_runs(self) -> tuple[dict, list[str], dict[str, str], float]:
        """The runs that fit now, at the best rates known: (the rates, their names, why each
        other does not fit, the GPU seconds to spare beyond them); the data sets they need are
        the ones the calls bring (``wanted``)."""
        left = self.now_left()
        rates = self.rates()
        estimate = self.estimate(rates)
        pending = [self.k.run(n) for n, r in self.status["runs"].items() if r["state"] == "pending"]
        fits, why = plan.schedule(pending, left, estimate, self.k.margin_s)
        for name in [*why, *fits]:
            self.status["runs"][name]["fits"] = why.get(name) or (
                f"projected {estimate(self.k.run(name)):,.0f} s"
            )
        self.status["wanted"] = list(dict.fromkeys(self.k.run(n).dataset for n in fits))
        slack = left - self.k.margin_s - sum(estimate(self.k.run(n)) for n in fits)
        self.status["slack_s"] = round(slack)
        return rates, fits, why, slack

    def next_task(self) -> Task | None:
        """The next GPU task (module docstring), or None: waiting for data, or nothing left
        (then the status says done)."""
        task = self.next_speed_try(self.plan_runs()[3])
        if task:
            return task
        rates, fits, why, slack = self.plan_runs()  # with the speed-up chosen
        task = self.next_run(fits, rates)
        if task is None and not self.waiting_for_data(fits):
            task = self.next_probe(slack)
        if task is None and not fits:
            self.finish_plan(why)
        return task

    def waiting_for_data(self, fits: list[str]) -> bool:
        data = self.status["data"]
        return any(data[self.k.run(n).dataset]["state"] == "travelling" for n in fits)

    def next_speed_try(self, slack: float) -> Task | None:
        speed = self.status["speed"]
        if speed.get("chosen"):
            return None
        done = {t["name"] for t in speed["tries"]}
        todo = [t for t in plan.SPEED_TRIES if t.name in self.k.speed and t.name not in done]
        limit = SMOKE_LIMIT_S if self.k.smoke else SPEED_LIMIT_S
        spent = sum(t.get("wall_s", 0) for t in speed["tries"])
        if todo and limit <= slack and spent + limit <= self.k.speed_s:
            t = todo[0]
            speed["tries"].append({"name": t.name, "prediction": t.prediction})
            self.log(f"speed try {t.name}: predicted: {t.prediction}")
            out = self.work / "speed" / f"{t.name}.json"
            cmd = self.bench_cmd("mixed_bfloat16", self.speed_flags(t.name), out)
            return Task(
                "speed", t.name, cmd, out.with_suffix(".log"), {**self.env, **dict(t.env)}, limit
            )
        self.choose_speed(todo)
        return None

    def speed_flags(self, name: str) -> list[str]:
        """A speed try's benchmark: the loss of step 50 (smoke: 6), 300 steps in one call timed
        (smoke: 5), 4 evaluation batches (smoke: none); the baseline also traces 10 steps
        (smoke: 1) and sums its kernels' time (speed/kernels.txt)."""
        smoke = self.k.smoke
        flags = ["--steps=2", "--warmup=1"] if smoke else ["--steps=5", "--warmup=3"]
        flags += [
            f"--loss_at_step={6 if smoke else plan.LOSS_STEP}",
            f"--chunk_steps={5 if smoke else 300}",
            f"--eval_batches={0 if smoke else 4}",
        ]
        if name == "baseline":
            flags += [
                f"--profile_dir={self.work / 'speed' / 'trace'}",
                f"--profile_steps={1 if smoke else 10}",
                f"--kernel_summary={self.work / 'speed' / 'kernels.txt'}",
            ]
        return flags

    def choose_speed(self, untried) -> None:
        """The fastest try whose loss matched the baseline's and that beats it by
        plan.SPEED_GAIN, else the baseline."""
        speed = self.status["speed"]
        tries = {t["name"]: t for t in speed["tries"]}
        base = tries.get("baseline", {})
        best = "baseline"
        for t in speed["tries"]:
            if t["name"] == "baseline":
                continue
            if t.get("passed") and base.get("images_per_s"):
                if t["images_per_s"] >= plan.SPEED_GAIN * tries[best].get("images_per_s", 0):
                    best = t["name"]
        speed["chosen"] = best
        speed["untried"] = [t.name for t in untried]
        self.log(
            f"speed: the runs train with {best} ("
            + "; ".join(
                f"{t['name']} {t.get('images_per_s', '-')} images/s" for t in speed["tries"]
            )
            + (f"; not tried, no GPU time to spare: {speed['untried']}" if untried else "")
            + ")"
        )

    def next_run(self, fits: list[str], rates: dict) -> Task | None:
        for name in fits:
            run = self.k.run(name)
            data = self.status["data"][run.dataset]
            if data["state"] == "failed":
                self.status["runs"][name].update(state="failed", why=f"its data: {data['why']}")
                continue
            if data["state"] != "restored":
                continue  # its parts still travel
            return self.start_run(run, data, rates)
        return None

    def start_run(self, run: plan.LeaseRun, data: dict, rates: dict) -> Task:
        """A run: ``launch/cifar.py`` in its folder, with its time budget."""
        left = self.now_left()
        need = self.estimate(rates)(run)
        folder = self.work / run.name
        budget = max(30, left - self.k.margin_s - self.k.return_s)
        cmd = [
            self.k.python,
            "launch/cifar.py",
            f"--data_path={self.root / data['path']}",
            f"--model_dir={folder}",
            *run.flags(self.k.smoke),
            f"--time_budget_s={budget:.0f}",
        ]
        chosen = self.status["speed"].get("chosen") or "baseline"
        env = dict(next(t for t in plan.SPEED_TRIES if t.name == chosen).env)
        rate, source = rates[run.precision]
        self.status["runs"][run.name].update(
            state="running",
            started_at=time.time(),
            projected_s=round(need),
            data=data["label"],
            speed=chosen,
            command=" ".join([*(f"{k}={v}" for k, v in env.items()), *cmd]),
        )
        self.status["phase"] = run.name
        self.log(
            f"{run.name}: start ({run.about}); projected {need:,.0f} s at {rate:,.0f} images/s "
            f"({source}), {left:,.0f} s left; speed-up {chosen}; time budget {budget:.0f} s"
        )
        return Task(
            "run",
            run.name,
            cmd,
            folder / "launch.log",
            {**self.env, **env},
            left - 20,
        )

    def next_probe(self, slack: float) -> Task | None:
        probe = self.status["probe"]
        for p in plan.PROBES:
            if p.name not in self.k.probes or p.name in probe:
                continue
            limit = SMOKE_LIMIT_S if self.k.smoke else p.limit_s
            if limit > slack:
                continue  # perhaps a later one fits
            if p.torch and not self.importable("torch"):
                probe[p.name] = {"skipped": "torch is not importable here"}
                self.log(f"probe {p.name}: skipped (torch is not importable here)")
                continue
            probe[p.name] = {"what": p.what, "state": "running"}
            self.log(f"probe {p.name}: start ({p.what}), at most {limit:.0f} s")
            cmd = self.probe_cmd(p.name)
            env = dict(
                next(
                    t
                    for t in plan.SPEED_TRIES
                    if t.name == (self.status["speed"].get("chosen") or "baseline")
                ).env
            )
            return Task(
                "probe",
                p.name,
                cmd,
                self.work / "probe" / f"{p.name}.log",
                {**self.env, **env},
                limit,
            )
        return None

    def importable(self, module: str) -> bool:
        check = [self.k.python, "-c", f"import {module}"]
        return subprocess.run(check, capture_output=True, env=self.env).returncode == 0

    def bench_cmd(self, precision: str, flags: list[str], out: Path) -> list[str]:
        small = ["--model=small"] if self.k.smoke else []
        return [
            self.k.python,
            "bench/throughput.py",
            f"--precision={precision}",
            "--input_batches=0",
            "--no-measure_matmul",
            *small,
            *flags,
            f"--output={out}",
        ]

    def probe_cmd(self, name: str) -> list[str]:
        out = self.work / "probe" / f"{name}.json"
        smoke = self.k.smoke
        if name in ("torch_compile", "torch_eager"):
            device = (
                ["--device=cpu", "--model=small", "--steps=3", "--warmup=2"]
                if smoke
                else [
                    "--device=cuda",
                    "--steps=50" if name == "torch_compile" else "--steps=20",
                    "--warmup=5",
                ]
            )
            compile_flag = ["--compile"] if name == "torch_compile" else []
            return [
                self.k.python,
                "bench/torch_twin.py",
                "--autocast=bfloat16",
                *device,
                *compile_flag,
                f"--output={out}",
            ]
        precision = {"true_fp32": "true_float32", "tf32": "float32"}[name]
        chunk = "--chunk_steps=5" if smoke else "--chunk_steps=100"
        return self.bench_cmd(
            precision, ["--steps=3", "--warmup=2", chunk, "--eval_batches=0"], out
        )

    # ---- a task's end
    def finish_task(self, task: Task) -> None:
        code = task.proc.returncode
        output = task.output()
        if task.kind == "run":
            self.finish_run(task, code, output)
            return
        result = read_json(
            self.work / ("speed" if task.kind == "speed" else "probe") / f"{task.name}.json"
        )
        wall = round(time.time() - task.started, 1)
        if task.kind == "speed":
            entry = next(t for t in self.status["speed"]["tries"] if t["name"] == task.name)
            entry["wall_s"] = wall
            if not result:
                entry["result"] = f"failed (exit {code}): {failure_line(output)}"
            else:
                self.speed_result(entry, result)
            self.log(f"speed try {task.name}: {entry['result']}")
        else:
            entry = self.status["probe"][task.name]
            entry.update(state="done" if result else "failed", wall_s=wall)
            if result:
                entry.update(probe_summary(task.name, result))
            else:
                entry["why"] = f"exit {code}: {failure_line(output)}"
            self.log(f"probe {task.name}: {json.dumps(entry)}")

    def speed_result(self, entry: dict, result: dict) -> None:
        rate = result.get("chunk_images_per_s") or result["train_images_per_s"]
        entry.update(
            images_per_s=rate,
            mfu=result.get("chunk_mfu") or result.get("mfu"),
            first_step_s=result.get("first_step_s"),
            eval_images_per_s=result.get("eval_images_per_s"),
            loss=result.get("loss_at_step"),
            device=result.get("device_name"),
            versions=f"{result.get('framework_version')}, Keras {result.get('keras_version')}",
        )
        base = next((t for t in self.status["speed"]["tries"] if t["name"] == "baseline"), {})
        if entry["name"] == "baseline":
            entry["kernels"] = result.get("kernel_summary")  # its top kernels: speed/kernels.txt
            entry["passed"] = entry["loss"] is not None
            entry["result"] = (
                f"{rate:,.0f} images/s, loss at step {result.get('loss_step')} {entry['loss']}"
            )
            return
        if base.get("loss") is None or entry["loss"] is None:
            entry["passed"] = False
            entry["result"] = f"{rate:,.0f} images/s; no loss to compare: not used"
            return
        diff = abs(entry["loss"] - base["loss"]) / abs(base["loss"])
        entry["passed"] = diff <= plan.LOSS_RTOL
        entry["result"] = (
            f"{rate:,.0f} images/s (x{rate / base['images_per_s']:.3f} the baseline's); loss at "
            f"step {result.get('loss_step')} {entry['loss']} against {base['loss']} ({diff:.2%}: "
            f"{'passes' if entry['passed'] else 'FAILS'} the {plan.LOSS_RTOL:.0%} check)"
        )

    def finish_run(self, task: Task, code: int | None, output: str) -> None:
        """The task's run ended: its state, its final JSON, its weights cut for the calls to
        bring back."""
        final = last_json_line(output)
        state = {0: "done", 3: "stopped at its time budget"}.get(code, "failed")
        name = task.name
        run = self.status["runs"][name]
        self.progress(name)
        run.update(
            state=state, exit=code, wall_s=round(time.time() - run["started_at"]), final=final
        )
        run.pop("projected_end_s", None)
        run.pop("samples", None)
        if state == "failed":
            run["why"] = failure_line(output)
        else:
            try:
                run["weights"] = collect.cut_weights(self.work / name, final)
            except (OSError, ValueError, KeyError) as e:
                run["weights"] = {"failed": str(e)}
        self.log(
            f"{name}: {state} (exit {code}) after {run['wall_s']} s: "
            f"{run.get('why') or json.dumps(final)}; weights "
            f"{json.dumps(run.get('weights', {}))[:300]}"
        )
        self.draw_curves()

    def draw_curves(self) -> None:
        """lease_curves.png: every run with evaluations, each labelled with its data,
        precision, seed and speed-up, the title with the device and versions
        (launch/compare_runs.py, beside the GPU's next task)."""
        runs = [
            (n, r)
            for n, r in self.status["runs"].items()
            if r["state"] in ("done", "stopped at its time budget", "failed")
            and (self.work / n / "metrics.jsonl").is_file()
        ]
        if not runs:
            return
        cmd = [
            self.k.python,
            "launch/compare_runs.py",
            f"--output={self.work / 'lease_curves.png'}",
        ]
        for name, run in runs:
            label = f"{name}: {run['data']}, {run['precision']}, seed {run['seed']}"
            cmd.append(f"--run={label}={self.work / name}")
        cmd.append(f"--title={self.status.get('device')}; {self.status.get('versions')}")
        env = {**self.env, "JAX_PLATFORMS": "cpu"}  # a plot: nothing of the GPU
        with open(self.work / "curves.log", "w") as log:
            self.helpers.append(
                subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, cwd=self.root)
            )

    def finish_plan(self, why: dict[str, str]) -> None:
        for name, run in self.status["runs"].items():
            if run["state"] == "pending":
                run.update(state="skipped", why=why.get(name, run.get("fits", "")))
                self.log(f"{name}: skipped: {run['why']}")
        for p in plan.PROBES:
            if p.name in self.k.probes and p.name not in self.status["probe"]:
                self.status["probe"][p.name] = {"skipped": "no GPU time to spare"}
        self.status.update(phase="done", done=True)
        self.log("plan done")

    # ---- the loop
    def run(self) -> None:
        self.log(
            f"plan started: runs {[r.name for r in self.k.runs]}"
            + (f" (finished earlier, left out: {list(self.k.finished)})" if self.k.finished else "")
            + f"; lease {self.k.lease_s:.0f} s, "
            f"margin {self.k.margin_s:.0f} s; speed tries {list(self.k.speed)}; probe "
            f"{list(self.k.probes)}"
        )
        while not self.status["done"]:
            self.restore_data()
            if self.task and self.task.proc.poll() is None and time.time() > self.task.deadline:
                self.log(f"{self.task.kind} {self.task.name}: past its deadline: stopped")
                self.task.stop()
            if self.task and self.task.proc.poll() is not None:
                self.finish_task(self.task)
                self.task = None
            if self.task is None:
                self.task = self.next_task()
                if self.task is None and not self.status["done"]:
                    self.status["phase"] = "waiting for data"
            self.helpers = [h for h in self.helpers if h.poll() is None]
            self.save()
            time.sleep(POLL_S)
        for helper in self.helpers:
            helper.wait(timeout=120)
        self.save()


SPEED_LIMIT_S = 60  # a speed try: start-up, compile, 50 steps, 300 timed, evaluation, a trace
SMOKE_LIMIT_S = 150  # a speed try or probe part of the smoke plan on a CPU


def probe_summary(name: str, result: dict) -> dict:
    """The figures of a probe part's JSON that the status keeps."""
    if name.startswith("torch"):
        return {
            "images_per_s": result["train_images_per_s"],
            "mfu": result.get("mfu"),
            "compile_s": result.get("compile_s"),
            "first_step_s": result.get("first_step_s"),
            "versions": f"torch {result.get('torch_version')}",
        }
    summary = {
        "images_per_s": result.get("chunk_images_per_s") or result.get("train_images_per_s"),
        "mfu": result.get("chunk_mfu") or result.get("mfu"),
        "first_step_s": result.get("first_step_s"),
        "precision": result.get("precision"),
    }
    return summary
