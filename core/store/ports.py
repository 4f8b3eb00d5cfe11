"""Every port a storage backend provides, the values that cross them, and the factory that makes them.

A caller asks for the narrowest port it uses: ``EntryLog`` (append with compare-and-set, idempotency keys and
decide-callables; reads; verify), ``Outbox`` (the delivery rows), ``SenderMemos`` (what a sender remembers),
``CommitFeed`` (hear about commits); ``LogStore`` is all of them plus ``close``, ``DeliveryStore`` what the
dispatcher and the senders use. ``IndexPort`` is the derived index (listing, routing, fingerprints, inbound dedup,
search, milestones); ``Inbox`` holds requests from outside before they are acknowledged; ``ApiKeys`` the REST
API's tokens (hashes) and the first answers of its idempotent writes.

Some ports exist only where several processes share one database: ``CursorClaims`` (one drainer per (scope,
topic) outbox cursor, and the other replicas' commits), ``Leases`` (named leases on the database clock),
``RouteLocks`` (the alert router's keyed locks), ``RateCounter`` (alert arrivals per source), ``PaceSlots`` (Slack's
per-channel post slots) and ``DueTurns`` (agent turns due, claimed by one replica). A backend without them answers
``None`` from its factory, and the caller uses its in-process way (an asyncio lock, a limiter in memory, timers).

``StorageFactory`` is a backend's one factory (core/store/sqlite/factory.py, core/store/postgres/factory.py,
core/store/memory/factory.py); core/store/backend.py picks one from configuration. Nothing here names a database,
and nothing outside the factories asks which backend it runs on. tests/store_contract.py and the suites under
tests/contract/ run against every factory.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Collection, Coroutine, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, NamedTuple, Protocol, TypeVar

from decklog.core.alarm import Alarm
from decklog.core.clock import Clock
from decklog.core.entries import Entry, NewEntry
from decklog.core.ids import ScopeId
from decklog.core.state import ScopeState

Decide = Callable[[ScopeState], Sequence[NewEntry]]
D = TypeVar("D", bound=Decide)
Listener = Callable[[str, tuple[Entry, ...]], None]
ScopeRef = ScopeId | str

# -- the log ----------------------------------------------------------------------------------------------------------


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

    def topics_for(self, kind: str) -> tuple[str, ...]:
        """The topics an entry of ``kind`` gets a row in (every topic, less those that filter the kind out)."""
        ...

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


class DeliveryStore(EntryLog, Outbox, SenderMemos, CommitFeed, Protocol):
    """What the dispatcher and senders use: the log, its outbox, memos and the commit feed (no ``close``)."""


class LogStore(DeliveryStore, Protocol):
    """Every port of one backend's log (what the composition root holds and closes), and its counters."""

    appended_total: int  # entries appended by this process (``decklog_appends_total``)

    @property
    def open_files(self) -> int:
        """Scope resources held open right now (SQLite files, database connections checked out)."""
        ...

    def refill_spares(self) -> None:
        """Prepare what the next declarations need, in the background (SQLite's spare files; elsewhere nothing)."""
        ...

    async def sweep_candidates(self, topics: Collection[str]) -> tuple[list[ScopeId], float]:
        """The scopes a boot sweep must look at for rows waiting for ``topics`` (every scope that may have some,
        not all of history), and a time to hand back to ``sweep_checked``."""
        ...

    async def sweep_checked(self, topics: Collection[str], at: float, pending: Sequence[ScopeRef]) -> None:
        """The boot sweep begun at ``at`` checked the candidates: exactly ``pending`` had rows waiting."""
        ...

    async def close(self) -> None: ...


# -- the index ----------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ScopeRow:
    id: str
    kind: str
    title: str
    status: str
    severity: int | None
    services: tuple[str, ...]
    created_at: str
    updated_at: str
    resolved_at: str
    version: int
    thread_channel: str
    thread_ts: str
    permalink: str
    pending_approvals: int
    forked_from: str = ""
    changed_at: str = ""  # a change scope: the change's own time (core/changes/facts.py change_time)

    @property
    def change_time(self) -> str:
        """When a change scope's change happened: its reported time, else (an index written before it was kept)
        when decklog recorded it."""
        return self.changed_at or self.created_at

    @property
    def is_open(self) -> bool:
        """An incident (or change) people work on: not resolved, not only reserved, and not a fork."""
        return self.status not in ("resolved", "reserved") and not self.forked_from

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "kind": self.kind,
            "title": self.title,
            "status": self.status,
            "severity": self.severity,
            "services": list(self.services),
            "created_at": self.created_at,
            "updated_at": self.updated_at,
            "resolved_at": self.resolved_at or None,
            "version": self.version,
            "thread": {"channel": self.thread_channel, "ts": self.thread_ts, "permalink": self.permalink}
            if self.thread_channel
            else None,
            "pending_approvals": self.pending_approvals,
        }


