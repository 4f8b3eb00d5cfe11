"""``build_report``: a pure function from a scope's log (and its linked scopes' logs) to a ``Report``.

Deterministic by construction: it reads only the entries and the verification results it is given, never the
clock, never an entry id; every list is in log order (or sorted by a total key). ``report_exported`` entries are
dropped first, so recording an export never changes the next export's bytes.

The builder only composes: each section of the report is derived by its own module in ``core/reports/sections/``
from one shared :class:`~core.reports.sections.source.Source`.
"""

from __future__ import annotations

from collections.abc import Sequence

from decklog.core.reports.model import Report
from decklog.core.reports.sections import (
    actions,
    compensations,
    findings,
    follow_ups,
    inferences,
    linked,
    milestones,
    obligations,
    people,
    questions,
    timeline,
)
from decklog.core.reports.sections.source import ScopeLog, Source


def build_report(main: ScopeLog, linked: Sequence[ScopeLog] = ()) -> Report:
    """The post-incident report of ``main``; ``linked`` are the logs of the scopes it links to (any order)."""
    return compose_report(Source(main, {log.scope: log for log in linked}))


def compose_report(src: Source) -> Report:
    """The report, section by section (the order of the derivations does not matter: each is pure)."""
    reached = milestones.milestones(src)
    action_lines, verifications, rejections, runs = actions.actions(src)
    obligation_lines = obligations.obligations(src)
    return Report(
        scope=src.main.scope,
        summary=milestones.summary(src, reached),
        impact=milestones.impact(src, reached),
        milestones=reached,
        timeline=timeline.timeline(src),
        decisions=timeline.decisions(src),
        inferences=inferences.inferences(src),
        findings=findings.findings(src),
        actions=action_lines,
        verifications=verifications,
        fence_rejections=rejections,
        compensations=compensations.compensations(src, runs, action_lines),
        open_questions=questions.open_questions(src, runs, verifications),
        obligations=tuple(o for o in obligation_lines if o.purpose != "follow_up" and o.status in ("open", "claimed")),
        follow_ups=tuple(o for o in obligation_lines if o.purpose == "follow_up"),
        tracker_follow_ups=follow_ups.follow_ups(src),
        participants=people.participants(src),
        agent_turns=people.turns(src),
        agent_totals=people.totals(src),
        linked_scopes=linked.linked(src),
        integrity=linked.integrity(src),
    )


__all__ = ["build_report", "compose_report"]
