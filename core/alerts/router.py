"""The alert application service: each notification's alerts go to exactly one place in the log.

A request's signals are split into parts (``batch.partition``: a vendor group, split only where explicit service
labels differ, else a lone alert); each part counts once against its source's per-minute rate limit (counted across
replicas with ``rates``, core/store/ports.py), and then, in order:

1. its group (or lone fingerprint) has an open incident → its observations are appended there, in one transaction;
2. else a part with no firing alert is ``ignored`` (it opens nothing);
3. else a lone alert (or a group with an explicit service) joins the open incident of its service that saw an
   alert within the grouping window; over the rate limit, the source's alert-storm incident (groups too);
4. else a ``new`` incident is declared with the part's observations in the same transaction — linked to the first
   incident of the same notification when a service label split it (``splits``: one parent, not every pair).

After the parts: a notification whose group resolved resolves the group's alerts it left out (``group_resolves``).
A notification too big to take is refused by the receiver and recorded once per window (``refusals``).

Appends are ``decide`` callables (``batch.decide_batch``), answered inside the append's transaction. Known groups
and fingerprints take a lock-free fast path; what may declare or join runs under locks on its keys (in-process, or
across replicas: ``locks``, core/store/ports.py) and claims its group (or fingerprint) in the index before the
lock is released, so concurrent first alerts open one incident.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any

from decklog.core.alerts import batch, outcomes, rules
from decklog.core.alerts.activity import Activity
from decklog.core.alerts.batch import Chosen, Part, Prepared
from decklog.core.alerts.caches import Recent
from decklog.core.alerts.group_resolves import GroupResolves
from decklog.core.alerts.locks import KeyedLocks
from decklog.core.alerts.refusals import Refusals
from decklog.core.alerts.rules import AlertOutcome, AlertPolicy
from decklog.core.alerts.splits import Family, SplitLinks, parent_link
from decklog.core.alerts.storms import Storms
from decklog.core.clock import Clock
from decklog.core.entries import Actor, Entry, NewEntry
from decklog.core.errors import NotFound
from decklog.core.ids import slugify
from decklog.core.index.keys import group_fingerprint
from decklog.core.service import ScopeService
from decklog.core.signals import AlertSignal
from decklog.core.state import ScopeState
from decklog.core.store.ports import IndexPort, LogStore, RateCounter, RouteLocks, quick

log = logging.getLogger(__name__)

#: Alerts of one notification's part that make a quick decide (each adds an observation, sometimes a note or two)
QUICK_ITEMS = 4
WARM_INCIDENTS = 2000  # unresolved incidents read at start-up (newest first)
#: Notifications routed at once on their own (as concurrent requests were before routing moved behind the answer)
SLOW_AT_ONCE = 32


class AlertRouter:
    """``await router.receive(source, signals, raw=...)`` → one ``AlertOutcome`` per signal, in order."""

    def __init__(
        self,
        store: LogStore,
        index: IndexPort,
        service: ScopeService,
        clock: Clock,
        policy: AlertPolicy,
        *,
        monotonic: Callable[[], float] = time.monotonic,
        locks: RouteLocks | None = None,
        rates: RateCounter | None = None,
    ) -> None:
        self.store = store
        self.index = index
        self.service = service
        self.clock = clock
        self.policy = policy
        self.storms = Storms(
            index, policy.rate_limit_per_minute, is_open=self._is_open, monotonic=monotonic, rates=rates
        )
        self._locks: RouteLocks = locks or KeyedLocks()  # several replicas: locks that span them
        self._fingerprints: Recent[str, str] = Recent()  # fingerprint → the open incident it was routed to
        self.activity = Activity(store, index, clock, policy.grouping_window, open_incident=self._open_incident)
        self._groups: Recent[str, str] = Recent()  # a source's group → the open incident it went to
        self._closed: Recent[str, str] = Recent(2_000)  # a group → its incident, once that was resolved
        self._warm: asyncio.Task[int] | None = None
        self.splits = SplitLinks(store)
        self.group_resolves = GroupResolves(store, self._open_incident)
        self.refusals = Refusals(store, index, service, clock, self._locks, severity=policy.default_severity)

    async def receive(
        self, source: str, signals: Sequence[AlertSignal], *, raw: Mapping[str, Any] | None = None
    ) -> list[AlertOutcome]:
        """Route each signal: one notification's alerts go to their incidents in one append per incident
        (``batch.partition``). ``raw`` (the capped vendor payload) is kept on the first observation appended."""
        await self.warm()
        outcomes: list[AlertOutcome | None] = [None] * len(signals)
        evidence = dict(raw or {})
        parts = batch.partition(signals)
        over = await self.storms.over_limit(source, len(parts))  # a group counts once: it opens one incident at most
        families: dict[str, Family] = {}
        resolved: dict[str, list[str]] = {}  # a resolved notification group → the incidents its parts went to
        to_storm: list[tuple[Part, list[Prepared]]] = []  # parts over the limit: one append to the storm incident
        for part, storm in zip(parts, over, strict=True):
            family = families.setdefault(part.family, Family(source)) if part.family else None
            held = len(to_storm)
            done = await self._route_part(part, evidence, storm, family, to_storm)
            for index, outcome in done:
                outcomes[index] = outcome
            if any(o.appended for _, o in done) or len(to_storm) > held:
                evidence = {}
            if part.first.group_resolved:
                routed = resolved.setdefault(part.family or part.group, [])
                routed.extend(o.scope for _, o in done if o.scope)
        if to_storm:
            for index, outcome in await self._storm_parts(to_storm):
                outcomes[index] = outcome
        for family in families.values():
            await self.splits.link(family)
        named = {s.fingerprint for s in signals}
        for group, routed in resolved.items():
            await self.group_resolves.resolve(source, group, routed, named)
        return [o for o in outcomes if o is not None]

    async def receive_many(self, notifications: Sequence[Notification]) -> list[list[AlertOutcome]]:
        """Route several notifications as ``receive`` routes each. The alerts whose incident is already known
        (their group's or their fingerprint's: a storm's repeats) go to it in one append per incident for all of
        them together, instead of one append per notification. The others (that may open, join, split or resolve)
        are routed each on its own, up to ``SLOW_AT_ONCE`` at a time, under the router's locks, as concurrent
        requests always were. Notifications that share an alert or a group are routed in their order."""
        await self.warm()
        out: list[list[AlertOutcome]] = [[] for _ in notifications]
        bulk, bulk_keys = _Bulk(), set[str]()
        slow: dict[int, Notification] = {}
        slow_keys: set[str] = set()

        async def run_slow() -> None:
            if not slow:
                return
            taken = list(slow.items())
            slow.clear()
            slow_keys.clear()
            gate = asyncio.Semaphore(SLOW_AT_ONCE)

            async def one(n: int, source: str, signals: Sequence[AlertSignal], raw: Mapping[str, Any] | None) -> None:
                async with gate:
                    out[n] = await self.receive(source, signals, raw=raw)

            await asyncio.gather(*(one(n, *note) for n, note in taken))

        for n, (source, signals, raw) in enumerate(notifications):
            keys = _keys(signals)
            if keys & slow_keys:  # an earlier one of these alerts may still open, resolve or move them
                await self._flush(bulk, out)
                bulk_keys.clear()
                await run_slow()
            parts = batch.partition(signals)
            targets = [self._cached(part) for part in parts]
            if parts and all(targets) and not any(p.family or p.first.group_resolved for p in parts):
                bulk.add(n, source, parts, [t for t in targets if t], self.policy, dict(raw or {}))
                bulk_keys |= keys
                continue
            if keys & bulk_keys:
                await self._flush(bulk, out)
                bulk_keys.clear()
            slow[n] = (source, signals, raw)
            slow_keys |= keys
        await self._flush(bulk, out)
        await run_slow()
        return out

    def _cached(self, part: Part) -> str | None:
        return self._groups.get(part.group) if part.group else self._fingerprints.get(part.first.fingerprint)

    async def _flush(self, pending: _Bulk, out: list[list[AlertOutcome]]) -> None:
        """Append what ``pending`` holds: one append per (incident, group), the incidents concurrently."""
        if not pending.runs:
            return
        runs, counts, sizes = pending.runs, pending.counts, pending.sizes
        pending.runs, pending.counts, pending.sizes = {}, {}, {}
        for source, parts in counts.items():  # the rate limit counts every part, as ``receive`` does
            await self.storms.over_limit(source, parts)
        slots: dict[int, list[AlertOutcome | None]] = {n: [None] * size for n, size in sizes.items()}

        async def one(scope: str, run: _Run) -> None:
            part = Part(run.group, tuple((g, item.signal) for g, item in enumerate(run.items)))
            items = [replace(item, index=g) for g, item in enumerate(run.items)]
            done = await self._append(scope, part, items, joined=False)
            if done is not None:
                for g, outcome in done:
                    n, index = run.origin[g]
                    slots[n][index] = outcome
                return
            for n, original in run.parts:  # no longer an open incident (resolved meanwhile): each part on its own
                for index, outcome in await self._route_part(original, {}, False):
                    slots[n][index] = outcome

        await asyncio.gather(*(one(key[0], run) for key, run in runs.items()))
        for n, slot in slots.items():
            out[n] = [o for o in slot if o is not None]

    async def refused(self, source: str, size: int | None, limit: int) -> str:
        """A notification from ``source`` was refused as too big (``size`` bytes, None = not declared): recorded in
        the source's "notifications refused" incident, at most once per window (core/alerts/refusals.py)."""
        return await self.refusals.record(source, size, limit)

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
            for group in state.alert_groups:
                self._groups.put(group, scope)
            last = await self.activity.last(state)
            for service in state.services:
                self.activity.remember(scope, service, last)
            source = rules.storm_source(state.title)
            if source:
                self.storms.seed(source, scope, age=(self.clock.now() - last).total_seconds())
        if found:
            log.info("alerts: routing state derived from %d open incident(s)", found)
        return found

    # -- routing ----------------------------------------------------------------------------------------------

    async def _route_part(
        self,
        part: Part,
        raw: dict[str, Any],
        storm: bool,
        family: Family | None = None,
        to_storm: list[tuple[Part, list[Prepared]]] | None = None,
    ) -> list[tuple[int, AlertOutcome]]:
        """Route one part (``to_storm``: where a part for the storm incident waits, instead of its own append)."""
        done = await self._route(part, raw, storm, family, to_storm)
        if family is not None:
            scopes = [o.scope for _, o in done if o.scope and not o.storm]
            if scopes and not family.parent:
                family.parent = scopes[0]  # the first incident of the notification: the others link to it
            elif scopes and scopes[0] != family.parent and any(o.outcome == "new" for _, o in done):
                family.children.append((scopes[0], batch.explicit_service(part.first)))
        return done

    async def _route(
        self,
        part: Part,
        raw: dict[str, Any],
        storm: bool,
        family: Family | None,
        to_storm: list[tuple[Part, list[Prepared]]] | None,
    ) -> list[tuple[int, AlertOutcome]]:
        first = part.first
        items = batch.prepare(self.policy, part, raw)
        service = first.service
        cached = self._groups.get(part.group) if part.group else self._fingerprints.get(first.fingerprint)
        if cached is not None:  # the fast path: no lock, the append itself checks that the incident is open
            done = await self._append(cached, part, items, joined=False)
            if done is not None:
                return done
        keys = [f"grp:{part.group}"] if part.group else [f"fp:{first.fingerprint}"]
        async with self._locks.hold(*keys, f"svc:{service}"):
            scope = await self._known_scope(part)
            if scope is not None and scope != cached:
                done = await self._append(scope, part, items, joined=False)
                if done is not None:
                    return done
            if not any(s.status == "firing" for s in part.signals):
                return outcomes.ignored(items)
            target: str | None = None
            if not first.vendor_incident and (not part.group or batch.explicit_service(first)):
                target = await self.activity.target(service)
            if target is None and storm:  # one storm incident per source, however many alerts are over at once
                if to_storm is not None:
                    to_storm.append((part, items))
                    return []
                return await self._storm_part(part, items, raw)
            done = None if target is None else await self._join(target, part, items, storm=storm)
            return done if done is not None else await self._declare(part, items, raw, storm=storm, family=family)

    async def _storm_part(
        self, part: Part, items: list[Prepared], raw: dict[str, Any]
    ) -> list[tuple[int, AlertOutcome]]:
        """Join the source's storm incident. Only declaring it takes the source's storm lock, so that alerts over the
        limit at once declare one between them; the others find it under the lock (or the index's claim) and join."""
        source = part.first.source
        done = await self._join_storm(source, part, items)
        if done is not None:
            return done
        async with self._locks.hold(rules.storm_key(source)):
            done = await self._join_storm(source, part, items)
            return done if done is not None else await self._declare(part, items, raw, storm=True)

    async def _storm_parts(self, waiting: list[tuple[Part, list[Prepared]]]) -> list[tuple[int, AlertOutcome]]:
        """A notification's parts over the limit, to the storm incident in one append (one each was one append per
        part, each writing the storm incident's whole state again: 2,000 services took minutes); then each part's
        group is claimed there, so that its later notifications go there too."""
        first, prepared = waiting[0]
        done = await self._storm_part(first, prepared, {})  # declares it if need be, on the first part's service
        scope = next((o.scope for _, o in done if o.scope), "")
        rest = waiting[1:]
        if not rest:
            return done
        combined = Part(rest[0][0].group, tuple(item for part, _ in rest for item in part.items))
        items = [item for _, its in rest for item in its]
        joined = await self._join(scope, combined, items, storm=True) if scope else None
        if joined is None:  # the storm incident was resolved meanwhile: a new one
            joined = await self._storm_part(combined, items, {})
            scope = next((o.scope for _, o in joined if o.scope), scope)
        if scope:  # concurrently: the index commits them in a few batches
            await asyncio.gather(*(self._claim(part, scope) for part, _ in rest[1:]))
        return done + joined

    async def _join_storm(
        self, source: str, part: Part, items: list[Prepared]
    ) -> list[tuple[int, AlertOutcome]] | None:
        known = await self.storms.incident(source)
        return None if known is None else await self._join(known, part, items, storm=True)

    async def _join(
        self, target: str, part: Part, items: list[Prepared], *, storm: bool
    ) -> list[tuple[int, AlertOutcome]] | None:
        """Append the part to ``target`` and claim its fingerprints there; None when ``target`` is not open."""
        done = await self._append(target, part, items, joined=True, storm=storm)
        if done is not None:
            await self._claim(part, target)
        return done

    async def _known_scope(self, part: Part) -> str | None:
        """The open incident this part's group (or lone alert's fingerprint) was routed to, per the index."""
        if part.group:
            scope = self._groups.get(part.group) or await self.index.open_scope_for_fingerprint(
                group_fingerprint(part.group)
            )
            if scope is not None:
                return scope
            for signal in part.signals:  # an alert already in an incident keeps it (also across restarts)
                known = self._fingerprints.get(signal.fingerprint)
                if known is not None:
                    return known
            if len(part.items) == 1:
                return await self.index.open_scope_for_fingerprint(part.first.fingerprint)
            return None
        fingerprint = part.first.fingerprint
        return self._fingerprints.get(fingerprint) or await self.index.open_scope_for_fingerprint(fingerprint)

    async def _append(
        self, scope: str, part: Part, items: list[Prepared], *, joined: bool, storm: bool = False
    ) -> list[tuple[int, AlertOutcome]] | None:
        """Append ``items`` to ``scope`` if it is an open incident (one transaction); None (and forget it) when
        it is not. An entry key already in the log (a retry older than the alert's last notification) makes the
        store refuse the whole batch: then each alert is appended on its own."""
        chosen = Chosen()
        try:
            decide = partial(batch.decide_batch, batch=items, group=part.group, chosen=chosen)
            if len(items) <= QUICK_ITEMS:  # a few alerts: the SQLite store may stage them on the loop (decision 133)
                quick(decide)
            result = await self.store.append(scope, decide)
        except NotFound:
            result = None
        if result is not None and result.duplicate:
            if len(items) > 1:
                out: list[tuple[int, AlertOutcome]] = []
                for item in items:
                    one = await self._append(scope, part, [item], joined=joined, storm=storm)
                    if one is None:
                        return out or None
                    out.extend(one)
                return out
            return outcomes.duplicates(scope, items, result.entries[0].seq if result.entries else 0)
        if result is None or (not result.entries and not chosen.skipped):
            self._forget(scope, part)
            return None
        return self._outcomes(scope, part, chosen, result.entries, joined=joined, storm=storm)

    def _outcomes(
        self,
        scope: str,
        part: Part,
        chosen: Chosen,
        entries: Sequence[Entry],
        *,
        joined: bool,
        storm: bool = False,
        opened: bool = False,
    ) -> list[tuple[int, AlertOutcome]]:
        """The outcomes of an append to ``scope``; the caches learn where its alerts went."""
        for item in chosen.items:
            self._fingerprints.put(item.signal.fingerprint, scope)
        if part.group:
            self._groups.put(part.group, scope)
        if entries:
            self.activity.remember(scope, part.first.service, entries[-1].at)
        return outcomes.appended(scope, chosen, entries, joined=joined, storm=storm, opened=opened)

    async def _declare(
        self, part: Part, items: list[Prepared], raw: dict[str, Any], *, storm: bool, family: Family | None = None
    ) -> list[tuple[int, AlertOutcome]]:
        first = part.first
        source = first.source
        if not storm:  # the first observation is the one the header shows
            items = [batch.prepare_one(self.policy, part, 0, raw, opened=True), *items[1:]]
        severity = batch.opening_severity(items)
        title = rules.storm_title(source, self.policy.rate_limit_per_minute) if storm else batch.group_title(part)
        links = await self._links(part)
        if family is not None and not storm:
            links.extend(parent_link(family))
        probe = ScopeState(scope="incident/new", severity=severity, version=1)
        chosen = Chosen()
        then = batch.decide_batch(probe, items, group=part.group, chosen=chosen, links=links)
        claimed = await self._claim_ahead(part, title, items[0].key)
        result = await self.service.declare(
            title=title,
            actor=Actor.system(source),
            severity=severity,
            services=list(dict.fromkeys(s.service for s in part.signals if s.service)),
            summary=first.summary,
            via="alert",
            idempotency_key=items[0].key,
            then=then,
        )
        scope = result.state.scope
        if result.duplicate:
            return outcomes.duplicates(scope, items, result.entries[-1].seq if result.entries else 0)
        if claimed != scope:
            await self._claim(part, scope)
        if storm:
            await self.storms.declared(source, scope)
        return self._outcomes(scope, part, chosen, result.entries[1:], joined=True, storm=storm, opened=True)

    async def _claim_ahead(self, part: Part, title: str, key: str | None) -> str | None:
        """Reserve the new incident's id (under the notification's identity, which ``declare`` then finds) and
        claim the group for it *before* the declaration commits: once it commits, delivering its entries keeps
        the index busy, and the claim would wait behind that. Only for a group with a notification identity."""
        if not part.group or not key:
            return None
        sid = await self.index.reserve_scope(
            "incident", slugify(" ".join(title.split())), exact=False, on_disk=self.store.holds, inbound_key=key
        )
        await self._claim(part, str(sid))
        return str(sid)

    async def _links(self, part: Part) -> list[NewEntry]:
        """Links of a new incident: to the incident the vendor reopened (its split notification's parent is
        ``splits.parent_link``'s)."""
        first = part.first
        out: list[NewEntry] = []
        if first.reopened and part.group:
            previous = self._closed.get(part.group) or await self.index.last_scope_for_fingerprint(
                group_fingerprint(part.group)
            )
            if previous:
                name = batch.source_name(first.source)
                reason = f"{name} reopened {first.title!r} after this incident was resolved"
                out.append(batch.link_entry(previous, "reopens", reason, first.source))
        return out

    async def _claim(self, part: Part, scope: str) -> None:
        """Tell the index (other processes, restarts) where this part went, before the lock is released."""
        first = part.first
        if part.group:
            self._groups.put(part.group, scope)
            await self.index.claim_fingerprint(group_fingerprint(part.group), scope, first.service)
            if len(part.items) > 1:
                return  # its alerts reach the index through the log (the index sender) shortly
        for signal in part.signals:
            self._fingerprints.put(signal.fingerprint, scope)
            await self.index.claim_fingerprint(signal.fingerprint, scope, signal.service)

    # -- open incidents ---------------------------------------------------------------------------------------

    async def _is_open(self, scope: str) -> bool:
        return await self._open_incident(scope) is not None

    async def _open_incident(self, scope: str) -> ScopeState | None:
        try:
            state = await self.store.get_state(scope)
        except NotFound:
            return None
        if state.kind != "incident" or not state.is_open or state.version == 0:
            self._forget(scope)
            return None
        return state

    def _forget(self, scope: str, part: Part | None = None) -> None:
        """``scope`` is no longer an open incident: drop it from the caches (the index has the truth)."""
        self.activity.forget(scope)
        if part is not None:
            for signal in part.signals:
                if self._fingerprints.get(signal.fingerprint) == scope:
                    self._fingerprints.pop(signal.fingerprint)
            if part.group and self._groups.get(part.group) == scope:
                self._groups.pop(part.group)
                self._closed.put(part.group, scope)
        self.storms.forget(scope)


Notification = tuple[str, Sequence[AlertSignal], Mapping[str, Any] | None]
"""One notification to route: its source, its signals and the (capped) vendor payload kept as evidence."""


def _keys(signals: Sequence[AlertSignal]) -> set[str]:
    """What orders notifications: their alerts' fingerprints and groups."""
    return {f"fp:{s.fingerprint}" for s in signals} | {f"grp:{s.group}" for s in signals if s.group}


@dataclass
class _Run:
    """Alerts of several notifications bound for one incident (and one group): appended together."""

    group: str
    items: list[Prepared] = field(default_factory=list)
    origin: list[tuple[int, int]] = field(default_factory=list)  # per item: (notification, its index there)
    parts: list[tuple[int, Part]] = field(default_factory=list)  # the parts it holds, by notification


@dataclass
class _Bulk:
    """Notifications whose every alert goes to a known incident, waiting for one append per incident."""

    runs: dict[tuple[str, str, int, str], _Run] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)  # parts per source (the rate limit counts them)
    sizes: dict[int, int] = field(default_factory=dict)  # alerts per notification

    def add(
        self,
        n: int,
        source: str,
        parts: Sequence[Part],
        targets: Sequence[str],
        policy: AlertPolicy,
        raw: dict[str, Any],
    ) -> None:
        self.counts[source] = self.counts.get(source, 0) + len(parts)
        self.sizes[n] = sum(len(part.items) for part in parts)
        evidence = raw
        for part, scope in zip(parts, targets, strict=True):
            first = part.first
            run = self.runs.setdefault((scope, part.group, first.left_out, first.service), _Run(part.group))
            prepared = batch.prepare(policy, part, evidence)
            evidence = {}  # the vendor payload is kept once per notification
            run.items.extend(prepared)
            run.origin.extend((n, item.index) for item in prepared)
            run.parts.append((n, part))
