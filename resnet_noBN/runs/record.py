"""A run's ``config.json``: the whole run recorded once, by every training launcher
(``launch/cifar.py``, ``launch/imagenet.py``, each run of ``launch/study.py``), and the check
that a rerun in the same folder resumes the same run.

The record (:func:`record`) has one section per config::

    network   the architecture (``ModelConfig`` / ``ImageNetConfig``, every field)
    recipe    the whole recipe (``TrainConfig``: learning rate, boundaries, decay, steps, batch
              sizes, weight decay, optimizer, momentum, loss, label smoothing, intervals) and
              the precision (``RuntimeConfig.precision``)
    data      what was read (``DataConfig``: data set, where from, layout, padding) and the
              train and test counts
    backend   "tensorflow", "jax" or "torch" (a run resumes on the backend it started on)
    seed      the run's seed, which a rerun without --seed reuses
    runtime   where it computed (``Backend.report``: strategy, devices, versions); never compared

A resumed run must match every field of network, recipe and data but those whose declaration
says ``"may_change"`` (they change neither the objective nor the stream: more steps, other
intervals, the evaluation batch, the precision, the layout of the convolutions, another copy
of the same data set): :func:`check_resumable` refuses anything else, naming the field.

Records of older versions still resume: theirs are flat (the network's fields, ``dataset``,
``cifar100_layout``, the optimizer's and the loss's names side by side; the claims runs' recipe
under ``recipe``), read section by section by :func:`section`. A key an older record lacks stands
for today's default where it is a switch added since (``absent``: that run had the one
behaviour there was); any other it lacks was not recorded and is not compared.
"""

from __future__ import annotations

import dataclasses
import json
import os

from resnet_noBN.configs import network_config, recipe_config
from resnet_noBN.configs.errors import InputError
from resnet_noBN.host import storage

CONFIG_FILE = "config.json"
SECTIONS = ("network", "recipe", "data")
RUNTIME_KEY = "runtime"  # where the run ran; not compared on resume
SEED_KEY = "seed"  # the run's seed, which a rerun without --seed reuses
BACKEND_KEY = "backend"


def record(network, recipe, data: dict, backend: str, precision: str, **recipe_extras) -> dict:
    """The record of a run: ``network`` and ``recipe`` config dataclasses, ``data`` (a
    ``cifar_data.data_record`` or a launcher's own), the backend's name, the precision, and
    what else the launcher's recipe has (ImageNet: ``epochs_per_decay``)."""
    return {
        "network": dataclasses.asdict(network),
        "recipe": {**dataclasses.asdict(recipe), "precision": precision, **recipe_extras},
        "data": data,
        BACKEND_KEY: backend,
    }


def may_change(*classes) -> frozenset[str]:
    """The fields of the config dataclasses ``classes`` whose declaration says a resumed run may
    change them (``metadata={"may_change": True}``)."""
    return frozenset(
        field.name
        for cls in classes
        for field in dataclasses.fields(cls)
        if field.metadata.get("may_change")
    )


def section(saved: dict, name: str) -> dict:
    """Section ``name`` of a saved record; of an older, flat one, the record itself (its keys
    are the fields' names). An older network or recipe in today's fields
    (``network_config.upgraded``: ``preactivation`` is now ``--block``;
    ``recipe_config.upgraded``: no optimizer recorded is Keras' momentum, not today's
    default)."""
    value = saved.get(name)
    value = value if isinstance(value, dict) else saved
    upgrade = {"network": network_config.upgraded, "recipe": recipe_config.upgraded}.get(name)
    return upgrade(value) if upgrade else value


def read_config(model_dir: str) -> dict:
    """``model_dir``'s config.json ({} when there is none yet)."""
    path = os.path.join(model_dir, CONFIG_FILE)
    if not os.path.exists(path):
        return {}
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def changes(saved: dict, run: dict, absent: dict, free: frozenset[str]) -> list[str]:
    """``key=old there, new now`` for each field of ``run``'s sections (and its backend) that
    ``saved`` records otherwise; a field in ``free`` is not compared, nor one ``saved`` lacks
    and ``absent`` (by section) has no default for."""
    run = json.loads(json.dumps(run))  # as saved: tuples are lists
    missing = object()
    found = []
    for name in SECTIONS:
        old, defaults = section(saved, name), absent.get(name, {})
        for key, value in run[name].items():
            before = old.get(key, defaults.get(key, missing))
            if key not in free and before is not missing and before != value:
                found.append(f"{key}={before!r} there, {value!r} now")
    before = saved.get(BACKEND_KEY, "tensorflow")  # the one backend before it was recorded
    if before != run[BACKEND_KEY]:
        found.append(f"{BACKEND_KEY}={before!r} there, {run[BACKEND_KEY]!r} now")
    return found


def check_resumable(model_dir: str, run: dict, absent: dict, free: frozenset[str]) -> None:
    """InputError, naming each field, if ``model_dir`` holds a run that this one (``run``, a
    :func:`record`) cannot resume (:func:`changes`); InputError too where it holds checkpoints
    and no config.json (nothing to check them against: no new one is written over them)."""
    saved = read_config(model_dir)
    index = storage.checkpoint_index(model_dir)
    if not saved and index:
        raise InputError(
            f"--model_dir {model_dir} holds checkpoints ({os.path.basename(index)}) but no "
            f"{CONFIG_FILE}, so they cannot be checked against this run; put back its "
            f"{CONFIG_FILE}, or move the checkpoints away to start afresh"
        )
    changed = changes(saved, run, absent, free) if saved else []
    if changed:
        raise InputError(
            f"--model_dir {model_dir} holds a run of another model "
            f"({'; '.join(changed)}); use a new --model_dir or the same flags"
        )


def record_config(model_dir: str, run_config: dict) -> None:
    """Write ``config.json`` into ``model_dir``, atomically (``storage.atomic_write``: the old
    one or the new one, never a part); StorageError (one line) where the write fails."""
    text = json.dumps(run_config, indent=2, sort_keys=True)
    try:
        os.makedirs(model_dir, exist_ok=True)
        storage.atomic_write(os.path.join(model_dir, CONFIG_FILE), lambda f: f.write(text.encode()))
    except OSError as e:
        raise storage.storage_error(CONFIG_FILE, model_dir, e, "the latest checkpoint") from None
