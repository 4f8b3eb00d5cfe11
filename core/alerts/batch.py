"""One notification's alerts as one append per incident: partitioning, and what the append decides.

Pure functions (no I/O, no clock). ``partition`` splits a request's signals into the parts that each go to one
incident; ``decide_batch`` is the ``decide`` callable of one part's append: it drops repeats that change nothing
(same notification identity as the alert's last one), and adds what the notification implies for the incident —
a truncation observation, a severity change or a note asking the commander to confirm one, a one-time set-up note,
and the all-clear suggestion.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from decklog.core.alerts.rules import (
    ALERTS_ACTOR,
    SUMMARY_SOURCE,
    TITLE_MAX,
    AlertPolicy,
    alert_observation,
    clip,
    map_severity,
    notification_key,
)
from decklog.core.entries import Actor, NewEntry, Observation, ScopeLinked, SeverityChanged, Suggestion
from decklog.core.signals import AlertSignal
from decklog.core.state import ScopeState

#: Labels that name a service explicitly: alerts of one notification that differ in them go to separate incidents.
SERVICE_LABELS = ("service", "service.name")
#: How sources are named in thread lines.
SOURCE_NAMES = {
    "alertmanager": "Alertmanager",
    "grafana": "Grafana",
    "pagerduty": "PagerDuty",
    "datadog": "Datadog",
    "generic": "the generic source",
}


def source_name(source: str) -> str:
    return SOURCE_NAMES.get(source, source)


def explicit_service(signal: AlertSignal) -> str:
    """The alert's explicit service label (``service``, OpenTelemetry ``service.name``), or ""."""
    for name in SERVICE_LABELS:
        value = signal.labels.get(name, "")
        if value:
            return value
    return ""


@dataclass(frozen=True)
class Part:
    """Signals of one request that go to one incident. ``group`` "" = a lone alert routed by fingerprint and
    service; ``family`` is the notification group this part was split off by a differing service label ("" when
    the notification was not split)."""

    group: str
    items: tuple[tuple[int, AlertSignal], ...]
    family: str = ""

    @property
    def signals(self) -> list[AlertSignal]:
        return [signal for _, signal in self.items]

    @property
    def first(self) -> AlertSignal:
        return self.items[0][1]


def partition(signals: Sequence[AlertSignal]) -> list[Part]:
    """Group by ``AlertSignal.group``; split a group only where explicit service labels differ (alerts without
    one stay with the group's first service). Signals without a group are one part each. Order is kept."""
    groups: dict[str, list[tuple[int, AlertSignal]]] = {}
    parts: list[Part | str] = []
    for index, signal in enumerate(signals):
        if not signal.group:
            parts.append(Part("", ((index, signal),)))
            continue
        if signal.group not in groups:
            groups[signal.group] = []
            parts.append(signal.group)
        groups[signal.group].append((index, signal))
    out: list[Part] = []
    for part in parts:
        if isinstance(part, Part):
            out.append(part)
            continue
        items = groups[part]
        services = list(dict.fromkeys(s for s in (explicit_service(sig) for _, sig in items) if s))
        if len(services) <= 1:
            out.append(Part(part, tuple(items)))
            continue
        by_service: dict[str, list[tuple[int, AlertSignal]]] = {svc: [] for svc in services}
        for index, signal in items:
            by_service[explicit_service(signal) or services[0]].append((index, signal))
        for svc in services:
            out.append(Part(f"{part}|service={svc}", tuple(by_service[svc]), family=part))
    return out


def in_family(group: str, family: str) -> bool:
    """Is ``group`` the notification group ``family`` or one of the service groups split off it?"""
    return group == family or group.startswith(family + "|service=")


@dataclass(frozen=True)
class Prepared:
    """One alert ready to append: its request index, mapped severity, notification identity and observation."""

    index: int
    signal: AlertSignal
    severity: int
    key: str | None
    entry: NewEntry


def prepare(policy: AlertPolicy, part: Part, raw: dict[str, Any]) -> list[Prepared]:
    """Each alert of ``part`` ready to append; ``raw`` (the vendor payload) goes on the first observation only."""
    actor = Actor.system(part.first.source)
    return [prepare_one(policy, part, n, raw, actor=actor) for n in range(len(part.items))]


