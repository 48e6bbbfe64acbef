"""The quick test tier, ``python -m pytest tests -q -m quick``: tests chosen by their measured
coverage so that together they execute code of every module of ``resnet_noBN/``, ``launch/``,
``ops/`` and ``bench/`` in as few seconds as the greedy rule finds.

    .venv/bin/python -m ops.ci.quick_tier measure [PYTEST_ARGS]   # e.g. tests/test_table2.py
    .venv/bin/python -m ops.ci.quick_tier choose [--budget_s=180]
    .venv/bin/python -m ops.ci.quick_tier time [--cifar_slices=PATH]

``measure`` runs pytest with PYTEST_ARGS under coverage.py, every Python process it starts
included (``COVERAGE_PROCESS_START``: the launchers the tests run as users do), each test's
in-process lines under a coverage context of its own (tests/conftest.py switches it) and each
subprocess's lines given to the test running when the subprocess wrote them. Each test's
seconds, outcome and the modules whose code it executed are merged into :data:`MEASURED` (a
test measured again replaces its line; a test of a measured file that is no longer collected
is dropped), so one test file can be measured again alone. The real CIFAR slices go to the
tests only where PYTEST_ARGS name them (``--cifar_slices=PATH``); without them those tests skip
and cover nothing.

``choose`` picks the tier from :data:`MEASURED`, greedily: the passed test with the most
modules not yet covered per measured second, until every module of :func:`modules` not in
:data:`OUTSIDE_TIER` is covered; then drops, slowest first, any chosen test the others cover
for. A test that needs the real slices is taken only for a module no other test touches, so
the tier depends on them as little as the tests allow. It writes :data:`TIER`, which
tests/conftest.py reads to mark those tests ``quick``.

``time`` runs ``python -m pytest tests -q -m quick`` as a user does (no coverage) and writes
its wall time, each quick test's seconds, the machine and the load beside it into :data:`TIER`.

A module is *touched* by a test when the test executed a line of one of its functions (its
import alone does not count); a module with no function (a package's ``__init__``, a table of
constants) is touched by any line of it run in the test: its import in a process the test
started (the tests' own process imports such modules once, at collection, for every test).
"""

from __future__ import annotations

import argparse
import ast
import bisect
import functools
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

from ops.ci.suite_under_load import machine, others_trainings

REPO = Path(__file__).resolve().parents[2]
TIER = REPO / "tests" / "quick_tier.json"
MEASURED = REPO / "ops" / "ci" / "quick_tier_measured.jsonl"
COMMAND = "python -m pytest tests -q -m quick"
SCOPE = ("resnet_noBN", "launch", "ops", "bench")
# tests/conftest.py: where the session writes its tests' times and outcomes (set by this tool)
OUT_ENV = "QUICK_TIER_OUT"
SLICES_ENV = "RESNET_NOBN_CIFAR_SLICES"  # tests/conftest.py: the real slices' default
RERUN = (
    ".venv/bin/python -m ops.ci.quick_tier measure tests/test_FILE.py && "
    ".venv/bin/python -m ops.ci.quick_tier choose (docs/testing.md, 'The quick tier')"
)

# Modules of SCOPE that the tier need not touch, with the reason: the harnesses run by hand, and
# PyTorch's modules, whose tests skip where it is not installed (the test extras leave it out:
# setup.py); the whole suite runs them where .ci/run installs PyTorch's CPU wheel
TORCH = "needs PyTorch, which the test extras leave out: its tests skip without it"
OUTSIDE_TIER = {
    "ops/ci/suite_under_load.py": "runs the whole suite beside trainings for hours: run by hand, "
    "its record is ops/ci/suite_under_load.jsonl",
    "ops/ci/peer_watch_at_exit.py": "repeats a two-process JAX job for minutes to provoke a "
    "race: run by hand, its record is ops/ci/peer_watch_at_exit.jsonl",
    "ops/mutation/__init__.py": "the package of ops/mutation/run.py, run by hand",
    "ops/mutation/run.py": "mutation testing, one module at a time, for tens of minutes: run by "
    "hand, its record is ops/mutation/passes.jsonl",
    "bench/torch_twin.py": TORCH,
    "resnet_noBN/backends/torch_backend.py": TORCH,
    "resnet_noBN/trainers/torch_training.py": TORCH,
}

