"""Every test's time from one run of the suite, kept, and where the time goes (issue #92).

    .venv/bin/python -m pytest tests -q ... --junitxml=RUN.xml
    .venv/bin/python -m ops.ci.suite_times RUN.xml [--out=ops/ci/suite_times.json] [--label=quiet]

Reads pytest's JUnit file (each test's time is its setup, call and teardown together) and
writes one JSON file: the machine (``lscpu``'s model, its vector extensions, the cores), the
date, the commit, the whole run's seconds and each test's id, seconds and outcome. It prints
two Markdown tables for docs/suite-time.md: the seconds by file, and by the kind of work a file
mostly does (:data:`KINDS`). ``--compare=OTHER.json`` (another run's record) prints, by kind and
by file, this run's seconds beside the other's over the tests both ran, and their ratio (a
loaded run's beside a quiet one's: which work two trainings slow most), then the other's ten
slowest tests. A run with ``-p ops.ci.busy_cpu`` (the tests one at a time) gives each test its
CPU too: the tables and the record then hold it.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import xml.etree.ElementTree as ET
from collections import defaultdict
from datetime import UTC, datetime
from pathlib import Path

from ops.ci.busy_cpu import PROPERTY
from ops.ci.suite_under_load import machine

REPO = Path(__file__).resolve().parents[2]

# The kind of work that takes most of a file's time; a file not named is "in-process".
KINDS = {
    "containers": ("test_container.py",),
    "clusters and peers": (
        "test_slurm.py",
        "test_distributed.py",
        "test_jax_multiprocess.py",
        "test_jax_mirrored_load.py",
    ),
    "signals and stops": ("test_stops.py", "test_faults.py", "test_processes.py"),
    "launches that train (process start-up and steps)": (
        "test_table2.py",
        "test_claims.py",
        "test_study.py",
        "test_launch_cifar.py",
        "test_gpu_lease.py",
        "test_bench.py",
        "test_export.py",
        "test_near_identity.py",
        "test_tensorflow_free_backends.py",
        "test_speed.py",
        "test_evaluation.py",
        "test_imagenet.py",
        "test_docs.py",
    ),
}


def kind_of(path: str) -> str:
    name = Path(path).name
    return next((kind for kind, files in KINDS.items() if name in files), "in-process")


def read_junit(path: Path) -> tuple[float, list[dict]]:
    """The run's seconds and its tests (id, seconds, outcome, and the machine's busy CPU where
    ``ops.ci.busy_cpu`` measured it), in the order they ran."""
    suite = ET.parse(path).getroot().find("testsuite")  # pytest's: <testsuites><testsuite>
    tests = []
    for case in suite.iter("testcase"):
        module = case.attrib["classname"].replace(".", "/")
        test_id = f"{module}.py::{case.attrib['name']}"
        outcome = "passed"
        for tag in ("failure", "error", "skipped"):
            if case.find(tag) is not None:
                outcome = {"failure": "failed"}.get(tag, tag)
        test = {
            "test": test_id,
            "seconds": round(float(case.attrib["time"]), 3),
            "outcome": outcome,
        }
        cpu = case.find(f"properties/property[@name='{PROPERTY}']")
        if cpu is not None:
            test[PROPERTY] = float(cpu.attrib["value"])
        tests.append(test)
    return float(suite.attrib["time"]), tests


def lscpu_model() -> str:
    out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    fields = dict(line.split(":", 1) for line in out.splitlines() if ":" in line)
    family, model = fields.get("CPU family", "").strip(), fields.get("Model", "").strip()
    return f"{fields.get('Model name', '').strip()} (family {family}, model {model})"


def summed(tests: list[dict], key, fields: list[str]) -> dict:
    """By ``key`` of a test's id: [how many tests, then each of ``fields`` summed over them]."""
    sums = defaultdict(lambda: [0] + [0.0] * len(fields))
    for test in tests:
        row = sums[key(test["test"])]
        row[0] += 1
        for i, field in enumerate(fields, 1):
            row[i] += test[field]
    return sums


def table(tests: list[dict], key, head: str) -> str:
    """Tests, seconds (and busy CPU-seconds, where measured) by ``key`` of a test's id, the
    longest first."""
    fields = ["seconds"] + ([PROPERTY] if all(PROPERTY in t for t in tests) else [])
    sums = summed(tests, key, fields)
    whole = sum(row[1] for row in sums.values())
    titles = " | ".join({"seconds": "seconds | share", PROPERTY: "busy CPU-s"}[f] for f in fields)
    lines = [f"| {head} | tests | {titles} |", "| --- " + "| ---: " * (len(fields) + 2) + "|"]
    for name, (count, seconds, *cpu) in sorted(sums.items(), key=lambda kv: -kv[1][1]):
        cells = [f"{count}", f"{seconds:,.0f}", f"{seconds / whole:.0%}"]
        lines.append(f"| {name} | " + " | ".join(cells + [f"{c:,.0f}" for c in cpu]) + " |")
    return "\n".join(lines)


