"""One run, one config, built and kept: a :class:`~resnet_noBN.configs.run_config.RunConfig`
(``configs.run_config``: the network, data, recipe and runtime, and the experiment) is the single
thing a training run is built from and the thing its ``config.json`` is, written whole and read
back whole (for a resume, an evaluation, a study's table).

A launcher builds it from an experiment and the flags given (:func:`from_flags`: an
experiment's values stand in for the defaults of the flags not given), a test or a benchmark
from an experiment and changes (:func:`build`), an evaluation from a run's ``config.json``
(:func:`from_record`).

``config.json`` (:func:`record_of`) keeps the sections older versions wrote, so an old run
folder resumes and evaluates: ``network``, ``recipe`` (the schedule's boundaries as steps),
``data`` (with the splits' counts), ``backend``, ``seed``, and ``runtime``: the run config's
runtime and where it computed (``Backend.report``), never compared on resume. Older records are
flat, or hold the precision in ``recipe``: :func:`from_record` reads each (``runs.record``).
"""

from __future__ import annotations

import dataclasses
import json
import typing

from absl import flags

from resnet_noBN.configs import experiments, presets
from resnet_noBN.configs.data_config import DataConfig, ImageNetData
from resnet_noBN.configs.errors import InputError
from resnet_noBN.configs.experiments import Experiment
from resnet_noBN.configs.flag_config import config_from_flags, define_flags
from resnet_noBN.configs.network_config import (
    BlockConfig,
    ImageNetConfig,
    ModelConfig,
    NetworkConfig,
)
from resnet_noBN.configs.recipe_config import ImageNetRecipe, TrainConfig
from resnet_noBN.configs.run_config import RunConfig, validated_run
from resnet_noBN.configs.runtime_config import RuntimeConfig
from resnet_noBN.datasets import cifar_data
from resnet_noBN.runs import record

flags.disclaim_key_flags()  # the flags defined here belong to the launcher calling define_*
FLAGS = flags.FLAGS

# The classes of each launcher's sections: (network, data, recipe)
CLASSES = {
    "cifar": (ModelConfig, DataConfig, TrainConfig),
    "imagenet": (ImageNetConfig, ImageNetData, ImageNetRecipe),
}
# the network fields a launcher derives and never takes from a flag
DERIVED = {
    "cifar": ("num_classes", "stage_strides"),
    "imagenet": ("num_classes", "stem_kernel", "data_format"),
}
# What a resumed run may change: the fields declared "may_change" (runs.record)
FREE_ON_RESUME = record.may_change(
    BlockConfig, TrainConfig, RuntimeConfig, DataConfig, ImageNetData
)


def record_of(run: RunConfig, backend: str, seed: int, host: dict | None = None) -> dict:
    """What ``config.json`` holds: each section of ``run`` whole (the recipe's boundaries as the
    steps of this run, and the coefficient its weight decay puts on the gradient), the data's
    counts, the backend, the seed and the runtime, with where it computed (``host``)."""
    sections = run.sections()
    data = (
        cifar_data.data_record(run.data) if isinstance(run.data, DataConfig) else run.data.record()
    )
    return {
        **sections,
        "data": data,
        record.BACKEND_KEY: backend,
        record.SEED_KEY: seed,
        record.RUNTIME_KEY: {**sections["runtime"], "seed": seed, **(host or {})},
    }


def build(
    name: str | Experiment, model: str | None = None, launcher: str | None = None, **sections
) -> RunConfig:
    """The run of experiment ``name`` (``configs.experiments``), with the network preset
    ``model`` in place of its own, and ``sections``' changes by field (``recipe={...}``) over
    its own; InputError for an unknown name or field or a bad value."""
    try:
        exp = name if isinstance(name, Experiment) else experiments.named(name, launcher or "cifar")
    except ValueError as e:
        raise InputError(str(e)) from None
    network_cls, data_cls, recipe_cls = CLASSES[exp.launcher]
    merged = {
        key: {**getattr(exp, key), **sections.get(key, {})}
        for key in ("network", "data", "recipe", "runtime")
    }
    try:
        data = data_cls(**merged["data"])
        network = _network(network_cls, model or exp.model, merged["network"], data)
        run = RunConfig(
            network,
            data,
            recipe_cls(**merged["recipe"]),
            RuntimeConfig(**merged["runtime"]),
            exp.name,
        )
    except TypeError as e:  # a field no section has
        raise InputError(f"experiment {exp.name}: {e}") from None
    return validated_run(run)


