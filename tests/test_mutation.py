"""ops/mutation/run.py, the mutation passes (docs/testing.md, "Mutation testing"), without running
mutmut: each pass's mutants named as mutmut names them, a survivor judged against
ops/mutation/equivalent.toml by its module, function and change, the copy's [tool.mutmut]
section, and the passes and the list naming what exists."""

import ast
import tomllib
from pathlib import Path

from ops.mutation import run
from ops.mutation.run import PASSES, Pass

REPO = Path(__file__).resolve().parents[1]

DIFF = """\
--- resnet_noBN/studies/original_eval.py
+++ resnet_noBN/studies/original_eval.py
@@ -1,3 +1,3 @@
 def _percent(fraction: float) -> float:
     \"\"\"A fraction of the test images as a percentage.\"\"\"
-    return round(100.0 * fraction, 4)
+    return round(100.0 * fraction, 5)"""


def test_a_pass_names_its_mutants_as_mutmut_does():
    p = Pass(
        "resnet_noBN/studies/study.py", ("tests/test_study.py",), ("spread", "Budget.validate")
    )
    assert p.globs() == [
        "resnet_noBN.studies.study.x_spread__mutmut_*",
        "resnet_noBN.studies.study.x\u01c1Budget\u01c1validate__mutmut_*",
    ]
    assert Pass("resnet_noBN/trainers/health.py", ()).globs() == [
        "resnet_noBN.trainers.health.*__mutmut_*"
    ]
    assert run.function_of("resnet_noBN.studies.study.x_spread__mutmut_12") == "spread"
    assert run.function_of("resnet_noBN.studies.study.x__gap__mutmut_3") == "_gap"
    method = "resnet_noBN.studies.study.x\u01c1Budget\u01c1validate__mutmut_2"
    assert run.function_of(method) == "Budget.validate"


def test_a_survivor_is_equivalent_where_an_entry_lists_its_function_and_change():
    """Matched by module, function and the lines changed (not by mutmut's number, which moves
    when the function changes); a survivor no entry lists is new; an entry of the pass's scope
    that no survivor matched is stale; one outside the scope is neither."""
    change = run.change_of(DIFF)
    assert change == (
        "- return round(100.0 * fraction, 4)",
        "+ return round(100.0 * fraction, 5)",
    )
    p = Pass("resnet_noBN/studies/original_eval.py", (), ("_percent", "figures"))
    entry = {"module": p.module, "function": "_percent", "change": change, "why": "same"}
    gone = {**entry, "function": "figures", "why": "killed now"}
    outside = {**entry, "function": "window_starts"}
    other = {**entry, "module": "resnet_noBN/trainers/health.py"}
    survivors = {
        "resnet_noBN.studies.original_eval.x__percent__mutmut_9": change,
        "resnet_noBN.studies.original_eval.x__percent__mutmut_10": change[:1] + ("+ return 0",),
    }
    equivalent, new, stale = run.judge(p, survivors, [entry, gone, outside, other])
    assert equivalent == {"resnet_noBN.studies.original_eval.x__percent__mutmut_9": "same"}
    assert list(new) == ["resnet_noBN.studies.original_eval.x__percent__mutmut_10"]
    assert stale == [gone]
    pasted = tomllib.loads(run.entry_text(p, "x__percent__mutmut_10", change))["mutant"][0]
    assert (pasted["module"], pasted["function"]) == (p.module, "_percent")
    assert tuple(pasted["change"]) == change


def test_the_copys_config_mutates_the_module_and_runs_its_tests(tmp_path):
    for name in ("launch", "resnet_noBN", "tests", "README.md"):
        (tmp_path / name).mkdir()
    (tmp_path / "tests" / "test_table2.py").write_text("")
    tests = ("tests/test_table2.py", "tests/test_gone.py", "-k", "a")
    p = Pass("resnet_noBN/studies/table2_plan.py", tests, slices=True)
    config = tomllib.loads(run.mutmut_config(p, tmp_path, "/data/slices"))["tool"]["mutmut"]
    assert config["only_mutate"] == [p.module]
    # a test file the copy lacks (an older commit's) is left out
    assert config["pytest_add_cli_args_test_selection"] == ["tests/test_table2.py", "-k", "a"]
    assert config["pytest_add_cli_args"][-1] == "--cifar_slices=/data/slices"
    assert config["also_copy"] == ["README.md", "launch", "sitecustomize.py", "mutation_hits.py"]
    plain = tomllib.loads(run.mutmut_config(PASSES["health"], tmp_path, "/data/slices"))
    assert not any("slices" in a for a in plain["tool"]["mutmut"]["pytest_add_cli_args"])


def test_mutmut_runs_the_copy_and_every_launch_cold(tmp_path, monkeypatch):
    """The copy's mutants on PYTHONPATH; every launch a test starts cold: a warm process started
    in mutmut's own process would be its child, and mutmut's runner stops at a child not its own."""
    monkeypatch.setenv("MUTANT_UNDER_TEST", "stats")
    env = run.mutmut_env(tmp_path)
    assert env["PYTHONPATH"] == str(tmp_path / "mutants")
    assert env["RESNET_NOBN_TESTS_COLD"] == "1" and "MUTANT_UNDER_TEST" not in env


def test_each_pass_and_each_equivalent_names_what_exists():
    """Every pass's module, functions and test files exist; every entry of the list names a
    pass's module and a function of its scope, and says why."""
    modules = {}
    for p in PASSES.values():
        tree = ast.parse((REPO / p.module).read_text())
        names = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
        names |= {
            f"{c.name}.{m.name}"
            for c in tree.body
            if isinstance(c, ast.ClassDef)
            for m in c.body
            if isinstance(m, ast.FunctionDef)
        }
        assert set(p.functions) <= names, (p.module, set(p.functions) - names)
        assert all((REPO / t).is_file() for t in p.tests if t.startswith("tests/")), p.tests
        modules[p.module] = set(p.functions) or names
    for entry in run.load_equivalent():
        assert entry["function"] in modules[entry["module"]], entry
        assert entry["why"] and "WHY" not in entry["why"] and len(entry["change"]) >= 2, entry
