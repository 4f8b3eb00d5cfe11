"""Time as a dependency: core never calls ``datetime.now`` directly, so tests and the demo can steer it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Protocol


class Clock(Protocol):
    def now(self) -> datetime: ...


class SystemClock:
    """Wall-clock time, always timezone-aware UTC."""

    def now(self) -> datetime:
        return datetime.now(UTC)


class ManualClock:
    """A clock tests move by hand: ``clock.advance(seconds=30)``."""

    def __init__(self, start: datetime | None = None) -> None:
        self._now = start or datetime(2026, 9, 19, 3, 12, tzinfo=UTC)

    def now(self) -> datetime:
        return self._now

    def advance(self, **delta: float) -> datetime:
        self._now += timedelta(**delta)
        return self._now


def iso(at: datetime) -> str:
    """ISO 8601 in UTC with microseconds and a ``Z``: the one format decklog writes."""
    if at.tzinfo is UTC and at.year >= 1000:  # every append formats a few: isoformat is a third faster than strftime
        return at.isoformat(timespec="microseconds")[:26] + "Z"
    return at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_iso(text: str) -> datetime:
    value = datetime.fromisoformat(text.replace("Z", "+00:00"))
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value.astimezone(UTC)
