"""What every training launcher shares on the command line: the layer table, the faster paths a
long run is told of (and a GPU run on a backend never measured on one, the path that was), the
run's report (its one line of JSON), and the exit codes. (The run's
flags are ``runs.run_config``'s; its start, ``runs.setup``'s.)

What differs between the Keras backends is the backend object's (``backends.registry.current()``):
TensorFlow is imported only on the TensorFlow backend, and nothing here imports Keras: a
launcher checks its flags and answers a bad one before its backend loads.

Exit status: 0 trained; 1 the loss diverged (the checkpoints stay intact); 2 bad input, one line
``error: ...`` on stderr, before anything is written; 3 stopped: SIGTERM or SIGINT arrived, in
training a checkpoint of the step reached was saved, elsewhere nothing was lost
(``host.stops``), and rerunning the same command resumes there; 4 a
write into the run's folder failed (no space left, any OSError): one line ``error: ...`` naming
the folder, the latest checkpoint whole and restorable, nothing half-written left; free space and
rerun to resume; 5 a peer of a multi-process job died or stopped answering for
``--peer_timeout_s``: one line ``error: ...`` naming it, nothing written damaged; rerun the job
to resume from its latest checkpoint (``configs.errors``).
"""

from __future__ import annotations

import functools
import json
import os
import shlex
import sys
from typing import TYPE_CHECKING

from absl import app, flags, logging

from resnet_noBN.backends import registry
from resnet_noBN.configs.errors import (
    PREEMPTED_EXIT,
    STORAGE_EXIT,
    CheckpointError,
    DataError,
    InputError,
    Preempted,
    StorageError,
    TrainingDiverged,
    say,
)
from resnet_noBN.host import cpu, stops
from resnet_noBN.study_plots import arm_health
from resnet_noBN.trainers import run_log

if TYPE_CHECKING:
    from resnet_noBN.backends.base import Runtime

FLAGS = flags.FLAGS


# bench/README.md, "The levers": the paper model's step on an AMD Zen 4 CPU with AVX512_BF16,
# float32 6.920 s, mixed_bfloat16 3.868 s (same run)
CPU_BF16_SPEEDUP = 6.920 / 3.868


def faster_paths(runtime: Runtime, precision: str, *more: str) -> str:
    """The faster paths a run projected to take over a day is told of, with the factor measured
    where there is one: a GPU (where it runs on a CPU), mixed_bfloat16 (where it runs float32 on
    a GPU or a CPU that computes bfloat16 natively), ``more`` (the launcher's own), fewer steps."""
    paths = []
    on_gpu = registry.current().has_gpu(runtime)
    if not on_gpu:
        paths.append("a GPU (launch/gpu_lease.sh runs the paper's recipe on a lent one)")
    if precision == "float32" and (on_gpu or cpu.has_native_bf16()):
        measured = (
            f", {CPU_BF16_SPEEDUP:.2f}x on a Zen 4 CPU with AVX512_BF16" if not on_gpu else ""
        )
        paths.append(f"--precision=mixed_bfloat16 (bfloat16 convolutions{measured})")
    paths += more
    paths.append("fewer --train_steps (the time is proportional to them)")
    return "; ".join(paths)


# results/gpu_h200: the paper's CIFAR-10 run on JAX, bfloat16 convolutions, one H200 (2026-11-27)
MEASURED_GPU_PATH = (
    "KERAS_BACKEND=jax with --precision=mixed_bfloat16 (the paper's CIFAR-10 run: 60,000 steps "
    "in 449 s on one H200, results/gpu_h200; also run on an H100)"
)


# results/gpu_h200_backends: 300 steps of the paper's CIFAR-100 run on each backend, one H200
# (2026-12-04): the images/s of steps 201 to 300
GPU_RATES = {"torch": "1,408 images/s against JAX's 20,018 (0.070 of it)"}


def measured_gpu_path(runtime: Runtime) -> str | None:
    """One line for a run on a GPU on a backend other than JAX: what this project measured of it
    on a GPU (TensorFlow: nothing; PyTorch: 300 steps, ``GPU_RATES``) and the path it measured
    whole, JAX with bfloat16 convolutions (H100, H200). None on JAX or without a GPU."""
    backend = registry.current()
    if backend.name == "jax" or not backend.has_gpu(runtime):
        return None
    rate = GPU_RATES.get(backend.name)
    measured = (
        f"the {backend.name} backend ran 300 steps on one H200 here, at {rate} "
        "(results/gpu_h200_backends)"
        if rate
        else f"this project has never run the {backend.name} backend on a GPU"
    )
    return (
        f"note: {measured}; the path measured on one: {MEASURED_GPU_PATH}; JAX's GPU build: "
        f"{registry.GPU_INSTALL}"
    )


