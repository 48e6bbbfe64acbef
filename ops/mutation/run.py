"""Mutation testing of the modules whose numbers the README and the tables report: each module
(or the part of it :data:`PASSES` names) changed one small way at a time by mutmut 3, and the
tests that cover it run on each change; a change no test fails on is a *survivor*, which a new or
stronger test kills, or :data:`EQUIVALENT` lists as equivalent (the code means the same) with why.

    .venv/bin/pip install -e '.[mutation]'              # mutmut, pinned (setup.py)
    .venv/bin/python -m ops.mutation.run                # every pass, one after the other
    .venv/bin/python -m ops.mutation.run health answers # the passes named
    .venv/bin/python -m ops.mutation.run --list         # each pass: its module, scope, tests

A pass works in a copy of the tree as committed (``--at=REV``, default HEAD: the code others
edit in the working tree meanwhile is not what the figures count; ``--tests_from_worktree``: the
tests as they are here; ``--at=worktree``: every file as it is here, its tracked files and those
git does not ignore, results/ as committed) under ``--work_dir``, where mutmut writes its own
copy (``mutants/``) with
every mutant in it, each switched on by ``MUTANT_UNDER_TEST``: the tree here is never changed,
and what imports it live (other work, trainings) never sees a mutant. ``PYTHONPATH`` names the
mutants' copy, so the launchers the tests start run the mutant too; a ``sitecustomize`` there
hands mutmut the functions those processes executed, so each mutant runs the tests that execute
it in any process (mutmut alone sees the tests' own process only). The real CIFAR slices
(``--cifar_slices``, default ``$RESNET_NOBN_CIFAR_SLICES``, as the tests read it) go to every
pass whose tests need them.

Each pass prints its mutants made, killed (a test failed, or a timeout), listed equivalent, and
new survivors, each with its diff and an entry to paste into :data:`EQUIVALENT` once it is
judged equivalent; an entry no survivor matches any more is named too (killed now, or the code
changed). It appends one JSON line a pass to :data:`PASSES_LOG` (the date, the machine, the
load, the commit, the counts, the seconds). Exit status: 0 no new survivor, 1 some, 2 bad input.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import subprocess
import sys
import time
import tomllib
from datetime import UTC, datetime
from pathlib import Path

from ops.ci.quick_tier import SLICES_ENV
from ops.ci.suite_under_load import machine, others_trainings

REPO = Path(__file__).resolve().parents[2]
EQUIVALENT = REPO / "ops" / "mutation" / "equivalent.toml"
PASSES_LOG = REPO / "ops" / "mutation" / "passes.jsonl"
WORK_DIR = Path("/tmp/resnet_noBN-mutation")
MUTMUT = "mutmut==3.8.1"  # setup.py's mutation extra
COMMAND = ".venv/bin/python -m ops.mutation.run"

# A survivor's change, as its diff shows it: the lines taken out and put in
Change = tuple[str, ...]


@dataclasses.dataclass(frozen=True)
class Pass:
    """One module (``module``, a path from the root), the functions of it mutated (``functions``:
    "name" or "Class.method"; empty: all), and the pytest arguments that select the tests
    covering it (``tests``); ``slices``: they need the real CIFAR slices; ``forkserver``: each
    mutant's tests run in a process forked from one that never imported them (mutmut's
    ``process_isolation = "forkserver"``), where the tests load TensorFlow in their own process:
    forked from a process TensorFlow's threads run in, a mutant's tests hang."""

    module: str
    tests: tuple[str, ...]
    functions: tuple[str, ...] = ()
    slices: bool = False
    forkserver: bool = False

    @property
    def dotted(self) -> str:
        return self.module.removesuffix(".py").replace("/", ".")

    def globs(self) -> list[str]:
        """The mutmut names of the mutants in scope: every one of the module, or those of
        ``functions``."""
        names = self.functions or ("*",)
        return [f"{self.dotted}.{mangled(name)}__mutmut_*" for name in names]


def mangled(function: str) -> str:
    """mutmut's name of ``function`` ("name", "Class.method", "*")."""
    if function == "*":
        return "*"
    cls, _, name = function.rpartition(".")
    return f"x\u01c1{cls}\u01c1{name}" if cls else f"x_{name}"