@dataclass(frozen=True)
class SearchHit:
    scope: str
    seq: int
    kind: str
    snippet: str
    rank: float  # lower is better


class Milestones(NamedTuple):
    """One incident's row; ``tta`` / ``ttm`` / ``ttr``: seconds from its declaration (``None``: not reached) — ``tta``
    of a paged incident from its first on-call page to the first acknowledgement after it."""

    scope: str
    status: str
    severity: int | None
    services: tuple[str, ...]
    source: str
    tta: float | None
    ttm: float | None
    ttr: float | None


class IndexPort(Protocol):
    """The index: listing, routing, alert fingerprints, inbound dedup, full-text search, milestones. Derived from
    the logs (fed through the ``index`` outbox topic by core/index/sender.py) and rebuilt by ``decklog reindex``;
    the only writes that do not come from a log are reservations made before an append."""

    async def open(self) -> None: ...

    async def close(self) -> None: ...

    async def ping(self) -> None:
        """Run a write transaction that writes nothing (the health check: the index can be written)."""
        ...

    async def reserve_scope(
        self,
        kind: str,
        base: str,
        *,
        exact: bool,
        on_disk: Callable[[str], bool] = ...,
        inbound_key: str | None = None,
    ) -> ScopeId:
        """Reserve a never-used scope id: ``base``, else ``base-2``, ``base-3``… (``exact``: ``base`` or Conflict).
        ``on_disk(id)`` says whether the log store already holds an id; with ``inbound_key`` the inbound event is
        recorded against the id at once (and a retry of it gets the same id back)."""
        ...

    async def inbound_scope(self, key: str) -> str | None: ...

    async def claim_fingerprint(self, fingerprint: str, scope: str, service: str) -> None: ...

    async def add_route(self, key: str, scope: str) -> None: ...

    async def route(self, channel: str, thread_ts: str = "") -> str | None:
        """The scope a Slack thread (or a dedicated channel) belongs to."""
        ...

    async def open_scope_for_fingerprint(self, fingerprint: str) -> str | None: ...

    async def last_scope_for_fingerprint(self, fingerprint: str) -> str | None:
        """The scope that last claimed ``fingerprint``, open or resolved (an alert source's reopened incident)."""
        ...

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
        upkeep: bool = False,
        limit: int | None = 500,
        before: tuple[str, str] | None = None,
    ) -> list[ScopeRow]:
        """Newest first (``created_at`` descending, then id). ``before``: only the rows after the row
        ``(created_at, id)`` in that order — a cursor that holds while scopes are declared (they sort before it)."""
        ...

    async def unresolved_incidents(self, *, limit: int = 2000) -> list[str]: ...

    async def changes_on(
        self, services: Sequence[str], since: datetime, until: datetime | None = None
    ) -> list[tuple[ScopeRow, datetime]]:
        """Change scopes on any of ``services`` created in [``since``, ``until``], each once, newest first."""
        ...

    async def search(
        self,
        text: str,
        *,
        limit: int = 20,
        exclude_scope: str | None = None,
        scope_kind: str | None = None,
        kinds: Sequence[str] = (),
    ) -> list[SearchHit]:
        """Entries matching any word of ``text``, best first (lowest ``rank``); optionally only scopes of
        ``scope_kind`` and entries of ``kinds``."""
        ...

    async def titles(self, ids: Sequence[str]) -> dict[str, str]:
        """Scope id → title, for the given ids the index knows."""
        ...

    async def position(self, scope: str, subscriber: str = ...) -> int: ...

    async def subscribe(self, scope: str, subscriber: str, position: int = 0) -> None: ...

    async def subscribers(self, scope: str) -> dict[str, int]: ...

    async def apply(self, state: ScopeState, entries: Sequence[Entry]) -> None:
        """Apply a scope's entries (idempotent by seq) and its current state, in one transaction."""
        ...

    async def rebuild(
        self,
        items: Sequence[tuple[ScopeState, Sequence[Entry]]],
        *,
        fresh: bool = True,
        routes: Mapping[str, str] | None = None,
    ) -> None:
        """Replace the index with what the given scopes' logs say (``decklog reindex``). ``fresh=False`` adds
        these scopes to a rebuild begun with ``fresh=True`` (history is rebuilt in chunks, in bounded memory).
        ``routes`` (key → scope): routes no entry implies (the Slack sender's memos), in the same write."""
        ...

    async def counts(self) -> dict[str, int]: ...

    async def milestones(self, since: float | None) -> list[Milestones]:
        """Every incident declared at or after ``since`` (epoch seconds; all of them with ``None``), oldest first."""
        ...