# a test id naming a line of a file (tests/test_docs.py's ``[docs/training.md:174]``) changes when
# the file is edited: never chosen, or the tier would lose its test at the next edit
UNSTABLE_ID = re.compile(r"\[[^\]]*:\d+\]$")


def modules() -> list[str]:
    """Every Python module of :data:`SCOPE`, as a path from the repository's root."""
    return sorted(
        path.relative_to(REPO).as_posix()
        for folder in SCOPE
        for path in (REPO / folder).rglob("*.py")
        if "__pycache__" not in path.parts
    )


@functools.cache
def body_lines(module: str) -> frozenset[int] | None:
    """The lines of the statements inside the functions of ``module`` (a path from the root):
    what runs when it is called, not when it is imported; None for a module with no function."""
    tree = ast.parse((REPO / module).read_text(), module)
    lines = {
        node.lineno
        for function in ast.walk(tree)
        if isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef)
        for statement in function.body
        for node in ast.walk(statement)
        if isinstance(node, ast.stmt)
    }
    return frozenset(lines) or None


def touched(module: str, executed: set[int]) -> bool:
    """Whether ``executed`` (the line numbers of ``module`` a test ran) touches it."""
    body = body_lines(module)
    return bool(executed & body) if body is not None else bool(executed)


def load_tier(path: Path = TIER) -> dict:
    return json.loads(path.read_text())


def uncovered(tier: dict) -> dict[str, str]:
    """What ``tier`` misses in the tree as it is now: {module: why}, empty when every module of
    :func:`modules` is touched by a quick test or is in :data:`OUTSIDE_TIER` (which must name
    modules that exist)."""
    covered = {module for test in tier["tests"] for module in test["covers"]}
    present = set(modules())
    missing = {
        module: f"no quick test executes {module}: measure the tests that do, choose again: {RERUN}"
        for module in sorted(present - covered - set(OUTSIDE_TIER))
    }
    for module in sorted(set(OUTSIDE_TIER) - present):
        missing[module] = f"ops/ci/quick_tier.py: OUTSIDE_TIER names {module}, which is gone"
    return missing


# ---- measure ----

RCFILE = """\
[run]
parallel = True
data_file = {data}
include =
    {include}
patch = _exit
sigterm = True
disable_warnings =
    no-data-collected
    module-not-measured
    module-not-imported
    couldnt-parse
    no-ctracer
"""


def run_pytest(pytest_args: list[str], out: Path, coverage_rc: Path | None) -> dict:
    """``python -m pytest -q PYTEST_ARGS`` from the root, tests/conftest.py writing its session
    record into ``out`` (every Python process under coverage where ``coverage_rc`` is given):
    its exit status, wall seconds, date, machine and load."""
    env = {**os.environ, OUT_ENV: str(out)}
    env.pop(SLICES_ENV, None)
    if coverage_rc is not None:
        env["COVERAGE_PROCESS_START"] = str(coverage_rc)
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *pytest_args]
    print(f"quick_tier: {' '.join(command[1:])}", flush=True)
    stamp, before, start = datetime.now().astimezone(), os.getloadavg()[0], time.monotonic()
    code = subprocess.run(command, cwd=REPO, env=env).returncode
    return {
        "exit": code,
        "wall_s": round(time.monotonic() - start, 1),
        "date": stamp.isoformat(timespec="seconds"),
        "machine": machine(),
        "others_trainings": others_trainings(),
        "load_average_1min": [round(before, 2), round(os.getloadavg()[0], 2)],
    }


def session_record(out: Path) -> dict:
    """What tests/conftest.py wrote for the session: its pid, the collected test ids and, per
    test run, its start and end (epoch seconds) and outcome."""
    path = out / "session.json"
    if not path.exists():
        sys.exit(f"error: pytest wrote no {path}: it stopped before its tests ran (see above)")
    return json.loads(path.read_text())


