"""Table 2 of arXiv:1611.04231 on your own machine, in one command: the paper's CIFAR-10 and
CIFAR-100 runs (``cifar10_paper``, ``cifar100_paper``: Table 1's network, Section 4's recipe;
the paper: 6.38% and 24.64%) from N seeds, one after the other, and the table written beside the
paper's.

    python launch/table2.py --cifar10_path=/data/cifar-10-batches-bin \\
        --cifar100_path=/data/cifar-100-binary                 # 3 seeds, into runs/table2
    python launch/table2.py --cifar10_path=... --cifar100_path=... --dry_run   # the plan alone
    python launch/table2.py --cifar10_path=... --cifar100_path=... --seeds=5 \\
        --output_dir=runs/table2_5seeds --run_flags=--eval_every=1000

Each run is ``launch/cifar.py --experiment=E --seed=K --data_path=... --model_dir=<output_dir>/
runs/E-seedK`` (its folder, config.json, answers, checkpoints; its output in ``launch.log``
there), in the order seed 0 of CIFAR-10, seed 0 of CIFAR-100, then seed 1 of each...; a
CIFAR-10 run also replays a divergence's last steps, as the CIFAR-100 experiment does.

The folder is locked first (another invocation there: refused at once). Before anything is written,
every check (``runs.table2_plan.build``): bad input is one line, exit 2. Then the plan: the runs
(ended, diverged, resuming at a step, to train), the data, the device, backend and precision (on a
GPU: JAX and mixed_bfloat16, the one path measured on GPUs here; on a CPU: the default backend in
float32), the rate measured by a few steps of the first run to train in a throwaway folder, the time
projected and the finish (a CPU: days, and the faster paths). ``--dry_run`` stops there. Then the
runs, their evaluations and divergences shown as they come, and after each: the table
(``table2.md``, ``table2.json``, ``table2.png``, ``table2_curves.png``: ``runs.table2_report``) and
a line with the runs done, the time left and the finish. Interrupted (SIGTERM, SIGINT: the run saves
a checkpoint; killed, on Linux its run is sent SIGTERM: ``arm_runs.start``), the same command
resumes: an ended run (a diverged one too) is never trained again, a stopped one resumes at its
checkpoint. Ends with the table and one line of JSON.

Exit status: 0 every run ended (a diverged one included); 1 a run failed otherwise (its
launch.log; rerun to resume it); 2 bad input, before anything is written; 3 stopped (SIGTERM,
SIGINT): rerun the same command to resume.
"""

from __future__ import annotations

import datetime
import json
import os
import re
import shlex
import signal
import sys
import time

from absl import flags

from resnet_noBN.backends import registry
from resnet_noBN.configs.errors import PREEMPTED_EXIT, Preempted
from resnet_noBN.configs.runtime_config import PRECISIONS
from resnet_noBN.progress import Progress
from resnet_noBN.runs import arm_runs, cli, folder_lock, table2_plan, table2_report

FLAGS = flags.FLAGS
flags.DEFINE_string("cifar10_path", None, "The CIFAR-10 binary files (cifar-10-batches-bin/).")
flags.DEFINE_string("cifar100_path", None, "The CIFAR-100 binary files (cifar-100-binary/).")
flags.DEFINE_integer("seeds", 3, "Seeds per data set (0, 1, ...).")
flags.DEFINE_string("output_dir", "runs/table2", "Where the runs and the table go.")
flags.DEFINE_bool("dry_run", False, "Print the plan and its projected time, and train nothing.")
flags.DEFINE_list(
    "run_flags",
    [],
    "More flags of every run, after the table's (e.g. --eval_every=1000, or --model=small "
    "--train_steps=400 for a smoke test).",
)
flags.DEFINE_enum(
    "backend",
    None,
    list(registry.BACKENDS),
    "The runs' Keras backend (default: jax on a GPU, the one backend measured on one; else "
    "KERAS_BACKEND, else tensorflow).",
)
flags.DEFINE_enum(
    "precision",
    None,
    list(PRECISIONS),
    "The runs' precision (default: mixed_bfloat16 on a GPU; else the paper's float32).",
)
flags.mark_flags_as_required(["cifar10_path", "cifar100_path"])

# what a run's log shows on this terminal: its evaluations, its rate and projection, a resume,
# a divergence's replay, warnings and errors; its progress lines once a minute (SHOW_EVERY_S)
SHOWN = re.compile(r"test error|the first call took|^resumed from|^replaying|^warning|^error")
PROGRESS = re.compile(r"^step +\d+ +loss")
SHOW_EVERY_S = 60.0