# -- the inbox ----------------------------------------------------------------------------------------------------------

DONE_RETENTION_S = 24 * 3600.0  # Slack retries for minutes; a day of done keys is far more than any retry needs
#: How much of a parked request's error is kept (a traceback's last line, not the traceback).
ERROR_MAX = 1000


@dataclass(frozen=True)
class InboxItem:
    key: str
    source: str
    body: dict[str, Any]
    meta: dict[str, Any] = field(default_factory=dict)
    received_at: float = 0.0
    attempts: int = 0


@dataclass(frozen=True)
class ParkedRequest:
    """A request given up after its attempts: what it was, and the error of its last attempt."""

    key: str
    source: str
    body: dict[str, Any]
    received_at: float
    attempts: int
    parked_at: float
    error: str


@dataclass
class InboxStats:
    """Counters for /metrics: requests persisted, and the commits (fsyncs) that made them durable."""

    persisted: int = 0
    duplicates: int = 0
    fsyncs: int = 0


class Inbox(Protocol):
    """Requests from outside (Slack today) stored before they are acknowledged, processed after.

    A receiver puts the request under its idempotency key, answers the sender, then processes it; ``done`` marks it
    finished. What is still pending at boot is replayed, oldest first. A key that is already there (pending,
    parked, or done within the retention window) is refused by ``put``: a retry, or a duplicate delivered while the
    first one is still running, is processed once. The port knows nothing of Slack: ``source`` and ``meta`` are
    the adapter's. A request that still fails after its bounded attempts (a poison request) is ``park``-ed with its
    error: no longer pending, never replayed at boot; ``decklog doctor`` lists it and ``doctor --retry`` puts it
    back in the queue. Parked requests are kept until then (they are few, and they are the record).
    """

    stats: InboxStats

    async def put(self, *, key: str, source: str, body: dict[str, Any], meta: dict[str, Any]) -> bool:
        """Durably store a request (group-committed, ``synchronous=FULL``). False if ``key`` is already there."""
        ...

    async def attempt(self, *, key: str) -> int:
        """Count one more processing attempt of ``key``; returns the new count."""
        ...

    async def done(self, *, key: str) -> None:
        """The request's work finished (or was given up): it is kept only to refuse retries of its key."""
        ...

    async def park(self, *, key: str, error: str, attempts: int) -> None:
        """Give ``key`` up after ``attempts`` with ``error`` (at most ``ERROR_MAX`` characters kept): no longer
        pending, kept for ``decklog doctor``, still refusing retries of its key. Durable (it must not come back)."""
        ...

    async def pending(self) -> list[InboxItem]:
        """Requests not done and not parked yet, oldest first."""
        ...

    async def pending_count(self) -> int: ...

    async def parked(self) -> list[ParkedRequest]:
        """Every parked request, oldest first."""
        ...

    async def parked_count(self) -> int: ...

    async def retry_parked(self) -> int:
        """Put every parked request back in the queue with no attempts counted; returns how many. A running
        server replays them within seconds (bot/ops.py ``inbox-replay``, or the replicas' ``inbox-takeover``)."""
        ...

    async def prune(self, *, older_than_s: float = DONE_RETENTION_S) -> int:
        """Forget done requests finished more than ``older_than_s`` ago; returns how many."""
        ...

    async def close(self) -> None: ...


# -- the alert inbox -----------------------------------------------------------------------------------------------

#: How long a routed notification's receipt is kept (then ``GET /api/alerts/receipts/{id}`` answers 404).
RECEIPT_RETENTION_S = 7 * 24 * 3600.0


