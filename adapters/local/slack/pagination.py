"""Cursor pagination and ``oldest``/``latest`` windows, as ``conversations.history``/``.replies``/``.list``.

Cursors are opaque base64 strings like Slack's (``bmV4dF90czoxNzAw...`` = ``next_ts:1700...``). ``oldest``
and ``latest`` are exclusive unless ``inclusive`` is set. The last page has ``next_cursor: ""``.
"""

from __future__ import annotations

import base64
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from .errors import SlackError
from .ids import parse_ts
from .model import Message
from .wire import Args

__all__ = ["Page", "page_messages", "page_offset"]

T = TypeVar("T")


@dataclass(frozen=True)
class Page:
    items: list[Any]
    has_more: bool
    next_cursor: str

    def metadata(self) -> dict[str, Any]:
        return {"next_cursor": self.next_cursor}


def _encode(prefix: str, value: str) -> str:
    return base64.b64encode(f"{prefix}:{value}".encode()).decode()


def _decode(cursor: str, prefix: str) -> str:
    try:
        text = base64.b64decode(cursor.encode(), validate=True).decode()
    except (ValueError, UnicodeDecodeError) as exc:
        raise SlackError("invalid_cursor") from exc
    head, _, value = text.partition(":")
    if head != prefix or not value:
        raise SlackError("invalid_cursor")
    return value


def _limit(args: Args, default: int, maximum: int) -> int:
    limit = args.number("limit", default)
    return default if limit <= 0 else min(limit, maximum)


def _bound(args: Args, name: str) -> int | None:
    value = args.text(name)
    if value is None:
        return None
    try:
        return parse_ts(value)
    except ValueError as exc:
        raise SlackError("invalid_ts_" + name) from exc


def page_messages(messages: Sequence[Message], args: Args, *, newest_first: bool) -> Page:
    """Applies ``oldest``/``latest``/``inclusive``/``limit``/``cursor`` to ``messages`` (oldest first)."""
    oldest, latest, inclusive = _bound(args, "oldest"), _bound(args, "latest"), args.flag("inclusive")

    def in_window(message: Message) -> bool:
        ts = parse_ts(message.ts)
        if oldest is not None and (ts < oldest or (ts == oldest and not inclusive)):
            return False
        return latest is None or ts < latest or (ts == latest and inclusive)

    window = [m for m in messages if in_window(m)]
    if newest_first:
        window.reverse()
    cursor = args.text("cursor")
    if cursor:
        start = parse_ts(_decode(cursor, "next_ts"))
        window = [m for m in window if (parse_ts(m.ts) <= start if newest_first else parse_ts(m.ts) >= start)]
    limit = _limit(args, 100, 999)
    page, rest = window[:limit], window[limit:]
    return Page(items=page, has_more=bool(rest), next_cursor=_encode("next_ts", rest[0].ts) if rest else "")


def page_offset(items: Sequence[T], args: Args, *, default_limit: int = 100) -> Page:
    """Offset pagination for lists that are not time-ordered (channels)."""
    cursor = args.text("cursor")
    start = 0
    if cursor:
        value = _decode(cursor, "offset")
        if not value.isdigit():
            raise SlackError("invalid_cursor")
        start = int(value)
    limit = _limit(args, default_limit, 1000)
    page = list(items[start : start + limit])
    more = start + limit < len(items)
    return Page(items=page, has_more=more, next_cursor=_encode("offset", str(start + limit)) if more else "")
