"""The store's ports: narrow Protocols that callers type against, and the values that cross them.

A caller asks for the narrowest port it uses: ``EntryLog`` (append with compare-and-set, idempotency keys and
decide-callables; reads; verify), ``Outbox`` (the delivery cursor rows), ``SenderMemos`` (what a sender
remembers), ``CommitFeed`` (hear about commits). ``LogStore`` is all of them plus ``close``: what a backend
implements and what the composition root holds. ``IndexPort`` is the index's port (core/index.py implements it).
Backends: ``SqliteLogStore`` (core/store/log_store.py, the embedded default) and ``MemoryLogStore``
(core/store/memory.py); tests/store_contract.py runs against each. Nothing here names a database.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from core.entries import Entry, NewEntry
from core.ids import ScopeId
from core.state import ScopeState

if TYPE_CHECKING:
    from core.index import ScopeRow, SearchHit

Decide = Callable[[ScopeState], Sequence[NewEntry]]
D = TypeVar("D", bound=Decide)
Listener = Callable[[str, tuple[Entry, ...]], None]
ScopeRef = ScopeId | str


@dataclass(frozen=True)
class AppendResult:
    """What an append did: the entries (the originals, for a duplicate) and the state after it."""

    entries: tuple[Entry, ...]
    state: ScopeState
    duplicate: bool = False

    @property
    def last_seq(self) -> int:
        return self.entries[-1].seq if self.entries else self.state.version


@dataclass(frozen=True)
class OutboxItem:
    topic: str
    entry: Entry
    attempts: int
    next_attempt_at: float


@dataclass(frozen=True)
class ParkedItem:
    scope: str
    topic: str
    seq: int
    kind: str
    attempts: int
    error: str
    parked_at: float


@dataclass(frozen=True)
class OutboxSummary:
    scope: str
    pending: dict[str, int]
    parked: dict[str, int]


@dataclass(frozen=True)
class VerifyReport:
    scope: str
    ok: bool
    entries: int
    first_bad_seq: int | None = None
    reason: str = ""
    keyed: bool = False  # the scope's chain is an HMAC (DECKLOG_LOG_KEY, core/store/chain.py)


class EntryLog(Protocol):
    """The scope logs. Scope ids are ``ScopeId`` or their ``kind/name`` text."""

    topics: tuple[str, ...]

    async def append(
        self,
        scope: ScopeRef,
        entries: Sequence[NewEntry] | Decide,
        *,
        expected_version: int | None = None,
        idempotency_key: str | None = None,
        create: bool = False,
    ) -> AppendResult: ...

    async def read(
        self, scope: ScopeRef, *, after: int = 0, limit: int | None = None, kinds: Sequence[str] = ()
    ) -> list[Entry]: ...

    async def read_seqs(self, scope: ScopeRef, seqs: Sequence[int]) -> list[Entry]: ...

    async def read_last(self, scope: ScopeRef, *, limit: int, kinds: Sequence[str] = ()) -> list[Entry]: ...

    async def get_state(self, scope: ScopeRef) -> ScopeState: ...

    async def exists(self, scope: ScopeRef) -> bool: ...

    def holds(self, scope: ScopeRef) -> bool:
        """Whether the store holds anything under this id (a cheap, synchronous check; ids are never reused)."""
        ...

    async def scope_ids(self) -> list[ScopeId]: ...

    async def verify(self, scope: ScopeRef) -> VerifyReport: ...


class Outbox(Protocol):
    """One row per (topic, entry) until its sender has it; parked rows wait for an operator."""

    topics: tuple[str, ...]

    async def outbox_pending(self, scope: ScopeRef, topic: str, *, limit: int = 100) -> list[OutboxItem]: ...

    async def outbox_done(self, scope: ScopeRef, topic: str, seqs: Sequence[int]) -> None: ...

    async def outbox_failed(
        self, scope: ScopeRef, topic: str, seq: int, *, attempts: int, next_attempt_at: float, error: str
    ) -> None: ...

    async def outbox_park(self, scope: ScopeRef, topic: str, seq: int, *, attempts: int, error: str) -> None: ...

    async def outbox_summary(self, scope: ScopeRef) -> OutboxSummary: ...

    async def outbox_parked(self, scope: ScopeRef) -> list[ParkedItem]: ...

    async def outbox_retry_parked(self, scope: ScopeRef, topic: str | None = None) -> int: ...


class SenderMemos(Protocol):
    """What a sender durably remembers per scope (e.g. the Slack ``ts`` an entry was posted as)."""

    async def memo_get(self, scope: ScopeRef, topic: str, key: str) -> dict[str, Any] | None: ...

    async def memo_put(self, scope: ScopeRef, topic: str, key: str, value: dict[str, Any]) -> None: ...

    async def memo_all(self, scope: ScopeRef, topic: str) -> dict[str, dict[str, Any]]: ...


class CommitFeed(Protocol):
    def subscribe(self, listener: Listener) -> None:
        """Call ``listener(scope, entries)`` after every committed append (the dispatcher's wake-up)."""
        ...


class LogStore(EntryLog, Outbox, SenderMemos, CommitFeed, Protocol):
    """Every port of one backend (what the composition root holds and closes)."""

    async def close(self) -> None: ...


class DeliveryStore(EntryLog, Outbox, SenderMemos, CommitFeed, Protocol):
    """What the dispatcher and senders use: the log, its outbox, memos and the commit feed (no ``close``)."""


class IndexPort(Protocol):
    """The index: listing, routing, alert fingerprints, inbound dedup, full-text search (core/index.py)."""

    async def open(self) -> None: ...

    async def close(self) -> None: ...

    async def reserve_scope(
        self,
        kind: str,
        base: str,
        *,
        exact: bool,
        on_disk: Callable[[str], bool] = ...,
        inbound_key: str | None = None,
    ) -> ScopeId: ...

    async def inbound_scope(self, key: str) -> str | None: ...

    async def claim_fingerprint(self, fingerprint: str, scope: str, service: str) -> None: ...

    async def add_route(self, key: str, scope: str) -> None: ...

    async def route(self, channel: str, thread_ts: str = "") -> str | None: ...

    async def open_scope_for_fingerprint(self, fingerprint: str) -> str | None: ...

    async def get(self, scope: str) -> ScopeRow | None: ...

    async def list_scopes(
        self,
        *,
        kind: str | None = None,
        status: str | None = None,
        severity: int | None = None,
        text: str | None = None,
        open_only: bool = False,
        service: str | None = None,
        updated_since: str | None = None,
        limit: int | None = 500,
    ) -> list[ScopeRow]: ...

    async def unresolved_incidents(self, *, limit: int = 2000) -> list[str]: ...

    async def changes_on(
        self, services: Sequence[str], since: datetime, until: datetime | None = None
    ) -> list[tuple[ScopeRow, datetime]]: ...

    async def search(self, text: str, *, limit: int = 20, exclude_scope: str | None = None) -> list[SearchHit]: ...

    async def position(self, scope: str, subscriber: str = ...) -> int: ...

    async def subscribe(self, scope: str, subscriber: str, position: int = 0) -> None: ...

    async def subscribers(self, scope: str) -> dict[str, int]: ...

    async def apply(self, state: ScopeState, entries: Sequence[Entry]) -> None: ...

    async def rebuild(self, items: Sequence[tuple[ScopeState, Sequence[Entry]]]) -> None: ...

    async def counts(self) -> dict[str, int]: ...


#: The most entries an append may carry (or a quick decide may be built for) to be staged on the SQLite store's
#: event-loop thread (decision 133).
QUICK_ENTRIES = 16


def quick(decide: D) -> D:
    """Mark ``decide`` as quick: pure, never blocking, and deciding a few entries (at most ``QUICK_ENTRIES``).
    The SQLite store may then run it on the event loop's thread, inside a batch whose statements run there too
    (decision 133). An unmarked decide runs on a worker thread."""
    decide.quick = True  # type: ignore[attr-defined]
    return decide


def is_quick(entries: Sequence[NewEntry] | Decide) -> bool:
    """A list of at most ``QUICK_ENTRIES`` entries, or a decide marked with ``quick``."""
    if callable(entries):
        return getattr(entries, "quick", False) is True
    return len(entries) <= QUICK_ENTRIES


def notify_listeners(listeners: Sequence[Listener], scope: str, entries: tuple[Entry, ...]) -> None:
    """Tell every commit-feed listener; the append has committed, so a failing listener is logged, never raised."""
    for listener in listeners:
        try:
            listener(scope, entries)
        except Exception:
            logging.getLogger("core.store").exception(
                "a log listener failed on %s (the append itself committed)", scope
            )