def function_of(key: str) -> str:
    """The function a mutant's mutmut name belongs to ("name", "Class.method")."""
    name = key.rpartition(".")[2].rsplit("__mutmut_", 1)[0]
    if name.startswith("x\u01c1"):
        return ".".join(name.removeprefix("x\u01c1").split("\u01c1"))
    return name.removeprefix("x_")


STUDY_IN_PROCESS = (
    "not side_by_side and not report_only and not retired_arm and not bad_flag and not unknown_arm"
)

EVALUATION_IN_PROCESS = (
    "not evaluated_again and not leak_probe and not folder_without_a_run and not damaged"
)

PASSES: dict[str, Pass] = {
    # the 2016 statistic (original_2016_error: best precision over 5,000-image windows)
    "original_eval": Pass(
        "resnet_noBN/studies/original_eval.py",
        ("tests/test_answers.py",),
    ),
    # which test images each evaluation got right (answers.jsonl), read and written
    "answers": Pass(
        "resnet_noBN/trainers/answers.py",
        ("tests/test_answers.py", "tests/test_progress.py"),
    ),
    # a run's health: loss parts, gradient norm, largest logit, summed over steps and calls
    "health": Pass(
        "resnet_noBN/trainers/health.py",
        ("tests/test_answers.py", "tests/test_progress.py"),
    ),
    # the evaluation of a saved run (launch/evaluate.py): the test error the tables quote, and
    # the probe of the label leak (the tests in this process: the launcher's train a run first;
    # with them, 155 mutants took 745 s here)
    "evaluation": Pass(
        "resnet_noBN/trained/evaluation.py",
        ("tests/test_evaluation.py", "-k", EVALUATION_IN_PROCESS),
        functions=("probed_test_split", "read_weights", "evaluate_run"),
    ),
    # a study's summaries: each arm's mean and spread over seeds, its gap to the paper
    "study": Pass(
        "resnet_noBN/studies/study.py",
        # the tests in this process: not those that run launch/study.py (52 s for the study
        # trained end to end; with those, 143 mutants took 712 s here)
        ("tests/test_study.py", "-k", STUDY_IN_PROCESS),
        functions=("run_figures", "spread", "summarize", "cell", "_gap", "_diverged"),
    ),
    # Table 2's summary and table: each run's figures, each data set's mean, spread and gap
    # (the test in this process: the launcher's, on the slices, take minutes)
    "table2_report": Pass(
        "resnet_noBN/studies/table2_report.py",
        ("tests/test_table2.py", "-k", "figures_are_known"),
        functions=("run_entry", "summarize", "_run_cell", "_computed", "markdown_tables"),
    ),
    # Table 2's plan: each run's state, its command, its timing run (a stand-in launcher), its
    # projected time, the total (the tests in this process: the launcher's, on the slices,
    # take minutes)
    "table2_plan": Pass(
        "resnet_noBN/studies/table2_plan.py",
        (
            "tests/test_table2.py",
            "-k",
            "projection or gpu_takes or plan_in_words or killed_launchers or timing_run",
        ),
        functions=(
            "runs",
            "state",
            "remove_left_timing_folders",
            "_timing_run",
            "measure",
            "Plan.command",
            "evaluations",
            "seconds",
            "projected",
            "_run_line",
            "describe",
        ),
    ),
    # a study's health table: each run's last weight norm, largest gradient norm, spike and
    # |logit| with their steps (results/identity's health rows)
    "arm_health": Pass(
        "resnet_noBN/study_plots/arm_health.py",
        ("tests/test_study.py", "-k", "health"),
        functions=("figures", "markdown_table"),
    ),
    # the claims study's report: each arm's seeds, chance for a diverged one, the verdict
    # against the baseline's spread, the table (results/claims/claims.md)
    "claims": Pass(
        "resnet_noBN/studies/claims.py",
        ("tests/test_claims.py", "-k", "diverged_seed or report_reads or verdict_at"),
        functions=(
            "arm_summary",
            "verdict",
            "_arms",
            "classes",
            "summarize",
            "_fmt",
            "markdown_table",
        ),
    ),
    # Section 3's sweep as results/theory/sweep.md prints it, and the last line's figures
    "expressivity_report": Pass(
        "resnet_noBN/theory/expressivity_report.py",
        ("tests/test_theory_expressivity.py", "-k", "sweep_table or summary_of"),
        functions=("sweep_table", "summary_of"),
    ),
    # a run's record (config.json) and what may change on resume
    "record": Pass(
        "resnet_noBN/runs/record.py",
        ("tests/test_record.py",),
    ),
    # a run's logs (train.jsonl, metrics.jsonl, answers.jsonl, TensorBoard's), read back, what
    # a resumed run drops from them, and when its plot is redrawn
    "run_log": Pass(
        "resnet_noBN/trainers/run_log.py",
        ("tests/test_run_log.py", "tests/test_progress.py"),
        functions=(
            "read_metrics",
            "_drop_after",
            "_drop_events_after",
            "_step_of",
            "RunLog.resume_at",
            "RunLog.evaluation_at",
            "RunLog.divergence",
            "RunLog.train",
            "RunLog.evaluation",
            "RunLog.draw",
            "RunLog.best_test_error",
        ),
    ),
    # the blocks (Section 2's x + C2(ReLU(C1 x)), Fixup, SkipInit, a zero last convolution,
    # the 2016 code's pre-activation unit): their outputs and gradients after step 0 against
    # each paper's formula, their kernels and scalars at step 0, the 2016 network's layers in
    # order (the resume tests aside: a variant trained twice)
    "blocks": Pass(
        "resnet_noBN/models/blocks.py",
        (
            "tests/test_identity_init.py",
            "tests/test_model.py",
            "-k",
            "not resumes and (identity_init or leaky_relu_identity_and_batch_norm)",
        ),
        forkserver=True,
    ),
    # how near each block is to the identity (results/near_identity's figures): the SAME
    # convolution and its adjoint, the power iteration, the circular norm, the branch ratios,
    # the slope against depth (the end-to-end launch aside: a training run a mutant)
    "near_identity": Pass(
        "resnet_noBN/theory/near_identity.py",
        ("tests/test_near_identity.py", "-k", "not end_to_end"),
        forkserver=True,
    ),
    # each block of a trained network against the identity (each run's near_identity.json,
    # whose figures results/near_identity's summary holds): the blocks found, each bound, the
    # ratios, a run folder and a .keras file measured, the table (the end-to-end launch aside)
    "trained_near_identity": Pass(
        "resnet_noBN/trained/near_identity.py",
        ("tests/test_near_identity.py", "-k", "not end_to_end"),
        forkserver=True,
    ),
    # the study near_identity by depth (results/near_identity's summary.json, the figures its
    # README quotes, its picture): the rows by depth and seed, the slopes, the lines drawn
    "near_identity_study": Pass(
        "resnet_noBN/studies/near_identity_study.py",
        ("tests/test_near_identity_study.py",),
    ),
    # the trained model in one file (launch/export.py): the served network, its weights copied,
    # the write that keeps what was there, the load (the tests in this process: those that read
    # the launchers' trained runs train three runs first, about a minute a mutant)
    "model_file": Pass(
        "resnet_noBN/trained/model_file.py",
        (
            "tests/test_export.py",
            "-k",
            "takes_raw_pixels or cut_short or load_refuses or written_here or load_reads or "
            "cannot_remove or keras_cannot_load",
        ),
        functions=("served_model", "copy_weights", "write", "remove", "load", "read_keras_file"),
        forkserver=True,
    ),
    # the suite's time kept (ops/ci/suite_times.json): each test's seconds and CPU read from a
    # run's JUnit file, summed by file and kind for docs/suite-time.md, and compared with
    # another run's
    "suite_times": Pass(
        "ops/ci/suite_times.py",
        ("tests/test_suite_times.py",),
        functions=(
            "kind_of",
            "read_junit",
            "summed",
            "table",
            "compared",
            "by_kind",
            "by_file",
            "summarise",
            "slowest",
            "dumps",
        ),
    ),
    # each test's CPU, the machine's, from /proc/stat, as a test's JUnit property
    "busy_cpu": Pass("ops/ci/busy_cpu.py", ("tests/test_suite_times.py",)),
}

