"""The flags of the probe settings, generated from the `Options` fields (userturn/core/options.py): `--NAME` with
`dest` the field's name, its type and bounds from the annotation (a bad value is a usage error naming the flag), a
`bool` as a switch, a `Literal` as choices, the description as help with what an unset flag means, and the `Flag`
annotation's placeholder and group. A new option is its declaration there; only the options whose flag is spelled
otherwise are written out in `cli/probe.py` (`SPELLED_OTHERWISE`)."""

from __future__ import annotations

import argparse
import types
import typing
from typing import Any, Literal

from pydantic.fields import FieldInfo

from userturn.cli.argtypes import bounded
from userturn.core.options import Flag, Options, ProbeOptions

# options whose flag differs from `--NAME VALUE` (read back into `Options` by `cli.probe.flag_layer`)
SPELLED_OTHERWISE = ("temperatures", "enable_thinking", "chat_template_kwargs", "scorer")


def flag_of(name: str) -> Flag:
    """The option's `Flag` annotation (the defaults where it has none)."""
    return next((m for m in Options.model_fields[name].metadata if isinstance(m, Flag)), Flag())


def _value_type(annotation: Any) -> tuple[Any, list[Any]]:
    """(the value's type without None, its constraints: pydantic's `Ge`, `Gt`, `Le` metadata)."""
    args = [a for a in typing.get_args(annotation) if a is not type(None)] \
        if typing.get_origin(annotation) in (typing.Union, types.UnionType) else [annotation]
    kind = args[0]
    constraints: list[Any] = []
    if typing.get_origin(kind) is typing.Annotated:
        kind, *extras = typing.get_args(kind)
        for extra in extras:
            constraints += extra.metadata if isinstance(extra, FieldInfo) else [extra]
    return kind, constraints


def _bound(constraints: list[Any], name: str) -> float | None:
    return next((getattr(c, name) for c in constraints if getattr(c, name, None) is not None), None)


def unset_words(name: str) -> str:
    """What an unset flag means: `the manifest's`, then the default (`ProbeOptions`) or the `Flag`'s words."""
    flag, default = flag_of(name), ProbeOptions.model_fields[name].default
    if flag.unset is not None:
        return f"default: the manifest's, else {flag.unset}"
    if default is None:
        return "default: the manifest's"
    shown = "off" if default is False else f"{default:g}" if isinstance(default, float) else str(default)
    return f"default: the manifest's, else {shown}"


def option_flag(name: str) -> tuple[str, dict[str, Any]]:
    """The flag of option `name` and its `add_argument` keywords."""
    field = Options.model_fields[name]
    kind, constraints = _value_type(field.annotation)
    flag = flag_of(name)
    kwargs: dict[str, Any] = {"dest": name, "default": None,
                              "help": f"{field.description} ({unset_words(name)})"}
    if kind is bool:
        kwargs["action"] = "store_true"
    elif typing.get_origin(kind) is Literal:
        kwargs["choices"] = list(typing.get_args(kind))
    elif kind in (int, float):
        kwargs["type"] = bounded(kind, ge=_bound(constraints, "ge"), gt=_bound(constraints, "gt"),
                                 le=_bound(constraints, "le"))
    if flag.metavar is not None:
        kwargs["metavar"] = flag.metavar
    return "--" + name.replace("_", "-"), kwargs


def add_option_flags(groups: dict[str, argparse._ArgumentGroup]) -> None:
    """Every option's flag (but `SPELLED_OTHERWISE` and `Flag(flag=False)`), each in its `Flag.group`."""
    for name in Options.names():
        if name in SPELLED_OTHERWISE or not flag_of(name).flag:
            continue
        flag, kwargs = option_flag(name)
        groups[flag_of(name).group].add_argument(flag, **kwargs)
