"""Identifier and timestamp minting for the fake Slack workspace.

Slack message timestamps (``ts``) are strings like ``"1700000000.000100"``: seconds and microseconds. They are
unique per channel and, in this fake, strictly increasing across the whole workspace, so that ordering by
``ts`` is ordering by arrival. Object ids (channels, users, views, files, ...) are a letter prefix plus a
counter.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["IdMint", "TsClock", "format_ts", "parse_ts"]

_MICROS = 1_000_000


def format_ts(micros: int) -> str:
    """``1700000000000100`` → ``"1700000000.000100"``."""
    return f"{micros // _MICROS}.{micros % _MICROS:06d}"


def parse_ts(ts: str) -> int:
    """``"1700000000.000100"`` → ``1700000000000100`` (microseconds); ``ValueError`` when malformed."""
    seconds, _, fraction = ts.partition(".")
    if not seconds.isdigit() or (fraction and not fraction.isdigit()):
        raise ValueError(f"not a Slack ts: {ts!r}")
    return int(seconds) * _MICROS + int(fraction.ljust(6, "0")[:6] or "0")


class TsClock:
    """Mints strictly increasing message timestamps.

    By default follows the wall clock (bumped by 1 µs when two calls land in the same microsecond). With
    ``start`` it is deterministic: ``start``, then ``step_micros`` later each call.

    >>> clock = TsClock(start=1_700_000_000.0)
    >>> clock.next(), clock.next()
    ('1700000000.000100', '1700000000.000200')
    """

    def __init__(
        self,
        *,
        start: float | None = None,
        step_micros: int = 100,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self._deterministic = start is not None
        self._last = int(start * _MICROS) if start is not None else 0
        self._step = step_micros
        self._wall = wall

    def next(self) -> str:
        if self._deterministic:
            self._last += self._step
        else:
            self._last = max(int(self._wall() * _MICROS), self._last + 1)
        return format_ts(self._last)

    def now(self) -> float:
        """Seconds since the epoch as this clock sees them (for ``event_time`` and ``created`` fields)."""
        return self._last / _MICROS if self._deterministic else self._wall()

    def to_dict(self) -> dict[str, Any]:
        """The clock's position: a clock restored from it never mints a ts at or before one it minted."""
        return {"deterministic": self._deterministic, "last": self._last, "step_micros": self._step}

    def load_dict(self, data: Mapping[str, Any]) -> None:
        """Take the position of :meth:`to_dict`; ``ValueError`` when ``data`` is not one."""
        deterministic, last, step = data.get("deterministic"), data.get("last"), data.get("step_micros")
        if not (isinstance(deterministic, bool) and isinstance(last, int) and isinstance(step, int)):
            raise ValueError(f"not a TsClock state: {dict(data)!r}")
        if not _is_int(last) or not _is_int(step) or last < 0 or step < 1:
            raise ValueError(f"not a TsClock state: {dict(data)!r}")
        self._deterministic, self._last, self._step = deterministic, last, step


class IdMint:
    """Mints Slack-looking ids: ``mint("C")`` → ``"C0A0001"``; ``token()`` → a random url-safe string."""

    def __init__(self) -> None:
        self._counters: dict[str, int] = {}  # prefix -> the last number minted

    def mint(self, prefix: str) -> str:
        number = self._counters.get(prefix, 0) + 1
        self._counters[prefix] = number
        return f"{prefix}0A{number:04d}"

    def to_dict(self) -> dict[str, int]:
        """The last number minted per prefix: a mint restored from it never repeats an id."""
        return dict(self._counters)

    def load_dict(self, data: Mapping[str, Any]) -> None:
        """Take the counters of :meth:`to_dict`; ``ValueError`` when ``data`` is not one."""
        if not all(isinstance(k, str) and _is_int(v) and v >= 0 for k, v in data.items()):
            raise ValueError(f"not IdMint counters: {dict(data)!r}")
        self._counters = dict(data)

    @staticmethod
    def token(nbytes: int = 12) -> str:
        return secrets.token_hex(nbytes)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
