"""What people do with on-call, as entries: acknowledge, page by hand, escalate now, override a schedule.

Every command is one append (persist, then the Slack handler acks): paging a person is an ``escalation`` entry
whose pages the escalation job (core/oncall/escalation.py) appends as they fall due — never a proposal waiting for
an approval. An override is an ``oncall_override`` entry in the schedule's own scope ``oncall/<schedule>``, declared
on first use under an idempotency key, so two replicas create it once.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta

from decklog.core.clock import Clock, iso, parse_iso
from decklog.core.entries import Actor, Declared, NewEntry
from decklog.core.entries.oncall import Acknowledged, Escalated, Escalation, EscalationLevel, OncallOverride, Page
from decklog.core.errors import InvalidInput
from decklog.core.oncall.rotation import Override
from decklog.core.oncall.setup import OncallConfig, Policy
from decklog.core.store.ports import AppendResult, LogStore

PAGING_KINDS = ("escalation", "page", "acknowledged", "escalated")
MAX_OVERRIDE_S = 90 * 86_400.0


def schedule_scope(schedule: str) -> str:
    return f"oncall/{schedule}"


def levels_of(policy: Policy) -> tuple[EscalationLevel, ...]:
    return tuple((lv.targets, lv.after) for lv in policy.levels)


def running(entries: Sequence[object]) -> list[int]:
    """The seqs of the escalations no acknowledgement has stopped, from ``PAGING_KINDS`` entries in seq order."""
    live: list[int] = []
    for e in entries:
        kind = getattr(e, "kind", "")
        if kind == "escalation":
            live.append(e.seq)  # type: ignore[attr-defined]
        elif kind == "acknowledged":
            live = []
    return live


async def acknowledge(store: LogStore, scope: str, user: str, *, via: str = "command") -> AppendResult:
    """Record ``user``'s acknowledgement; it stops every escalation running in ``scope``. Always recorded (an
    acknowledgement that races a page is in the log either way); ``escalations`` says what it stopped."""
    state = await store.get_state(scope)
    if state.kind != "incident":
        raise InvalidInput(f"{scope} is not an incident", field="scope")
    stopped = running(await store.read(scope, kinds=PAGING_KINDS))
    payload = Acknowledged(user=user, via=via, escalations=tuple(stopped))
    return await store.append(scope, [NewEntry.make("acknowledged", Actor.human(user), payload)])


async def page(
    store: LogStore,
    scope: str,
    setup: OncallConfig,
    *,
    by: str,
    policy: str = "",
    user: str = "",
    idempotency_key: str | None = None,
) -> AppendResult:
    """Start paging in ``scope``: ``policy`` by name, or ``user`` alone (one level), or the route's policy."""
    state = await store.get_state(scope)
    if state.kind != "incident" or not state.created_at:
        raise InvalidInput(f"{scope} is not an incident", field="scope")
    if not state.is_open:
        raise InvalidInput(f"{scope} is resolved: nobody is paged for it", field="scope")
    if user:
        levels: tuple[EscalationLevel, ...] = (((f"user:{user}",), 0.0),)
        name = ""
        repeat = 0
    else:
        chosen = setup.policy(policy) if policy else setup.route_for(state.severity, state.services)
        if chosen is None:
            known = ", ".join(p.name for p in setup.policies) or "none configured"
            raise InvalidInput(
                f"no escalation policy {policy!r} (known: {known})"
                if policy
                else f"no route chooses a policy for this incident: name one (known: {known}) or a person",
                field="policy",
            )
        levels, name, repeat = levels_of(chosen), chosen.name, chosen.repeat
    text = f"paged {'<@' + user + '>' if user else 'policy ' + name} by <@{by}>"
    payload = Escalation(policy=name, levels=levels, repeat=repeat, reason="command", by=by, text=text)
    entry = NewEntry.make("escalation", Actor.human(by), payload)
    return await store.append(scope, [entry], idempotency_key=idempotency_key)


