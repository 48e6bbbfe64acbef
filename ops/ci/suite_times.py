"""Every test's time from one run of the suite, kept, and where the time goes (issue #92).

    .venv/bin/python -m pytest tests -q ... --junitxml=RUN.xml
    .venv/bin/python -m ops.ci.suite_times RUN.xml [--out=ops/ci/suite_times.json] [--label=quiet]

Reads pytest's JUnit file (each test's time is its setup, call and teardown together) and
writes one JSON file: the machine (``lscpu``'s model, its vector extensions, the cores), the
date, the commit, the whole run's seconds and each test's id, seconds and outcome. It prints
two Markdown tables for docs/suite-time.md: the seconds by file, and by the kind of work a file
mostly does (:data:`KINDS`). ``--compare=OLD.json`` prints the files' seconds beside another
run's and the ten slowest tests of each.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import xml.etree.ElementTree as ET
from collections import defaultdict
from datetime import UTC, datetime
from pathlib import Path

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
    """The run's seconds and its tests (id, seconds, outcome), in the order they ran."""
    root = ET.parse(path).getroot()
    suite = root if root.tag == "testsuite" else root.find("testsuite")
    tests = []
    for case in suite.iter("testcase"):
        module = case.get("classname", "").replace(".", "/")
        test_id = f"{module}.py::{case.get('name')}"
        outcome = "passed"
        for tag in ("failure", "error", "skipped"):
            if case.find(tag) is not None:
                outcome = {"failure": "failed"}.get(tag, tag)
        tests.append(
            {"test": test_id, "seconds": round(float(case.get("time", 0)), 3), "outcome": outcome}
        )
    return float(suite.get("time", 0)), tests


def lscpu_model() -> str:
    out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    fields = dict(line.split(":", 1) for line in out.splitlines() if ":" in line)
    family, model = fields.get("CPU family", "").strip(), fields.get("Model", "").strip()
    return f"{fields.get('Model name', '').strip()} (family {family}, model {model})"


def by(tests: list[dict], key) -> dict[str, float]:
    totals = defaultdict(float)
    for test in tests:
        totals[key(test["test"])] += test["seconds"]
    return dict(sorted(totals.items(), key=lambda kv: -kv[1]))


def table(totals: dict[str, float], counts: dict[str, int], head: str) -> str:
    whole = sum(totals.values())
    lines = [f"| {head} | tests | seconds | share |", "| --- | ---: | ---: | ---: |"]
    for name, seconds in totals.items():
        lines.append(f"| {name} | {counts[name]} | {seconds:,.0f} | {seconds / whole:.0%} |")
    return "\n".join(lines)


def summarise(record: dict) -> str:
    tests = record["tests"]
    files = by(tests, lambda t: t.split("::")[0])
    kinds = by(tests, lambda t: kind_of(t.split("::")[0]))
    file_counts = defaultdict(int)
    kind_counts = defaultdict(int)
    for test in tests:
        file_counts[test["test"].split("::")[0]] += 1
        kind_counts[kind_of(test["test"].split("::")[0])] += 1
    return "\n\n".join(
        [
            f"{record['label']}: {len(tests)} tests, {record['wall_s']:,.0f} s"
            f" on {record['machine']}",
            table(kinds, kind_counts, "kind"),
            table(files, file_counts, "file"),
        ]
    )


def slowest(record: dict, n: int = 10) -> list[str]:
    top = sorted(record["tests"], key=lambda t: -t["seconds"])[:n]
    return [f"{t['seconds']:7.1f} s  {t['test']}" for t in top]


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
    parser.add_argument("--compare", type=Path, help="another run's suite_times JSON")
    parser.add_argument("--commit", help="the commit that ran (default: this checkout's HEAD)")
    args = parser.parse_args()
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
    if args.compare:
        old = json.loads(args.compare.read_text())
        print(
            f"\nslowest ten of {old['label']} ({old['wall_s']:,.0f} s):\n" + "\n".join(slowest(old))
        )


if __name__ == "__main__":
    main()
