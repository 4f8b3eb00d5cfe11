"""The alert application service: each normalised alert goes to exactly one place in the log.

Routing of one alert (``AlertRouter.receive``), in order:

1. its fingerprint has an open incident → the observation is appended there (a repeat, a resolve, an ack);
2. else a resolve or an acknowledgement is ``ignored`` (it opens nothing);
3. else a firing alert on a service whose open incident saw an alert (or was declared) within the grouping
   window ``joins`` that incident;
4. else, while its source is over the per-minute rate limit, it joins (or opens) the source's alert-storm
   incident, so that a storm gives Slack one header and summaries instead of a header per alert;
5. else a ``new`` incident is declared (title from the alert, ``via="alert"``, severity mapped) with the alert
   observation in the same transaction.

Appends are ``decide`` callables (``rules.append_alert``): "is this still an open incident?" and "is this the
all-clear?" are answered inside the append's transaction. Known fingerprints take a lock-free fast path; anything
that may declare or join runs under in-process locks on the fingerprint and the service, and claims the
fingerprint in the index before the lock is released, so concurrent first alerts open one incident.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from functools import partial
from typing import Any, Generic, TypeVar

from core.alerts import rules
from core.alerts.locks import KeyedLocks
from core.alerts.rules import AlertOutcome, AlertPolicy
from core.clock import Clock, parse_iso
from core.entries import Actor, NewEntry
from core.errors import NotFound
from core.index import Index
from core.service import ScopeService
from core.signals import AlertSignal
from core.state import ScopeState
from core.store import LogStore

log = logging.getLogger(__name__)

WARM_INCIDENTS = 2000  # unresolved incidents read at start-up (newest first)

K = TypeVar("K")
V = TypeVar("V")


class Recent(Generic[K, V]):
    """A bounded mapping that forgets the least recently written keys (caches in front of the index)."""

    def __init__(self, size: int = 10_000) -> None:
        self.size = size
        self._items: OrderedDict[K, V] = OrderedDict()

    def get(self, key: K) -> V | None:
        return self._items.get(key)

    def put(self, key: K, value: V) -> None:
        self._items[key] = value
        self._items.move_to_end(key)
        while len(self._items) > self.size:
            self._items.popitem(last=False)

    def pop(self, key: K) -> None:
        self._items.pop(key, None)

    def __len__(self) -> int:
        return len(self._items)


class RateLimiter:
    """Per source: is this alert beyond ``limit`` in the last 60 s? Keeps only the last ``limit`` arrival times."""

    def __init__(self, limit: int, *, window: float = 60.0, monotonic: Callable[[], float] = time.monotonic) -> None:
        self.limit = limit
        self.window = window
        self._monotonic = monotonic
        self._arrivals: dict[str, deque[float]] = {}

    def hit(self, source: str) -> bool:
        """Count one alert; True when it is over the limit (``limit`` others arrived within the window)."""
        now = self._monotonic()
        arrivals = self._arrivals.setdefault(source, deque(maxlen=self.limit))
        over = len(arrivals) == self.limit and now - arrivals[0] < self.window
        arrivals.append(now)
        return over

    def seed(self, source: str, *, age: float) -> None:
        """Count ``source`` as over the limit, as if ``limit`` alerts had arrived ``age`` seconds ago (a restart
        during a storm: the storm incident's last alert says the storm was going on)."""
        if self.limit > 0 and 0 <= age < self.window:
            self._arrivals[source] = deque([self._monotonic() - age] * self.limit, maxlen=self.limit)


class AlertRouter:
    """``await router.receive(source, signals, raw=...)`` → one ``AlertOutcome`` per signal, in order."""

    def __init__(
        self,
        store: LogStore,
        index: Index,
        service: ScopeService,
        clock: Clock,
        policy: AlertPolicy,
        *,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.store = store
        self.index = index
        self.service = service
        self.clock = clock
        self.policy = policy
        self.rate = RateLimiter(policy.rate_limit_per_minute, monotonic=monotonic)
        self._locks = KeyedLocks()
        self._fingerprints: Recent[str, str] = Recent()  # fingerprint → the open incident it was routed to
        self._activity: Recent[str, datetime] = Recent()  # incident → its last alert (or declaration) time
        self._by_service: Recent[str, tuple[str, ...]] = Recent(2_000)  # service → incidents routed to lately
        self._storms: dict[str, str] = {}  # source → its current alert-storm incident
        self._warm: asyncio.Task[int] | None = None

    async def receive(
        self, source: str, signals: Sequence[AlertSignal], *, raw: Mapping[str, Any] | None = None
    ) -> list[AlertOutcome]:
        """Route each signal. ``raw`` (the capped vendor payload) is kept on the first observation the request
        appends."""
        await self.warm()
        outcomes: list[AlertOutcome] = []
        evidence = dict(raw or {})
        for signal in signals:
            over_limit = self.rate.hit(source)
            outcome = await self._route(signal, evidence, over_limit)
            if outcome.appended:
                evidence = {}
            outcomes.append(outcome)
        return outcomes

    # -- state derived from the index and the scope states ----------------------------------------------------

    async def warm(self) -> int:
        """Derive the caches from stored state, once per router (at start-up; ``receive`` waits for it).

        Every unresolved incident the index knows — also one only *reserved* there because the process that
        declared it died before the index saw the declaration — is read from its log: its fingerprints route to
        it, it is a grouping candidate for its services with its last alert time, and an alert-storm incident is
        its source's storm again, with the source counted as over the rate limit while the storm's last alert is
        less than a minute old. Returns how many open incidents it found.
        """
        task = self._warm
        if task is None or (task.done() and (task.cancelled() or task.exception() is not None)):
            task = self._warm = asyncio.ensure_future(self._derive())  # a failed attempt is tried again
        return await asyncio.shield(task)

    async def _derive(self) -> int:
        found = 0
        for scope in reversed(await self.index.unresolved_incidents(limit=WARM_INCIDENTS)):  # oldest first
            state = await self._open_incident(scope)
            if state is None:
                continue
            found += 1
            for fingerprint in state.alerts:
                self._fingerprints.put(fingerprint, scope)
            last = await self._last_activity(state)
            for service in state.services:
                self._remember(scope, service, last)
            source = rules.storm_source(state.title)
            if source:
                self._storms[source] = scope
                self.rate.seed(source, age=(self.clock.now() - last).total_seconds())
        if found:
            log.info("alerts: routing state derived from %d open incident(s)", found)
        return found

    # -- routing ----------------------------------------------------------------------------------------------

    async def _route(self, signal: AlertSignal, raw: dict[str, Any], over_limit: bool) -> AlertOutcome:
        severity = rules.map_severity(self.policy, signal.source, signal.source_severity)
        key = rules.notification_key(signal)
        fingerprint, service = signal.fingerprint, signal.service

        def entry(*, opened: bool = False) -> NewEntry:
            observation = rules.alert_observation(signal, severity=severity, raw=raw, opened_incident=opened)
            return NewEntry.make("observation", Actor.system(signal.source), observation, idempotency_key=key)

        cached = self._fingerprints.get(fingerprint)
        if cached is not None:  # the fast path: no lock, the append itself checks that the incident is open
            done = await self._append(cached, signal, entry(), severity, joined=False)
            if done is not None:
                return done
        async with self._locks.hold(f"fp:{fingerprint}", f"svc:{service}"):
            scope = self._fingerprints.get(fingerprint) or await self.index.open_scope_for_fingerprint(fingerprint)
            if scope is not None and scope != cached:
                done = await self._append(scope, signal, entry(), severity, joined=False)
                if done is not None:
                    return done
            if signal.status != "firing":
                return AlertOutcome(
                    fingerprint,
                    signal.status,
                    "ignored",
                    severity=severity,
                    reason=f"no open incident has this alert; a {signal.status} alert opens none",
                )
            target = await self._grouping_target(service)
            storm = False
            if target is None and over_limit:
                target, storm = await self._storm_incident(signal.source), True
            if target is not None:
                done = await self._append(target, signal, entry(), severity, joined=True, storm=storm)
                if done is not None:
                    if done.appended:
                        await self.index.claim_fingerprint(fingerprint, target, service)
                    return done
            return await self._declare(signal, entry(opened=not over_limit), severity, key, storm=over_limit)

    async def _append(
        self,
        scope: str,
        signal: AlertSignal,
        observation: NewEntry,
        severity: int,
        *,
        joined: bool,
        storm: bool = False,
    ) -> AlertOutcome | None:
        """Append to ``scope`` if it is an open incident; None (and forget it) when it is not."""
        try:
            result = await self.store.append(scope, partial(rules.append_alert, observation=observation))
        except NotFound:
            result = None
        if result is not None and result.duplicate:
            seq = result.entries[0].seq if result.entries else 0
            return AlertOutcome(signal.fingerprint, signal.status, "duplicate", scope, seq, severity)
        if result is None or not result.entries:
            self._forget(scope, signal.fingerprint)
            return None
        appended = result.entries[0]
        self._fingerprints.put(signal.fingerprint, scope)
        self._remember(scope, signal.service, appended.at)
        if joined:
            outcome: rules.Outcome = "joined"
        elif signal.status in ("resolved", "acknowledged"):
            outcome = "resolved" if signal.status == "resolved" else "acknowledged"
        else:
            outcome = "repeat"
        return AlertOutcome(
            signal.fingerprint,
            signal.status,
            outcome,
            scope,
            appended.seq,
            severity,
            storm=storm,
            suggested_resolve=any(e.kind == "suggestion" for e in result.entries),
        )

    async def _declare(
        self, signal: AlertSignal, observation: NewEntry, severity: int, key: str | None, *, storm: bool
    ) -> AlertOutcome:
        source, service = signal.source, signal.service
        title = rules.storm_title(source, self.policy.rate_limit_per_minute) if storm else rules.incident_title(signal)
        result = await self.service.declare(
            title=title,
            actor=Actor.system(source),
            severity=severity,
            services=[service] if service else [],
            summary=signal.summary,
            via="alert",
            idempotency_key=key,
            then=[observation],
        )
        scope = result.state.scope
        if result.duplicate:
            seq = result.entries[-1].seq if result.entries else 0
            return AlertOutcome(signal.fingerprint, signal.status, "duplicate", scope, seq, severity)
        await self.index.claim_fingerprint(signal.fingerprint, scope, service)
        self._fingerprints.put(signal.fingerprint, scope)
        self._remember(scope, service, result.entries[-1].at)
        if storm:
            self._storms[source] = scope
        return AlertOutcome(signal.fingerprint, signal.status, "new", scope, result.entries[-1].seq, severity, storm)

    # -- where a new fingerprint goes -------------------------------------------------------------------------

    async def _grouping_target(self, service: str) -> str | None:
        """The open incident on ``service`` with the most recent alert activity, if within the grouping window."""
        window = self.policy.grouping_window
        if not service or window.total_seconds() <= 0:
            return None
        known = list(reversed(self._by_service.get(service) or ()))
        rows = await self.index.list_scopes(kind="incident", service=service, open_only=True, limit=20)
        now = self.clock.now()
        best: tuple[datetime, str] | None = None
        for scope in dict.fromkeys([*known, *(r.id for r in rows)]):
            state = await self._open_incident(scope)
            if state is None or service not in state.services:
                continue
            last = await self._last_activity(state)
            if now - last <= window and (best is None or last > best[0]):
                best = (last, scope)
        return best[1] if best else None

    async def _storm_incident(self, source: str) -> str | None:
        """The source's open alert-storm incident (this process's, else one the index knows), if any."""
        scope = self._storms.get(source)
        if scope is not None and await self._open_incident(scope) is not None:
            return scope
        self._storms.pop(source, None)
        for row in await self.index.list_scopes(kind="incident", open_only=True, text="alert storm", limit=50):
            if rules.is_storm_title(row.title, source) and await self._open_incident(row.id) is not None:
                self._storms[source] = row.id
                return row.id
        return None

    async def _open_incident(self, scope: str) -> ScopeState | None:
        try:
            state = await self.store.get_state(scope)
        except NotFound:
            return None
        if state.kind != "incident" or not state.is_open or state.version == 0:
            self._forget(scope)
            return None
        return state

    async def _last_activity(self, state: ScopeState) -> datetime:
        """When the incident last saw an alert (or was declared): cached, else read from its log."""
        cached = self._activity.get(state.scope)
        if cached is not None:
            return cached
        when = parse_iso(state.created_at) if state.created_at else self.clock.now()
        last_seq = max((a.last_seq for a in state.alerts.values()), default=0)
        if last_seq:
            entries = await self.store.read_seqs(state.scope, [last_seq])
            if entries:
                when = max(when, entries[0].at)
        self._activity.put(state.scope, when)
        return when

    def _remember(self, scope: str, service: str, at: datetime) -> None:
        previous = self._activity.get(scope)
        self._activity.put(scope, at if previous is None else max(previous, at))
        if service:
            known = tuple(s for s in self._by_service.get(service) or () if s != scope)
            self._by_service.put(service, (*known[-7:], scope))

    def _forget(self, scope: str, fingerprint: str = "") -> None:
        """``scope`` is no longer an open incident: drop it from the caches (the index has the truth)."""
        self._activity.pop(scope)
        if fingerprint and self._fingerprints.get(fingerprint) == scope:
            self._fingerprints.pop(fingerprint)
        for source, storm in list(self._storms.items()):
            if storm == scope:
                del self._storms[source]