async def escalate(store: LogStore, scope: str, escalation: int, user: str) -> AppendResult:
    """Page the next level of ``escalation`` now (the DM's Escalate button)."""
    entries = await store.read(scope, kinds=PAGING_KINDS)
    found = next((e for e in entries if e.seq == escalation and isinstance(e.payload, Escalation)), None)
    if found is None:
        raise InvalidInput(f"no escalation #{escalation} in {scope}", field="escalation")
    assert isinstance(found.payload, Escalation)
    n = len(found.payload.levels)
    paged = [
        e.payload.repetition * n + e.payload.level
        for e in entries
        if isinstance(e.payload, Page) and e.payload.escalation == escalation
    ]
    forward = [
        e.payload.to_level for e in entries if isinstance(e.payload, Escalated) and e.payload.escalation == escalation
    ]
    paged_step = max([*paged, *forward, 0])
    total = len(found.payload.levels) * (found.payload.repeat + 1)
    if paged_step + 1 >= total:
        raise InvalidInput("this escalation has no further level to page", field="escalation")
    payload = Escalated(escalation=escalation, to_level=paged_step + 1, user=user)
    return await store.append(scope, [NewEntry.make("escalated", Actor.human(user), payload)])


async def awaiting_ack(store: LogStore, scopes: Sequence[str], user: str) -> str | None:
    """The incident among ``scopes`` whose latest unacknowledged page went to ``user`` (an SMS reply "ACK" names no
    incident), or None."""
    best: tuple[str, str] | None = None  # (page time, scope)
    for scope in scopes:
        entries = await store.read(scope, kinds=PAGING_KINDS)
        live = set(running(entries))
        for e in entries:
            p = e.payload
            if isinstance(p, Page) and p.target == user and p.escalation in live:
                at = iso(e.at)
                if best is None or at > best[0]:
                    best = (at, scope)
    return best[1] if best else None


async def read_overrides(store: LogStore, schedule: str) -> list[Override]:
    scope = schedule_scope(schedule)
    if not await store.exists(scope):
        return []
    out = []
    for e in await store.read(scope, kinds=("oncall_override",)):
        p = e.payload
        if isinstance(p, OncallOverride):
            out.append(Override(p.user, parse_iso(p.start), parse_iso(p.end), e.seq))
    return out


async def override(
    store: LogStore,
    setup: OncallConfig,
    clock: Clock,
    *,
    schedule: str,
    user: str,
    seconds: float,
    by: str,
    start: datetime | None = None,
) -> AppendResult:
    """Put ``user`` on call in ``schedule`` for ``seconds`` from ``start`` (default: now)."""
    if setup.schedule(schedule) is None:
        known = ", ".join(s.name for s in setup.schedules) or "none configured"
        raise InvalidInput(f"no schedule {schedule!r} (known: {known})", field="schedule")
    if not 0 < seconds <= MAX_OVERRIDE_S:
        raise InvalidInput("an override lasts more than 0 seconds and at most 90 days", field="duration")
    begins = start or clock.now()
    payload = OncallOverride(
        schedule=schedule, user=user, start=iso(begins), end=iso(begins + timedelta(seconds=seconds)), by=by
    )
    scope = await open_schedule_scope(store, schedule)
    return await store.append(scope, [NewEntry.make("oncall_override", Actor.human(by), payload)])


async def open_schedule_scope(store: LogStore, schedule: str) -> str:
    """The schedule's ``oncall/<name>`` scope, declared on first use (once across replicas: an idempotency key)."""
    scope = schedule_scope(schedule)
    if not await store.exists(scope):
        declared = Declared(title=f"On-call schedule {schedule}", via="oncall")
        first = NewEntry.make("declared", Actor.system("oncall"), declared)
        await store.append(scope, [first], idempotency_key=f"oncall-scope:{schedule}", create=True)
    return scope
