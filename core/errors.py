"""The error hierarchy of decklog's core.

Receivers map these to user-facing answers: ``InvalidInput`` → 400 / an ephemeral usage message / CLI exit 2,
``NotFound`` → 404, ``Conflict`` → 409, ``Forbidden`` → 403. Anything else is a bug and is logged with a
correlation id.
"""

from __future__ import annotations


class DecklogError(Exception):
    """Base class for every error core raises on purpose."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class InvalidInput(DecklogError):
    """The caller sent something malformed. ``field`` names the offending field where there is one."""

    def __init__(self, message: str, *, field: str = "") -> None:
        super().__init__(f"{field}: {message}" if field else message)
        self.field = field


class NotFound(DecklogError):
    """A scope, entry, obligation, proposal or run does not exist."""


class Conflict(DecklogError):
    """The scope changed under the caller (compare-and-set failed) or the request contradicts its state."""


class StaleFence(Conflict):
    """A write carried a fencing token older than the obligation's current one."""

    def __init__(self, message: str, *, fence: int, current: int) -> None:
        super().__init__(message)
        self.fence = fence
        self.current = current


class Forbidden(DecklogError):
    """The actor may not do this (approve, self-approve an R3 action, act on a denied R4 action)."""


class StorageError(DecklogError):
    """The log could not be read or written (disk full, corrupt file)."""
