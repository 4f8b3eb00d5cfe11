"""Plain-dict round trips of the fake workspace's records (``User``, ``Channel``, ``Message``, ...).

``record_to_dict`` gives JSON-ready data (bytes become ``{"base64": ...}``); ``record_from_dict`` rebuilds the
record and checks every field against its annotation (``str | None``, ``list[str]``, ``dict[str, list[str]]``,
``JSON``, ...), so that a damaged or foreign dict is a ``ValueError`` here rather than a broken workspace later.
No file I/O: where and when to keep the data is the caller's business.

>>> from .model import User
>>> user = User(id="U1", name="dana", real_name="Dana", team_id="T1")
>>> record_from_dict(User, record_to_dict(user)) == user
True
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
from collections.abc import Mapping
from typing import Any, TypeVar

__all__ = ["check_type", "record_from_dict", "record_to_dict"]

R = TypeVar("R")
_SCALARS: Mapping[str, tuple[type, ...]] = {"str": (str,), "bool": (bool,), "None": (type(None),)}


def record_to_dict(record: Any) -> dict[str, Any]:
    """A dataclass record as a JSON-ready dict (deep copy)."""
    data = dataclasses.asdict(record)
    for name, value in data.items():
        if isinstance(value, bytes):
            data[name] = {"base64": base64.b64encode(value).decode("ascii")}
    return data


def record_from_dict(cls: type[R], data: object) -> R:
    """The record ``cls`` rebuilt from :func:`record_to_dict`'s dict; ``ValueError`` naming the field at fault."""
    if not isinstance(data, Mapping):
        raise ValueError(f"a {cls.__name__} must be an object, not {type(data).__name__}")
    fields = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    unknown = sorted(set(data) - set(fields))
    if unknown:
        raise ValueError(f"unknown {cls.__name__} fields: {', '.join(map(str, unknown))}")
    values: dict[str, Any] = {}
    for name, field in fields.items():
        if name not in data:
            if field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING:
                raise ValueError(f"{cls.__name__}.{name} is missing")
            continue
        value = data[name]
        annotation = str(field.type)
        if "bytes" in annotation and isinstance(value, Mapping):
            value = _bytes(value, f"{cls.__name__}.{name}")
        check_type(value, annotation, f"{cls.__name__}.{name}")
        values[name] = value
    return cls(**values)


def check_type(value: object, annotation: str, where: str) -> None:
    """Check ``value`` against a simple annotation string; ``ValueError`` when it does not fit."""
    if not _fits(value, annotation.strip()):
        raise ValueError(f"{where} should be {annotation}, not {type(value).__name__}")


def _fits(value: object, annotation: str) -> bool:
    alternatives = _split(annotation, "|")
    if len(alternatives) > 1:
        return any(_fits(value, alt) for alt in alternatives)
    head, _, rest = annotation.partition("[")
    args = _split(rest[:-1], ",") if rest else []
    if head in _SCALARS:
        return isinstance(value, _SCALARS[head])
    if head == "int":
        return isinstance(value, int) and not isinstance(value, bool)
    if head == "float":
        return isinstance(value, int | float) and not isinstance(value, bool)
    if head == "bytes":
        return isinstance(value, bytes)
    if head == "Any":
        return True
    if head in ("JSON", "dict"):
        if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
            return False
        return len(args) != 2 or all(_fits(v, args[1]) for v in value.values())
    if head == "list":
        return isinstance(value, list) and (not args or all(_fits(v, args[0]) for v in value))
    raise ValueError(f"cannot check values against {annotation!r}")  # a model change this module must learn


def _split(text: str, sep: str) -> list[str]:
    """``text`` split on ``sep`` outside brackets, each part stripped."""
    parts, depth, start = [], 0, 0
    for i, char in enumerate(text):
        if char == "[":
            depth += 1
        elif char == "]":
            depth -= 1
        elif char == sep and depth == 0:
            parts.append(text[start:i].strip())
            start = i + 1
    parts.append(text[start:].strip())
    return parts


def _bytes(value: Mapping[str, Any], where: str) -> bytes:
    encoded = value.get("base64")
    if set(value) != {"base64"} or not isinstance(encoded, str):
        raise ValueError(f"{where} should be {{'base64': '...'}}")
    try:
        return base64.b64decode(encoded.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError):
        raise ValueError(f"{where} is not valid base64") from None
