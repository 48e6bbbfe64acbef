"""Run at start-up by every Python whose ``PYTHONPATH`` names this folder (``COLD`` in
tests/jax_cache.py): every process the tests start (tests/conftest.py puts it last on their
path). Once the process has imported JAX, it keys, writes and reads the session's compilation
cache as the warm JAX launches do (``jax_cache.share``). It imports only the standard library,
so a process that never imports JAX runs as it would without it. The hook is the package's
``host/after_import.py``, loaded by its path: importing the package here would register its
Keras hook before the process's own imports (tests/test_export.py's probes import in both
orders)."""

import importlib.util
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def _load(name: str, path: Path, register: bool = False):
    """The module of the file ``path`` run as ``name`` (in ``sys.modules`` where ``register``:
    the one a later ``import name`` gets)."""
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    if register:
        sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _share() -> None:
    jax_cache = sys.modules.get("jax_cache")  # tests/warm_start.py imports it first
    if jax_cache is None:
        jax_cache = _load("jax_cache", TESTS / "jax_cache.py", register=True)
    jax_cache.share()


_hooks = _load("_after_import", TESTS.parent / "resnet_noBN" / "host" / "after_import.py")
_hooks.after_import("jax", _share)
