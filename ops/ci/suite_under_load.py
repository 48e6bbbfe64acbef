"""The test suite run as CI runs it, on a busy machine: finds the tests that pass or fail by
timing luck (issue #47).

    .venv/bin/python ops/ci/suite_under_load.py [--load=2] [--repeat=N] [-- PYTEST_ARGS]

Without PYTEST_ARGS each repeat is ``bash .ci/run`` (venv, ruff, the whole suite); with them,
``.venv/bin/python -m pytest PYTEST_ARGS`` (e.g. ``-- tests/test_jax_multiprocess.py``), the
real CIFAR slices passed as .ci/run passes them. Beside it, ``--load`` CPU-bound training
processes in all: the ``launch/cifar.py`` runs of others already going count, this script's own
make up the rest (each a ``launch/cifar.py --model=small`` on random CIFAR-10 files it writes,
started and ended as others' come and go); ``--load=0`` for a quiet run. Every repeat appends
one JSON line to ``--record``: its date, the machine, the load average and the training
processes (sampled every 10 s), counts, wall time, each failure with its message, the slowest
tests; the runs' JUnit files and output stay in ``--keep``. Exit status 1 if a run failed.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
import threading
import time
import xml.etree.ElementTree as ET
from datetime import datetime
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
VENV_PYTHON = REPO / ".venv" / "bin" / "python"


def machine() -> str:
    """The CPU's model name, its vector extensions (AVX-512 or AVX2) and its usable cores."""
    model, flags = platform.processor() or "unknown CPU", set()
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
            elif line.startswith("flags"):
                flags = set(line.split(":", 1)[1].split())
    isa = "AVX-512" if "avx512f" in flags else "AVX2" if "avx2" in flags else "no AVX2"
    return f"{model}, {isa}, {len(os.sched_getaffinity(0))} cores"


MARK = "SUITE_UNDER_LOAD"  # in the environment of what this script starts, and all it starts


def others_trainings() -> int:
    """How many ``launch/cifar.py`` processes of this PID namespace run now that neither this
    script nor the suite started (those carry :data:`MARK` in their environment): another's
    training runs, a load already there. A container's processes (another PID namespace), a
    SLURM job's (they inherit the submitter's environment) and those the suite runs in a
    clean environment from a temporary folder (the GPU lease's copy of the tree) are the
    suite's. A stopped process (``kill -STOP``, state T) is no load and does not count."""
    count, namespace = 0, os.readlink("/proc/self/ns/pid")
    temporary = os.path.realpath(tempfile.gettempdir()) + os.sep
    for pid in filter(str.isdigit, os.listdir("/proc")):
        with contextlib.suppress(OSError):
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            if not any(arg.endswith(b"launch/cifar.py") for arg in argv):
                continue
            if Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] in "tT":
                continue
            if os.readlink(f"/proc/{pid}/ns/pid") != namespace:
                continue
            if os.path.realpath(os.readlink(f"/proc/{pid}/cwd")).startswith(temporary):
                continue
            environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            count += not any(v.startswith(MARK.encode() + b"=") for v in environ)
    return count


class SteadyLoad(threading.Thread):
    """Keeps ``total`` CPU-bound training processes running beside the suite: every
    ``every_s`` seconds it counts others' (:func:`others_trainings`) and starts or ends its own
    to make up the rest, each a ``launch/cifar.py --model=small`` on random CIFAR-10 files with
    TensorFlow's thread pool of 1, in a session of its own. Samples the 1-minute load average
    and the training processes each time; :meth:`ready` waits until its own ones train."""

    def __init__(self, total: int, folder: Path, every_s: float = 10.0):
        super().__init__(daemon=True)
        self.total, self.folder, self.every_s = total, folder, every_s
        self.own: list[tuple[subprocess.Popen, Path]] = []
        self.started = 0
        self.samples: list[tuple[float, int, int]] = []  # (load, others', own)
        self.lock, self.stopped = threading.Lock(), threading.Event()
        self.data = folder / "cifar-10-batches-bin"
        if total:
            subprocess.run(
                [
                    sys.executable,
                    "-c",
                    "import sys; from resnet_noBN.datasets.cifar_data import write_random; "
                    "write_random(sys.argv[1], 'cifar10', 256)",
                    str(self.data),
                ],
                check=True,
                cwd=REPO,
            )

    def _start_one(self) -> None:
        log = self.folder / f"load{self.started}.log"
        with open(log, "w") as out:
            proc = subprocess.Popen(
                [
                    sys.executable,
                    "launch/cifar.py",
                    "--model=small",
                    f"--data_path={self.data}",
                    f"--model_dir={self.folder / f'load{self.started}'}",
                    "--intra_op_threads=1",
                    "--train_steps=100000000",
                    "--log_every=50",
                    "--eval_every=100000000",
                    "--checkpoint_every=100000000",
                ],
                cwd=REPO,
                env={
                    **os.environ,
                    MARK: "load",
                    "TF_CPP_MIN_LOG_LEVEL": "2",
                    "PYTHONUNBUFFERED": "1",
                },
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.own.append((proc, log))
        self.started += 1

    def _end_one(self) -> None:
        proc, _ = self.own.pop()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()

    def adjust(self) -> None:
        """Start or end own processes so that others' and own make ``total``; sample."""
        with self.lock:
            others = others_trainings()
            self.own = [(p, log) for p, log in self.own if p.poll() is None]
            while len(self.own) < self.total - others:
                self._start_one()
            while self.own and len(self.own) > self.total - others:
                self._end_one()
            self.samples.append((os.getloadavg()[0], others, len(self.own)))

    def ready(self, timeout_s: float = 600) -> None:
        """Wait until every own process has logged a training step: the load is steady."""
        self.adjust()
        deadline = time.monotonic() + timeout_s
        for proc, log in list(self.own):
            while "step " not in log.read_text():
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"a load process did not train: see {log}")
                time.sleep(1)

    def run(self) -> None:
        while not self.stopped.wait(self.every_s):
            self.adjust()

    def summary(self, since: int) -> dict:
        """The load average and the training processes (others', own) sampled after sample
        number ``since``: min, mean, max."""
        samples = self.samples[since:] or self.samples[-1:]

        def stats(values):
            return {
                "min": round(min(values), 2),
                "mean": round(sum(values) / len(values), 2),
                "max": round(max(values), 2),
            }

        return {
            "load_average_1min": stats([s[0] for s in samples]),
            "others_trainings": stats([s[1] for s in samples]),
            "own_load_processes": stats([s[2] for s in samples]),
        }

    def close(self) -> None:
        self.stopped.set()
        with self.lock:
            while self.own:
                self._end_one()