def executed_by_test(out: Path, session: dict) -> dict[str, dict[str, set[int]]]:
    """{test id: {module: lines executed}} from the coverage data in ``out``: the pytest
    process's lines by context (the test's id), a subprocess's lines given to the test during
    which its data file was written (a process saves its data as it exits)."""
    from coverage import CoverageData

    tests = sorted(session["tests"].items(), key=lambda kv: kv[1]["start"])
    starts = [t["start"] for _, t in tests]

    def test_at(moment: float) -> str | None:
        i = bisect.bisect_right(starts, moment) - 1
        return tests[i][0] if i >= 0 and moment <= tests[i][1]["end"] else None

    executed: dict[str, dict[str, set[int]]] = {}
    lost = 0
    for path in sorted(out.glob("coverage/.coverage.*")):
        data = CoverageData(basename=str(path))
        data.read()
        main = f".pid{session['pid']}." in path.name
        owner = None if main else test_at(path.stat().st_mtime)
        lost += not main and owner is None
        for filename in data.measured_files():
            if not Path(filename).resolve().is_relative_to(REPO):
                continue
            module = Path(filename).resolve().relative_to(REPO).as_posix()
            if main:
                for line, contexts in data.contexts_by_lineno(filename).items():
                    for context in contexts:
                        if context in session["tests"]:
                            executed.setdefault(context, {}).setdefault(module, set()).add(line)
            elif owner is not None:
                lines = set(data.lines(filename) or ())
                executed.setdefault(owner, {}).setdefault(module, set()).update(lines)
    if lost:
        print(f"quick_tier: {lost} subprocess data files written between tests, not counted")
    return executed


def read_measured() -> dict[str, dict]:
    if not MEASURED.exists():
        return {}
    return {r["test"]: r for r in map(json.loads, MEASURED.read_text().splitlines())}


def measure(pytest_args: list[str]) -> int:
    with tempfile.TemporaryDirectory(prefix="quick-tier-") as scratch:
        out = Path(scratch)
        (out / "coverage").mkdir()
        rc = out / "coveragerc"
        include = "\n    ".join(f"{REPO / folder}/*" for folder in SCOPE)
        rc.write_text(RCFILE.format(data=out / "coverage" / ".coverage", include=include))
        run = run_pytest(pytest_args, out, rc)
        session = session_record(out)
        executed = executed_by_test(out, session)
    collected = set(session["collected"])
    files = {test.split("::")[0] for test in collected}
    records = {
        test: r
        for test, r in read_measured().items()
        if test in collected or test.split("::")[0] not in files
    }
    for test, t in session["tests"].items():
        lines = executed.get(test, {})
        records[test] = {
            "test": test,
            "s": round(t["end"] - t["start"], 2),
            "outcome": t["outcome"],
            "needs_slices": t["needs_slices"],
            "modules": sorted(m for m, executed in lines.items() if touched(m, executed)),
            "date": run["date"],
            "machine": run["machine"],
            "others_trainings": run["others_trainings"],
        }
    MEASURED.write_text("".join(json.dumps(records[t]) + "\n" for t in sorted(records)))
    outcomes = [t["outcome"] for t in session["tests"].values()]
    print(
        f"quick_tier: {len(outcomes)} tests measured ({outcomes.count('passed')} passed) in "
        f"{run['wall_s']} s, {run['others_trainings']} trainings beside; {len(records)} in "
        f"{MEASURED.relative_to(REPO)}"
    )
    return 0


# ---- choose ----


def pick(covers: dict[str, set[str]], seconds: dict[str, float], universe: set[str]):
    """Greedy set cover: the tests (of ``covers``: test -> modules it touches) that touch every
    module of ``universe``, each step the test with the most modules not yet touched per second
    (ties: the faster, then the first by id); then, slowest first, each chosen test the others
    cover for is dropped. Returns (the chosen tests by id, the modules none of them touches)."""
    left, chosen = set(universe), []
    while left:
        best = max(sorted(covers), key=lambda t: (len(covers[t] & left) / seconds[t], -seconds[t]))
        if not covers[best] & left:
            break
        chosen.append(best)
        left -= covers[best]
    for test in sorted(chosen, key=lambda t: -seconds[t]):
        if set().union(*(covers[t] for t in chosen if t != test)) >= universe - left:
            chosen.remove(test)
    return sorted(chosen), left


