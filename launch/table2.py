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
every check (``studies.table2_plan.build``): bad input is one line, exit 2. Then the plan: the runs
(ended, diverged, resuming at a step, to train), the data, the device, backend and precision (on a
GPU: JAX and mixed_bfloat16, the one path measured on GPUs here; on a CPU: the default backend in
float32), the rate measured by a few steps of the first run to train in a throwaway folder, the time
projected and the finish (a CPU: days, and the faster paths). ``--dry_run`` stops there. Then the
runs, their evaluations and divergences shown as they come, and after each: the table
(``table2.md``, ``table2.json``, ``table2.png``, ``table2_curves.png``:
``studies.table2_report``) and
a line with the runs done, the time left (the plan's projection of the runs still to train) and
the finish (``studies.run_loop``). Stopped at any moment (SIGTERM, SIGINT: ``host.stops``), it ends
in one line and exit 3: during the checks and the timing run with the folder as it found it; while
a run trains, that run saves a checkpoint first and the table is written; killed (``kill -9``),
on Linux its run is sent SIGTERM (``arm_runs.start``). The same command resumes: an ended run (a
diverged one too) is never trained again, a stopped one resumes at its checkpoint. Ends with the
table and one line of JSON.

Exit status: 0 every run ended (a diverged one included); 1 a run failed otherwise (its
launch.log; rerun to resume it); 2 bad input, before anything is written; 3 stopped (SIGTERM,
SIGINT): rerun the same command to resume.
"""

from __future__ import annotations

from resnet_noBN.host import stops

stops.install("while checking the data, the flags and every run: nothing written")

import datetime
import json
import os
import shlex
import sys
import time

from absl import flags

from resnet_noBN.backends import registry
from resnet_noBN.configs.errors import Preempted
from resnet_noBN.configs.runtime_config import PRECISIONS
from resnet_noBN.runs import cli, folder_lock
from resnet_noBN.studies import run_loop, table2_plan, table2_report

FLAGS = flags.FLAGS
flags.DEFINE_string("cifar10_path", None, "The CIFAR-10 binary files (cifar-10-batches-bin/).")
flags.DEFINE_string("cifar100_path", None, "The CIFAR-100 binary files (cifar-100-binary/).")
flags.DEFINE_integer(
    "seeds", 3, f"Seeds per data set (0, 1, ...; at most {table2_plan.MAX_SEEDS})."
)
flags.DEFINE_string("output_dir", "runs/table2", "Where the runs and the table go.")
flags.DEFINE_bool("dry_run", False, "Print the plan and its projected time, and train nothing.")
flags.DEFINE_list("run_flags", [], cli.RUN_FLAGS_HELP.format(launcher="the table's"))
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


def header(plan: table2_plan.Plan) -> str:
    command = "python launch/table2.py " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    return (
        f"# Table 2 of arXiv:1611.04231 on your own machine: "
        f"{table2_plan.seeds_text(plan.seeds)}\n\n"
        f"This invocation: {plan.device()}; backend {plan.backend}, precision "
        f"{plan.precision or 'float32'}; {datetime.date.today().isoformat()}.\n"
        f"Command: `{command}`\n"
    )


def checked_plan() -> tuple[table2_plan.Plan, table2_plan.Measured | None, str]:
    """The plan, every check made, and the rate of a few steps of its first run to train (None
    and why where none was measured); the folder locked first (another invocation there:
    refused at once), and a refusal or a stop before training gives it back as it was found."""
    data = {"cifar10": FLAGS.cifar10_path, "cifar100": FLAGS.cifar100_path}
    lock = None if FLAGS.dry_run else folder_lock.lock(FLAGS.output_dir, "--output_dir")
    try:
        print("checking the data, the flags and every run as it would start", flush=True)
        plan = table2_plan.build(
            FLAGS.output_dir,
            FLAGS.seeds,
            data,
            cli.each_flag(FLAGS.run_flags),
            FLAGS.backend,
            FLAGS.precision,
        )
        todo = [run for run in plan.states() if run.to_train]
        if not todo:
            return plan, None, ""
        stops.doing("while timing a few steps in a throwaway folder: nothing written")
        print(f"timing {todo[0].experiment}, seed {todo[0].seed} for a few steps", flush=True)
        return plan, *table2_plan.measure(plan, todo[0])
    except BaseException:  # nothing else written yet
        if lock is not None:
            lock.withdraw()
        raise


@cli.exit_codes
def main(argv):
    plan, measured, measured_line = checked_plan()
    if not FLAGS.dry_run:  # what a stop interrupts from now on, the runs aside (run_loop)
        stops.doing("while writing the table: each file is replaced whole")
    print(table2_plan.describe(plan, measured, measured_line, time.time()), flush=True)
    if FLAGS.dry_run:
        return
    batch_size = plan.configs[table2_plan.EXPERIMENTS["cifar10"]]["recipe"]["batch_size"]

    def write_table() -> dict:
        return table2_report.write(FLAGS.output_dir, plan.seeds, header(plan), batch_size)

    jobs = [
        run_loop.Job(
            f"{run.experiment}, seed {run.seed}",
            run.folder,
            tuple(plan.command(run.experiment, run.seed)),
            plan.env(),
        )
        for run in plan.states()
        if run.to_train
    ]
    tables = []  # the table after each run
    ended = run_loop.run_all(
        jobs,
        lambda: tables.append(write_table()),
        echo=True,
        seconds_left=lambda: table2_plan.projected(plan, measured),
    )
    summary = tables[-1] if tables else write_table()  # nothing trained: the runs as they stand
    print(table2_report.markdown_tables(summary), flush=True)
    if ended.stopped_by is not None:
        raise Preempted(ended.stop_line())
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
    if ended.failed:
        print(f"{', '.join(ended.failed)} failed (see its launch.log): rerun to resume", flush=True)
        sys.exit(1)


if __name__ == "__main__":
    cli.run(main)