@dataclass(frozen=True)
class StoredNotification:
    """An alert notification as it arrived (``body``: the raw bytes), under its ``receipt``, not routed yet."""

    receipt: str
    source: str
    body: bytes
    accepted: int
    received_at: float
    attempts: int = 0


@dataclass(frozen=True)
class AlertReceipt:
    """What became of one stored notification: ``outcomes`` (one JSON object per alert, in order) once routed,
    None while it waits; ``error`` when routing gave it up after its attempts."""

    receipt: str
    source: str
    accepted: int
    received_at: float
    routed_at: float | None = None
    outcomes: list[dict[str, Any]] | None = None
    error: str | None = None


class AlertInbox(Protocol):
    """Alert notifications stored raw before they are acknowledged (202 with a receipt), routed after.

    ``put`` is durable when it returns (group-committed: concurrent notifications share one commit). Routing takes
    what is pending (``pending``: this process's own, and those of a replica whose lease ran out), and ``finish``
    records each notification's outcomes under its receipt, which ``receipt`` reads back. A notification whose
    routing keeps failing is finished with its ``error``: never replayed again, its receipt says why."""

    stats: InboxStats

    async def put(self, *, receipt: str, source: str, body: bytes, accepted: int) -> None:
        """Durably store a notification under ``receipt`` (a new, unique id)."""
        ...

    async def pending(self, *, limit: int = 1000) -> list[StoredNotification]:
        """Notifications not routed yet, oldest first: this process's (their leases renewed) and those of a process
        whose lease ran out (taken over now). At most ``limit``."""
        ...

    async def attempt(self, receipts: Sequence[str]) -> None:
        """Count one more routing attempt of each of ``receipts``."""
        ...

    async def finish(self, results: Sequence[AlertReceipt]) -> None:
        """Record what became of each notification (``outcomes`` or ``error``): no longer pending."""
        ...

    async def receipt(self, receipt: str) -> AlertReceipt | None:
        """The notification's receipt (outcomes None while it waits); None when unknown (or pruned)."""
        ...

    async def pending_count(self) -> int: ...

    async def prune(self, *, older_than_s: float = RECEIPT_RETENTION_S) -> int:
        """Forget receipts routed more than ``older_than_s`` ago; returns how many."""
        ...

    async def close(self) -> None: ...


# -- several processes on one database ------------------------------------------------------------------------------

RemoteCommit = Callable[[str, tuple[str, ...], bool], None]
"""``(scope, topics, drained)`` of a commit another process made; ``drained``: that process delivers it itself."""


@dataclass(frozen=True)
class CursorClaim:
    """A cursor taken. ``previous``: the replica that drained it last, when not the taker; ``died``: its lease
    ran out while it held the cursor (it died or stalled mid-delivery, so its last posts may lack memos and marks).
    """

    previous: str | None = None
    died: bool = False


class CursorClaims(Protocol):
    """Several drainers on one database's outbox: each (scope, topic) cursor is held by one at a time under a lease
    on the database clock (a dead holder's lease runs out), the other processes' commits are heard (a poll stays
    the safety net), and the scopes with rows waiting can be listed (a dead replica's deliveries are found there)."""

    async def take_cursor(
        self, scope: ScopeRef, topic: str, owner: str, *, lease_s: float = 30.0
    ) -> CursorClaim | None:
        """Take the (scope, topic) cursor for ``owner`` until the database clock passes ``lease_s`` from now: None
        while another owner holds an unexpired lease (or is taking it right now)."""
        ...

    async def renew_cursor(self, scope: ScopeRef, topic: str, owner: str, *, lease_s: float = 30.0) -> bool:
        """The holder extends its own lease (False once another owner took the cursor, or it was let go)."""
        ...

    async def release_cursor(self, scope: ScopeRef, topic: str, owner: str) -> None: ...

    async def outbox_pending_scopes(self) -> list[str]:
        """Scopes with rows waiting for delivery (any topic), whichever process committed them."""
        ...

    def hold_liveness(self, owner: str) -> str:
        """Make this process's death visible at once (a lock its connection holds); the owner name to drain
        under."""
        ...

    def alive_until(self, asked: float) -> float:
        """The last monotonic moment this process's liveness lets a delivery start under a lease asked for at
        ``asked`` (the backend's margin before its liveness deadline is already taken off)."""
        ...

    async def fence_dead_holders(self) -> list[tuple[str, str, float]]:
        """Cut the leases of holders found dead to a short grace: (scope, topic, seconds left) of each."""
        ...

    def on_remote_commit(self, callback: RemoteCommit) -> None:
        """``callback(scope, topics, drained)`` on this event loop for each commit another process makes."""
        ...


