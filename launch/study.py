"""Run a study: a baseline experiment and arms that each change one thing from it, every arm
from several seeds at one budget, several runs side by side, then the table of what each change
does (resnet_noBN/studies/study.py; the paper's claims: resnet_noBN/studies/claims.py).

    python launch/study.py --study=table2 --data_path=/data/cifar-10-batches-bin \\
        --output_dir=results/table2_small          # small network, 8,000 steps, 3 seeds
    python launch/study.py --study=table2 --arms=cifar10_paper,cifar10_leaky --model=quarter \\
        --seeds=2 --data_path=... --output_dir=results/table2_quarter
    python launch/study.py --study=claims --data_path=... --output_dir=results/claims
    python launch/study.py --study=claims --model=paper --train_steps=20000 --eval_every=2000 \\
        --seeds=1 --arms=claims_trainable_head --run_flags=--precision=mixed_bfloat16 \\
        --data_path=...                            # the claims at Table 1's width, a GPU

A study's budget (network preset, steps, evaluations, seeds, flags of every run) is its own
(``studies.study.BUDGETS``) where no flag gives one. Each (arm, seed) is one ``launch/cifar.py``
run (``--experiment=ARM`` at the budget) in ``<output_dir>/runs/<arm>-seed<k>``, its output in
``launch.log`` there; ``--parallel`` of them at a time (no more than there are to do), the
cores shared between them; a run keeps its share to its end, so the runs left once none waits
get a line of advice: stop, and resume them on all the cores. Every
run still to do is checked first (``launch/cifar.py --check_only``: its flags, data, backend and
folder), so a refused study writes nothing. Stopped at any moment (SIGTERM, SIGINT:
``host.stops``), it ends in one line and exit 3, each run training saving a checkpoint first
(``studies.run_loop``, the loop it shares with launch/table2.py); the same command resumes: a
finished run is kept, an unfinished one resumes. After each run: the report (``study.md``: the
table, ``study.json``, ``study_curves.png``, ``study_errors.png``, ``study_health.png``; the
claims': ``claims.md``, ``claims.json``, ``claims_curves.png``), and a line with the runs done,
the time left (at the rate of the runs that ended) and the finish. Ends with
one line of JSON. ``--report_only`` writes the report of the runs that have ended and starts
none (a study whose runs go on elsewhere; the table gives each arm's seeds as 1/2); its
``--arms`` may also name an arm the study no longer runs (``experiments.RETIRED``), whose
committed runs it reports with the others.
"""

from __future__ import annotations

from resnet_noBN.host import stops

stops.install("while checking the runs to do: nothing written")  # one line and exit 3

import datetime
import json
import os
import shlex
import sys

from absl import flags

from resnet_noBN.configs import experiments
from resnet_noBN.configs.errors import InputError, Preempted
from resnet_noBN.configs.flag_config import config_from_flags, define_flags
from resnet_noBN.runs import cli, folder_lock
from resnet_noBN.studies import arm_runs, claims, run_loop, study, thinned
from resnet_noBN.studies.arm_runs import run_dir

FLAGS = flags.FLAGS
flags.DEFINE_enum("study", "table2", list(experiments.STUDIES), "The study (experiments.py).")
flags.DEFINE_list(
    "arms",
    None,
    "Its arms to run (default: all; the baseline always runs); with --report_only also a "
    "retired arm (experiments.RETIRED) to report.",
)
# the budget's flags (study.Budget's fields), no default: each study's own (study.BUDGETS)
define_flags(
    study.Budget(**dict.fromkeys(("model", "train_steps", "eval_every", "seeds"))),
    exclude=("flags",),
)
flags.DEFINE_integer("parallel", 2, "Runs side by side.")
flags.DEFINE_string("data_path", None, "The data every run reads (launch/cifar.py --data_path).")
flags.DEFINE_list("run_flags", [], cli.RUN_FLAGS_HELP.format(launcher="the study's"))
flags.DEFINE_string("label", None, "What the data is, for the report's title (default: none).")
flags.DEFINE_string("output_dir", "results/table2", "Where the runs, table and curves go.")
flags.DEFINE_bool(
    "report_only",
    False,
    "Write the report from the runs that have ended and start none (the table says each arm's "
    "seeds, e.g. 1/2): for runs still going elsewhere, or a report written again.",
)
flags.DEFINE_bool(
    "thin",
    False,
    "With --report_only: first put each ended run's records in their committed form "
    "(studies/thinned.py: answers.jsonl's last evaluation and figures.json, a train.jsonl of 5 "
    "significant digits), then write the report from them.",
)

# the report of each study: the claims' verdicts (studies/claims.py); the others',
# studies/study.py's
REPORTS = {"claims": claims}


def arms() -> tuple[str, ...]:
    """--arms in the study's order, its baseline first; a retired arm (experiments.RETIRED)
    after them, for --report_only alone."""
    every = experiments.STUDIES[FLAGS.study]
    retired = tuple(a for a in experiments.RETIRED.get(FLAGS.study, {}) if a in (FLAGS.arms or ()))
    if retired and not FLAGS.report_only:
        raise InputError(
            f"--arms: {', '.join(retired)} is an arm {FLAGS.study} no longer runs; only "
            "--report_only writes the report of its runs"
        )
    unknown = sorted(set(FLAGS.arms or ()) - set(every) - set(retired))
    if unknown:
        raise InputError(
            f"--arms: {', '.join(unknown)} is not an arm of {FLAGS.study}; choose from "
            f"{','.join(every)}"
        )
    ran = tuple(a for a in every if FLAGS.arms is None or a in FLAGS.arms or a == every[0])
    return ran + retired


