"""Where a comparison of arms (a study of ``launch/study.py``, the paper's claims among them)
keeps its runs: ``<output_dir>/runs/<arm>-seed<k>``, a folder per arm and
seed, holding ``result.json`` once the run has ended (its last line of JSON, or its divergence);
a folder without one is a run to start or resume. Each run is a ``launch/cifar.py`` process,
checked before any starts (:func:`check`), started with its output in ``launch.log`` there
(:func:`start`), its end read back (:func:`outcome`). Plain files and processes: no backend."""

from __future__ import annotations

import collections
import contextlib
import ctypes
import functools
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterable

from resnet_noBN.configs.errors import PREEMPTED_EXIT, InputError, Preempted
from resnet_noBN.host import storage
from resnet_noBN.progress import Progress
from resnet_noBN.runs.record import read_config, section

RESULT_FILE = "result.json"
LOG_FILE = "launch.log"  # a run's output, stdout and stderr, every invocation's appended
PR_SET_PDEATHSIG = 1  # prctl(2): the signal a process gets when its parent ends
# what stops a run: a terminal's Ctrl-C, a scheduler's or a user's kill, a hang-up
STOPS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
# the divergence's line (trainers.loop): the step of the call that met the non-finite loss, and
# the step the replay met it at, one step a call (--replay_divergence), where it did
DIVERGED = re.compile(r"^error: loss is \S+ at step (\d+): training diverged")
REPLAYED = re.compile(r"one step at a time from step \d+: loss \S+ at step (\d+) ")
CHECKPOINT = re.compile(r"^ckpt-(\d+)\.(index|npz)$")  # TensorFlow's, and JAX's and PyTorch's
CHECKS_SHOWN_EVERY_S = 30.0  # check: a line of how many runs are checked, this often


def run_dir(output_dir: str, arm: str, seed: int) -> str:
    return os.path.join(output_dir, "runs", f"{arm}-seed{seed}")


def read_result(output_dir: str, arm: str, seed: int) -> dict | None:
    """The ended run's result (None while it has not ended)."""
    path = os.path.join(run_dir(output_dir, arm, seed), RESULT_FILE)
    if not os.path.exists(path):
        return None
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def on_cpu(devices: Iterable[str]) -> bool:
    """Whether the devices a run's config.json names (``runtime.devices``) are the CPU's:
    "CPU" in TensorFlow's and PyTorch's words, "cpu" (its device kind) in JAX's."""
    return all(device.lower() == "cpu" for device in devices)


def _machine(runtime: dict) -> str:
    """Where a run computed, from its config.json's ``runtime``: its accelerator, or on a CPU
    the widest vector extension it had (what sets a CPU run's speed here)."""
    if not on_cpu(runtime.get("devices", ["CPU"])):
        return " + ".join(runtime["devices"])
    if "cpu_isa" not in runtime:
        return "a CPU its config.json does not name"
    isa = runtime["cpu_isa"]
    if "avx512f" in isa:
        return "a CPU with AVX-512 and AMX" if "amx_tile" in isa else "a CPU with AVX-512"
    return "a CPU with AVX2" if "avx2" in isa else "a CPU without AVX2"


def machines(output_dir: str, runs: Iterable[tuple[str, int]]) -> str:
    """How many of the ended ``runs`` ((arm, seed) pairs) computed where, most first, each read
    from the run's own config.json: a comparison resumed over days may mix machines, and its
    wall times compare only within one."""
    counts = collections.Counter()
    for arm, seed in runs:
        if read_result(output_dir, arm, seed) is not None:
            counts[_machine(read_config(run_dir(output_dir, arm, seed)).get("runtime", {}))] += 1
    return ", ".join(f"{n} on {where}" for where, n in counts.most_common())


def optimizers(output_dir: str, runs: Iterable[tuple[str, int]]) -> str:
    """How many of the ended ``runs`` trained with which optimizer, most first, each read from
    the run's own config.json (``record.section``: a record without one ran Keras' momentum): a
    comparison resumed across the change of default (``momentum_2016`` since 2026-11-28) may mix
    the two forms of momentum."""
    counts = collections.Counter()
    for arm, seed in runs:
        if read_result(output_dir, arm, seed) is not None:
            recipe = section(read_config(run_dir(output_dir, arm, seed)), "recipe")
            counts[recipe["optimizer"]] += 1
    return ", ".join(f"{name} in {n}" for name, n in counts.most_common())


def write_result(folder: str, result: dict) -> None:
    """``result`` as the ``result.json`` of the run in ``folder``, replaced whole."""
    storage.write_text(os.path.join(folder, RESULT_FILE), json.dumps(result, indent=2))


def ended_by(returncode: int) -> str:
    """How a process ended, in words: "exit 2", or the signal's name ("SIGKILL")."""
    if returncode < 0:
        return signal.Signals(-returncode).name
    return f"exit {returncode}"


def check(commands: dict[str, list[str]], env: dict | None = None, print_fn=print) -> None:
    """Every run of ``commands`` (its name in words -> its ``launch/cifar.py`` command) checked
    as it would start (``--check_only``: its flags, data, backend and what its folder holds),
    writing nothing; InputError, one line naming the run, for the first refused; Preempted
    where a check was stopped (the terminal's Ctrl-C reaches it too). ``env``: the runs'
    environment (their Keras backend). A line every :data:`CHECKS_SHOWN_EVERY_S` seconds says
    how many are checked (``print_fn``)."""
    progress = Progress(len(commands), every_s=CHECKS_SHOWN_EVERY_S)
    for name, command in commands.items():
        began = time.perf_counter()
        proc = subprocess.run([*command, "--check_only"], capture_output=True, text=True, env=env)
        if proc.returncode in (PREEMPTED_EXIT, -signal.SIGINT, -signal.SIGTERM):
            raise Preempted(
                f"the check of {name} was stopped ({ended_by(proc.returncode)}): nothing "
                "written; rerun the same command to resume"
            )
        if proc.returncode != 0:
            said = (proc.stderr.strip().splitlines() or [ended_by(proc.returncode)])[-1]
            raise InputError(f"{name}: {said.removeprefix('error: ')}")
        progress.add(1, time.perf_counter() - began)
        if progress.due() and progress.done < progress.total:
            print_fn(f"checked {progress.done:,} of {progress.total:,} runs; {progress.text()}")