class Leases(Protocol):
    """Named leases on the shared database's clock: one holder at a time per name (periodic jobs, turn slots, the
    run-target gate); a holder that dies frees its lease when it runs out."""

    async def try_lease(self, name: str, owner: str, *, lease_s: float) -> bool:
        """Hold ``name`` for ``owner`` for ``lease_s`` seconds: True when it was free, expired or already
        ``owner``'s (renewed), False while another owner's lease runs."""
        ...

    async def release_lease(self, name: str, owner: str) -> None:
        """Give ``name`` up now, if ``owner`` still holds it."""
        ...


class RouteLocks(Protocol):
    """The alert router's routing locks across every process (``async with locks.hold("fp:abc", "svc:x")``): the
    same fingerprint posted to two replicas at once is routed by one of them at a time — the second finds the
    first's claim in the shared index and appends to its incident instead of opening another. In one process the
    router's own asyncio locks do this (core/alerts/locks.py)."""

    def hold(self, *keys: str) -> AbstractAsyncContextManager[None]:
        """Hold every key (taken in sorted order) for the body of the ``async with``."""
        ...


class RateCounter(Protocol):
    """The alert router's per-source arrivals counted across every process: each replica behind a load balancer
    sees only its share of a storm, so a limiter in memory would trip at replicas × the configured rate."""

    async def count(self, source: str, n: int, *, window: float) -> int:
        """Record ``n`` alerts from ``source`` now; return how many arrived within the last ``window`` seconds,
        these ``n`` included, on every replica."""
        ...


class PaceSlots(Protocol):
    """Slack's post slots per channel shared by every process, so posts to one channel are spaced by the interval
    whichever replica sends them."""

    async def reserve(self, channel: str, interval: float, floor: float = 0.0) -> float:
        """Take the next free slot of ``channel``: the seconds to wait for it (0 or more); ``floor`` pushes the
        slot back (a 429's ``Retry-After``) for every replica."""
        ...


RunTurn = Callable[[str, str], Awaitable[object]]
"""Run the scheduled turn of ``scope`` (``trigger``: debounce | first | max_wait | boot | takeover, or ``wake``:
a forced turn, run even when nothing new warrants one)."""

DueIn = Callable[[str], Awaitable[float | None]]
"""Seconds until the next turn of ``scope`` is due, from the log (None: nothing pending)."""

Spawn = Callable[[Coroutine[Any, Any, Any]], None]
"""Run a coroutine as a task the scheduler tracks (``idle``, ``stop``)."""

Answer = Callable[[str], Awaitable[object]]
"""Answer every unanswered question of ``scope`` (each once: the runtime answers a question's key once)."""


class DueTurns(Protocol):
    """Where a scope's next scheduled turn waits until it runs, across every process: one holder per scope at a
    time, on the database clock. The scheduler (core/agents/scheduler.py) still decides *when*, from the log; this
    keeps that time durable, hands each due scope to one runner, and re-arms it when entries were delivered while
    its turn ran. A reasoner's wake-up and the scope's questions share the holder (one turn at a time per scope).
    Without it (one process) the scheduler keeps its own timers on the ``Alarm``, re-armed from the log at boot."""

    async def want(self, scope: str, delay: float, trigger: str) -> None:
        """A turn of ``scope`` is wanted in ``delay`` seconds (a later call moves it: the trailing debounce),
        never later than the max wait after the first call since its last turn. While a turn of ``scope`` runs,
        the call is remembered and the scope re-armed, from the log, when the turn ends."""

    async def wake(self, scope: str, delay: float) -> None:
        """A reasoner asked for a forced turn of ``scope`` in ``delay`` seconds (replacing an earlier wake-up)."""

    async def ask(self, scope: str) -> None:
        """``scope`` has a question to answer now (the question itself is in the log)."""

    def start(self, run: RunTurn, due_in: DueIn, spawn: Spawn, answer: Answer | None = None) -> None:
        """Begin running due turns with ``run`` (``due_in`` re-arms a scope after its turn; ``answer`` answers
        its questions)."""

    async def stop(self) -> None:
        """Stop claiming; a claimed turn that has not finished is left to its lease (another replica runs it)."""

    async def held(self, scope: str) -> bool:
        """A replica holds ``scope``'s turn now, under a live lease (its progress reaction is not stale)."""


