"""Alert routing rules as pure functions: severity mapping, a notification's identity, the observation an alert
becomes, and what appending it to an incident decides (the observation, plus one resolve suggestion at all-clear).

Nothing here does I/O or reads the clock; ``core.alerts.router`` applies these under its locks.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Literal

from decklog.core.clock import iso
from decklog.core.entries import Actor, NewEntry, Observation, Suggestion
from decklog.core.signals import AlertSignal
from decklog.core.state import ScopeState

#: ``Observation.source`` of the per-minute summaries (``core.alerts.summary``).
SUMMARY_SOURCE = "decklog:alerts"
#: Who records what decklog itself concludes from alerts (summaries, the all-clear suggestion).
ALERTS_ACTOR = Actor.system(SUMMARY_SOURCE)
TITLE_MAX = 300  # ``Declared.title``

Outcome = Literal["new", "joined", "repeat", "resolved", "acknowledged", "duplicate", "ignored"]


@dataclass(frozen=True)
class AlertPolicy:
    """The ``[alerts]`` section of decklog.toml, as routing needs it. ``severity`` keys are lower-case."""

    grouping_window: timedelta = timedelta(minutes=10)
    rate_limit_per_minute: int = 120
    raw_evidence_bytes: int = 16_384
    default_severity: int = 3
    severity: Mapping[str, Mapping[str, int]] = field(default_factory=dict)

    @classmethod
    def build(
        cls,
        *,
        grouping_window_minutes: float = 10,
        rate_limit_per_minute: int = 120,
        raw_evidence_bytes: int = 16_384,
        default_severity: int = 3,
        severity: Mapping[str, Mapping[str, int]] | None = None,
    ) -> AlertPolicy:
        """``AlertPolicy.build(**config.alerts.model_dump())``: source names and their words are matched
        case-insensitively."""
        table = {
            source.lower(): {word.strip().lower(): int(level) for word, level in words.items()}
            for source, words in (severity or {}).items()
        }
        return cls(
            grouping_window=timedelta(minutes=grouping_window_minutes),
            rate_limit_per_minute=rate_limit_per_minute,
            raw_evidence_bytes=raw_evidence_bytes,
            default_severity=default_severity,
            severity=table,
        )


@dataclass(frozen=True)
class AlertOutcome:
    """What one alert of a request did: ``new`` incident, ``joined`` an open one (a new fingerprint), ``repeat`` /
    ``resolved`` / ``acknowledged`` (a known fingerprint), ``duplicate`` (a retry: nothing appended) or ``ignored``
    (a resolve or acknowledgement of an alert no open incident has)."""

    fingerprint: str
    status: str
    outcome: Outcome
    scope: str = ""
    seq: int = 0
    severity: int | None = None
    storm: bool = False
    suggested_resolve: bool = False
    reason: str = ""

    @property
    def appended(self) -> bool:
        return self.outcome not in ("duplicate", "ignored")

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "fingerprint": self.fingerprint,
            "status": self.status,
            "outcome": self.outcome,
            "scope": self.scope or None,
            "seq": self.seq or None,
        }
        if self.severity is not None:
            out["severity"] = self.severity
        if self.storm:
            out["storm"] = True
        if self.suggested_resolve:
            out["suggested_resolve"] = True
        if self.reason:
            out["reason"] = self.reason
        return out


def map_severity(policy: AlertPolicy, source: str, source_severity: str) -> int:
    """The source's word → decklog's 1–4 via ``[alerts.severity.<source>]``; else ``sevN`` / ``pN`` / ``N`` as
    decklog severities; else ``default_severity``.

    >>> map_severity(AlertPolicy.build(severity={"alertmanager": {"critical": 1}}), "alertmanager", "CRITICAL")
    1
    """
    word = source_severity.strip().lower()
    if not word:
        return policy.default_severity
    mapped = policy.severity.get(source.lower(), {}).get(word)
    if mapped is not None and 1 <= mapped <= 4:
        return mapped
    bare = word.removeprefix("sev").removeprefix("p").strip()
    if bare in ("1", "2", "3", "4"):
        return int(bare)
    return policy.default_severity


def notification_key(signal: AlertSignal) -> str | None:
    """The idempotency key of one notification about one alert, or None when the source gives nothing to tell a
    retry from a new notification (then every delivery counts).

    Identity = source + fingerprint + status + (the source's event id, else the time the status refers to:
    ``ended_at`` for a resolve, else ``started_at``, else — no usable time, e.g. Go's zero ``startsAt`` of
    Grafana's test and no-data notifications — the alert's content: title, summary, severity, labels). A vendor's
    retry of a delivery repeats all of these and appends nothing; a new notification (a new PagerDuty/Datadog
    event, a re-fire with a new ``startsAt``, changed content) counts.
    """
    when = signal.ended_at if signal.status == "resolved" and signal.ended_at else signal.started_at
    discriminator = signal.event_id or (iso(when) if when is not None else "")
    if not discriminator:
        content = [signal.title, signal.summary, signal.source_severity, sorted(signal.labels.items())]
        discriminator = "content:" + json.dumps(content, ensure_ascii=True)
    material = json.dumps([signal.source, signal.fingerprint, signal.status, discriminator], ensure_ascii=True)
    return f"alert:{signal.source}:{hashlib.sha256(material.encode('ascii')).hexdigest()[:32]}"


def incident_title(signal: AlertSignal) -> str:
    """A declaration's title from an alert: whitespace collapsed, at most ``TITLE_MAX`` characters."""
    title = " ".join(signal.title.split()) or f"Alert {signal.fingerprint}"
    return title if len(title) <= TITLE_MAX else title[: TITLE_MAX - 1].rstrip() + "…"