def prepare_one(
    policy: AlertPolicy, part: Part, n: int, raw: dict[str, Any], *, opened: bool = False, actor: Actor | None = None
) -> Prepared:
    """The ``n``-th alert of ``part``; ``opened``: its observation is the one that opens the incident."""
    index, signal = part.items[n]
    severity = map_severity(policy, signal.source, signal.source_severity)
    key = notification_key(signal)
    observation = alert_observation(
        signal, severity=severity, raw=raw if n == 0 else None, opened_incident=opened, key=key, group=part.group
    )
    who = actor if actor is not None and actor.id == signal.source else Actor.system(signal.source)
    return Prepared(index, signal, severity, key, NewEntry.make("observation", who, observation, idempotency_key=key))


@dataclass
class Chosen:
    """What the last ``decide_batch`` run chose (the store runs ``decide`` once per append)."""

    items: list[Prepared] = field(default_factory=list)
    known: frozenset[str] = frozenset()
    skipped: list[Prepared] = field(default_factory=list)


def decide_batch(
    state: ScopeState,
    batch: Sequence[Prepared],
    *,
    group: str,
    chosen: Chosen,
    links: Sequence[NewEntry] = (),
) -> list[NewEntry]:
    """The entries one part appends to ``state``'s incident (``[]`` when it is not an open incident)."""
    chosen.items, chosen.skipped, chosen.known = [], [], frozenset(state.alerts)
    if state.kind != "incident" or not state.is_open:
        return []
    seen: dict[str, str | None] = {}
    for item in batch:
        fp = item.signal.fingerprint
        last = seen[fp] if fp in seen else state.alert_keys.get(fp)
        if item.key is not None and last == item.key:
            chosen.skipped.append(item)  # a resend: nothing changed
            continue
        seen[fp] = item.key
        chosen.items.append(item)
    out = [item.entry for item in chosen.items]
    first = batch[0].signal if batch else None
    if first is not None:
        out.extend(_left_out(state, first, group))
        out.extend(_severity(state, chosen.items))
        out.extend(_notes(state, batch))
    out.extend(links)
    changes = [(i.signal.fingerprint, i.signal.status, i.signal.title) for i in chosen.items]
    suggestion = all_clear(state, changes)
    if suggestion is not None:
        out.append(suggestion)
    return out


def _left_out(state: ScopeState, signal: AlertSignal, group: str) -> list[NewEntry]:
    """A truncation observation when the sender's left-out count changed (``truncatedAlerts``)."""
    previous = state.alerts_left_out.get(signal.source, 0)
    count = signal.left_out
    if count == previous:
        return []
    name = source_name(signal.source)
    if count:
        text = f"{count} more alert{'s' if count != 1 else ''} not sent by {name} (its notification was truncated)"
    else:
        text = f"{name} sends every alert of the group again (none left out)"
    observation = Observation(text=text, source=signal.source, data={"left_out": count, "group": group})
    return [NewEntry.make("observation", Actor.system(signal.source), observation)]


def _severity(state: ScopeState, items: Sequence[Prepared]) -> list[NewEntry]:
    """Severity follows the sources until a person decides: a more severe alert raises it; a source whose priority
    is authoritative (PagerDuty) moves it both ways. Once a person set it, sources never lower it, and a raise
    becomes a one-time note asking the commander to confirm."""
    setting = [i for i in items if i.signal.sets_severity and i.signal.status != "resolved"]
    if setting:
        pick, both_ways = setting[-1], True
        why = f"{source_name(pick.signal.source)} priority {pick.signal.source_severity}"
    else:
        firing = [i for i in items if i.signal.status == "firing" and i.signal.source_severity]
        if not firing:
            return []
        pick, both_ways = min(firing, key=lambda i: i.severity), False
        why = f"{source_name(pick.signal.source)}: “{clip(pick.signal.title, 80)}” is {pick.signal.source_severity}"
    target, current = pick.severity, state.severity
    if target == current:
        return []
    lower = current is not None and target > current
    if lower and not both_ways:
        return []
    source = pick.signal.source
    if state.severity_set_by_person:
        note = f"severity:{source}:{target}"
        if lower or note in state.alert_notes:
            return []
        text = (
            f"{why} → SEV{target}, but a person set SEV{current}: commander, confirm with "
            f"`/incident severity {target}` if the severity should change"
        )
        return [
            NewEntry.make(
                "observation", ALERTS_ACTOR, Observation(text=text, source=SUMMARY_SOURCE, data={"note": note})
            )
        ]
    change = SeverityChanged(severity=target, previous=current, reason=why)
    return [NewEntry.make("severity_changed", Actor.system(source), change)]


