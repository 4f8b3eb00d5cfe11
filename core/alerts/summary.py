"""Alert summaries: what Slack shows of an incident's alerts instead of one message per alert.

The alert that opens an incident is in its header; every later alert observation (a new fingerprint joining, a
repeat, a resolve, an acknowledgement) is folded into at most one summary a minute per incident — an
``observation`` entry with ``source="decklog:alerts"`` and ``data={"summary": {...}}`` that the Slack renderer shows
as one line: "+37 alerts in the last minute: 2 new (…), 33 repeats, 2 resolved · 3 of 5 firing".

``AlertSummarizer`` arms a per-scope alarm when an unsummarised alert is appended; where it got to lives in the
scope's memo (topic ``alerts``) and in the summaries themselves, so a restart re-arms from the log. While alerts
keep coming, the gap between summaries doubles (two intervals after the first, then four, at most ``BACKOFF_MAX``):
a storm of a couple of minutes gives its incident a header and two summaries, not one a minute; the header's
counters (updated in place) stay live meanwhile.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import partial
from typing import Any

from decklog.core.alarm import Alarm
from decklog.core.alerts.caches import Recent
from decklog.core.alerts.rules import ALERTS_ACTOR, SUMMARY_SOURCE
from decklog.core.entries import Entry, NewEntry, Observation
from decklog.core.errors import NotFound
from decklog.core.state import ScopeState
from decklog.core.store.ports import LogStore

log = logging.getLogger(__name__)

MEMO_TOPIC = "alerts"
MEMO_KEY = "summary"
TITLES_SHOWN = 3
BACKOFF_MAX = 8  # at most this many intervals between two summaries of an incident that keeps alerting
HELD_PER_INCIDENT = 20_000  # alert observations kept in memory per incident between two summaries (then: read)
HELD_INCIDENTS = 500  # incidents whose alert observations are kept (the least recently alerting are forgotten)
#: A state read can be ahead of the listener: a batch is committed before its appends return to the loop and are
#: held. So a summary that finds some missing looks again after these waits (seconds) before it reads the log.
HELD_WAITS = (0.0, 0.005, 0.02)


@dataclass(frozen=True, slots=True)
class AlertItem:
    """What a summary needs of one alert observation."""

    seq: int
    at: datetime
    fingerprint: str
    status: str
    text: str
    opened: bool  # the observation that opened the incident: its header shows it, no summary mentions it

    @classmethod
    def of(cls, entry: Entry) -> AlertItem:
        p = entry.payload
        assert isinstance(p, Observation)
        return cls(entry.seq, entry.at, p.fingerprint, p.alert_status, p.text, bool(p.data.get("opened_incident")))


def is_alert(entry: Entry) -> bool:
    """An alert observation (as opposed to a summary, a change's evidence or a human's observation)."""
    p = entry.payload
    return isinstance(p, Observation) and bool(p.fingerprint) and p.source != SUMMARY_SOURCE


def summary_through(entry: Entry) -> int | None:
    """The last seq a summary entry covers, or None if ``entry`` is not a summary."""
    p = entry.payload
    if isinstance(p, Observation) and p.source == SUMMARY_SOURCE and isinstance(p.data.get("summary"), Mapping):
        through = p.data["summary"].get("through_seq")
        return int(through) if isinstance(through, int) else entry.seq
    return None


def summarise(alerts: Sequence[AlertItem], state: ScopeState, *, now: datetime) -> Observation | None:
    """One summary observation for ``alerts`` (alert observations, in seq order), or None when there are none.

    An alert is *new* when its observation is the first of its fingerprint in the scope, a *repeat* when it
    fires again; resolves and acknowledgements are counted apart. The counts of firing alerts come from ``state``.
    """
    if not alerts:
        return None
    new: list[str] = []
    resolved: list[str] = []
    acknowledged: list[str] = []
    repeats = 0
    for item in alerts:
        first = state.alerts.get(item.fingerprint)
        if item.status == "resolved":
            resolved.append(item.text)
        elif item.status == "acknowledged":
            acknowledged.append(item.text)
        elif first is not None and first.first_seq == item.seq:
            new.append(item.text)
        else:
            repeats += 1
    minutes = max(1, math.ceil((now - alerts[0].at).total_seconds() / 60 - 1e-9))
    period = "in the last minute" if minutes <= 1 else f"in the last {minutes} minutes"
    parts = [
        _titled(len(new), "new", new),
        f"{repeats} repeat{'s' if repeats != 1 else ''}" if repeats else "",
        _titled(len(resolved), "resolved", resolved),
        _titled(len(acknowledged), "acknowledged", acknowledged),
    ]
    n = len(alerts)
    firing = len(state.firing_alerts)
    text = f"+{n} alert{'s' if n != 1 else ''} {period}: " + ", ".join(x for x in parts if x)
    text += f" · {firing} of {len(state.alerts)} firing"
    counts: dict[str, Any] = {
        "alerts": n,
        "new": len(new),
        "repeats": repeats,
        "resolved": len(resolved),
        "acknowledged": len(acknowledged),
        "new_titles": _distinct(new)[:10],
        "resolved_titles": _distinct(resolved)[:10],
        "firing": firing,
        "total": len(state.alerts),
        "from_seq": alerts[0].seq,
        "through_seq": alerts[-1].seq,
    }
    return Observation(text=text, source=SUMMARY_SOURCE, data={"summary": counts})


def _distinct(titles: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(titles))


def _titled(count: int, word: str, titles: list[str]) -> str:
    if not count:
        return ""
    shown = _distinct(titles)
    names = ", ".join(_clip(t, 60) for t in shown[:TITLES_SHOWN])
    more = f", +{len(shown) - TITLES_SHOWN} more" if len(shown) > TITLES_SHOWN else ""
    return f"{count} {word} ({names}{more})"


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


class HeldAlerts:
    """The alert observations this process committed, per incident, since its last summary: a summary takes them
    instead of reading a storm's minute back from the log (thousands of entries). Only a hint: ``covering`` hands
    them out only when their number is what the folded state counts since the memo's mark (``counted``), so an
    append by another process, a restart or an incident past ``HELD_PER_INCIDENT`` makes the summary read the log."""

    def __init__(self) -> None:
        self._held: Recent[str, list[AlertItem]] = Recent(HELD_INCIDENTS)

    def add(self, scope: str, items: Sequence[AlertItem]) -> None:
        held = self._held.get(scope) or []
        held.extend(items)
        if len(held) > HELD_PER_INCIDENT:
            held = []  # the next summary reads the log; holding starts again from here
        self._held.put(scope, held)

    def covering(self, scope: str, *, through: int, counted: int, state: ScopeState) -> list[AlertItem] | None:
        """Every alert observation after ``through`` up to ``state``'s version, or None if some are not held."""
        unique = {i.seq: i for i in self._held.get(scope) or () if through < i.seq <= state.version}
        if len(unique) != alert_count(state) - counted:
            return None
        return [unique[seq] for seq in sorted(unique)]

    def prune(self, scope: str, through: int) -> None:
        held = self._held.get(scope)
        if held:
            self._held.put(scope, [i for i in held if i.seq > through])