# Written into the copy (beside mutants/, and copied into it): in every Python process started
# under PYTHONPATH=mutants while mutmut maps functions to tests, the functions executed are
# written at exit for the test that started it; tests that set PYTHONPATH to the tree's root
# name the same folder.
SITECUSTOMIZE = """\
import os

if os.environ.get("MUTANT_UNDER_TEST") == "stats" and os.environ.get("MUTATION_HITS"):
    import atexit

    def _mutation_hits(folder=os.environ["MUTATION_HITS"], pid=os.getpid()):
        state = __import__("sys").modules.get("mutmut.state")
        if state is None or os.getpid() != pid:
            return
        hits = sorted(state.state()._stats)
        if hits:
            path = os.path.join(folder, f"{pid}.txt")
            with open(path + ".part", "w") as f:
                f.write("\\n".join(hits) + "\\n")
            os.replace(path + ".part", path)

    def _mutmut_config(root=os.environ["MUTATION_ROOT"]):
        from mutmut import configuration

        here = os.getcwd()
        os.chdir(root)
        try:
            configuration.config()
        finally:
            os.chdir(here)

    _mutmut_config()
    atexit.register(_mutation_hits)
"""

# The pytest plugin (-p mutation_hits): before mutmut reads a test's functions at its teardown,
# the functions of the processes it started are added; after each session (a mutant's tests),
# what those processes left running is killed.
PLUGIN = """\
import os
import signal

import pytest


def _hits(folder):
    names = set()
    for entry in sorted(os.listdir(folder)):
        if entry.endswith(".txt"):
            path = os.path.join(folder, entry)
            with open(path) as f:
                names.update(line for line in f.read().splitlines() if line)
            os.remove(path)
    return names


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_teardown(item, nextitem):
    folder = os.environ.get("MUTATION_HITS")
    if os.environ.get("MUTANT_UNDER_TEST") == "stats" and folder:
        from mutmut.state import state

        state()._stats.update(_hits(folder))


def _children(pid):
    found = []
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children") as f:
                found += [int(c) for c in f.read().split()]
    except OSError:
        pass
    return found + [g for c in found for g in _children(c)]


def pytest_sessionfinish(session):
    for pid in _children(os.getpid()):
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
"""


