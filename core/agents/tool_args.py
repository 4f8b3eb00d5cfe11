"""Reading a tool's input: each reader checks one argument and raises ``ToolInputError`` with a message that says
how to call the tool correctly (core/agents/tools.py turns it into an ``error`` result the model reads)."""

from __future__ import annotations

import json
from typing import Any

from decklog.core.entries import Entry
from decklog.core.views import brief, clip


class ToolInputError(Exception):
    """A tool input the model must correct (the message says how)."""


def text_arg(args: dict[str, Any], key: str, *, required: bool = False) -> str:
    value = args.get(key)
    if value is None or value == "":
        if required:
            raise ToolInputError(f"`{key}` is required")
        return ""
    if not isinstance(value, str):
        raise ToolInputError(f"`{key}` must be a string, got {type(value).__name__}")
    return value.strip()


def int_arg(args: dict[str, Any], key: str, *, default: int, low: int, high: int) -> int:
    value = args.get(key, default)
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise ToolInputError(f"`{key}` must be an integer between {low} and {high}, got {value!r}")
    return value


def num_arg(args: dict[str, Any], key: str, *, default: float, low: float, high: float) -> float:
    value = args.get(key, default)
    if not isinstance(value, int | float) or isinstance(value, bool) or not low <= value <= high:
        raise ToolInputError(f"`{key}` must be a number between {low:g} and {high:g}, got {value!r}")
    return float(value)


def short_input(args: Any) -> Any:
    text = json.dumps(args, ensure_ascii=False, default=str)
    return args if len(text) <= 300 else clip(text, 300)


def full_entry(entry: Entry) -> dict[str, Any]:
    out = brief(entry, limit=400)
    payload = entry.payload.model_dump(mode="json")
    payload.pop("raw", None)
    text = json.dumps(payload, ensure_ascii=False, default=str)
    out["payload"] = payload if len(text) <= 1500 else {"truncated": clip(text, 1500)}
    return out