class LogTail:
    """The lines a run appends to its launch.log from now on, the ones worth showing echoed
    here with the run's name (:data:`SHOWN`; a progress line once a minute)."""

    def __init__(self, path: str, name: str):
        self.path, self.name, self.partial, self.shown_s = path, name, "", 0.0
        self.offset = os.path.getsize(path) if os.path.exists(path) else 0

    def echo(self) -> None:
        with open(self.path, encoding="utf-8", errors="replace") as f:
            f.seek(self.offset)
            text = self.partial + f.read()
            self.offset = f.tell()
        *lines, self.partial = text.split("\n")
        for line in lines:
            progress = PROGRESS.match(line) and time.monotonic() - self.shown_s >= SHOW_EVERY_S
            if SHOWN.search(line) or progress:
                self.shown_s = time.monotonic() if progress else self.shown_s
                print(f"  {self.name}: {line}", flush=True)


def header(plan: table2_plan.Plan) -> str:
    command = "python launch/table2.py " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    return (
        f"# Table 2 of arXiv:1611.04231 on your own machine: "
        f"{table2_plan.seeds_text(plan.seeds)}\n\n"
        f"This invocation: {plan.device()}; backend {plan.backend}, precision "
        f"{plan.precision or 'float32'}; {datetime.date.today().isoformat()}.\n"
        f"Command: `{command}`\n"
    )


def stop_before_training(signum, frame):
    raise Preempted("stopped before any run started: nothing written; rerun to start")


@cli.exit_codes
def main(argv):
    data = {"cifar10": FLAGS.cifar10_path, "cifar100": FLAGS.cifar100_path}
    # the folder is this invocation's from the first moment (another one there: refused at
    # once); a refusal or a stop before training gives it back as it was found
    lock = None if FLAGS.dry_run else folder_lock.lock(FLAGS.output_dir, "--output_dir")
    try:
        print("checking the data, the flags and every run as it would start", flush=True)
        plan = table2_plan.build(
            FLAGS.output_dir, FLAGS.seeds, data, FLAGS.run_flags, FLAGS.backend, FLAGS.precision
        )
        todo = [run for run in plan.states() if run.to_train]
        measured, measured_line = None, ""
        if todo:
            signal.signal(signal.SIGTERM, stop_before_training)
            signal.signal(signal.SIGINT, stop_before_training)
            first = todo[0]
            print(f"timing {first.experiment}, seed {first.seed} for a few steps", flush=True)
            measured, measured_line = table2_plan.measure(plan, first)
    except BaseException:  # nothing else written yet
        if lock is not None:
            lock.withdraw()
        raise
    print(table2_plan.describe(plan, measured, measured_line, time.time()), flush=True)
    if FLAGS.dry_run:
        return
    running, stopping = [], []

    def stop(signum, frame):  # each run saves a checkpoint and exits 3
        stopping.append(signum)
        for proc in running:
            proc.send_signal(signal.SIGTERM)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    batch_size = plan.configs[table2_plan.EXPERIMENTS["cifar10"]]["recipe"]["batch_size"]
    progress, failed, summary = Progress(len(todo), every_units=1), [], None
    for done, run in enumerate(todo, 1):
        if stopping:
            break
        name = f"{run.experiment}, seed {run.seed}"
        tail = LogTail(os.path.join(run.folder, arm_runs.LOG_FILE), name)
        began = time.perf_counter()
        running[:] = [
            arm_runs.start(run.folder, plan.command(run.experiment, run.seed), plan.env())
        ]
        if stopping:  # a signal between the check above and the start
            running[0].send_signal(signal.SIGTERM)
        print(f"started {name}", flush=True)
        while running[0].poll() is None:
            time.sleep(1)
            tail.echo()
        tail.echo()
        said = arm_runs.outcome(run.folder, running[0].returncode)
        if running[0].returncode not in (0, 1) and not stopping:
            failed.append(name)
        progress.add(1, time.perf_counter() - began)
        print(f"[{done}/{len(todo)}] {name}: {said}; {progress.text()}", flush=True)
        summary = table2_report.write(FLAGS.output_dir, plan.seeds, header(plan), batch_size)
    if summary is None:  # nothing trained: the table of the runs as they stand
        summary = table2_report.write(FLAGS.output_dir, plan.seeds, header(plan), batch_size)
    print(table2_report.markdown_tables(summary), flush=True)
    if stopping:
        print("stopped: rerun the same command to resume", flush=True)
        sys.exit(PREEMPTED_EXIT)
    print(
        json.dumps(
            {
                "output_dir": FLAGS.output_dir,
                "table": os.path.join(FLAGS.output_dir, table2_report.TABLE_FILE),
                **{
                    d: {k: s[k] for k in ("paper_error", "final_error", "ended", "diverged")}
                    for d, s in summary.items()
                },
            }
        ),
        flush=True,
    )
    if failed:
        print(f"{', '.join(failed)} failed (see its launch.log): rerun to resume", flush=True)
        sys.exit(1)


if __name__ == "__main__":
    cli.run(main)