def train_and_report(run, faster: str = "", **report) -> dict:
    """Train ``run`` (``runs.setup.Run``), then print its one line of JSON (``report`` first);
    returns the result. ``faster``: the faster paths named where the run would take over a day
    (:func:`faster_paths`)."""
    try:
        result = run.trainer.train(
            run.train_source,
            run.eval_source,
            print_fn=lambda line: print(line, flush=True),
            faster=faster,
        )
    except TrainingDiverged:
        plot_divergence(run.trainer)
        raise
    finally:
        run.trainer.close()
    print(json.dumps({**report, **result}), flush=True)
    return result


def plot_divergence(trainer) -> None:
    """``divergence/health.png``: the health of every step of a divergence replayed
    (``--replay_divergence``; ``trainers.loop.TrainLoop.replay``), drawn as a study's
    (``arm_health.plot``), where the replay recorded a step."""
    folder = os.path.join(trainer.model_dir, run_log.DIVERGENCE_DIR)
    if trainer.is_chief and os.path.isfile(os.path.join(folder, run_log.TRAIN_FILE)):
        arm_health.plot(
            {"replayed step by step": [folder]},
            os.path.join(folder, run_log.HEALTH_PLOT),
            f"{trainer.log.title}: every step before the divergence",
            trainer.cfg.batch_size,
        )


# --run_flags of launch/study.py and launch/table2.py (``launcher``: whose flags come first)
RUN_FLAGS_HELP = (
    "More flags of every run, after {launcher}, separated by commas or spaces (e.g. "
    "--eval_every=1000, or '--model=small --train_steps=400' for a smoke test)."
)


def each_flag(values: list[str]) -> list[str]:
    """The flags of a --run_flags (absl's list, split at commas), each item split at spaces
    too, as a shell splits: "--model=small --train_steps=400" is two flags; InputError (one
    line) for an item a shell could not split (a quote left open)."""
    flags_given = []
    for value in values:
        try:
            flags_given += shlex.split(value)
        except ValueError as e:
            raise InputError(
                f"--run_flags: {value} cannot be split ({e}); close its quote"
            ) from None
    return flags_given


# absl's help flags: each prints the help it was asked for and exits 1, which ``run`` makes 0
HELP_FLAGS = ("--help", "-help", "-h", "-?", "--helpshort", "--helpfull", "--helpxml")


def run(main) -> None:
    """``app.run(main)``, with a bad flag or a Keras backend that cannot load reported as one
    line ``error: ...`` and exit 2, and the help, asked for, printed with exit 0."""

    def parse(argv):
        try:
            return FLAGS(argv)
        except flags.Error as e:
            say(f"error: {e}")
            sys.exit(2)
        except SystemExit as e:
            if e.code == 1 and any(a.split("=")[0] in HELP_FLAGS for a in argv[1:]):
                sys.exit(0)
            raise

    def quiet_tf_info(argv):  # absl's default verbosity shows TensorFlow's INFO chatter
        logging.set_verbosity(logging.WARNING)
        try:
            registry.check_chosen()  # before anything imports Keras
        except InputError as e:
            say(f"error: {e}")
            sys.exit(2)
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
            say(f"error: {e}")
            exit_alone(2)
        except TrainingDiverged as e:
            say(f"error: {e}")
            sys.exit(1)
        except Preempted as e:
            say(str(e))
            sys.exit(PREEMPTED_EXIT)
        except StorageError as e:
            say(f"error: {e}")
            exit_alone(STORAGE_EXIT)
        except Exception as e:
            backend = registry.loaded()
            if backend is not None:
                backend.end_if_peer_lost(e)  # one line and exit 5, where it is one
                backend.end_now_in_job(1, e)
            raise
        finally:  # its last line is written: a signal now changes nothing (host.stops)
            stops.ended()

    return wrapped


def exit_alone(status: int) -> None:
    """``sys.exit(status)`` after a failure this process alone may have met (bad input, a
    failed write: only process 0 of a JAX job writes); in a job, at once, so that the peers
    waiting for it end too (``Backend.end_now_in_job``). Divergence and preemption are
    met by every process at the same step, and exit through JAX's shutdown as usual. (A
    process that refused its input before loading a backend is in no job yet.)"""
    backend = registry.loaded()
    if backend is not None:
        backend.end_now_in_job(status)
    sys.exit(status)
