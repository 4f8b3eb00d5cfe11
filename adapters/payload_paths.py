"""Where a field is in an untrusted payload, as a user would find it (``alerts[2].labels.severity``), and how a
wrong value is shown in an error message. Shared by ``adapters.payload_fields`` and ``adapters.payload_times``."""

from __future__ import annotations

import re
from collections.abc import Mapping

_IDENT = re.compile(r"[A-Za-z_$][A-Za-z0-9_\-$]*")


def child(path: str, key: object) -> str:
    """``path`` + ``.key`` (or ``["odd key"]`` when the key is not a plain name)."""
    name = str(key)
    if _IDENT.fullmatch(name):
        return f"{path}.{name}" if path else name
    quoted = '"' + utf8_safe(name[:60]).replace("\\", "\\\\").replace('"', '\\"') + '"'
    return f"{path}[{quoted}]"


def item(path: str, index: int) -> str:
    return f"{path}[{index}]"


def json_type(value: object) -> str:
    """The JSON name of a value's type, for error messages."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list | tuple):
        return "array"
    if isinstance(value, Mapping):
        return "object"
    return type(value).__name__


def show(value: str, limit: int = 40) -> str:
    """A short, safe rendering of a bad value for an error message."""
    text = value if len(value) <= limit else value[: limit - 1] + "…"
    return repr(clean(text, limit + 1))


def utf8_safe(text: str) -> str:
    """``text`` with characters UTF-8 cannot encode (lone surrogates, from ``\\udXXX`` escapes) replaced by ``?``."""
    if text.isascii():
        return text
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "replace").decode("utf-8")
    return text


def clean(text: str, limit: int) -> str:
    """Trim, replace unencodable characters (lone surrogates), cap at ``limit`` characters with ``…``."""
    text = utf8_safe(text.strip())
    if len(text) > limit:
        text = text[: limit - 1].rstrip() + "…"
    return text
