"""Recording changes: each deploy or push becomes a ``change/<id>`` scope, linked to the incidents it may have caused.

``ChangeService.record`` turns normalised ``ChangeSignal``s into change scopes (declared ``via="change"`` with
``services=[service]``) and observations that carry the deploy and its commits' paths (what a reasoner reads to say
"it touched the payments config path"). A repeated delivery appends nothing (the idempotency key is a digest of
the normalised change); a new status of the same change (started → succeeded) appends an observation.

Linking (both orders):

- a change arrives for a service with open incidents → each incident whose first alert is at most
  ``link_window`` after the change is linked;
- an incident opens on a service (``incident_opened``, from any declaration) → each change to that service in
  ``link_window`` before its first alert (or since) is linked.

A link is ``scope_linked`` in both logs (``suspected_cause`` / ``suspected_effect`` when the change came first,
``related`` when it came after the alert started) plus one evidence observation in the incident ("Recent change
on payments: r2026-09-19-4 by maria 2 min before the alert — touched config/payments/timeouts.yaml"), which is
what the incident's Slack thread shows. Each side registers itself in memory before it looks for the other, so a
change and an incident arriving together still find each other before the index has caught up.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Mapping, Sequence
from datetime import datetime, timedelta
from functools import partial
from typing import Any

from decklog.core.changes.facts import (
    CHANGES_ACTOR,
    EVIDENCE_SOURCE,
    REGISTRY_MAX,
    ChangeFacts,
    ChangeOutcome,
    Outcome,
    alert_started,
    change_key,
    change_observation,
    change_scope,
    change_time,
    change_title,
    evidence_text,
)
from decklog.core.clock import Clock, parse_iso
from decklog.core.entries import Actor, Declared, NewEntry, Observation
from decklog.core.errors import DecklogError, NotFound
from decklog.core.service import ScopeService
from decklog.core.signals import ChangeSignal
from decklog.core.state import ScopeState
from decklog.core.store.ports import IndexPort, LogStore

log = logging.getLogger(__name__)


def _decide_change(state: ScopeState, *, declared: NewEntry, observation: NewEntry) -> list[NewEntry]:
    return [observation] if state.version else [declared, observation]


class ChangeService:
    """Change scopes and their links to incidents. ``record`` for receivers; ``incident_opened`` for the
    composition root to call on every incident declaration."""

    def __init__(
        self,
        store: LogStore,
        index: IndexPort,
        service: ScopeService,
        clock: Clock,
        *,
        link_window: timedelta = timedelta(hours=6),
    ) -> None:
        self.store = store
        self.index = index
        self.service = service
        self.clock = clock
        self.link_window = link_window
        self._changes: dict[str, dict[str, datetime]] = {}  # service → {change scope: change time}
        self._incidents: dict[str, dict[str, datetime]] = {}  # service → {incident scope: first alert time}

    async def record(
        self, signals: Sequence[ChangeSignal], *, raw: Mapping[str, Any] | None = None
    ) -> list[ChangeOutcome]:
        """Record each change (``raw`` is kept on the first observation the request appends) and link it."""
        outcomes: list[ChangeOutcome] = []
        evidence = dict(raw or {})
        for signal in signals:
            outcome = await self._record_one(signal, evidence)
            if outcome.outcome != "duplicate":
                evidence = {}
            outcomes.append(outcome)
        return outcomes

    async def _record_one(self, signal: ChangeSignal, raw: dict[str, Any]) -> ChangeOutcome:
        scope = change_scope(signal.change_id)
        actor = Actor.system(signal.source)
        declared = NewEntry.make(
            "declared",
            actor,
            Declared(
                title=change_title(signal),
                services=(signal.service,),
                summary=signal.description,
                via="change",
            ),
        )
        observation = NewEntry.make(
            "observation", actor, change_observation(signal, raw), idempotency_key=change_key(signal)
        )
        result = await self.store.append(
            scope, partial(_decide_change, declared=declared, observation=observation), create=True
        )
        if result.duplicate:
            return ChangeOutcome(signal.change_id, scope, "duplicate", result.entries[0].seq if result.entries else 0)
        at = signal.at or result.entries[-1].at
        known = self._register_change(scope, signal.service, at)  # synchronous: before anything else can run
        linked = await self._link_change(scope, signal.service, at, known)
        outcome: Outcome = "new" if result.entries[0].kind == "declared" else "updated"
        return ChangeOutcome(signal.change_id, scope, outcome, result.entries[-1].seq, tuple(linked))

    # -- linking ----------------------------------------------------------------------------------------------

    def incident_opened(self, scope: str, services: Sequence[str], alert_at: datetime) -> Awaitable[list[str]]:
        """An incident was declared on ``services`` (its first alert at ``alert_at``): link recent changes.

        Registers the incident at once (call it right when the declaration commits); the returned awaitable
        does the linking and answers the linked change scopes.
        """
        known: dict[str, datetime] = {}
        for service in dict.fromkeys(s for s in services if s):
            incidents = self._incidents.setdefault(service, {})
            incidents[scope] = alert_at
            if len(incidents) > REGISTRY_MAX:  # resolved ones are pruned lazily: keep the newest
                for old, _ in sorted(incidents.items(), key=lambda kv: kv[1])[: len(incidents) - REGISTRY_MAX]:
                    del incidents[old]
            known.update(self._changes.get(service, {}))
        return self._link_incident(scope, tuple(s for s in services if s), alert_at, known)

    async def _link_incident(
        self, scope: str, services: tuple[str, ...], alert_at: datetime, known: dict[str, datetime]
    ) -> list[str]:
        since = alert_at - self.link_window
        candidates = dict(known)
        for service in services:
            for row in await self.index.list_scopes(kind="change", service=service, limit=50):
                if row.created_at and parse_iso(row.created_at) >= since:  # received after the window opened
                    candidates.setdefault(row.id, parse_iso(row.created_at))
        linked: list[str] = []
        for change in candidates:
            facts = await self._facts(change)
            if facts is None or facts.at < since:
                continue
            common = [s for s in services if s in facts.services]
            if common and await self._link(scope, facts, common[0], alert_at):
                linked.append(change)
        return linked

    async def change_declared(self, scope: str) -> list[str]:
        """A change scope was declared (from the outbox, also after a crash): link it to the open incidents on its
        service (idempotent: ``record`` may have linked them already)."""
        facts = await self._facts(scope)
        if facts is None:
            return []
        linked: list[str] = []
        for service in facts.services:
            known = self._register_change(scope, service, facts.at)
            linked += await self._link_change(scope, service, facts.at, known)
        return linked

    def _register_change(self, scope: str, service: str, at: datetime) -> dict[str, datetime]:
        changes = self._changes.setdefault(service, {})
        changes[scope] = min(at, changes.get(scope, at))
        horizon = self.clock.now() - 2 * self.link_window
        for old in [c for c, when in changes.items() if when < horizon and c != scope]:
            del changes[old]
        return dict(self._incidents.get(service, {}))

    async def _link_change(self, change: str, service: str, at: datetime, known: dict[str, datetime]) -> list[str]:
        candidates = dict(known)
        for row in await self.index.list_scopes(kind="incident", service=service, open_only=True, limit=50):
            candidates.setdefault(row.id, datetime.min.replace(tzinfo=at.tzinfo))
        facts = await self._facts(change)
        if facts is None:
            return []
        linked: list[str] = []
        for incident in candidates:
            state = await self._state(incident)
            if state is None or state.kind != "incident" or not state.is_open:
                self._incidents.get(service, {}).pop(incident, None)
                continue
            alert_at = await self._alert_time(state, candidates[incident])
            if facts.at >= alert_at - self.link_window and await self._link(incident, facts, service, alert_at):
                linked.append(incident)
        return linked

    async def _link(self, incident: str, facts: ChangeFacts, service: str, alert_at: datetime) -> bool:
        """Link both ways and put the change in the incident's thread as evidence (idempotent)."""
        text, relation, back, when = evidence_text(facts, service, alert_at)
        try:
            first, _ = await self.service.link(
                incident,
                facts.scope,
                CHANGES_ACTOR,
                relation=relation,
                back_relation=back,
                reason=f"{service} changed {when}",
            )
            evidence = Observation(
                text=text,
                source=EVIDENCE_SOURCE,
                service=service,
                links=(facts.link,) if facts.link else (),
                data={
                    "kind": "recent_change",
                    "change": facts.scope,
                    "relation": relation,
                    "minutes_before_alert": round((alert_at - facts.at).total_seconds() / 60, 1),
                    "version": facts.version,
                    "author": facts.author,
                    "paths": list(facts.paths[:20]),
                },
            )
            refs = tuple(e.seq for e in first.entries if e.kind == "scope_linked")
            await self.store.append(
                incident,
                [
                    NewEntry.make(
                        "observation",
                        CHANGES_ACTOR,
                        evidence,
                        refs=refs,
                        idempotency_key=f"change-evidence:{facts.scope}",
                    )
                ],
            )
        except DecklogError as exc:
            log.warning("changes: could not link %s and %s: %s", incident, facts.scope, exc)
            return False
        return True

    # -- reading scopes ---------------------------------------------------------------------------------------

    async def _state(self, scope: str) -> ScopeState | None:
        try:
            state = await self.store.get_state(scope)
        except NotFound:
            return None
        return state if state.version else None

    async def _alert_time(self, state: ScopeState, known: datetime) -> datetime:
        """When the incident's first alert started (its declaration time when it has no alert)."""
        if known > datetime.min.replace(tzinfo=known.tzinfo):
            return known
        first_seq = min((a.first_seq for a in state.alerts.values()), default=0)
        when = parse_iso(state.created_at) if state.created_at else self.clock.now()
        if first_seq:
            entries = await self.store.read_seqs(state.scope, [first_seq])
            if entries:
                when = alert_started(entries[0]) or entries[0].at
        for service in state.services:
            self._incidents.setdefault(service, {})[state.scope] = when
        return when

    async def _facts(self, scope: str) -> ChangeFacts | None:
        state = await self._state(scope)
        if state is None or state.kind != "change":
            return None
        entries = await self.store.read(scope, kinds=("observation",), limit=50)
        values: dict[str, str] = {}
        paths: list[str] = []
        for entry in entries:
            p = entry.payload
            if not isinstance(p, Observation) or "change_id" not in p.data:
                continue
            for key in ("change_id", "version", "author", "status", "link"):
                value = p.data.get(key)
                if isinstance(value, str) and value:
                    values[key] = value  # the latest delivery wins
            raw_paths = p.data.get("paths")
            if isinstance(raw_paths, list):
                paths.extend(x for x in raw_paths if isinstance(x, str) and x not in paths)
        return ChangeFacts(
            scope=scope,
            services=state.services,
            at=change_time(entries) or parse_iso(state.created_at),
            change_id=values.get("change_id", ""),
            version=values.get("version", ""),
            author=values.get("author", ""),
            status=values.get("status", ""),
            link=values.get("link", ""),
            paths=tuple(paths),
        )