def alert_count(state: ScopeState) -> int:
    """How many alert observations the scope has (the fold counts each one on its fingerprint)."""
    return sum(a.count for a in state.alerts.values())


class AlertSummarizer:
    """Appends at most one summary per ``interval`` seconds per incident, when something is unsummarised.

    ``notice(scope)`` after an alert is appended (cheap, synchronous; arms the scope's alarm); ``rearm(scopes)``
    at start-up and periodically (finds scopes whose alerts the memo says are not summarised yet).
    """

    def __init__(
        self,
        store: LogStore,
        alarm: Alarm,
        *,
        interval: float = 60.0,
        clock: Callable[[], datetime] | None = None,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self.alarm = alarm
        self.interval = interval
        self._wall = wall
        self._now = clock
        self._last: dict[str, float] = {}  # scope → wall time of its last summary (this process)
        self._streak: dict[str, int] = {}  # scope → consecutive summaries (each within twice its gap of the last)
        self._running: set[str] = set()
        self._dirty: set[str] = set()
        self.held = HeldAlerts()
        self.appended = 0
        self.reads = 0  # summaries that had to read their alerts back from the log

    @property
    def coalesce(self) -> float:
        """How long the first alert of a burst waits for the rest of it."""
        return min(10.0, self.interval / 6)

    def key(self, scope: str) -> str:
        return f"alerts:summary:{scope}"

    def gap(self, streak: int) -> float:
        """The least time between a summary and the next, after ``streak`` consecutive ones: one interval after
        none, then two, four, at most ``BACKOFF_MAX`` intervals."""
        return float(self.interval * min(1 << streak, BACKOFF_MAX))

    def observe(self, scope: str, entries: Sequence[Entry]) -> None:
        """A commit to ``scope`` (a store listener): hold its alert observations, and arm a summary if one of them
        needs it."""
        items = [AlertItem.of(e) for e in entries if is_alert(e)]
        if items:
            self.held.add(scope, items)
            if not all(i.opened for i in items):
                self.notice(scope)

    def notice(self, scope: str) -> None:
        """An alert that needs summarising was appended to ``scope``: make sure a summary run is scheduled."""
        if scope in self._running:
            self._dirty.add(scope)
            return
        key = self.key(scope)
        if self.alarm.pending(key):
            return
        last = self._last.get(scope)
        gap = self.gap(self._streak.get(scope, 0))
        delay = self.coalesce if last is None else max(self.coalesce, last + gap - self._wall())
        self.alarm.set(key, delay, partial(self.run, scope))

    async def run(self, scope: str) -> None:
        """Append the summary of everything not summarised yet (nothing if there is nothing)."""
        self._running.add(scope)
        self._dirty.discard(scope)
        try:
            await self._summarise(scope)
            if await self._behind(scope):  # alerts appended while this ran (whatever their notice did)
                self._dirty.add(scope)
        finally:
            self._running.discard(scope)
            if scope in self._dirty:
                self._dirty.discard(scope)
                self.notice(scope)

    async def _behind(self, scope: str) -> bool:
        """Does ``scope`` have alert observations past the memo's mark?"""
        state = await self.store.get_state(scope)
        memo = await self.store.memo_get(scope, MEMO_TOPIC, MEMO_KEY) or {}
        if "at" in memo:
            self._last[scope] = max(self._last.get(scope, 0.0), float(memo["at"]))
            self._streak[scope] = int(memo.get("streak", 1))
        newest = max((a.last_seq for a in state.alerts.values()), default=0)
        return newest > int(memo.get("through", 0))

    async def _summarise(self, scope: str) -> None:
        memo = await self.store.memo_get(scope, MEMO_TOPIC, MEMO_KEY) or {}
        last_at = float(memo.get("at", 0.0))
        streak = int(memo.get("streak", 1 if last_at else 0))
        wait = last_at + self.gap(streak) - self._wall()
        if wait > 0:  # a summary went out less than its gap ago (e.g. before a restart): not yet
            self._last[scope] = last_at
            self._streak[scope] = streak
            self.alarm.set(self.key(scope), max(wait, self.coalesce), partial(self.run, scope))
            return
        state = await self.store.get_state(scope)
        through, items = await self._alerts_since(scope, memo, state)
        pending = [i for i in items if not i.opened]
        total = alert_count(state)
        if not pending:
            mark = max(through, items[-1].seq) if items else through
            if mark != int(memo.get("through", 0)) or "counted" not in memo:
                await self.store.memo_put(scope, MEMO_TOPIC, MEMO_KEY, {**memo, "through": mark, "counted": total})
            self.held.prune(scope, mark)
            return
        now = self._now() if self._now is not None else max(i.at for i in pending)
        observation = summarise(pending, state, now=max(now, pending[-1].at))
        assert observation is not None
        upto = pending[-1].seq
        await self.store.append(
            scope,
            [NewEntry.make("observation", ALERTS_ACTOR, observation, idempotency_key=f"alerts:summary:{upto}")],
        )
        self.appended += 1
        at = self._wall()
        streak = streak + 1 if last_at and at - last_at < 2 * self.gap(streak) else 1  # still alerting: back off
        self._last[scope] = at
        self._streak[scope] = streak
        counted = total - sum(1 for i in items if i.seq > upto)  # alert observations up to the new mark
        memo = {"through": upto, "at": at, "streak": streak, "counted": counted}
        await self.store.memo_put(scope, MEMO_TOPIC, MEMO_KEY, memo)
        self.held.prune(scope, upto)

    async def _alerts_since(
        self, scope: str, memo: Mapping[str, Any], state: ScopeState
    ) -> tuple[int, list[AlertItem]]:
        """The mark and every alert observation after it up to ``state``'s version: the held ones when they are
        all there (``HeldAlerts.covering``), else read from the log, where a summary appended after the memo was
        last written (a crash in between) moves the mark."""
        through = int(memo.get("through", 0))
        # No mark yet means nothing counted yet: a process that saw the incident open holds all of its alerts, so
        # the first summary (ten incidents' at once, 10 s into a storm) reads nothing back either (decision 132).
        counted = memo.get("counted", 0 if "through" not in memo else None)
        if isinstance(counted, int):
            for wait in HELD_WAITS:
                if wait:
                    await asyncio.sleep(wait)
                held = self.held.covering(scope, through=through, counted=counted, state=state)
                if held is not None:
                    return through, held
        self.reads += 1
        items: list[AlertItem] = []
        for entry in await self.store.read(scope, after=through, kinds=("observation",)):
            if entry.seq > state.version:
                break
            covered = summary_through(entry)
            if covered is not None:
                through = max(through, covered)
                items = [i for i in items if i.seq > through]
            elif is_alert(entry) and entry.seq > through:
                items.append(AlertItem.of(entry))
        return through, items

    async def rearm(self, scopes: Iterable[str]) -> int:
        """Schedule a run for each scope with alert observations past the memo's mark; returns how many."""
        armed = 0
        for scope in scopes:
            try:
                behind = await self._behind(scope)
            except NotFound:
                continue
            if behind:
                self.notice(scope)
                armed += 1
        return armed
