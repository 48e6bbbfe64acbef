"""ops/ci/suite_times.py: each test's seconds read from pytest's JUnit file, kept one a line, and
summed by file and by kind for docs/suite-time.md."""

import json
import os
import subprocess
import sys

import pytest
from conftest import file_seconds

from ops.ci import busy_cpu, suite_times

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
    quiet = tmp_path / "quiet.json"  # another run's record: test_a took 5 s there, test_c 4 s
    quiet.write_text(
        json.dumps(
            {
                "label": "quiet",
                "wall_s": 9.0,
                "tests": [
                    {"test": "tests/test_stops.py::test_a", "seconds": 5.0},
                    {"test": "tests/test_model.py::test_c", "seconds": 4.0},
                    {"test": "tests/test_gone.py::test_e", "seconds": 1.5},
                ],
            }
        )
    )
    proc = subprocess.run(
        [sys.executable, "-m", "ops.ci.suite_times", str(junit), f"--out={out}", "--commit=abc"]
        + ["--label=loaded", f"--compare={quiet}"],
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
    assert "costliest ten in CPU:" not in lines
    # beside the other run, over the tests both ran (test_b, test_d and test_e left out)
    assert lines[lines.index("| kind | tests | loaded, s | quiet, s | ratio |") + 1 :][:4] == [
        "| --- | ---: | ---: | ---: | ---: |",
        "| signals and stops | 1 | 20 | 5 | 4.05 |",
        "| in-process | 1 | 6 | 4 | 1.50 |",
        "| all | 2 | 26 | 9 | 2.92 |",
    ]
    assert "| tests/test_model.py | 1 | 6 | 4 | 1.50 |" in lines
    other = json.loads(quiet.read_text())
    other["tests"][1]["seconds"] = 0.0  # a test of no time there: no ratio, not a division
    assert suite_times.compared(record, other, suite_times.by_file, "file").splitlines() == [
        "| file | tests | loaded, s | quiet, s | ratio |",
        "| --- | ---: | ---: | ---: | ---: |",
        "| tests/test_stops.py | 1 | 20 | 5 | 4.05 |",
        "| tests/test_model.py | 1 | 6 | 0 | - |",
        "| all | 2 | 26 | 5 | 5.25 |",
    ]
    # two tests of a kind summed; the rows by this run's seconds, not the other's
    other["tests"] = [dict(t, seconds=s) for t, s in zip(tests[:3], (5.0, 1.0, 8.0))]
    assert suite_times.compared(record, other, suite_times.by_kind, "kind").splitlines()[2:] == [
        "| signals and stops | 2 | 24 | 6 | 4.04 |",
        "| in-process | 1 | 6 | 8 | 0.75 |",
        "| all | 3 | 30 | 14 | 2.16 |",
    ]
    assert lines[lines.index("slowest ten of quiet (9 s):") + 1 :] == [
        "    5.0 s  tests/test_stops.py::test_a",
        "    4.0 s  tests/test_model.py::test_c",
        "    1.5 s  tests/test_gone.py::test_e",
    ]

    # measured one at a time (ops.ci.busy_cpu): each table gains the busy CPU-seconds
    for test, cpu in zip(tests, (31.5, 2.25, 12.0, 0.5)):
        test["busy_cpu_s"] = cpu
    measured = {"label": "alone", "wall_s": 30.5, "machine": "m", "tests": tests}
    lines = suite_times.summarise(measured).splitlines()
    assert lines[lines.index("| kind | tests | seconds | share | busy CPU-s |") + 1 :][:4] == [
        "| --- | ---: | ---: | ---: | ---: |",
        "| signals and stops | 2 | 24 | 80% | 34 |",
        "| in-process | 1 | 6 | 20% | 12 |",
        "| containers | 1 | 0 | 1% | 0 |",
    ]
    assert "| tests/test_model.py | 1 | 6 | 20% | 12 |" in lines
    assert suite_times.slowest(measured, 2, "busy_cpu_s") == [
        "   31.5 CPU-s  tests/test_stops.py::test_a",
        "   12.0 CPU-s  tests/test_model.py::test_c",
    ]
    del tests[3]["busy_cpu_s"]  # one test not measured: no column, not a partial sum
    assert "busy CPU-s" not in suite_times.summarise(measured)


def test_a_file_not_there_is_refused_in_one_line_and_nothing_written(tmp_path, monkeypatch, capsys):
    """A JUnit file or a --compare record that is not there: exit 2, the last line names it and
    what to pass, and the record is not written."""
    junit, out = tmp_path / "run.xml", tmp_path / "times.json"
    junit.write_text(JUNIT)
    for args, said in (
        ([str(tmp_path / "none.xml")], f"{tmp_path / 'none.xml'}: no such file; pass the file "),
        ([str(junit), f"--compare={tmp_path}/old.json"], f"--compare={tmp_path}/old.json: no "),
    ):
        monkeypatch.setattr(sys, "argv", ["suite_times", *args, f"--out={out}"])
        with pytest.raises(SystemExit) as ended:
            suite_times.main()
        assert ended.value.code == 2
        assert said in capsys.readouterr().err.splitlines()[-1]
        assert not out.exists()


# an error, a time past the milliseconds, the CPU beside another property
ONE_ERROR = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest" time="1.25">
<testcase classname="tests.test_a" name="test_e" time="0.2504"><error message="x"/>
<properties><property name="other" value="7"/><property name="busy_cpu_s" value="0.75"/>
</properties></testcase>
</testsuite></testsuites>
"""


def test_a_record_is_read_and_written_exactly_and_the_cpu_counted_in_ticks(tmp_path, monkeypatch):
    """The record's fields as read, its text as written; the ten slowest by default; the busy
    time summed from user, nice, system, irq and softirq ticks."""
    junit = tmp_path / "run.xml"
    junit.write_text(ONE_ERROR)
    wall_s, tests = suite_times.read_junit(junit)
    assert wall_s == 1.25
    assert tests == [
        {"test": "tests/test_a.py::test_e", "seconds": 0.25, "outcome": "error", "busy_cpu_s": 0.75}
    ]
    line = (
        '{"test": "tests/test_a.py::test_e", "seconds": 0.25, "outcome": "error", '
        '"busy_cpu_s": 0.75}'
    )
    assert suite_times.dumps({"label": "l", "wall_s": 1.25, "tests": tests * 2}) == (
        '{\n "label": "l",\n "wall_s": 1.25,\n "tests": [\n' + line + ",\n" + line + "\n ]\n}\n"
    )
    many = {"tests": [{"test": f"t{i}", "seconds": float(i)} for i in range(12)]}
    assert suite_times.slowest(many) == [f"{i:7.1f} s  t{i}" for i in range(11, 1, -1)]
    stat = tmp_path / "stat"
    stat.write_text("cpu  1000 200 300 4000 500 60 70 0 0 0\ncpu0 1 1 1 1 1 1 1 0 0 0\n")
    monkeypatch.setattr(busy_cpu, "STAT", str(stat))
    assert busy_cpu.busy_cpu_s() == 1630 / os.sysconf("SC_CLK_TCK")


def test_the_files_go_out_longest_first_under_xdist(request):
    """Under pytest-xdist the worker's collection is ordered by each file's seconds in
    ops/ci/suite_times.json, longest first, and xdist is told to keep that order."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        pytest.skip("runs in a pytest-xdist worker (the README's -n 2 --dist loadfile)")
    assert request.config.option.loadscopereorder is False
    seconds = file_seconds()
    order = [seconds.get(item.nodeid.split("::")[0], 0.0) for item in request.session.items]
    assert len(seconds) > 30 and order == sorted(order, reverse=True)


# a test file for ops.ci.busy_cpu: one test whose child process burns 0.3 CPU-s, one that waits
BURNS = """
import pathlib, resource, subprocess, sys, time

def test_burns_in_a_child():
    code = "import time\\nt = time.process_time()\\nwhile time.process_time() - t < 0.3: pass"
    subprocess.run([sys.executable, "-c", code], check=True)
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    pathlib.Path(__file__).with_name("child_cpu").write_text(str(used.ru_utime + used.ru_stime))

def test_waits():
    time.sleep(0.2)
"""


def test_a_test_run_alone_gets_the_machines_busy_cpu_its_children_included(tmp_path):
    """``-p ops.ci.busy_cpu``: every test gets a ``busy_cpu_s`` property in the JUnit file, which
    suite_times keeps; a test's child's CPU is in its figure (to /proc/stat's tick). With
    pytest-xdist's workers the plugin refuses, in one line."""
    (tmp_path / "test_burns.py").write_text(BURNS)
    junit = tmp_path / "run.xml"

    def pytest_run(*more):
        return subprocess.run(
            [sys.executable, "-m", "pytest", str(tmp_path / "test_burns.py"), "-q"]
            + ["-p", "ops.ci.busy_cpu", "-p", "no:cacheprovider", *more],
            cwd=suite_times.REPO,
            capture_output=True,
            text=True,
            timeout=120,
        )

    proc = pytest_run(f"--junitxml={junit}")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    _, tests = suite_times.read_junit(junit)
    assert [t["test"].split("::")[1] for t in tests] == ["test_burns_in_a_child", "test_waits"]
    child = float((tmp_path / "child_cpu").read_text())
    assert child >= 0.3 and tests[0]["busy_cpu_s"] >= child - 0.03, (child, tests)
    assert tests[1]["busy_cpu_s"] >= 0 and tests[1]["seconds"] >= 0.2
    assert "| file | tests | seconds | share | busy CPU-s |" in suite_times.summarise(
        {"label": "alone", "wall_s": 1.0, "machine": "m", "tests": tests}
    )

    refused = pytest_run("-n", "2")
    assert refused.returncode == pytest.ExitCode.USAGE_ERROR
    assert refused.stderr.strip().splitlines() == [
        "ERROR: -p ops.ci.busy_cpu measures the tests one at a time: drop -n (pytest-xdist's "
        "workers), or each test's figure holds the other workers' CPU"
    ]