def choose(budget_s: float) -> int:
    """:func:`pick` over the passed measured tests whose ids are stable; writes :data:`TIER`."""
    records = [
        r
        for r in read_measured().values()
        if r["outcome"] == "passed" and not UNSTABLE_ID.search(r["test"])
    ]
    universe = set(modules()) - set(OUTSIDE_TIER)
    covers = {r["test"]: set(r["modules"]) & universe for r in records}
    seconds = {r["test"]: max(r["s"], 0.01) for r in records}
    needs_slices = {r["test"]: r.get("needs_slices", False) for r in records}
    # the tests that need the real CIFAR slices only for the modules no other test touches
    plain = {t: c for t, c in covers.items() if not needs_slices[t]}
    chosen, left = pick(plain, seconds, universe)
    if left:
        more, left = pick({t: covers[t] for t in covers.keys() - plain}, seconds, left)
        chosen = sorted(chosen + more)
    if left:
        for module in sorted(left):
            print(f"error: no measured test that passed executes {module}: measure one: {RERUN}")
        return 1
    total = round(sum(seconds[t] for t in chosen), 1)
    measured = [r for r in records if r["test"] in chosen]
    tier = {
        "command": COMMAND,
        "rerun": RERUN,
        "chosen": {
            "by": f"python -m ops.ci.quick_tier choose --budget_s={budget_s:g}",
            "date": datetime.now().astimezone().isoformat(timespec="seconds"),
            "tests": len(chosen),
            "modules": len(universe),
            "measured_s": total,
            "budget_s": budget_s,
            "measured_on": sorted({r["machine"] for r in measured}),
            "measured_dates": [min(r["date"] for r in measured), max(r["date"] for r in measured)],
            "others_trainings": sorted({r["others_trainings"] for r in measured}),
        },
        "tests": [
            {
                "test": t,
                "measured_s": seconds[t],
                "needs_slices": needs_slices[t],
                "covers": sorted(covers[t]),
            }
            for t in chosen
        ],
        "outside_tier": OUTSIDE_TIER,
    }
    TIER.write_text(json.dumps(tier, indent=1) + "\n")
    print(
        f"quick_tier: {len(chosen)} tests cover {len(universe)} modules in {total} measured s "
        f"(budget {budget_s:g} s); wrote {TIER.relative_to(REPO)}; time it: "
        ".venv/bin/python -m ops.ci.quick_tier time"
    )
    if total > budget_s:
        print(f"error: the tier's measured {total} s is over the budget of {budget_s:g} s")
        return 1
    return 0


# ---- time ----


def time_tier(pytest_args: list[str]) -> int:
    """Runs the tier as a user does (PYTEST_ARGS added: ``--cifar_slices=PATH``); its wall time
    and each test's seconds into :data:`TIER`."""
    tier = load_tier()
    with tempfile.TemporaryDirectory(prefix="quick-tier-") as scratch:
        run = run_pytest(["tests", "-m", "quick", *pytest_args], Path(scratch), None)
        ran = session_record(Path(scratch))["tests"]
    outcomes = [t["outcome"] for t in ran.values()]
    tier["timed"] = {
        "command": " ".join([COMMAND, *pytest_args]),
        **run,
        **{outcome: outcomes.count(outcome) for outcome in ("passed", "skipped", "failed")},
    }
    for test in tier["tests"]:
        t = ran.get(test["test"])
        test["timed_s"] = round(t["end"] - t["start"], 2) if t else None
    TIER.write_text(json.dumps(tier, indent=1) + "\n")
    print(
        f"quick_tier: {len(ran)} tests ({outcomes.count('passed')} passed) in {run['wall_s']} s, "
        f"exit {run['exit']}"
    )
    return run["exit"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser(
        "measure", help="run the tests PYTEST_ARGS name under coverage; merge into the record"
    )
    c = sub.add_parser("choose", help="choose the tier from the record")
    c.add_argument(
        "--budget_s",
        type=float,
        default=180,
        help="the most measured seconds the tier may take (exit 1 above it)",
    )
    sub.add_parser("time", help=f"time `{COMMAND} [PYTEST_ARGS]`; record it in the tier file")
    args, pytest_args = parser.parse_known_args()  # the rest, pytest's: --cifar_slices=PATH
    if args.command == "measure":
        if not pytest_args:
            parser.error("measure needs pytest's arguments: test files or test ids")
        return measure(pytest_args)
    if pytest_args and args.command == "choose":
        parser.error(f"choose takes no pytest arguments: {' '.join(pytest_args)}")
    if args.command == "choose":
        return choose(args.budget_s)
    return time_tier(pytest_args)


if __name__ == "__main__":
    sys.exit(main())