def files_of_tree() -> list[str]:
    """The tree's files as a pass copies them: tracked, and untracked ones git does not ignore,
    but under results/ only the tracked (trainings write there)."""

    def listed(*flags: str) -> list[str]:
        out = subprocess.run(
            ["git", "ls-files", "-z", *flags], cwd=REPO, capture_output=True, check=True
        ).stdout
        return [name for name in out.decode().split("\0") if name]

    tracked = set(listed())
    untracked = [
        f for f in listed("--others", "--exclude-standard") if not f.startswith("results/")
    ]
    return sorted(f for f in tracked | set(untracked) if (REPO / f).is_file())


def tests_of_tree() -> list[str]:
    return [f for f in files_of_tree() if f.startswith("tests/")]


def toml_list(values) -> str:
    return "[" + ", ".join(json.dumps(v) for v in values) + "]"


def present(p: Pass, work: Path) -> list[str]:
    """The pass's pytest arguments, less the test files the copy lacks (a pass of an older
    commit, from before its tests)."""
    return [t for t in p.tests if not t.startswith("tests/") or (work / t).is_file()]


def mutmut_config(p: Pass, work: Path, slices: str | None) -> str:
    """The [tool.mutmut] section of the pass's copy: its module mutated, its tests run, the rest
    of the tree beside them in mutants/."""
    source = p.module.split("/")[0]  # resnet_noBN, or ops for the suite's own tools
    tops = sorted({path.name for path in work.iterdir()} - {source, "tests"})
    extra = ["-p", "no:cacheprovider", "-p", "mutation_hits"]
    if p.slices and slices:
        extra.append(f"--cifar_slices={slices}")
    return "\n".join(
        [
            "",
            "[tool.mutmut]",
            f"source_paths = {toml_list([source])}",
            f"only_mutate = {toml_list([p.module])}",
            f"also_copy = {toml_list([*tops, 'sitecustomize.py', 'mutation_hits.py'])}",
            f"pytest_add_cli_args_test_selection = {toml_list(present(p, work))}",
            f"pytest_add_cli_args = {toml_list(extra)}",
            # a mutant's tests may run this long before it counts as a timeout (killed): 4 times
            # their clean time, and 10 s more
            "timeout_multiplier = 4.0",
            "timeout_constant = 10.0",
            *(['process_isolation = "forkserver"'] if p.forkserver else []),
            "",
        ]
    )


