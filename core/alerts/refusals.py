"""Notifications refused because they are too big, recorded where people see them.

A sender whose notification is over ``[alerts] max_payload_bytes`` gets a 413 naming the limit; it records nothing
of the notification, and Alertmanager then sends it again every few seconds for ever. So that someone knows, the
refusal is recorded too: the first one opens the source's "notifications refused" incident (its header in the alerts
channel, through the outbox like everything in Slack), with an observation saying which source, how big, and what to
change in the sender (Alertmanager's ``max_alerts``). The retries are coalesced from stored state: while that
incident is open, a refusal less than ``REFUSED_EVERY`` after the last one recorded appends nothing; a later one
appends one more observation. The incident is claimed in the index under ``refused_key(source)`` (beside the storm
incident's claim), and found again there by any replica or after a restart.
"""

from __future__ import annotations

from datetime import timedelta

from decklog.core.alerts.batch import source_name
from decklog.core.clock import Clock
from decklog.core.entries import Actor, NewEntry, Observation
from decklog.core.errors import NotFound
from decklog.core.service import ScopeService
from decklog.core.store.ports import IndexPort, LogStore, RouteLocks

REFUSED_EVERY = timedelta(minutes=10)  # at most one refusal entry per source in this long
RECENT_READ = 50  # the incident's last observations looked at for the last refusal recorded
#: What to change in each sender to make its notifications smaller.
ADVICE = {
    "alertmanager": (
        "set `max_alerts` in Alertmanager's `webhook_configs` entry for decklog (e.g. `max_alerts: 1000`): decklog "
        "then gets the first 1000 alerts of each group, counts the others, and a resolved group still resolves all "
        "of them"
    ),
    "grafana": (
        "set *Max alerts* in the Grafana webhook contact point for decklog (e.g. 1000): decklog then gets the first "
        "1000 alerts of each group and counts the others"
    ),
}
DEFAULT_ADVICE = "make the sender's notifications smaller (fewer alerts per notification), or raise the limit"


def refused_key(source: str) -> str:
    """The index key under which a source's open "notifications refused" incident is claimed."""
    return f"refused:{source}"


def megabytes(size: int) -> str:
    return f"{size / 1_000_000:.1f} MB" if size >= 100_000 else f"{size:,} bytes"


def refused_title(source: str) -> str:
    return f"{source_name(source)} notifications refused: over decklog's size limit"


def refusal(source: str, size: int | None, limit: int) -> Observation:
    """The observation a refused notification becomes. ``size`` None = not declared (it was over the limit when
    reading stopped)."""
    how_big = f"of {megabytes(size)}" if size is not None else f"of more than {megabytes(limit)}"
    advice = ADVICE.get(source, DEFAULT_ADVICE)
    text = (
        f"Refused a notification {how_big} from {source_name(source)}: decklog takes at most {megabytes(limit)} "
        f"(`[alerts] max_payload_bytes` = {limit}). Nothing of it was recorded, and the sender will send it again. "
        f"To fix: {advice}."
    )
    data = {"refused": {"source": source, "bytes": size, "limit": limit}}
    return Observation(text=text, source=source, data=data)


class Refusals:
    def __init__(
        self,
        store: LogStore,
        index: IndexPort,
        service: ScopeService,
        clock: Clock,
        locks: RouteLocks,
        *,
        severity: int,
        every: timedelta = REFUSED_EVERY,
    ) -> None:
        self.store = store
        self.index = index
        self.service = service
        self.clock = clock
        self.locks = locks
        self.severity = severity
        self.every = every
        self.recorded = 0  # refusals this process appended (the coalesced ones are not)

    async def record(self, source: str, size: int | None, limit: int) -> str:
        """Record a refused notification from ``source`` (coalesced: see the module); the incident's scope."""
        key = refused_key(source)
        async with self.locks.hold(key):
            scope = await self._open(key)
            observation = NewEntry.make("observation", Actor.system(source), refusal(source, size, limit))
            if scope is not None:
                if await self._recent(scope):
                    return scope
                try:
                    await self.store.append(scope, [observation])
                    self.recorded += 1
                    return scope
                except NotFound:
                    pass
            bucket = int(self.clock.now().timestamp() // max(1.0, self.every.total_seconds()))
            result = await self.service.declare(
                title=refused_title(source),
                actor=Actor.system(source),
                severity=self.severity,
                summary=f"To fix: {ADVICE.get(source, DEFAULT_ADVICE)}.",
                via="alert",
                idempotency_key=f"{key}:{bucket}",
                then=[observation],
            )
            scope = result.state.scope
            await self.index.claim_fingerprint(key, scope, "")
            if not result.duplicate:
                self.recorded += 1
            return scope

    async def _open(self, key: str) -> str | None:
        scope = await self.index.open_scope_for_fingerprint(key)
        if scope is None:
            return None
        try:
            state = await self.store.get_state(scope)
        except NotFound:
            return None
        return scope if state.kind == "incident" and state.is_open else None

    async def _recent(self, scope: str) -> bool:
        """Did the incident record a refusal less than ``every`` ago?"""
        now = self.clock.now()
        for entry in reversed(await self.store.read_last(scope, limit=RECENT_READ, kinds=("observation",))):
            p = entry.payload
            if isinstance(p, Observation) and "refused" in p.data:
                return now - entry.at < self.every
        return False