def outcomes(junit: Path) -> dict:
    """Counts, pytest's own seconds, failures (test, message) and the 15 slowest tests of a
    pytest JUnit file."""
    counts = {"passed": 0, "failed": 0, "error": 0, "skipped": 0}
    failures, times = [], []
    root = ET.parse(junit).getroot()
    for case in root.iter("testcase"):
        name = f"{case.get('classname', '').replace('.', '/')}.py::{case.get('name')}"
        times.append((float(case.get("time", 0)), name))
        kinds = [child.tag for child in case if child.tag in ("failure", "error", "skipped")]
        if "failure" in kinds or "error" in kinds:
            kind = "failed" if "failure" in kinds else "error"
            counts[kind] += 1
            element = case.find("failure" if kind == "failed" else "error")
            message = (element.get("message") or element.text or "").strip()
            failures.append({"test": name, "kind": kind, "message": message[:1500]})
        elif "skipped" in kinds:
            counts["skipped"] += 1
        else:
            counts["passed"] += 1
    slowest = [{"test": n, "s": round(t, 1)} for t, n in sorted(times, reverse=True)[:15]]
    suite = root if root.tag == "testsuite" else root.find("testsuite")
    pytest_s = round(float(suite.get("time", 0))) if suite is not None else None
    return {"counts": counts, "pytest_s": pytest_s, "failures": failures, "slowest": slowest}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--load",
        type=int,
        default=2,
        help="CPU-bound training processes beside the suite: others' running ones count, own "
        "ones make up the rest (0: a quiet run)",
    )
    parser.add_argument("--repeat", type=int, default=1, help="runs, one after the other")
    parser.add_argument("--label", default="run", help="a name for these runs in the record")
    parser.add_argument(
        "--record",
        type=Path,
        default=Path(tempfile.gettempdir()) / "suite_under_load.jsonl",
        help="the file each run appends its JSON line to",
    )
    parser.add_argument(
        "--keep",
        type=Path,
        default=Path(tempfile.gettempdir()) / "suite_under_load",
        help="the folder of the runs' JUnit files and output",
    )
    parser.add_argument("pytest_args", nargs="*", help="after --: pytest's arguments")
    args = parser.parse_args()
    args.keep.mkdir(parents=True, exist_ok=True)
    slices = (REPO.parent / "shared" / "data").resolve()
    if args.pytest_args:
        command = [str(VENV_PYTHON), "-m", "pytest", *args.pytest_args]
        command += [f"--cifar_slices={slices}"] if slices.is_dir() else []
    else:
        command = ["bash", ".ci/run"]
    failed = 0
    with tempfile.TemporaryDirectory() as scratch:
        load = SteadyLoad(args.load, Path(scratch))
        try:
            load.ready()
            load.start()
            for i in range(args.repeat):
                stamp = datetime.now().astimezone()
                name = f"{stamp:%Y%m%d-%H%M%S}-{args.label}-{i + 1}"
                junit = args.keep / f"{name}.xml"
                addopts = os.environ.get("PYTEST_ADDOPTS", "")
                addopts += f" --junitxml={junit} -p no:cacheprovider"
                since, start = len(load.samples), time.monotonic()
                with open(args.keep / f"{name}.log", "w") as log:
                    code = subprocess.run(
                        command,
                        cwd=REPO,
                        env={**os.environ, MARK: "suite", "PYTEST_ADDOPTS": addopts.strip()},
                        stdout=log,
                        stderr=subprocess.STDOUT,
                    ).returncode
                wall = time.monotonic() - start
                result = {
                    "run": name,
                    "date": stamp.isoformat(timespec="seconds"),
                    "machine": machine(),
                    "command": " ".join(command),
                    "load": args.load,
                    **load.summary(since),
                    "exit": code,
                    "wall_s": round(wall),
                    **(outcomes(junit) if junit.exists() else {"counts": None}),
                }
                with open(args.record, "a") as f:
                    f.write(json.dumps(result) + "\n")
                failed += code != 0
                print(
                    f"{name}: exit {code}, {result['counts']}, {wall / 60:.1f} min, load average "
                    f"{result['load_average_1min']}",
                    flush=True,
                )
                for failure in result.get("failures", []):
                    print(f"  {failure['kind']}: {failure['test']}: {failure['message'][:300]}")
        finally:
            load.close()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
