"""Run at start-up by every Python whose ``PYTHONPATH`` names this folder (``COLD`` in
tests/jax_cache.py). Once the process has imported JAX, it keys, writes and reads the session's
compilation cache as the warm JAX launches do (``jax_cache.share``). It imports nothing itself,
so a process that never imports JAX runs as it would without it."""

import importlib.machinery
import importlib.util
import sys
from pathlib import Path


class _ShareOnceJaxRuns:
    """JAX's own spec, its loader made to call ``jax_cache.share`` once it has run JAX (then this
    finder leaves ``sys.meta_path``). A look-up that imports nothing
    (``importlib.util.find_spec``, as ``backends.registry.check_chosen`` makes) leaves it in
    place."""

    def find_spec(self, name, path=None, target=None):
        if name != "jax":
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:  # no JAX here: the look-up answers as without
            return spec
        run = spec.loader.exec_module

        def run_then_share(module):
            run(module)
            if self in sys.meta_path:
                sys.meta_path.remove(self)
            jax_cache = sys.modules.get("jax_cache")  # tests/warm_start.py imports it first
            if jax_cache is None:
                where = Path(__file__).resolve().parents[1] / "jax_cache.py"
                found = importlib.util.spec_from_file_location("jax_cache", where)
                jax_cache = sys.modules["jax_cache"] = importlib.util.module_from_spec(found)
                found.loader.exec_module(jax_cache)  # the one a later `import jax_cache` gets
            jax_cache.share()

        spec.loader.exec_module = run_then_share
        return spec


sys.meta_path.insert(0, _ShareOnceJaxRuns())
