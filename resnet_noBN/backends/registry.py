"""The backend of this process, chosen once from the Keras backend (``KERAS_BACKEND`` or
``~/.keras/keras.json``, read by Keras when it is first imported). Importing this module loads
nothing: Keras (and with it TensorFlow, on its backend) loads at the first :func:`name` or
:func:`current`, so a launcher answers a bad flag first.

Adding a backend (another framework Keras runs on, say): a module implementing ``base.Backend`` and
an entry in :data:`BACKENDS`, a function importing it (so no backend's library is imported
unless it runs).
"""

from __future__ import annotations

import functools
import importlib.util
import json
import os
import sys
from typing import TYPE_CHECKING

from resnet_noBN.configs.errors import InputError, say

if TYPE_CHECKING:
    from resnet_noBN.backends.base import Backend


def _tensorflow() -> Backend:
    from resnet_noBN.backends.tensorflow_backend import TensorFlowBackend

    return TensorFlowBackend()


def _jax() -> Backend:
    from resnet_noBN.backends.jax_backend import JaxBackend

    return JaxBackend()


def _torch() -> Backend:
    from resnet_noBN.backends.torch_backend import TorchBackend

    return TorchBackend()


# keras.backend.backend() -> the function building its Backend
BACKENDS = {"tensorflow": _tensorflow, "jax": _jax, "torch": _torch}
# launch/<name>.py that train or evaluate -> the backends that run it. ImageNet's input is tf.data
# over TFRecords, which only TensorFlow runs.
LAUNCHERS = {"cifar": tuple(BACKENDS), "evaluate": tuple(BACKENDS), "imagenet": ("tensorflow",)}


# the framework each backend needs installed (Keras imports it at its own import), and how
INSTALL = {
    "tensorflow": "pip install -e .",
    "jax": "pip install -e '.[jax]'",
    "torch": "pip install -e '.[torch]'",
}
# JAX's build for an NVIDIA GPU, its own CUDA wheels (the lease's machines: JAX 0.11.2 on CUDA 13)
GPU_INSTALL = "pip install -e '.[cuda13]' (or '.[cuda12]' where the NVIDIA driver predates CUDA 13)"


def check_chosen(env=os.environ) -> str:
    """The Keras backend chosen (``KERAS_BACKEND``, else ``~/.keras/keras.json``'s, else
    TensorFlow) checked before Keras is imported: InputError, one line, for one no launcher
    supports or whose framework is not installed (Keras would end in a traceback). Returns its
    name."""
    chosen = env.get("KERAS_BACKEND")
    if not chosen:
        home = env.get("KERAS_HOME") or os.path.join(os.path.expanduser("~"), ".keras")
        try:
            with open(os.path.join(home, "keras.json")) as f:
                chosen = json.load(f).get("backend")
        except (OSError, ValueError, AttributeError):
            chosen = None
    chosen = chosen or "tensorflow"
    if chosen not in BACKENDS:
        raise InputError(f"KERAS_BACKEND={chosen} is not supported; use {' or '.join(BACKENDS)}")
    if importlib.util.find_spec(chosen) is None:
        raise InputError(
            f"KERAS_BACKEND={chosen}, but {chosen} is not installed: {INSTALL[chosen]}, or "
            "choose another backend"
        )
    return chosen


def name() -> str:
    """The Keras backend in use (Keras imported here, on the first call)."""
    import keras

    return keras.backend.backend()


def loaded() -> Backend | None:
    """:func:`current` where this process has loaded Keras already; None before (a launcher
    that refused its flags before loading a backend is in no job, and has nothing to end)."""
    return current() if "keras" in sys.modules and name() in BACKENDS else None


@functools.cache
def current() -> Backend:
    """The Backend of the Keras backend in use (InputError for one no launcher supports)."""
    if name() not in BACKENDS:
        raise InputError(f"KERAS_BACKEND={name()} is not supported; use {' or '.join(BACKENDS)}")
    return BACKENDS[name()]()


def check_serves(launcher: str, backend: str) -> None:
    """InputError where ``backend`` cannot run ``launch/<launcher>.py``."""
    if backend not in LAUNCHERS[launcher]:
        raise InputError(
            f"launch/{launcher}.py needs TensorFlow (its input is tf.data, which the "
            f"{backend} backend cannot run); run it with KERAS_BACKEND=tensorflow"
        )


def serving(launcher: str) -> Backend:
    """:func:`current`, the backend chosen checked first to serve ``launch/<launcher>.py``
    (:func:`check_chosen`, :func:`check_serves`): otherwise one line ``error: ...`` on stderr and
    exit 2, before Keras or the backend's library is imported and before anything is written."""
    try:
        check_serves(launcher, check_chosen())
        return current()
    except InputError as e:
        say(f"error: {e}")
        sys.exit(2)