def _notes(state: ScopeState, batch: Sequence[Prepared]) -> list[NewEntry]:
    """One-time set-up notes a source asks for (e.g. Datadog's default payload → use decklog's template)."""
    out: list[NewEntry] = []
    given = set(state.alert_notes)
    for item in batch:
        note_id = item.signal.note_id
        if note_id and item.signal.note and note_id not in given:
            given.add(note_id)
            observation = Observation(text=item.signal.note, source=SUMMARY_SOURCE, data={"note": note_id})
            out.append(NewEntry.make("observation", ALERTS_ACTOR, observation))
    return out


def all_clear(state: ScopeState, changes: Sequence[tuple[str, str, str]]) -> NewEntry | None:
    """One resolve suggestion when a batch resolves the incident's last firing alerts (once per all-clear).
    ``changes``: the batch's alert observations, first in the batch, as ``(fingerprint, status, title)``."""
    if not changes or "resolve" in state.suggestion_actions.values():
        return None
    final = {a.fingerprint: a.status for a in state.alerts.values()}
    last_resolved: int | None = None
    for n, (fp, status, _title) in enumerate(changes):
        if status == "resolved" and final.get(fp) != "resolved":
            last_resolved = n
        final[fp] = status
    if last_resolved is None or any(s != "resolved" for s in final.values()):
        return None
    total = len(final)
    title = changes[last_resolved][2]
    seq = state.version + 1 + last_resolved
    alerts = "the alert" if total == 1 else f"all {total} alerts"
    return NewEntry.make(
        "suggestion",
        ALERTS_ACTOR,
        Suggestion(
            suggestion_id=f"alerts-clear-{seq}",
            text=f"{alerts[0].upper()}{alerts[1:]} of this incident {'has' if total == 1 else 'have'} "
            "resolved. Resolve the incident?",
            action="resolve",
            rationale=f"“{clip(title, 80)}” resolved at #{seq}, and no alert of this incident is firing",
        ),
        refs=(seq,),
    )


def opening_severity(items: Sequence[Prepared]) -> int:
    """The severity an incident opens with: the last authoritative priority (PagerDuty), else the most severe
    firing alert, else the first alert's."""
    setting = [i for i in items if i.signal.sets_severity and i.signal.status != "resolved"]
    if setting:
        return setting[-1].severity
    firing = [i.severity for i in items if i.signal.status == "firing" and i.signal.source_severity]
    return min(firing) if firing else items[0].severity


def group_title(part: Part) -> str:
    """The title of an incident a part opens: the alert's, or the group's when it holds several alerts."""
    titles = list(dict.fromkeys(" ".join(s.title.split()) for s in part.signals))
    first = part.first
    if len(titles) <= 1:
        title = titles[0] if titles else f"Alert {first.fingerprint}"
    elif first.group_title:
        title = first.group_title
    else:
        title = f"{titles[0]} (+{len(titles) - 1} more)"
    service = explicit_service(first)
    if part.family and service and service not in title:
        title = f"{title} — {service}"
    return title if len(title) <= TITLE_MAX else title[: TITLE_MAX - 1].rstrip() + "…"


def link_entry(scope: str, relation: str, reason: str, source: str) -> NewEntry:
    return NewEntry.make(
        "scope_linked", Actor.system(source), ScopeLinked(scope=scope, relation=relation, reason=reason)
    )
