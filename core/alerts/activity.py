"""The grouping window's inputs for the alert router: when each open incident last saw an alert, and which
incidents each service's alerts went to lately (caches in front of the index and the logs; a restart rebuilds
them, ``AlertRouter.warm``).

``target(service)`` is where a new fingerprint on ``service`` goes: the open incident on that service with the most
recent alert, if that alert is within ``grouping_window_minutes``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta

from decklog.core.alerts.caches import Recent
from decklog.core.clock import Clock, parse_iso
from decklog.core.state import ScopeState
from decklog.core.store.ports import IndexPort, LogStore


class Activity:
    def __init__(
        self,
        store: LogStore,
        index: IndexPort,
        clock: Clock,
        window: timedelta,
        *,
        open_incident: Callable[[str], Awaitable[ScopeState | None]],
    ) -> None:
        self.store = store
        self.index = index
        self.clock = clock
        self.window = window
        self.open_incident = open_incident
        self._last: Recent[str, datetime] = Recent()  # incident → its last alert (or declaration) time
        self._by_service: Recent[str, tuple[str, ...]] = Recent(2_000)  # service → incidents routed to lately

    async def target(self, service: str) -> str | None:
        """The open incident on ``service`` with the most recent alert activity, if within the grouping window."""
        if not service or self.window.total_seconds() <= 0:
            return None
        known = list(reversed(self._by_service.get(service) or ()))
        rows = await self.index.list_scopes(kind="incident", service=service, open_only=True, limit=20)
        now = self.clock.now()
        best: tuple[datetime, str] | None = None
        for scope in dict.fromkeys([*known, *(r.id for r in rows)]):
            state = await self.open_incident(scope)
            if state is None or service not in state.services:
                continue
            last = await self.last(state)
            if now - last <= self.window and (best is None or last > best[0]):
                best = (last, scope)
        return best[1] if best else None

    async def last(self, state: ScopeState) -> datetime:
        """When the incident last saw an alert (or was declared): cached, else read from its log."""
        cached = self._last.get(state.scope)
        if cached is not None:
            return cached
        when = parse_iso(state.created_at) if state.created_at else self.clock.now()
        last_seq = max((a.last_seq for a in state.alerts.values()), default=0)
        if last_seq:
            entries = await self.store.read_seqs(state.scope, [last_seq])
            if entries:
                when = max(when, entries[0].at)
        self._last.put(state.scope, when)
        return when

    def remember(self, scope: str, service: str, at: datetime) -> None:
        previous = self._last.get(scope)
        self._last.put(scope, at if previous is None else max(previous, at))
        if service:
            known = tuple(s for s in self._by_service.get(service) or () if s != scope)
            self._by_service.put(service, (*known[-7:], scope))

    def forget(self, scope: str) -> None:
        self._last.pop(scope)
