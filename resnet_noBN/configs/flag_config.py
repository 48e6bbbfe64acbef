"""Command-line flags generated from a config dataclass, and the config built back from them.

A field is written once, in its dataclass: its name is the flag's, its default the flag's, and
``dataclasses.field(metadata={"help": ..., "choices": ...})`` gives the help text and, for a
string, the allowed values (an enum flag). ``tuple[int, ...]`` and ``tuple[str, ...]`` fields
are comma-separated string flags. A field that is no flag (one derived from others, or fixed by
the launcher) is excluded where the flags are defined, and given to :func:`config_from_flags`
instead::

    define_flags(ModelConfig, exclude=("num_classes", "stage_strides"))
    ...
    cfg = config_from_flags(ModelConfig, num_classes=10)
    # a preset in place of the defaults: the flags given on the command line override it
    cfg = config_from_flags(ModelConfig, base=ModelConfig.preset("small"), num_classes=10)
"""

from __future__ import annotations

import dataclasses
import typing

from absl import flags

from resnet_noBN.configs.errors import InputError

flags.disclaim_key_flags()  # the flags defined here belong to the module calling define_flags

FLAGS = flags.FLAGS
_FLAG_FIELDS: dict[type, tuple[str, ...]] = {}  # config class -> the fields that are flags


def int_list(flag_name: str, text: str) -> tuple[int, ...]:
    """'30000,50000' -> (30000, 50000), or InputError naming the flag."""
    try:
        return tuple(int(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise InputError(f"--{flag_name} must be comma-separated integers, got '{text}'") from None


def flag_value(name: str, value, kind):
    """A flag's value as its field's type: a comma-separated string as a tuple of ints or of
    strings; anything else as it is."""
    if kind == tuple[int, ...]:
        return int_list(name, value)
    if kind == tuple[str, ...]:
        return tuple(v.strip() for v in value.split(",") if v.strip())
    return value


def check_choices(cfg) -> None:
    """ValueError (one line, naming the flag) where a field of the config dataclass ``cfg`` that
    declares ``choices`` holds another value: the choices are declared once, on the field."""
    for field in dataclasses.fields(cfg):
        choices = field.metadata.get("choices")
        if choices and getattr(cfg, field.name) not in choices:
            raise ValueError(
                f"--{field.name}={getattr(cfg, field.name)} is unknown; choose one of "
                f"{', '.join(choices)}"
            )


def check_at_least(cfg, names: tuple[str, ...], low: int, words: str) -> None:
    """ValueError "--NAME must be WORDS, got VALUE" (one line, naming the flag) for the first
    integer field of ``names`` in the config dataclass ``cfg`` below ``low``."""
    for name in names:
        if getattr(cfg, name) < low:
            raise ValueError(f"--{name} must be {words}, got {getattr(cfg, name)}")


def validated(cfg):
    """``cfg`` after ``cfg.validate()``; its ValueError becomes an InputError."""
    try:
        cfg.validate()
    except ValueError as e:
        raise InputError(str(e)) from None
    return cfg


def define_flags(
    defaults, exclude: tuple[str, ...] = (), only: tuple[str, ...] | None = None
) -> None:
    """A flag for every field of the config dataclass ``defaults`` but those in ``exclude``
    (``only``: those fields alone; :func:`config_from_flags` gives the others their defaults).

    ``defaults``: the class (the flags' defaults are its fields' defaults) or an instance (its
    values: a launcher's recipe). The flags belong to the calling module (its ``--help``).
    """
    cls = defaults if isinstance(defaults, type) else type(defaults)
    instance = defaults() if isinstance(defaults, type) else defaults
    types = typing.get_type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls)]
    unknown = (set(exclude) | set(only or ())) - set(names)
    if unknown:
        raise ValueError(f"{cls.__name__} has no field(s) {', '.join(sorted(unknown))}")
    fields = [
        f
        for f in dataclasses.fields(cls)
        if f.name not in exclude and (only is None or f.name in only)
    ]
    for field in fields:
        if "help" not in field.metadata:
            raise ValueError(
                f"{cls.__name__}.{field.name} has no help: give it "
                'metadata={"help": ...} or exclude it from the flags'
            )
        _define(field.name, types[field.name], getattr(instance, field.name), field.metadata)
    _FLAG_FIELDS[cls] = tuple(f.name for f in fields)


def _define(name: str, kind, default, metadata) -> None:
    help_text, choices = metadata["help"], metadata.get("choices")
    optional = [arg for arg in typing.get_args(kind) if arg is not type(None)]
    if len(optional) == 1 and type(None) in typing.get_args(kind):  # int | None: default None
        kind = optional[0]
    if kind is bool:
        flags.DEFINE_bool(name, default, help_text)
    elif kind is int:
        flags.DEFINE_integer(name, default, help_text)
    elif kind is float:
        flags.DEFINE_float(name, default, help_text)
    elif kind is str and choices:
        flags.DEFINE_enum(name, default, list(choices), help_text)
    elif kind is str:
        flags.DEFINE_string(name, default, help_text)
    elif kind in (tuple[int, ...], tuple[str, ...]):
        flags.DEFINE_string(name, ",".join(map(str, default)), help_text)
    else:
        raise TypeError(f"--{name}: no flag for a field of type {kind}")


def add_argument(parser, cls, name: str) -> None:
    """The option ``--name`` of an ``argparse`` parser (a benchmark's) made from the field
    ``name`` of the config dataclass ``cls``, as :func:`define_flags` makes the absl flag: its
    default, help and choices written once, in the field."""
    import argparse

    field = {f.name: f for f in dataclasses.fields(cls)}[name]
    kind, default = typing.get_type_hints(cls)[name], getattr(cls(), name)
    if kind is bool:
        options = {"action": argparse.BooleanOptionalAction}
    else:
        options = {"type": kind, "choices": field.metadata.get("choices")}
    parser.add_argument(f"--{name}", default=default, help=field.metadata["help"], **options)


def config_from_flags(cls, base=None, **overrides):
    """The validated ``cls`` the flags of :func:`define_flags` describe, ``overrides`` (the
    fields that are no flags, or a value the launcher derives) replacing them; InputError for a
    bad value. ``base``: an instance of ``cls`` (a named preset) whose values stand in for the
    defaults of the flags not given on the command line."""
    if cls not in _FLAG_FIELDS:
        raise ValueError(f"define_flags({cls.__name__}) has not been called")
    types = typing.get_type_hints(cls)
    values = {}
    for name in _FLAG_FIELDS[cls]:
        if name in overrides:
            continue
        if base is not None and not FLAGS[name].present:
            values[name] = getattr(base, name)
        else:
            values[name] = flag_value(name, FLAGS[name].value, types[name])
    return validated(cls(**values, **overrides))
