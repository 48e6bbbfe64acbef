"""Each test's CPU, the machine's as a whole, kept in pytest's JUnit file (issue #92).

    .venv/bin/python -m pytest tests -q -p ops.ci.busy_cpu --junitxml=RUN.xml
    .venv/bin/python -m ops.ci.suite_times RUN.xml --out=ops/ci/suite_times-serial.json

A test's wall time says how long it took, waits included. Its CPU says what it costs a slower or
busier machine. A test's processes cannot be summed from the test: a launch forked from a warm
process (tests/warm_start.py) is that process's child, not the test's. So this plugin reads what
every core did, from ``/proc/stat`` (user, nice, system, irq and softirq time), as the test's
setup starts and as its teardown ends. It writes the difference as the test's property
``busy_cpu_s``, which ``ops.ci.suite_times`` keeps beside the test's seconds.

That is the test's CPU only with the tests run one at a time on a quiet machine. So the plugin
refuses pytest-xdist's workers (``-n``): with two, each test's figure would hold the other's.
"""

from __future__ import annotations

import os

import pytest

PROPERTY = "busy_cpu_s"
STAT = "/proc/stat"
_START = pytest.StashKey[float]()


def busy_cpu_s() -> float:
    """The seconds every core has spent busy since boot (:data:`STAT`'s first line, in ticks)."""
    with open(STAT) as stat:
        user, nice, system, _idle, _iowait, irq, softirq = map(int, stat.readline().split()[1:8])
    return (user + nice + system + irq + softirq) / os.sysconf("SC_CLK_TCK")


def pytest_configure(config: pytest.Config) -> None:
    if config.getoption("numprocesses", None):
        raise pytest.UsageError(
            "-p ops.ci.busy_cpu measures the tests one at a time: drop -n (pytest-xdist's "
            "workers), or each test's figure holds the other workers' CPU"
        )


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem):
    item.stash[_START] = busy_cpu_s()
    yield


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> None:
    """Before the teardown's report is made: JUnit takes a test's properties from it."""
    if call.when == "teardown" and _START in item.stash:
        item.user_properties.append((PROPERTY, round(busy_cpu_s() - item.stash[_START], 2)))
