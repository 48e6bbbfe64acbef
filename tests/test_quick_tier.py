"""The quick tier, ``python -m pytest tests -q -m quick`` (docs/testing.md, "The quick tier"):
tests/quick_tier.json, chosen by ops/ci/quick_tier.py from each test's measured coverage, still
covers every module of the tree as it is now, every test it names exists, and ``-m quick``
selects exactly those tests (tests/conftest.py marks them) and the tier's own check."""

import re
import subprocess
import sys

import pytest

from ops.ci import quick_tier

OWN = "tests/test_quick_tier.py::test_every_module_has_a_quick_test_and_every_quick_test_exists"


@pytest.mark.quick  # the tier's own check: in the tier always, whatever it covers
def test_every_module_has_a_quick_test_and_every_quick_test_exists():
    """The tier file against the tree; then ``-m quick`` collected in a process of its own over
    the tier's files: it selects the listed tests and this one, no other, and says so in its
    count (a test the conftest no longer marks, or one marked after ``-m`` selects, fails it)."""
    tier = quick_tier.load_tier()
    missing = quick_tier.uncovered(tier)
    assert not missing, "\n".join(missing.values())
    assert tier["command"] == "python -m pytest tests -q -m quick"
    assert tier["rerun"] == quick_tier.RERUN
    listed = [test["test"] for test in tier["tests"]]
    assert len(listed) == len(set(listed)) == tier["chosen"]["tests"]
    gone = [test for test in listed if not (quick_tier.REPO / test.split("::")[0]).is_file()]
    assert not gone, (
        f"tests/quick_tier.json names tests that do not exist: {gone}; measure their files "
        f"again and choose again: {quick_tier.RERUN}"
    )
    files = sorted({test.split("::")[0] for test in [*listed, OWN]})
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider"]
        + ["-m", "quick", *files],
        cwd=quick_tier.REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    # a listed test not collected stops -m quick (tests/conftest.py), the tests named
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    selected = {line for line in proc.stdout.splitlines() if "::" in line}
    unmarked = sorted(set(listed) - selected)
    assert not unmarked, (
        f"-m quick does not select {len(unmarked)} of the {len(listed)} tests of "
        f"tests/quick_tier.json (tests/conftest.py marks them quick): {unmarked}"
    )
    assert sorted(selected - set(listed)) == [OWN], "-m quick selects tests the tier does not list"
    count = re.match(r"(\d+)/\d+ tests collected", proc.stdout.strip().splitlines()[-1])
    assert count and int(count.group(1)) == len(selected), proc.stdout[-500:]


def test_a_module_no_quick_test_executes_is_named_with_the_command_that_mends_it():
    module = "resnet_noBN/progress.py"
    others = [m for m in quick_tier.modules() if m != module]
    missing = quick_tier.uncovered(
        {"tests": [{"test": "tests/test_x.py::test_y", "covers": others}]}
    )
    assert list(missing) == [module]
    message = missing[module]
    assert message.startswith(f"no quick test executes {module}: measure the tests that do")
    assert "python -m ops.ci.quick_tier measure tests/test_FILE.py" in message
    assert "python -m ops.ci.quick_tier choose" in message


def test_a_module_is_touched_by_a_line_of_its_functions_not_by_its_import():
    body = quick_tier.body_lines("resnet_noBN/progress.py")
    source = (quick_tier.REPO / "resnet_noBN/progress.py").read_text().splitlines()
    defs = {i + 1 for i, line in enumerate(source) if line.startswith(("def ", "class "))}
    assert defs and not defs & body
    assert not quick_tier.touched("resnet_noBN/progress.py", defs)
    assert quick_tier.touched("resnet_noBN/progress.py", defs | {min(body)})
    # a module with no function (a package's __init__): touched by its import in a process
    assert quick_tier.body_lines("resnet_noBN/configs/__init__.py") is None
    assert quick_tier.touched("resnet_noBN/configs/__init__.py", {1})


def test_pick_takes_the_most_modules_per_second_and_drops_what_the_rest_cover():
    covers = {
        "slow_all": {"a", "b", "c", "d"},
        "fast_ab": {"a", "b"},
        "fast_c": {"c"},
        "mid_cd": {"c", "d"},
        "none": set(),
    }
    seconds = {"slow_all": 10.0, "fast_ab": 1.0, "fast_c": 0.5, "mid_cd": 3.0, "none": 0.01}
    # fast_c first (2 modules a second as fast_ab, but the faster), then fast_ab, then for d
    # mid_cd (1 in 3 s) before slow_all (1 in 10 s); mid_cd covers c, so fast_c is dropped
    assert quick_tier.pick(covers, seconds, {"a", "b", "c", "d"}) == (["fast_ab", "mid_cd"], set())
    assert quick_tier.pick(covers, seconds, {"a", "e"}) == (["fast_ab"], {"e"})
