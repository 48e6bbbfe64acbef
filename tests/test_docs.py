"""The documentation's commands work and its quoted figures are the committed results'.

Every shell block of every Markdown file is marked as run or not run (with a reason); the run
blocks are run (those that take seconds: the parameter counts, a bad input's line, the demo
shortened to a few steps of the `small` network on generated data, the benchmark's smoke run);
every call of a repository script, run or not, names a script that exists and flags it accepts;
every figure marked as read from a committed result file is that file's; every relative link
resolves. The markers: docs/testing.md, "The documentation's commands"."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys

import launchers
import pytest
from doc_blocks import (
    NOT_RUN_REASONS,
    REPO,
    Block,
    all_blocks,
    anchors,
    argparse_options,
    as_number,
    commands,
    figure_value,
    figures,
    inline_commands,
    invocations,
    is_python,
    is_setup,
    links,
    markdown_files,
    matches,
    named_files,
    split_placeholders,
    uses_absl,
)

SHELL_BLOCKS = [b for b in all_blocks() if b.is_shell]
RUN_BLOCKS = [b for b in SHELL_BLOCKS if b.run_marker()]


def test_every_shell_block_is_run_or_marked_not_run_with_a_reason():
    assert len(SHELL_BLOCKS) > 30 and len(RUN_BLOCKS) >= 5  # the collection finds them
    problems = []
    for block in SHELL_BLOCKS:
        reason = block.not_run_reason()
        if block.run_marker():
            continue
        if reason is None:
            problems.append(f"{block.where}: no <!-- run ... --> or <!-- not run: ... --> marker")
        elif not reason.startswith(NOT_RUN_REASONS):
            problems.append(
                f"{block.where}: reason {reason!r} starts with none of {NOT_RUN_REASONS}"
            )
    for block in all_blocks():
        if not block.language:
            problems.append(f"{block.where}: a fenced block without an info string (sh, text, ...)")
        if block.marker == "output" and block.language != "text":
            problems.append(f"{block.where}: an output block must be `text`")
    assert not problems, "\n".join(problems)


def test_the_front_page_opens_with_set_up_and_run_then_set_up_and_test_as_ci_runs_it():
    readme = [b for b in SHELL_BLOCKS if b.path == REPO / "README.md"]
    run_cmd, test_cmd = (commands(b.text) for b in readme[:2])
    assert [c.argv[:3] for c in run_cmd if is_setup(c)] == [
        ["python3", "-m", "venv"],
        [".venv/bin/pip", "install", "-e"],
    ]
    assert run_cmd[-1].argv[:2] == [".venv/bin/python", "launch/cifar.py"]
    assert [" ".join(c.argv) for c in test_cmd] == [
        "python3 -m venv .venv",
        ".venv/bin/pip install -e .[test]",
        ".venv/bin/ruff format --check .",
        ".venv/bin/ruff check .",
        ".venv/bin/python -m pytest tests -q -n 2 --dist loadfile",
    ]
    ci = (REPO / ".ci" / "run").read_text()
    for line in (
        "python3 -m venv .venv && .venv/bin/pip install -e '.[test]'",
        ".venv/bin/ruff format --check . && .venv/bin/ruff check .",
        ".venv/bin/python -m pytest tests -q -n 2 --dist loadfile",
    ):
        assert line in ci, line


def _calls() -> list[tuple[str, str, list[str], dict]]:
    """(where, script, args, env) of every call of a repository script in the docs: the shell
    blocks' and the inline commands'; the flags a lease passes on (``LEASE_FLAGS``) as a call
    of launch/cifar.py."""
    found = []
    for block in SHELL_BLOCKS:
        found += [(block.where, cmd) for cmd in commands(block.text)]
    for path in markdown_files():
        for line, text in inline_commands(path):
            found += [(f"{path.relative_to(REPO)}:{line}", cmd) for cmd in commands(text)]
    calls = []
    for where, cmd in found:
        for i in invocations(cmd):
            calls.append((where, i.script, i.args, i.env))
            if "LEASE_FLAGS" in i.env:
                calls.append((where, "launch/cifar.py", shlex.split(i.env["LEASE_FLAGS"]), {}))
    return calls


# Argument lists the flag check must refuse (a misspelt flag, a bad enum value, a placeholder's
# misspelt flag) and accept (a placeholder of a required flag, a negated boolean), checked in the
# same subprocess as the docs' own (one TensorFlow import).
PROBES = [
    {
        "script": "launch/cifar.py",
        "args": [
            ["--model=small", "--train_step=4"],
            ["--model=tiny"],
            split_placeholders(["--model_dirr=RUN"])[0],
            split_placeholders(["--model=small", "--noconv_bias", "--data_path=DATA", "..."])[0],
        ],
    },
    {"script": "launch/evaluate.py", "args": [["--model_dir=x"]]},
]


@pytest.fixture(scope="module")
def absl_errors():
    """errors(cases): per case ``{"script": ..., "args": [argument lists]}``, the absl error of
    each argument list (None: it parses), from one subprocess (tests/doc_flags.py) shared with
    PROBES; errors.probes: PROBES' errors."""
    cases = _absl_cases(_calls())[1]
    request = [{"script": c["script"], "args": c["args"]} for c in cases] + PROBES
    proc = subprocess.run(
        [sys.executable, str(REPO / "tests" / "doc_flags.py")],
        input=json.dumps(request),
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    errors = [r["errors"] for r in json.loads(proc.stdout.strip().splitlines()[-1])]
    return errors[: len(cases)], errors[len(cases) :]


def _absl_cases(calls) -> tuple[list[str], list[dict]]:
    """(problems found without absl, one case per absl script with its argument lists and where
    each was written)."""
    problems = [f"{w}: {s} does not exist" for w, s, _, _ in calls if not (REPO / s).is_file()]
    cases: dict[str, dict] = {}
    for where, script, args, env in calls:
        path = REPO / script
        if path.is_file() and script.endswith(".sh"):
            problems += _check_knobs(where, script, env)
        if not path.is_file() or not script.endswith(".py"):
            continue
        parse, _ = split_placeholders(args)
        if uses_absl(path):
            case = cases.setdefault(script, {"script": script, "args": [], "where": []})
            case["args"].append(parse)
            case["where"].append(where)
        else:
            options = argparse_options(path)
            for name in [a.split("=", 1)[0] for a in parse if a.startswith("--")]:
                if name not in options:
                    problems.append(f"{where}: {script} has no flag {name}")
    return problems, list(cases.values())


def test_every_command_names_a_script_that_exists_and_flags_it_accepts(absl_errors):
    calls = _calls()
    scripts = {script for _, script, _, _ in calls}
    assert {"launch/cifar.py", "launch/local_cluster.py", "bench/throughput.py"} <= scripts
    problems, cases = _absl_cases(calls)
    for case, case_errors in zip(cases, absl_errors[0]):
        for where, error in zip(case["where"], case_errors):
            if error:
                problems.append(f"{where}: {case['script']}: {error}")
    assert not problems, "\n".join(problems)


def _check_knobs(where: str, script: str, env: dict) -> list[str]:
    """A call of a shell script: no ``LEASE_*`` knob that neither it, a Python module beside it
    nor the lease package reads (the lease's knobs: ops/lease/README.md)."""
    path = REPO / script
    modules = [*path.parent.glob("*.py"), *(REPO / "ops" / "lease").glob("*.py")]
    sources = path.read_text() + "".join(p.read_text() for p in modules)
    return [
        f"{where}: {script}: nothing reads {name}"
        for name in env
        if name.startswith("LEASE_") and not re.search(rf"\b{name}\b", sources)
    ]


def test_a_flag_the_launcher_does_not_accept_fails_the_check(absl_errors):
    """The check above can fail: PROBES' misspelt flag, bad enum value and placeholder of a
    misspelt flag are caught, a required flag left out too; a misspelt argparse flag is not
    among the options read."""
    errors, evaluate_errors = absl_errors[1]
    assert "train_step" in errors[0] and "tiny" in errors[1] and "model_dirr" in errors[2]
    assert errors[3] is None
    assert "data_path" in evaluate_errors[0]
    options = argparse_options(REPO / "bench" / "throughput.py")
    assert {"--steps", "--measure_matmul", "--no-measure_matmul"} <= options
    assert "--step" not in options
    assert _check_knobs("x", "launch/gpu_lease.sh", {"LEASE_RUN": "cifar10_paper"})
    assert not _check_knobs("x", "launch/gpu_lease.sh", {"LEASE_RUNS": "cifar10_paper"})


def _substitute(text: str, cifar10, tmp_path) -> str:
    return text.replace("{cifar10}", str(cifar10)).replace("{tmp}", str(tmp_path))


@pytest.fixture(scope="module")
def generated_cifar10(tmp_path_factory, write_cifar):
    folder = tmp_path_factory.mktemp("data") / "cifar-10-batches-bin"
    write_cifar(folder, "cifar10", 64)
    return folder


@pytest.mark.parametrize("block", RUN_BLOCKS, ids=lambda b: b.where)
def test_the_run_blocks_run(block: Block, tmp_path, generated_cifar10):
    marker = block.run_marker()
    adding = shlex.split(_substitute(marker.group("adding") or "", generated_cifar10, tmp_path))
    expected_status = int(marker.group("exit") or 0)
    runs = [c for c in commands(block.text) if not is_setup(c)]
    assert runs, f"{block.where}: nothing to run"
    output = ""
    for cmd in runs:
        assert is_python(cmd.argv[0]) and cmd.argv[1].endswith(".py"), (
            f"{block.where}: the tests run repository scripts only, not {cmd.argv[0]}"
        )
        # the block's variables added to this process's; launch/ and bench/ scripts fork warm
        proc = launchers.run(
            cmd.argv[1], *cmd.argv[2:], *adding, env=cmd.env, timeout=300, cwd=REPO
        )
        assert proc.returncode == expected_status, (
            f"{block.where}: {' '.join(cmd.argv)} exited {proc.returncode}\n{proc.stderr[-3000:]}"
        )
        output += proc.stdout + proc.stderr
        if "--model_dir={tmp}/demo" in (marker.group("adding") or ""):
            _check_the_demo(proc, tmp_path / "demo")
    for line in (block.output or "").splitlines():
        assert line.strip() in output, f"{block.where}: the output lacks {line.strip()!r}"


def _check_the_demo(proc, model_dir):
    """The front page's demo, shortened: the `small` network trained, evaluated on the whole
    (generated) test split, its record written, and the run's time estimated after its first
    call."""
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["final_step"] == 4 and result["test_examples"] == 64
    config = json.loads((model_dir / "config.json").read_text())
    assert config["network"]["num_residual_units"] == 1
    assert config["network"]["stage_widths"] == [16, 32, 64]
    assert "the first call took " in proc.stdout and " steps left take " in proc.stdout


def test_every_quoted_figure_is_the_committed_results():
    problems, checked = [], 0
    for path in markdown_files():
        found, orphans = figures(path)
        problems += [
            f"{path.relative_to(REPO)}:{n}: a `from` marker after no figure" for n in orphans
        ]
        for fig in found:
            source = REPO / fig.source
            if not source.is_file():
                problems.append(f"{fig.where}: {fig.source} does not exist")
                continue
            value = figure_value(source, fig.query)
            checked += 1
            if not matches(fig.number, value):
                problems.append(
                    f"{fig.where}: {fig.number} written, {fig.source} ({fig.query}) gives {value}"
                )
    assert checked >= 30
    assert not problems, "\n".join(problems)


def test_a_wrong_figure_or_query_would_fail(tmp_path):
    metrics = tmp_path / "metrics.jsonl"
    metrics.write_text(
        '{"step": 2, "test_error": 0.5, "train_precision": 0.75}\n'
        '{"step": 4, "test_error": 0.1044, "train_precision": 0.9}\n'
    )
    assert matches("10.44", figure_value(metrics, "last test_error %"))
    assert not matches("10.45", figure_value(metrics, "min test_error %"))
    assert not matches("10.4", figure_value(metrics, "max test_error %"))  # 50.0
    assert matches("25", figure_value(metrics, "where step=2 1-train_precision %"))
    assert matches("4.06", figure_value(metrics, "last test_error % - 6.38"))
    assert matches("1,059", 1058.5) and matches("−1.38", -1.3833) and not matches("1.38", -1.38)
    assert as_number("−1,381.5") == (-1381.5, 1)
    with pytest.raises(ValueError):
        figure_value(metrics, "where step=3 test_error")


def test_every_relative_link_resolves():
    problems = []
    for path in markdown_files():
        for line, target in links(path):
            file, _, anchor = target.partition("#")
            dest = (path.parent / file).resolve() if file else path
            where = f"{path.relative_to(REPO)}:{line}"
            if not dest.exists():
                problems.append(f"{where}: {target} does not exist")
            elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
                problems.append(f"{where}: {target}: no such heading")
    assert not problems, "\n".join(problems)


def test_every_file_the_docs_name_exists():
    """A file named in inline code (`launch/cifar.py`) exists, from the repository root or the
    page's folder: a file moved or renamed fails here until the docs follow."""
    named = [(p, n, f) for p in markdown_files() for n, f in named_files(p)]
    assert len(named) > 50
    missing = [
        f"{p.relative_to(REPO)}:{n}: {f}"
        for p, n, f in named
        if not ((REPO / f).exists() or (p.parent / f).exists())
    ]
    assert not missing, "\n".join(missing)


def test_no_markdown_hides_a_command_in_an_indented_block():
    problems = []
    for path in markdown_files():
        lines = path.read_text(encoding="utf-8").splitlines()
        for n, line in enumerate(lines[1:], 2):
            if (
                re.match(r" {4}(\S+=\S+ )*(python3?|bash|sbatch|docker) ", line)
                and not lines[n - 2].strip()
            ):
                problems.append(f"{path.relative_to(REPO)}:{n}: an indented command; fence it")
    in_fences = {b.path for b in all_blocks()}
    assert in_fences and not problems, "\n".join(problems)