def _network(cls, model: str, changes: dict, data) -> NetworkConfig:
    """The network of a run: for CIFAR the preset ``model`` with ``changes`` and the data set's
    classes; for ImageNet its config with ``changes``."""
    if cls is ModelConfig:
        classes = cifar_data.num_classes(data.dataset)
        return ModelConfig.preset(model, **{**changes, "num_classes": classes})
    return cls(**changes)


# ------------------------------------------------------------------------------ the flags
def define(launcher: str) -> None:
    """The flags of a launcher's run config: --experiment or --config, --model (CIFAR), every
    field of its four sections (their defaults the default experiment's, which ``--help``
    shows), and --scale_lr. Call it at the launcher's import."""
    default = experiments.EXPERIMENTS[experiments.DEFAULTS[launcher]]
    ours = [n for n, e in experiments.EXPERIMENTS.items() if e.launcher == launcher]
    flags.DEFINE_string(
        "experiment",
        default.name,
        f"The experiment to run (resnet_noBN/configs/experiments.py: {', '.join(ours)}); every "
        "flag given beside it overrides its value.",
    )
    flags.DEFINE_string(
        "config",
        None,
        "A run's config.json to replay instead of an experiment: its network, data, recipe "
        "(the learning-rate drops at the steps it had them) and runtime, its seed included; "
        "every flag given beside it overrides its value (--data_path where the data lives here).",
    )
    base = build(default)
    if launcher == "cifar":
        flags.DEFINE_enum(
            "model",
            None,
            list(presets.MODELS),
            "The architecture to start from (resnet_noBN/configs/presets.py): paper (Table 1), "
            "quarter (its widths / 4: the CPU long runs), small (1 block per stage: tests); "
            "default: the experiment's. The model flags given on the command line override it.",
        )
    define_flags(base.network, exclude=DERIVED[launcher])
    define_flags(base.data)
    define_flags(base.recipe)
    flags.DEFINE_bool(
        "scale_lr",
        False,
        f"Linear scaling rule: multiply --learning_rate by --batch_size / "
        f"{base.recipe.batch_size} (the paper's batch), for a larger global batch. "
        "--train_steps and step --lr_boundaries are not rescaled.",
    )
    define_flags(RuntimeConfig)


def from_flags(launcher: str) -> RunConfig:
    """The run the command line describes: --experiment's (or the run --config records), each
    flag given replacing its value (--model its network preset), --scale_lr applied; InputError
    for a bad value."""
    if FLAGS.config:
        base = replayed(FLAGS.config, launcher)
    else:
        try:
            exp = experiments.named(FLAGS.experiment, launcher)
        except ValueError as e:
            raise InputError(str(e)) from None
        base = build(exp, FLAGS["model"].value if launcher == "cifar" else None)
    data = config_from_flags(type(base.data), base=base.data)
    network = base.network
    if launcher == "cifar":
        network = dataclasses.replace(network, num_classes=cifar_data.num_classes(data.dataset))
    derived = {
        name: getattr(network, name) for name in DERIVED[launcher] if _is_field(network, name)
    }
    network = config_from_flags(type(network), base=network, **derived)
    recipe = config_from_flags(type(base.recipe), base=base.recipe)
    if FLAGS.scale_lr:
        recipe = dataclasses.replace(
            recipe, learning_rate=recipe.learning_rate * recipe.batch_size / base.recipe.batch_size
        )
    runtime = config_from_flags(RuntimeConfig, base=base.runtime)
    return validated_run(RunConfig(network, data, recipe, runtime, base.experiment))


def replayed(path: str, launcher: str) -> RunConfig:
    """The run the ``config.json`` at ``path`` records (:func:`from_record`), its seed the one
    it ran with, for ``launch/<launcher>.py`` to train again; InputError (one line) for a file
    that is no run's record, one of the other launcher, or --experiment / --model beside it
    (the record is the whole run: its network's flags change it)."""
    given = [
        f"--{name}" for name in ("experiment", "model") if name in FLAGS and FLAGS[name].present
    ]
    if given:
        raise InputError(
            f"--config replays the run {path} records; {' and '.join(given)} cannot change it: "
            "give the network's, data's, recipe's or runtime's own flags instead"
        )
    try:
        with open(path, encoding="utf-8") as f:
            saved = json.load(f)
        if not isinstance(saved, dict):
            raise ValueError("not a JSON object")
    except (OSError, ValueError) as e:
        why = e.strerror if isinstance(e, OSError) else e
        raise InputError(
            f"--config {path} cannot be read ({why}); give a run's config.json"
        ) from None
    run = from_record(saved)
    if run.launcher != launcher:
        raise InputError(
            f"--config {path} records a run of launch/{run.launcher}.py; replay it there"
        )
    seed = run.runtime.seed if run.runtime.seed is not None else saved.get(record.SEED_KEY)
    return dataclasses.replace(run, runtime=dataclasses.replace(run.runtime, seed=seed))


