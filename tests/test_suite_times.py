"""ops/ci/suite_times.py: each test's seconds read from pytest's JUnit file, kept one a line, and
summed by file and by kind for docs/suite-time.md."""

import json
import os
import subprocess
import sys

import pytest
from conftest import file_seconds

from ops.ci import suite_times

JUNIT = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest" errors="0" failures="1" skipped="1" tests="4" time="30.5">
<testcase classname="tests.test_stops" name="test_a" time="20.25" />
<testcase classname="tests.test_stops" name="test_b[kill-0]" time="4.0"><failure message="x"/>
</testcase>
<testcase classname="tests.test_model" name="test_c" time="6.0" />
<testcase classname="tests.test_container" name="test_d" time="0.25"><skipped message="no engine"/>
</testcase>
</testsuite></testsuites>
"""


def test_a_junit_file_is_kept_a_test_a_line_and_summed_by_file_and_kind(tmp_path):
    junit = tmp_path / "run.xml"
    junit.write_text(JUNIT)
    wall_s, tests = suite_times.read_junit(junit)
    assert wall_s == 30.5
    assert tests == [
        {"test": "tests/test_stops.py::test_a", "seconds": 20.25, "outcome": "passed"},
        {"test": "tests/test_stops.py::test_b[kill-0]", "seconds": 4.0, "outcome": "failed"},
        {"test": "tests/test_model.py::test_c", "seconds": 6.0, "outcome": "passed"},
        {"test": "tests/test_container.py::test_d", "seconds": 0.25, "outcome": "skipped"},
    ]
    out = tmp_path / "times.json"
    proc = subprocess.run(
        [sys.executable, "-m", "ops.ci.suite_times", str(junit), f"--out={out}", "--commit=abc"],
        cwd=suite_times.REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    record = json.loads(out.read_text())
    assert record["tests"] == tests and record["wall_s"] == 30.5 and record["commit"] == "abc"
    assert "family" in record["machine"] and record["machine"].endswith(" cores")
    assert len(out.read_text().splitlines()) == 8 + 4 + 2  # the head, a test a line, the ends
    lines = proc.stdout.splitlines()
    assert "| signals and stops | 2 | 24 | 80% |" in lines
    assert "| in-process | 1 | 6 | 20% |" in lines and "| containers | 1 | 0 | 1% |" in lines
    assert "| tests/test_stops.py | 2 | 24 | 80% |" in lines
    assert lines[lines.index("slowest ten:") + 1] == "   20.2 s  tests/test_stops.py::test_a"


def test_the_files_go_out_longest_first_under_xdist(request):
    """Under pytest-xdist the worker's collection is ordered by each file's seconds in
    ops/ci/suite_times.json, longest first, and xdist is told to keep that order."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        pytest.skip("runs in a pytest-xdist worker (the README's -n 2 --dist loadfile)")
    assert request.config.option.loadscopereorder is False
    seconds = file_seconds()
    order = [seconds.get(item.nodeid.split("::")[0], 0.0) for item in request.session.items]
    assert len(seconds) > 30 and order == sorted(order, reverse=True)