def copy_files(names: list[str], work: Path) -> None:
    for name in names:
        (work / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / name, work / name)


def prepare(p: Pass, work: Path, args) -> None:
    """The pass's copy of the tree in ``work`` (emptied first): the commit ``args.at`` (its tests
    the working tree's with ``args.tests_from_worktree``) or the working tree; its config and
    hooks."""
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    if args.at == "worktree":
        copy_files(files_of_tree(), work)
    else:
        archive = subprocess.run(
            ["git", "archive", "--format=tar", args.at], cwd=REPO, capture_output=True, check=True
        ).stdout
        subprocess.run(["tar", "-x", "-C", str(work)], input=archive, check=True)
        if args.tests_from_worktree:
            shutil.rmtree(work / "tests")
            copy_files(tests_of_tree(), work)
    with open(work / "pyproject.toml", "a") as f:
        f.write(mutmut_config(p, work, args.cifar_slices))
    (work / "sitecustomize.py").write_text(SITECUSTOMIZE)
    (work / "mutation_hits.py").write_text(PLUGIN)
    # mutants/ made now: were it absent when Python starts, PYTHONPATH's entry for it would be
    # cached as no folder, and the tests would import the tree's own code
    (work / "mutants").mkdir()
    (work / "hits").mkdir()


def mutmut_env(work: Path) -> dict:
    env = {
        **os.environ,
        "PYTHONPATH": str(work / "mutants"),
        "MUTATION_HITS": str(work / "hits"),
        "MUTATION_ROOT": str(work / "mutants"),
        "TF_CPP_MIN_LOG_LEVEL": "2",
        # every launch a test starts is a fresh process of the mutant's code. A warm process
        # (tests/warm_start.py) started by the tests mutmut runs in its own process would be
        # that process's child: mutmut's runner reaps any child (os.wait) and stops with a
        # KeyError when the child is not one of its workers
        "RESNET_NOBN_TESTS_COLD": "1",
    }
    env.pop("MUTANT_UNDER_TEST", None)
    return env


def mutmut_bin() -> str:
    return str(Path(sys.executable).with_name("mutmut"))


def statuses(work: Path, p: Pass) -> dict[str, str]:
    """{mutant: mutmut's status} of the mutants in the pass's scope."""
    from fnmatch import fnmatch

    from mutmut.stats import status_by_exit_code

    meta = json.loads((work / "mutants" / (p.module + ".meta")).read_text())
    return {
        key: status_by_exit_code[code]
        for key, code in meta["exit_code_by_key"].items()
        if any(fnmatch(key, glob) for glob in p.globs())
    }


