"""resnet_noBN/host/after_import.py: a hook run once a module has been imported, as the package
registers its layers with Keras and tests/cold_jax shares the JAX cache. On a module written
here, in this process; the finder list is put back after each test."""

import importlib.util
import sys

import pytest

from resnet_noBN.host.after_import import after_import


@pytest.fixture
def module(tmp_path, monkeypatch):
    """A module not yet imported, on the path: its name. Importing it appends "ran" to
    ``sys.after_import_log``, so a hook can tell whether the module ran before it."""
    monkeypatch.setattr(sys, "meta_path", list(sys.meta_path))
    monkeypatch.setattr(sys, "after_import_log", [], raising=False)
    (tmp_path / "after_import_subject.py").write_text(
        "import sys\nsys.after_import_log.append('ran')\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "after_import_subject", raising=False)
    yield "after_import_subject"
    sys.modules.pop("after_import_subject", None)


def test_the_hook_runs_once_after_the_first_import_and_a_look_up_leaves_it_waiting(module):
    finders = len(sys.meta_path)
    after_import(module, lambda: sys.after_import_log.append("hook"))
    assert len(sys.meta_path) == finders + 1
    assert importlib.util.find_spec(module) is not None  # a look-up: nothing run
    assert sys.after_import_log == [] and len(sys.meta_path) == finders + 1
    importlib.import_module(module)
    assert sys.after_import_log == ["ran", "hook"] and len(sys.meta_path) == finders
    importlib.import_module(module)
    assert sys.after_import_log == ["ran", "hook"]


def test_the_hook_runs_at_once_for_a_module_already_imported(module):
    importlib.import_module(module)
    finders = len(sys.meta_path)
    after_import(module, lambda: sys.after_import_log.append("hook"))
    assert sys.after_import_log == ["ran", "hook"] and len(sys.meta_path) == finders


def test_a_module_not_installed_is_looked_up_as_without_the_hook(module):
    after_import("after_import_nowhere", lambda: sys.after_import_log.append("hook"))
    assert importlib.util.find_spec("after_import_nowhere") is None
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("after_import_nowhere")
    assert sys.after_import_log == []


def test_hooks_of_two_copies_of_the_file_on_one_module_each_run_once(module):
    """The package's copy and a ``sitecustomize``'s (loaded by its path) both waiting on one
    module: each finder asks the other, and each hook runs once, after the module; before, the
    two asked each other until Python's recursion limit."""
    path = importlib.util.find_spec("resnet_noBN.host.after_import").origin
    spec = importlib.util.spec_from_file_location("_after_import_copy", path)
    copy = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(copy)
    finders = len(sys.meta_path)
    after_import(module, lambda: sys.after_import_log.append("package"))
    copy.after_import(module, lambda: sys.after_import_log.append("copy"))
    after_import(module, lambda: sys.after_import_log.append("package again"))
    assert importlib.util.find_spec(module) is not None and sys.after_import_log == []
    importlib.import_module(module)
    assert sorted(sys.after_import_log[1:]) == ["copy", "package", "package again"]
    assert sys.after_import_log[0] == "ran" and len(sys.meta_path) == finders
