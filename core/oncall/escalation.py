"""Escalation steps as due times derived from the log: the job that appends each page once, when it falls due.

An ``escalation`` entry (a route chose a policy as the incident opened, a person paged by hand, or a proposal has
waited for approval longer than ``[oncall] approval_after``) copies its policy's levels. Level ``i`` of repetition
``r`` falls due at the escalation's time plus the ``after`` of every earlier step (an ``escalated`` entry — the
Escalate button — brings a step forward to its own time). A level's targets are resolved at the level's due time,
never at the tick's: ``schedule:<name>`` is whoever was on call then (core/oncall/rotation.py, with the schedule's
overrides from the log), ``user:<id>`` that person, ``pagerduty:<key>`` a PagerDuty trigger. Each person is then
notified by their rules (``[oncall.people.<id>] rules``; Slack at once by default), each rule at the level's time
plus its ``after``.

Each notification is a ``page`` entry appended under the idempotency key
``page:<scope>:<escalation seq>:<level>:<target>:<repetition>:<method>``: a restart, a second replica or a repeated
tick appends it once, and the outbox topic ``oncall`` delivers it (core/oncall/sender.py). A handoff (the person on
call in a schedule changed) is an ``oncall_handoff`` entry in the schedule's ``oncall/<name>`` scope, keyed by the
schedule and the moment, which the same sender posts to the alerts channel. An ``acknowledged``
entry stops every escalation started before it: no later page is appended, and the sender drops a page it finds
acknowledged at delivery — so an acknowledgement racing a page lets at most that one page out. A resolved incident
pages nobody.

``OncallJob.tick`` runs periodically (bot wiring; on PostgreSQL under a lease, so one replica appends, and the
idempotency keys make even two appenders harmless). Nothing is kept in memory between ticks.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from decklog.core.clock import Clock, iso, parse_iso
from decklog.core.entries import Actor, Entry, NewEntry
from decklog.core.entries.oncall import Escalated, Escalation, OncallHandoff, Page
from decklog.core.oncall.desk import PAGING_KINDS, levels_of, open_schedule_scope, read_overrides
from decklog.core.oncall.rotation import Override, next_handoff, on_call, shifts
from decklog.core.oncall.setup import OncallConfig
from decklog.core.state import ScopeState
from decklog.core.store.ports import IndexPort, LogStore

log = logging.getLogger(__name__)

ACTOR = Actor.system("oncall")
#: A handoff older than this when first seen is not posted (a restart, or on-call configured mid-shift).
HANDOFF_WINDOW_S = 3600.0


@dataclass(frozen=True)
class Step:
    """One level of one repetition, and when it falls due."""

    level: int
    repetition: int
    due_at: datetime


@dataclass(frozen=True)
class DuePage:
    key: str
    payload: Page


def steps(escalation: Escalation, started: datetime, escalated: Sequence[tuple[int, datetime]] = ()) -> list[Step]:
    """Every step of ``escalation`` with its due time; ``escalated``: (step number, when asked) brought forward."""
    n = len(escalation.levels)
    forward: dict[int, datetime] = {}
    for step, at in escalated:
        forward[step] = min(at, forward.get(step, at))
    out: list[Step] = []
    at = started
    for k in range(n * (escalation.repeat + 1)):
        if k in forward and forward[k] < at:
            at = forward[k]
        out.append(Step(k % n, k // n, at))
        at = at + timedelta(seconds=escalation.levels[k % n][1])
    return out


def page_key(scope: str, escalation: int, level: int, target: str, repetition: int, method: str) -> str:
    return f"page:{scope}:{escalation}:{level}:{target}:{repetition}:{method}"


def planned(
    scope: str,
    seq: int,
    escalation: Escalation,
    started: datetime,
    escalated: Sequence[tuple[int, datetime]],
    setup: OncallConfig,
    overrides: dict[str, list[Override]],
    now: datetime,
) -> tuple[list[DuePage], datetime | None]:
    """The pages of one escalation due by ``now``, and when the next one falls due (None: none left)."""
    due: list[DuePage] = []
    upcoming: datetime | None = None
    for step in steps(escalation, started, escalated):
        if step.due_at > now:
            upcoming = step.due_at if upcoming is None else min(upcoming, step.due_at)
            break
        targets, _after = escalation.levels[step.level]
        for target in targets:
            kind, _, name = target.partition(":")
            if kind == "pagerduty":
                rules: list[tuple[str, float, str]] = [("pagerduty", 0.0, name)]
            else:
                if kind == "schedule":
                    schedule = setup.schedule(name)
                    user = on_call(schedule, step.due_at, overrides.get(name, ())) if schedule else None
                    if user is None:
                        continue  # nobody on call then: the next level is the answer
                else:
                    user = name
                rules = [(r.method, r.after, user) for r in setup.person(user).rules]
            for method, after, who in rules:
                at = step.due_at + timedelta(seconds=after)
                if at > now:
                    upcoming = at if upcoming is None else min(upcoming, at)
                    continue
                key = page_key(scope, seq, step.level, who, step.repetition, method)
                payload = Page(
                    escalation=seq,
                    level=step.level,
                    target=who,
                    repetition=step.repetition,
                    method=method,
                    key=key,
                    due_at=iso(at),
                    source=target,
                    proposal=escalation.proposal,
                )
                due.append(DuePage(key, payload))
    return due, upcoming


class OncallJob:
    """Appends what has fallen due: route escalations of new incidents, approval escalations, and pages."""

    def __init__(self, store: LogStore, index: IndexPort, clock: Clock, setup: OncallConfig) -> None:
        self.store = store
        self.index = index
        self.clock = clock
        self.setup = setup
        self.appended = 0

    async def tick(self) -> list[tuple[str, str]]:
        """One pass over the open incidents: returns the (scope, idempotency key) of every entry appended."""
        if not self.setup.enabled:
            return []
        now = self.clock.now()
        overrides = {s.name: await read_overrides(self.store, s.name) for s in self.setup.schedules}
        fired: list[tuple[str, str]] = []
        try:
            fired += await self.handoffs(now, overrides)
        except Exception:  # a handoff post never stops the pages
            log.exception("oncall: handoffs failed")
        for row in await self.index.list_scopes(kind="incident", open_only=True, limit=None):
            try:
                fired += await self.scope(row.id, now, overrides)
            except Exception:  # one bad scope never stops the others; the next tick tries again
                log.exception("oncall: checking %s failed", row.id)
        self.appended += len(fired)
        return fired

    async def handoffs(self, now: datetime, overrides: dict[str, list[Override]]) -> list[tuple[str, str]]:
        """An ``oncall_handoff`` entry for each schedule whose person changed within the last ``HANDOFF_WINDOW_S``
        (once per handoff: keyed by the schedule and the moment; a schedule enabled long after its last handoff
        posts nothing until the next one)."""
        fired = []
        for schedule in self.setup.schedules:
            mine = overrides.get(schedule.name, [])
            shift = next(
                (s for s in shifts(schedule, now, now + timedelta(seconds=1), mine) if s.start <= now < s.end), None
            )
            if shift is None or (now - shift.start).total_seconds() > HANDOFF_WINDOW_S:
                continue
            at = shift.start
            previous = on_call(schedule, at - timedelta(microseconds=1), mine)
            if previous == shift.user:
                continue
            until = next_handoff(schedule, at, mine)
            payload = OncallHandoff(
                schedule=schedule.name,
                user=shift.user,
                previous=previous or "",
                at=iso(at),
                until=iso(until) if until else "",
            )
            key = f"handoff:{schedule.name}:{iso(at)}"
            entry = NewEntry.make("oncall_handoff", ACTOR, payload)
            scope = await open_schedule_scope(self.store, schedule.name)
            result = await self.store.append(scope, [entry], idempotency_key=key)
            if not result.duplicate:
                fired.append((scope, key))
        return fired

    async def scope(self, scope: str, now: datetime, overrides: dict[str, list[Override]]) -> list[tuple[str, str]]:
        state = await self.store.get_state(scope)
        if state.forked_from or not state.is_open or state.kind != "incident" or not state.created_at:
            return []
        entries = await self.store.read(scope, kinds=PAGING_KINDS)
        fired = await self._start(scope, state, entries, now)
        if fired:
            entries = await self.store.read(scope, kinds=PAGING_KINDS)
        live: list[Entry] = []
        for e in entries:
            if e.kind == "escalation":
                live.append(e)
            elif e.kind == "acknowledged":
                live = []
        if not live:
            return fired
        known = {e.payload.key for e in entries if isinstance(e.payload, Page)}
        waiting = {pid for pid, p in state.proposals.items() if p.status == "waiting_for_approval"}
        for esc in live:
            p = esc.payload
            assert isinstance(p, Escalation)
            if p.reason == "approval" and p.proposal not in waiting:
                continue  # approved, denied or expired: nobody needs to be woken for it any more
            forward = [
                (e.payload.to_level, e.at)
                for e in entries
                if isinstance(e.payload, Escalated) and e.payload.escalation == esc.seq
            ]
            due, _next = planned(scope, esc.seq, p, esc.at, forward, self.setup, overrides, now)
            for item in due:
                if item.key in known:
                    continue
                entry = NewEntry.make("page", ACTOR, item.payload, refs=(esc.seq,))
                result = await self.store.append(scope, [entry], idempotency_key=item.key)
                known.add(item.key)
                if not result.duplicate:
                    fired.append((scope, item.key))
        return fired

    async def _start(self, scope: str, state: ScopeState, entries: list[Entry], now: datetime) -> list[tuple[str, str]]:
        """The route's escalation of a new incident, and the escalations of proposals parked too long."""
        fired = []
        setup = self.setup
        started = {e.payload.proposal for e in entries if isinstance(e.payload, Escalation) and e.payload.proposal}
        if not any(isinstance(e.payload, Escalation) and e.payload.reason == "route" for e in entries):
            age = (now - parse_iso(state.created_at)).total_seconds()
            policy = setup.route_for(state.severity, state.services)
            if policy is not None and age <= setup.auto_page_within:
                text = f"paging policy {policy.name} (route for SEV{state.severity or '?'})"
                payload = Escalation(policy=policy.name, levels=levels_of(policy), repeat=policy.repeat, text=text)
                key = f"escalation:route:{scope}"
                entry = NewEntry.make("escalation", ACTOR, payload)
                result = await self.store.append(scope, [entry], idempotency_key=key)
                if not result.duplicate:
                    fired.append((scope, key))
        approver = setup.approver() if setup.approval_after > 0 else None
        if approver is not None:
            for pid, proposal in state.proposals.items():
                if proposal.status != "waiting_for_approval" or pid in started or not proposal.proposed_seq:
                    continue
                made = await self.store.read_seqs(scope, [proposal.proposed_seq])
                if not made or (now - made[0].at).total_seconds() < setup.approval_after:
                    continue
                text = f"proposal {proposal.action} has waited for approval longer than the approval wait"
                payload = Escalation(
                    policy=approver.name,
                    levels=levels_of(approver),
                    repeat=approver.repeat,
                    reason="approval",
                    proposal=pid,
                    text=text,
                )
                key = f"escalation:approval:{scope}:{pid}"
                entry = NewEntry.make("escalation", ACTOR, payload, refs=(proposal.proposed_seq,))
                result = await self.store.append(scope, [entry], idempotency_key=key)
                if not result.duplicate:
                    fired.append((scope, key))
        return fired