KILLED = {"killed", "timeout", "segfault", "suspicious"}  # a test failed, or never ended
# mutmut's words where no selected test executes the module (none selected: pytest's status 5)
NO_TESTS = ("could not find any test case", "failed to collect stats. runner returned 5")
SURVIVED = {"survived", "no tests"}


def diff_of(work: Path, p: Pass, key: str) -> str:
    from mutmut.mutation.diff_apply import get_diff_for_mutant

    here = os.getcwd()
    os.chdir(work)
    try:
        return get_diff_for_mutant(key, path=p.module)
    finally:
        os.chdir(here)


def change_of(diff: str) -> Change:
    """The lines a diff takes out and puts in, each stripped, "-" or "+" first."""
    return tuple(
        line[0] + " " + line[1:].strip()
        for line in diff.splitlines()
        if line[:1] in "-+" and not line.startswith(("---", "+++"))
    )


def load_equivalent(path: Path = EQUIVALENT) -> list[dict]:
    if not path.exists():
        return []
    entries = tomllib.loads(path.read_text()).get("mutant", [])
    for entry in entries:
        entry["change"] = tuple(entry["change"])
    return entries


def judge(p: Pass, survivors: dict[str, Change], entries: list[dict]):
    """(equivalent, new, stale): the survivors that an entry of ``entries`` lists (same module,
    function and change), those none lists, and the pass's entries no survivor matched."""
    mine = [e for e in entries if e["module"] == p.module]
    unused = list(mine)
    equivalent, new = {}, {}
    for key, change in sorted(survivors.items(), key=lambda kv: mutant_order(kv[0])):
        match = next(
            (e for e in unused if e["function"] == function_of(key) and e["change"] == change),
            None,
        )
        if match is None:
            new[key] = change
        else:
            unused.remove(match)
            equivalent[key] = match["why"]
    in_scope = {function_of(g) for g in p.globs()} if p.functions else None
    stale = [e for e in unused if in_scope is None or e["function"] in in_scope]
    return equivalent, new, stale


def mutant_order(key: str) -> tuple[str, int]:
    head, _, number = key.rpartition("__mutmut_")
    return head, int(number) if number.isdigit() else 0


def entry_text(p: Pass, key: str, change: Change) -> str:
    """The :data:`EQUIVALENT` entry of a survivor, its reason to write."""
    lines = ",\n".join(f"    {json.dumps(line)}" for line in change)
    return (
        "[[mutant]]\n"
        f"module = {json.dumps(p.module)}\n"
        f"function = {json.dumps(function_of(key))}\n"
        f"change = [\n{lines},\n]\n"
        'why = "WHY IT MEANS THE SAME"\n'
    )


def commit_of(args) -> str:
    """What the pass mutated and tested: the commit, "+ the working tree's tests", or the
    working tree on its commit."""
    rev = "HEAD" if args.at == "worktree" else args.at
    out = subprocess.run(["git", "rev-parse", rev], cwd=REPO, capture_output=True, text=True)
    commit = out.stdout.strip()[:12]
    if args.at == "worktree":
        return f"{commit} + the working tree"
    return commit + (" + the working tree's tests" if args.tests_from_worktree else "")