def budget_from_flags() -> study.Budget:
    """The study's budget (``study.BUDGETS``) with the flags given over it, --run_flags and
    --data_path after its own flags; checked (InputError, one line)."""
    own = study.BUDGETS[FLAGS.study]
    data = (f"--data_path={FLAGS.data_path}",) if FLAGS.data_path else ()
    return config_from_flags(
        study.Budget, base=own, flags=own.flags + tuple(cli.each_flag(FLAGS.run_flags)) + data
    )


def header(budget: study.Budget, report) -> str:
    command = "python launch/study.py " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    cpu = next(
        (line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if "model name" in line),
        "unknown CPU",
    )
    label = f", {FLAGS.label}" if FLAGS.label else ""
    invocation = (
        "the report only, nothing trained"
        if FLAGS.report_only
        else f"{cpu}, {len(os.sched_getaffinity(0))} cores, {FLAGS.parallel} runs side by side"
    )
    return (
        f"# Study {FLAGS.study}: {budget.model} network, {budget.train_steps} steps, "
        f"{budget.seeds} seeds{label}\n\n{report.describe(budget)} "
        f"This invocation: {invocation}, {datetime.date.today().isoformat()}.\n"
        f"Command: `{command}`\n"
    )


def check(todo: list, budget: study.Budget, threads) -> None:
    """Every run of ``todo`` checked as it would start (``arm_runs.check``), writing nothing;
    InputError, one line naming the run, for the first refused."""
    arm_runs.check(
        {
            f"{arm}, seed {seed}": study.command(FLAGS.output_dir, arm, seed, budget, threads)
            for arm, seed in todo
        }
    )


def report_only(arm_names: tuple[str, ...], budget: study.Budget, report, ended: int, todo):
    """--report_only: the report of the ``ended`` runs, nothing started; InputError where none
    has ended (a report of nothing)."""
    if not ended:
        raise InputError(
            f"--report_only: no run of {FLAGS.study} has ended in {FLAGS.output_dir}; "
            "check --output_dir, --arms and --seeds"
        )
    folder_lock.lock(FLAGS.output_dir, "--output_dir")
    stops.doing("while writing the report: each file is replaced whole")
    if FLAGS.thin:
        for arm, seed in study.runs(arm_names, budget):
            if study.finished(FLAGS.output_dir, arm, seed):
                thinned.thin(run_dir(FLAGS.output_dir, arm, seed))
    left = ", ".join(f"{arm} seed {seed}" for arm, seed in todo) or "none"
    print(f"report of {ended} of {ended + len(todo)} runs; not ended: {left}", flush=True)
    final_report(arm_names, budget, report, ended)


def final_report(arm_names: tuple[str, ...], budget: study.Budget, report, runs: int) -> None:
    """The report written, its table printed, then the one line of JSON."""
    summary = report.write_report(FLAGS.output_dir, arm_names, budget, header(budget, report))
    print(report.markdown_table(summary, arm_names, budget), flush=True)
    print(json.dumps({"output_dir": FLAGS.output_dir, "runs": runs, "arms": summary}), flush=True)


@cli.exit_codes
def main(argv):
    budget, report = budget_from_flags(), REPORTS.get(FLAGS.study, study)
    if FLAGS.parallel < 1:
        raise InputError(f"--parallel must be positive, got {FLAGS.parallel}")
    arm_names = arms()
    todo = [r for r in study.runs(arm_names, budget) if not study.finished(FLAGS.output_dir, *r)]
    total = len(study.runs(arm_names, budget))
    if FLAGS.thin and not FLAGS.report_only:
        raise InputError("--thin changes the records of ended runs: give it with --report_only")
    if FLAGS.report_only:
        return report_only(arm_names, budget, report, total - len(todo), todo)
    tf_threads = study.threads_each(min(FLAGS.parallel, max(1, len(todo))))
    threads = tf_threads if os.environ.get("KERAS_BACKEND", "tensorflow") == "tensorflow" else None
    if todo:  # before anything is written; a second or so a run
        runs = "the run" if len(todo) == 1 else f"the {len(todo):,} runs"
        print(f"checking {runs} to do as each would start", flush=True)
        check(todo, budget, threads)
    folder_lock.lock(FLAGS.output_dir, "--output_dir")
    stops.doing("while writing the report: each file is replaced whole")
    print(
        f"study {FLAGS.study}: {total} runs ({len(arm_names)} arms x {budget.seeds} seeds), "
        f"{total - len(todo)} already finished; {FLAGS.parallel} side by side",
        flush=True,
    )
    jobs = [
        run_loop.Job(
            f"{arm}, seed {seed}",
            run_dir(FLAGS.output_dir, arm, seed),
            tuple(study.command(FLAGS.output_dir, arm, seed, budget, threads)),
        )
        for arm, seed in todo
    ]

    def write() -> None:
        report.write_report(FLAGS.output_dir, arm_names, budget, header(budget, report))

    ended = run_loop.run_all(
        jobs, write, parallel=FLAGS.parallel, alone=study.advice_when_alone(threads)
    )
    if ended.stopped_by is not None:
        raise Preempted(ended.stop_line())
    final_report(arm_names, budget, report, total)


if __name__ == "__main__":
    cli.run(main)
