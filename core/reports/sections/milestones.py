"""Milestones, the summary and the impact: declared → first human response → mitigated → resolved, the
severity history, and the alerts that fired."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from decklog.core.clock import iso
from decklog.core.entries import (
    Constraint,
    Declared,
    Entry,
    Goal,
    Observation,
    SeverityChanged,
    StatusChanged,
)
from decklog.core.reports.model import (
    AlertLine,
    Impact,
    Milestone,
    MilestoneName,
    SeverityStep,
    Summary,
)
from decklog.core.reports.sections.source import Source, seconds
from decklog.core.state import NOT_A_RESPONSE, mtta


def acknowledges(e: Entry) -> bool:
    """Whether an entry is the incident's first human response when none came before: the definition of the
    state's ``acknowledged_at`` (core/state/folding.py), where an unpaged incident's MTTA ends (core/state/mtta.py,
    which the report's summary and insights both read). A person's
    declaration, a person's entry that responds to the incident (not an export, a thread link or another
    ``NOT_A_RESPONSE``), or the alert source's acknowledgement."""
    p = e.payload
    if isinstance(p, Declared):
        return e.actor.type == "human"
    if isinstance(p, Observation) and p.alert_status == "acknowledged":
        return True
    return e.actor.type == "human" and e.kind not in NOT_A_RESPONSE


def milestones(src: Source) -> tuple[Milestone, ...]:
    """Declared, first human response, mitigated, resolved — computed the way the state fold computes them."""
    found: dict[str, Entry] = {}
    for e in src.entries:
        p = e.payload
        if isinstance(p, Declared) and "declared" not in found:
            found["declared"] = e
        if "first_human_response" not in found and acknowledges(e):
            found["first_human_response"] = e
        if isinstance(p, StatusChanged):
            if p.status in ("mitigated", "resolved") and "mitigated" not in found:
                found["mitigated"] = e
            if p.status == "resolved":
                found["resolved"] = e
            else:
                found.pop("resolved", None)  # reopened
    labels: dict[MilestoneName, str] = {
        "declared": "Declared",
        "first_human_response": "First human response",
        "mitigated": "Mitigated",
        "resolved": "Resolved",
    }
    out: list[Milestone] = []
    previous: Entry | None = None
    declared = found.get("declared")
    for name, label in labels.items():
        hit = found.get(name)
        if hit is None:
            out.append(Milestone(name=name, label=label, reached=False))
            continue
        out.append(
            Milestone(
                name=name,
                label=label,
                reached=True,
                seq=hit.seq,
                at=iso(hit.at),
                by=hit.actor,
                since_declared_s=seconds(hit.at, declared.at) if declared is not None else None,
                since_previous_s=seconds(hit.at, previous.at) if previous is not None else None,
                link=src.link_for(hit),
            )
        )
        previous = hit
    return tuple(out)


def summary(src: Source, milestones: tuple[Milestone, ...]) -> Summary:
    s = src.state
    d = src.declared
    declared = d.payload if d is not None and isinstance(d.payload, Declared) else None
    resolution = ""
    goals: list[str] = []
    constraints: list[str] = []
    for e in src.entries:
        p = e.payload
        if isinstance(p, StatusChanged) and p.status == "resolved" and p.summary:
            resolution = p.summary
        elif isinstance(p, Goal):
            goals.append(p.text)
        elif isinstance(p, Constraint):
            constraints.append(p.text)
    resolved = next(m for m in milestones if m.name == "resolved")
    span = mtta(s)
    return Summary(
        scope=src.main.scope,
        kind=s.kind,
        title=s.title or src.main.scope,
        status=s.status,
        severity=s.severity,
        worst_severity=worst_severity(src),
        services=s.services,
        declared_at=iso(d.at) if d is not None else None,
        declared_by=d.actor if d is not None else None,
        declared_via=declared.via if declared is not None else "",
        resolved_at=resolved.at,
        duration_s=resolved.since_declared_s,
        mtta_from=span.start_from,
        mtta_s=span.seconds,
        description=declared.summary if declared is not None else "",
        resolution=resolution,
        goals=tuple(goals),
        constraints=tuple(constraints),
        thread_permalink=src.thread_permalink,
    )


def severity_steps(src: Source) -> list[SeverityStep]:
    steps: list[SeverityStep] = []
    for e in src.entries:
        p = e.payload
        if isinstance(p, Declared) and p.severity is not None:
            steps.append(SeverityStep(seq=e.seq, at=iso(e.at), severity=p.severity, by=e.actor, reason="declared"))
        elif isinstance(p, SeverityChanged):
            steps.append(SeverityStep(seq=e.seq, at=iso(e.at), severity=p.severity, by=e.actor, reason=p.reason))
    return steps


def worst_severity(src: Source) -> int | None:
    values = [s.severity for s in severity_steps(src)]
    return min(values) if values else None


def impact(src: Source, milestones: tuple[Milestone, ...]) -> Impact:
    alerts: dict[str, dict[str, Any]] = {}
    first_firing: datetime | None = None
    for e in src.entries:
        p = e.payload
        if not isinstance(p, Observation) or not p.fingerprint:
            continue
        at = iso(e.at)
        status = p.alert_status or (alerts[p.fingerprint]["status"] if p.fingerprint in alerts else "firing")
        if status == "firing" and first_firing is None:
            first_firing = e.at
        if p.fingerprint not in alerts:
            alerts[p.fingerprint] = {
                "fingerprint": p.fingerprint,
                "title": p.text,
                "service": p.service,
                "source": p.source,
                "status": status,
                "first_at": at,
                "last_at": at,
                "notifications": 1,
                "resolved_at": at if status == "resolved" else None,
            }
            continue
        alert = alerts[p.fingerprint]
        alert.update(status=status, last_at=at, notifications=alert["notifications"] + 1)
        alert["resolved_at"] = at if status == "resolved" else None
    started = src.declared.at if src.declared is not None else None
    if first_firing is not None and (started is None or first_firing < started):
        started = first_firing
    mitigated = next((m for m in milestones if m.name == "mitigated" and m.reached), None)
    mitigated_at = mitigated.at if mitigated is not None else None
    duration = None
    if started is not None and mitigated is not None:
        end = next(e.at for e in src.entries if e.seq == mitigated.seq)
        duration = seconds(end, started)
    return Impact(
        services=src.state.services,
        worst_severity=worst_severity(src),
        severity_history=tuple(severity_steps(src)),
        alerts=tuple(AlertLine(**a) for a in alerts.values()),
        started_at=iso(started) if started is not None else None,
        mitigated_at=mitigated_at,
        duration_s=duration,
    )