def _signalled_at_parents_end(parent: int, prctl, signum: int) -> None:
    """``signum`` when ``parent`` ends, however it ends (``kill -9`` too): Linux's
    ``prctl(PR_SET_PDEATHSIG)`` (looked up in the parent: nothing loads between fork and exec);
    at once where it has ended already."""
    prctl(PR_SET_PDEATHSIG, signum)
    if os.getppid() != parent:
        os.kill(os.getpid(), signum)


def _stop_with(parent: int, prctl, signum: int, mask: set) -> None:
    """In a child process, before its program starts: ``signum`` when ``parent`` ends
    (:func:`_signalled_at_parents_end`). Then the stops the parent held through the fork
    (:func:`popen`) are let in at their defaults, as the program's start finds them: one sent
    meanwhile ends the child here."""
    _signalled_at_parents_end(parent, prctl, signum)
    for stop in STOPS:
        if signal.getsignal(stop) is not signal.SIG_IGN:  # an ignored one stays so past exec
            signal.signal(stop, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_SETMASK, mask)


def popen(command: list[str], signum: int = signal.SIGTERM, **options) -> subprocess.Popen:
    """``subprocess.Popen(command, **options)``, the child getting ``signum`` when this process
    ends, however it ends (Linux: :func:`_stop_with`). The stops (:data:`STOPS`) are held
    through the fork. Python runs its at-fork hooks and the ``preexec_fn`` in the child, and a
    Ctrl-C that came then would run this process's handler there, or be printed as "Exception
    ignored" and lost."""
    if sys.platform != "linux":
        return subprocess.Popen(command, **options)
    with stops_held() as mask:
        ending = functools.partial(_stop_with, os.getpid(), ctypes.CDLL(None).prctl, signum, mask)
        return subprocess.Popen(command, preexec_fn=ending, **options)


@contextlib.contextmanager
def stops_held():
    """The stops (:data:`STOPS`) held in this thread for the while (a fork made in it: in its
    child too), then let in as before; gives the mask as it was."""
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, STOPS)
    try:
        yield mask
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)


def start(folder: str, command: list[str], env: dict | None = None) -> subprocess.Popen:
    """The run of ``command`` started, its output appended to ``folder``'s ``launch.log``. On
    Linux it is stopped (SIGTERM: it saves a checkpoint) when this process ends, however it
    ends: a launcher killed leaves no run training on unwatched, holding its folder."""
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, LOG_FILE), "a") as log:
        return popen(command, stdout=log, stderr=log, env=env)


def diverged_at(lines: list[str]) -> int | None:
    """The step a run's loss turned non-finite, from its divergence's ``error:`` line among
    ``lines`` (its log): the step the replay met it at, one step a call, where it did; else the
    last step of the call that met it. None where no such line is found."""
    for line in reversed(lines):
        if found := DIVERGED.match(line):
            replayed = REPLAYED.search(line)
            return int((replayed or found).group(1))
    return None


def outcome(folder: str, returncode: int) -> str:
    """A run that ended with ``returncode``: its result written (its last line of JSON, or its
    divergence: the last step evaluated, and the step the loss turned non-finite), in words;
    where it was stopped, at which checkpoint; where it failed otherwise, how (the signal's
    name, or its status and its last line: its log)."""
    with open(os.path.join(folder, LOG_FILE), errors="replace") as f:
        lines = f.read().splitlines()
    results = [line for line in lines if line.startswith("{")]
    if returncode == 0 and results:
        result = json.loads(results[-1])
        write_result(folder, result)
        return f"test error {100 * result['test_error']:.2f}%"
    if returncode == 1:
        from resnet_noBN.trainers.run_log import read_metrics  # TensorBoard's writer: seconds

        step = max((r["step"] for r in read_metrics(folder)), default=0)
        at = diverged_at(lines)
        write_result(folder, {"diverged": True, "final_step": step, "diverged_at": at})
        turned = f" (the last evaluated; its loss non-finite at step {at})" if at else ""
        return f"diverged after step {step}{turned}"
    kept = checkpoint_step(folder)
    resume = f"rerun to resume it at step {kept:,}" if kept else "rerun to start it again"
    if returncode == PREEMPTED_EXIT:
        at = f"at step {kept:,} (its checkpoint)" if kept else "before its first checkpoint"
        return f"stopped {at}; {resume}"
    said = lines[-1] if lines and lines[-1].startswith("error: ") else ""
    why = f": {said.removeprefix('error: ')}" if returncode > 0 and said else ""
    return f"ended by {ended_by(returncode)}{why} (see its {LOG_FILE}); {resume}"


def checkpoint_step(folder: str) -> int:
    """The step of the newest checkpoint in ``folder`` (0: none), from the files' names."""
    names = os.listdir(folder) if os.path.isdir(folder) else []
    return max((int(m.group(1)) for n in names if (m := CHECKPOINT.match(n))), default=0)