# -- API tokens and idempotent replies ----------------------------------------------------------------------------


@dataclass(frozen=True)
class ApiTokenRow:
    """One API token as stored: never the secret, only its sha256 (``digest``). ``scope``: read, write or admin;
    ``user``: the Slack user id it acts for ("" = nobody: its writes are the system's, and it cannot approve)."""

    name: str
    scope: str
    digest: str
    created_at: float
    user: str = ""
    revoked_at: float | None = None


@dataclass(frozen=True)
class StoredReply:
    """The first answer to an API write made under an ``Idempotency-Key`` (``key`` names the token too), and the
    sha256 of the request it answered (a replay with another request is refused)."""

    key: str
    request_hash: str
    status: int
    body: str


class ApiKeys(Protocol):
    """The REST API's own rows: its tokens (hashes only) and the replies its writes gave under an idempotency key.
    Neither is derived from the logs, so both live beside them, not in the (rebuildable) index."""

    async def token_add(self, row: ApiTokenRow) -> bool:
        """Store a new token; False when a token that is not revoked already has that name."""
        ...

    async def token_by_digest(self, digest: str) -> ApiTokenRow | None:
        """The token whose secret hashes to ``digest`` (revoked ones too: the caller refuses them)."""
        ...

    async def tokens(self) -> list[ApiTokenRow]:
        """Every token, oldest first (revoked ones too)."""
        ...

    async def token_revoke(self, name: str, *, at: float) -> bool:
        """Revoke the live token named ``name``; False when there is none."""
        ...

    async def reply_get(self, key: str) -> StoredReply | None: ...

    async def reply_put(self, reply: StoredReply) -> StoredReply:
        """Keep ``reply`` unless one is already stored under its key; returns the one stored (the first wins)."""
        ...

    async def close(self) -> None: ...


# -- the factory ----------------------------------------------------------------------------------------------------


class StorageFactory(Protocol):
    """One backend's parts on one storage (a data directory, a database): the one object a backend package
    exposes, made once from configuration (core/store/backend.py). Open the log store first: the other parts of a
    backend run on its connections and worker threads. Each part made is closed by whoever asked for it;
    ``close`` ends what the factory keeps for itself. A capability the backend lacks is ``None`` here."""

    name: str  # "sqlite", "postgresql", "memory"

    async def log_store(
        self,
        *,
        topics: Sequence[str] = ("index",),
        topic_kinds: Mapping[str, Collection[str]] | None = None,
        clock: Clock | None = None,
    ) -> LogStore:
        """A log store on this storage, opened (its schema made or checked; a newer schema is refused). Every
        store made shares the storage: a second one is a restart, or another process."""
        ...

    async def index(self) -> IndexPort:
        """The index, opened."""
        ...

    async def inbox(self) -> Inbox:
        """The inbox, opened (made when there is none yet)."""
        ...

    def inbox_exists(self) -> bool:
        """Whether there is an inbox already (False: nothing was ever stored in one, and none need be made to
        find that out)."""
        ...

    async def alert_inbox(self) -> AlertInbox:
        """The alert inbox, opened (made when there is none yet)."""
        ...

    def cursor_claims(self) -> CursorClaims | None: ...

    def leases(self) -> Leases | None: ...

    def route_locks(self) -> RouteLocks | None: ...

    def rate_counter(self) -> RateCounter | None: ...

    def pace_slots(self) -> PaceSlots | None: ...

    def due_turns(self, alarm: Alarm, owner: str, *, max_wait: float, lease_s: float, poll_s: float) -> DueTurns | None:
        """Due agent turns shared by the processes (``owner`` names this one; ``max_wait`` caps the debounce)."""
        ...

    async def api_keys(self) -> ApiKeys:
        """The REST API's tokens and idempotent replies, opened (made when there are none yet)."""
        ...

    async def health(self) -> dict[str, str]:
        """Checks of the storage itself beyond the index (a shared database: ``{"database": "writable"}``)."""
        ...

    async def close(self) -> None: ...


# -- helpers every backend uses ---------------------------------------------------------------------------------------

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
            logging.getLogger("decklog.core.store").exception(
                "a log listener failed on %s (the append itself committed)", scope
            )