def _is_field(config, name: str) -> bool:
    return name in {f.name for f in dataclasses.fields(config)}


# ------------------------------------------------------------------------------ config.json
def from_record(saved: dict) -> RunConfig:
    """The run a ``config.json`` of any version records (lists back to tuples; a field an older
    record lacks takes today's default, as for a resume; the precision from its runtime, or from
    its recipe where older runs kept it). InputError where it is no run's record."""
    network_section = record.section(saved, "network")
    launcher = "imagenet" if "stage_units" in network_section else "cifar"
    network_cls, data_cls, recipe_cls = CLASSES[launcher]
    recipe = _fields(recipe_cls, record.section(saved, "recipe"))
    runtime_section = {**saved.get(record.RUNTIME_KEY, {})}
    precision = runtime_section.get("precision") or record.section(saved, "recipe").get("precision")
    runtime = _fields(RuntimeConfig, {**runtime_section, "precision": precision or "float32"})
    try:
        data = data_cls(**_fields(data_cls, record.section(saved, "data")))
        network = network_cls(**_fields(network_cls, network_section))
        run = RunConfig(
            network,
            data,
            recipe_cls(**recipe),
            RuntimeConfig(**runtime),
            saved.get("experiment"),
        )
    except TypeError as e:
        raise InputError(f"config.json records no run this version reads ({e})") from None
    return run


def _fields(cls, section: dict) -> dict:
    """The keys of ``section`` that are fields of ``cls`` (a derived field kept only where it is
    one of ``cls``'s init arguments), lists as tuples."""
    types = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls) if f.init}
    return {
        key: tuple(value) if isinstance(value, list) and "tuple" in str(types[key]) else value
        for key, value in section.items()
        if key in names
    }


def resumed_seed(run: RunConfig, model_dir: str | None) -> int | None:
    """The seed ``run`` takes: its own; else, resuming, the one ``model_dir``'s config.json
    recorded (so a rerun continues the same data order); else None (drawn at random)."""
    if run.runtime.seed is not None or model_dir is None:
        return run.runtime.seed
    return record.read_config(model_dir).get(record.SEED_KEY)


def resumed(run: RunConfig, model_dir: str) -> RunConfig:
    """``run`` as it resumes the run ``model_dir`` holds: where its learning-rate drops are
    fractions and no --schedule_steps is given, they stay fractions of the length the run
    started with (its ``schedule_steps``, or ``train_steps``), so a longer --train_steps
    extends the run at its last rate, as a drop at a fixed step always did. Unchanged for a new
    folder."""
    saved = record.read_config(model_dir)
    if not saved or run.recipe.schedule_steps or not run.recipe.relative():
        return run
    before = record.section(saved, "recipe")
    length = before.get("schedule_steps") or before.get("train_steps")
    if not length or length == run.recipe.train_steps:
        return run
    return run.changed("recipe", schedule_steps=length)


def checked_record(
    run: RunConfig, model_dir: str, backend: str, seed: int, host: dict | None = None
) -> dict:
    """``record_of(run, ...)``, refused (InputError, naming each field) where ``model_dir`` holds a
    run this one cannot resume. A key an older config.json lacks stands for today's default
    where it is a switch added since: the network's fields, the recipe's loss and label
    smoothing, the data's CIFAR-100 layout and JPEG quality (the optimizer: Keras' momentum,
    ``record.section``)."""
    saved = record_of(run, backend, seed, host)
    defaults = type(run.recipe)()
    absent = {
        "network": dataclasses.asdict(type(run.network)()),
        "recipe": {k: getattr(defaults, k) for k in ("loss", "label_smoothing")},
        "data": {k: v for k, v in dataclasses.asdict(type(run.data)()).items()},
    }
    record.check_resumable(model_dir, saved, absent, FREE_ON_RESUME)
    return saved