def compared(record: dict, other: dict, key, head: str) -> str:
    """By ``key`` of a test's id, over the tests both runs hold: their count, the seconds in
    ``record`` and in ``other``, and the ratio of the two, the longest in ``record`` first; the
    last row sums them all."""
    theirs = {t["test"]: t["seconds"] for t in other["tests"]}
    both = [
        {**test, "theirs": theirs[test["test"]]}
        for test in record["tests"]
        if test["test"] in theirs
    ]
    sums = summed(both, key, ["seconds", "theirs"])
    rows = sorted(sums.items(), key=lambda kv: -kv[1][1])
    rows.append(("all", [sum(row[i] for _, row in rows) for i in range(3)]))
    lines = [
        f"| {head} | tests | {record['label']}, s | {other['label']}, s | ratio |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    for name, (count, here, there) in rows:
        ratio = f"{here / there:.2f}" if there else "-"
        lines.append(f"| {name} | {count} | {here:,.0f} | {there:,.0f} | {ratio} |")
    return "\n".join(lines)


def by_file(test: str) -> str:
    return test.split("::")[0]


def by_kind(test: str) -> str:
    return kind_of(by_file(test))


def summarise(record: dict) -> str:
    tests = record["tests"]
    return "\n\n".join(
        [
            f"{record['label']}: {len(tests)} tests, {record['wall_s']:,.0f} s"
            f" on {record['machine']}",
            table(tests, by_kind, "kind"),
            table(tests, by_file, "file"),
        ]
    )


def slowest(record: dict, n: int = 10, field: str = "seconds") -> list[str]:
    """The ``n`` tests highest in ``field`` (their seconds, or busy CPU-seconds)."""
    top = sorted((t for t in record["tests"] if field in t), key=lambda t: -t[field])[:n]
    unit = "s" if field == "seconds" else "CPU-s"
    return [f"{t[field]:7.1f} {unit}  {t['test']}" for t in top]


def dumps(record: dict) -> str:
    """The record as JSON, a test a line (the file is read and diffed by people too)."""
    head = {k: v for k, v in record.items() if k != "tests"}
    tests = ",\n".join(json.dumps(t) for t in record["tests"])
    return json.dumps(head, indent=1)[:-2] + ',\n "tests": [\n' + tests + "\n ]\n}\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("junit", type=Path)
    parser.add_argument("--out", type=Path, default=REPO / "ops/ci/suite_times.json")
    parser.add_argument("--label", default="quiet", help="what the run was (quiet, loaded, ...)")
    parser.add_argument("--command", default="bash .ci/run", help="the command that ran it")
    parser.add_argument("--compare", type=Path, help="another run's record (suite_times JSON)")
    parser.add_argument("--commit", help="the commit that ran (default: this checkout's HEAD)")
    args = parser.parse_args()
    if not args.junit.is_file():
        parser.error(f"{args.junit}: no such file; pass the file pytest's --junitxml wrote")
    if args.compare and not args.compare.is_file():
        parser.error(f"--compare={args.compare}: no such file; pass another run's record")
    wall_s, tests = read_junit(args.junit)
    commit = (
        args.commit
        or subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=REPO
        ).stdout.strip()
    )
    record = {
        "label": args.label,
        "command": args.command,
        "machine": f"{lscpu_model()}, {machine().split(', ', 1)[1]}",
        "date": datetime.fromtimestamp(args.junit.stat().st_mtime, UTC).isoformat(
            timespec="seconds"
        ),
        "commit": commit,
        "wall_s": round(wall_s, 1),
        "tests": tests,
    }
    args.out.write_text(dumps(record))
    print(summarise(record))
    print("\nslowest ten:\n" + "\n".join(slowest(record)))
    if any(PROPERTY in t for t in tests):
        print("\ncostliest ten in CPU:\n" + "\n".join(slowest(record, field=PROPERTY)))
    if args.compare:
        other = json.loads(args.compare.read_text())
        for key, head in ((by_kind, "kind"), (by_file, "file")):
            print("\n" + compared(record, other, key, head))
        print(
            f"\nslowest ten of {other['label']} ({other['wall_s']:,.0f} s):\n"
            + "\n".join(slowest(other))
        )


if __name__ == "__main__":
    main()
