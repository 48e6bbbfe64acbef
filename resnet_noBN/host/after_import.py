"""A hook run once a module has been imported, without importing it: the package registers the
layers of its model files with Keras this way (``resnet_noBN/__init__.py``). It imports only
the standard library and nothing of the package, so a ``sitecustomize`` can load it by its path
before the process imports anything (tests/cold_jax does, to share the tests' JAX cache)."""

from __future__ import annotations

import importlib.abc
import sys
from collections.abc import Callable


class _AfterImport(importlib.abc.MetaPathFinder):
    """``name``'s own spec, found by the finders after this one, its loader made to call ``hook``
    once it has run the module (then this finder leaves ``sys.meta_path``). A look-up that
    imports nothing (``importlib.util.find_spec``, as TensorFlow's of Keras) leaves it in place;
    where ``name`` is not installed, the look-up answers None, as it would without it.

    Several hooks may wait on one module, each finder from a copy of this file of its own (the
    package's, a ``sitecustomize``'s). Each asks the others, so a finder asked again while it
    looks (by another's look-up) answers None: the last finder asked finds the spec, and each
    wraps its loader in turn. Without that, two of them asked each other until Python's
    recursion limit. Python holds its import lock while a finder looks, so one flag serves every
    thread."""

    def __init__(self, name: str, hook: Callable[[], None]):
        self.name, self.hook = name, hook
        self.looking = False

    def find_spec(self, fullname, path=None, target=None):
        if fullname != self.name or self.looking:
            return None
        others = (f for f in sys.meta_path if f is not self and hasattr(f, "find_spec"))
        self.looking = True
        try:
            spec = next(filter(None, (f.find_spec(fullname, path, target) for f in others)), None)
        finally:
            self.looking = False
        if spec is not None and spec.loader is not None:
            execute = spec.loader.exec_module

            def exec_module(module):
                execute(module)
                if self in sys.meta_path:
                    sys.meta_path.remove(self)
                self.hook()

            spec.loader.exec_module = exec_module
        return spec


def after_import(name: str, hook: Callable[[], None]) -> None:
    """``hook()`` at once where the module ``name`` is imported already, else once its first
    import has run it."""
    if name in sys.modules:
        hook()
    else:
        sys.meta_path.insert(0, _AfterImport(name, hook))