def storm_title(source: str, limit: int) -> str:
    return f"Alert storm: more than {limit} {source} alerts a minute"


def storm_key(source: str) -> str:
    """The index key under which a source's open alert-storm incident is claimed (beside alert fingerprints)."""
    return f"storm:{source}"


def is_storm_title(title: str, source: str) -> bool:
    return title.startswith("Alert storm: ") and title.endswith(f" {source} alerts a minute")


def storm_source(title: str) -> str:
    """The source of an alert-storm incident's title (``storm_title``), or "" when it is not one."""
    match = _STORM.fullmatch(title)
    return match.group(1) if match else ""


_STORM = re.compile(r"Alert storm: more than \d+ (\S+) alerts a minute")


def alert_observation(
    signal: AlertSignal,
    *,
    severity: int,
    raw: Mapping[str, Any] | None = None,
    opened_incident: bool = False,
    key: str | None = None,
    group: str = "",
) -> Observation:
    """The observation an alert notification becomes. ``text`` is the alert's title (the state fold names the
    alert after it); ``opened_incident`` marks the alert shown by the incident's header (summaries skip it)."""
    data: dict[str, Any] = {"severity": severity}
    optional: dict[str, Any] = {
        "source_severity": signal.source_severity,
        "summary": signal.summary,
        "event_id": signal.event_id,
        "started_at": iso(signal.started_at) if signal.started_at else "",
        "ended_at": iso(signal.ended_at) if signal.ended_at else "",
        "occurred_at": iso(signal.occurred_at) if signal.occurred_at else "",
        "links": [{"url": link.url, "title": link.title} for link in signal.links],
    }
    data.update({name: value for name, value in optional.items() if value})
    if key:
        data["key"] = key  # the state remembers it: a resend with the same identity appends nothing
    if group:
        data["group"] = group
    if opened_incident:
        data["opened_incident"] = True
    return Observation(
        text=" ".join(signal.title.split()) or f"Alert {signal.fingerprint}",
        source=signal.source,
        service=signal.service,
        fingerprint=signal.fingerprint,
        alert_status=signal.status,
        labels=dict(signal.labels),
        links=tuple(link.url for link in signal.links),
        data=data,
        raw=dict(raw or {}),
    )


def append_alert(state: ScopeState, observation: NewEntry) -> list[NewEntry]:
    """Decide what an alert observation appends to ``state``'s scope (run inside the append's transaction).

    ``[]`` when the scope is not an open incident (the caller routes elsewhere). Otherwise the observation, plus
    one ``resolve`` suggestion when it resolves the last unresolved alert of the incident and no open resolve
    suggestion exists (once per all-clear: a repeated resolve of an already resolved alert suggests nothing).
    """
    if state.kind != "incident" or not state.is_open:
        return []
    p = observation.payload
    assert isinstance(p, Observation)
    out = [observation]
    previous = state.alerts.get(p.fingerprint)
    newly_resolved = p.alert_status == "resolved" and (previous is None or previous.status != "resolved")
    others_open = [a for a in state.alerts.values() if a.fingerprint != p.fingerprint and a.status != "resolved"]
    if newly_resolved and not others_open and "resolve" not in state.suggestion_actions.values():
        total = len(state.alerts) + (0 if previous is not None else 1)
        seq = state.version + 1
        alerts = "the alert" if total == 1 else f"all {total} alerts"
        out.append(
            NewEntry.make(
                "suggestion",
                ALERTS_ACTOR,
                Suggestion(
                    suggestion_id=f"alerts-clear-{seq}",
                    text=f"{alerts[0].upper()}{alerts[1:]} of this incident {'has' if total == 1 else 'have'} "
                    "resolved. Resolve the incident?",
                    action="resolve",
                    rationale=f"“{clip(p.text, 80)}” resolved at #{seq}, and no alert of this incident is firing",
                ),
                refs=(seq,),
            )
        )
    return out


def clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"
