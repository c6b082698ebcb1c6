"""Building frozen config dataclasses from plain dicts (YAML, JSON) with errors that name the key.

One function, ``from_dict``, serves the library's configs and the pipeline's params reader:
unknown keys are rejected with the closest valid name, values are type-checked against the
dataclass annotations (an int is accepted where a float is expected; a bool is never an int),
nested dataclasses recurse with a dotted path in the message.
"""

from __future__ import annotations

import dataclasses
import difflib
import types
import typing
from collections.abc import Mapping
from typing import Any, TypeVar

T = TypeVar("T")


class ConfigError(ValueError):
    """A config value or key is wrong; the message names the key and the fix."""


def _describe(tp: Any) -> str:
    return getattr(tp, "__name__", None) or str(tp).replace("typing.", "")


def _coerce(value: Any, tp: Any, key: str) -> Any:
    """Return ``value`` checked against annotation ``tp`` (converted where lossless)."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(tp)
        if value is None and type(None) in args:
            return None
        errors = []
        for arg in (a for a in args if a is not type(None)):
            try:
                return _coerce(value, arg, key)
            except ConfigError as err:
                errors.append(str(err))
        raise ConfigError(errors[0] if len(errors) == 1 else f"{key}: {value!r} is not a {_describe(tp)}")
    if origin is typing.Literal:
        choices = typing.get_args(tp)
        if value not in choices:
            raise ConfigError(f"{key}: {value!r} is not one of {list(choices)}")
        return value
    if origin in (tuple, list):
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{key}: expected a list, got {type(value).__name__} {value!r}")
        (item_tp, *rest) = typing.get_args(tp) or (Any,)
        items = [_coerce(v, item_tp, f"{key}[{i}]") for i, v in enumerate(value)]
        return tuple(items) if origin is tuple else items
    if origin is dict:
        if not isinstance(value, Mapping):
            raise ConfigError(f"{key}: expected a mapping, got {type(value).__name__} {value!r}")
        _, val_tp = typing.get_args(tp) or (str, Any)
        return {str(k): _coerce(v, val_tp, f"{key}.{k}") for k, v in value.items()}
    if dataclasses.is_dataclass(tp):
        if isinstance(value, tp):
            return value
        if not isinstance(value, Mapping):
            raise ConfigError(f"{key}: expected a section (mapping), got {type(value).__name__} {value!r}")
        return from_dict(tp, value, where=key)
    if tp is Any:
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{key}: expected a number, got {type(value).__name__} {value!r}")
        return float(value)
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{key}: expected an integer, got {type(value).__name__} {value!r}")
        return value
    if tp in (str, bool):
        if type(value) is not tp:
            raise ConfigError(f"{key}: expected {_describe(tp)}, got {type(value).__name__} {value!r}")
        return value
    raise TypeError(f"unsupported annotation {tp!r} for {key}")  # a bug in our dataclass, not user input


def check_types(obj: Any, where: str = "") -> None:
    """Raise ConfigError if a field of dataclass ``obj`` does not match its annotation."""
    hints = typing.get_type_hints(type(obj))
    for field in dataclasses.fields(obj):
        key = f"{where}.{field.name}" if where else field.name
        _coerce(getattr(obj, field.name), hints[field.name], key)


def check_choice(value: str, choices: Mapping[str, Any] | typing.Iterable[str], key: str) -> None:
    """Raise ConfigError unless ``value`` names one of ``choices`` (a dispatch dict or names)."""
    names = list(choices)
    if value not in names:
        raise ConfigError(f"{key}: {value!r} is not one of {names}")


def from_dict(cls: type[T], data: Mapping[str, Any], where: str = "") -> T:
    """Build dataclass ``cls`` from ``data``; unknown keys and wrong types raise ConfigError.

    ``where`` prefixes key names in messages (e.g. "model" gives "model.hidden_size").
    Missing keys take the dataclass defaults; a missing key without default is an error.
    """
    if not isinstance(data, Mapping):
        raise ConfigError(f"{where or cls.__name__}: expected a mapping, got {type(data).__name__}")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    prefix = f"{where}." if where else ""
    for key in data:
        if key not in fields:
            close = difflib.get_close_matches(str(key), fields, n=1)
            hint = f"; did you mean '{prefix}{close[0]}'?" if close else ""
            raise ConfigError(f"unknown key '{prefix}{key}'{hint} (valid keys: {', '.join(fields)})")
    kwargs = {}
    for name, field in fields.items():
        if name in data:
            kwargs[name] = _coerce(data[name], hints[name], prefix + name)
        elif field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING:
            raise ConfigError(f"missing key '{prefix}{name}' ({_describe(hints[name])})")
    try:
        return cls(**kwargs)
    except ConfigError as err:
        if where and not str(err).startswith(prefix):
            raise ConfigError(f"{prefix}{err}") from None
        raise


def to_dict(obj: Any) -> dict[str, Any]:
    """A dataclass as plain nested dicts/lists (tuples become lists), for YAML/JSON."""

    def plain(v: Any) -> Any:
        if isinstance(v, (list, tuple)):
            return [plain(x) for x in v]
        if isinstance(v, dict):
            return {k: plain(x) for k, x in v.items()}
        return v

    return {k: plain(v) for k, v in dataclasses.asdict(obj).items()}