def run_pass(name: str, p: Pass, args) -> dict:
    work = Path(args.work_dir) / name
    prepare(p, work, args)
    load = os.getloadavg()[0]
    trainings = others_trainings()
    began = time.monotonic()
    with open(work / "mutmut.log", "w") as log:
        proc = subprocess.run(
            [mutmut_bin(), "run", f"--max-children={args.max_children}", *p.globs()],
            cwd=work,
            env=mutmut_env(work),
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    seconds = time.monotonic() - began
    said = (work / "mutmut.log").read_text()
    # no test selected, or none that executes the module: mutmut stops before testing a mutant
    untested = proc.returncode != 0 and any(line in said for line in NO_TESTS)
    if proc.returncode != 0 and not untested:
        raise SystemExit(f"error: pass {name}: mutmut exited {proc.returncode}:\n{said[-3000:]}")
    found = statuses(work, p)
    if untested:
        found = {key: "no tests" for key in found}
    survivors = {key: change_of(diff_of(work, p, key)) for key, s in found.items() if s in SURVIVED}
    equivalent, new, stale = judge(p, survivors, load_equivalent())
    counts = {s: sum(v == s for v in found.values()) for s in sorted(set(found.values()))}
    result = {
        "pass": name,
        "module": p.module,
        "functions": list(p.functions),
        "tests": present(p, work),
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": machine(),
        "others_trainings": trainings,
        "load_average_1min": [round(load, 2), round(os.getloadavg()[0], 2)],
        "commit": commit_of(args),
        "mutmut": MUTMUT.split("==")[1],
        "made": len(found),
        "killed": sum(v in KILLED for v in found.values()),
        "equivalent": len(equivalent),
        "new": len(new),
        "statuses": counts,
        "seconds": round(seconds, 1),
        "new_mutants": sorted(new, key=mutant_order),
        "stale": [f"{e['function']}: {' / '.join(e['change'])}" for e in stale],
    }
    print(
        f"{name}: {p.module} ({', '.join(p.functions) or 'every function'}): "
        f"{result['made']} mutants, {result['killed']} killed, {result['equivalent']} "
        f"equivalent, {result['new']} new survivors; {seconds:.0f} s",
        flush=True,
    )
    for key in sorted(new, key=mutant_order):
        print(f"\nsurvived ({found[key]}): {key}\n{diff_of(work, p, key)}\n")
        print(entry_text(p, key, new[key]))
    for entry in result["stale"]:
        print(f"listed equivalent, no survivor matches now (killed, or the code changed): {entry}")
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    return result


def parse(argv: list[str]):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "passes", nargs="*", help=f"passes to run (default all: {', '.join(PASSES)})"
    )
    parser.add_argument("--list", action="store_true", help="print each pass and exit")
    parser.add_argument("--work_dir", default=str(WORK_DIR), help="where the copies go")
    parser.add_argument(
        "--cifar_slices",
        default=os.environ.get(SLICES_ENV),
        help="the real CIFAR slices, for the passes whose tests need them (default: "
        f"${SLICES_ENV}, as the tests read it)",
    )
    parser.add_argument(
        "--at", default="HEAD", help="the commit to mutate (default HEAD), or 'worktree'"
    )
    parser.add_argument(
        "--tests_from_worktree",
        action="store_true",
        help="the tests as they are in the working tree, over the commit's",
    )
    parser.add_argument("--max_children", type=int, default=2, help="mutants tested at once")
    parser.add_argument("--keep", action="store_true", help="keep each pass's copy")
    parser.add_argument(
        "--no_record", action="store_true", help=f"do not append to {PASSES_LOG.name}"
    )
    args = parser.parse_args(argv)
    unknown = [name for name in args.passes if name not in PASSES]
    if unknown:
        parser.error(f"no pass {', '.join(unknown)}: the passes are {', '.join(PASSES)}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(sys.argv[1:] if argv is None else argv)
    names = args.passes or list(PASSES)
    if args.list:
        for name in names:
            p = PASSES[name]
            scope = ", ".join(p.functions) or "every function"
            print(f"{name}: {p.module} ({scope}); tests: {' '.join(p.tests)}")
        return 0
    if shutil.which(mutmut_bin()) is None:
        print(f"error: no mutmut beside {sys.executable}: pip install -e '.[mutation]'")
        return 2
    results = []
    for name in names:
        results.append(run_pass(name, PASSES[name], args))
        if not args.no_record:
            with open(PASSES_LOG, "a") as f:
                f.write(json.dumps(results[-1]) + "\n")
    print("\n| pass | mutants | killed | equivalent | new survivors | seconds |")
    print("| --- | --- | --- | --- | --- | --- |")
    for r in results:
        print(
            f"| {r['pass']} | {r['made']} | {r['killed']} | {r['equivalent']} | {r['new']} | "
            f"{r['seconds']:.0f} |"
        )
    return 1 if any(r["new"] for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
