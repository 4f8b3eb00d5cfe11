"""The timeline (the scope's entries, with those of merged linked scopes, in time order) and the human record
of decisions."""

from __future__ import annotations

from datetime import datetime

from decklog.core.clock import iso
from decklog.core.entries import (
    Decision,
    Entry,
    ScopeLinked,
)
from decklog.core.reports.model import (
    DecisionLine,
    TimelineLine,
)
from decklog.core.reports.sections.source import Source, origin, report_entries


def timeline(src: Source) -> tuple[TimelineLine, ...]:
    rows: list[tuple[datetime, int, str, int, TimelineLine]] = []
    for e in src.entries:
        rows.append((e.at, 0, e.scope, e.seq, _line(src, e, src.thread_permalink)))
    for scope in sorted(src.merged_scopes()):
        log = src.linked_logs[scope]
        for e in report_entries(log.entries):
            if isinstance(e.payload, ScopeLinked) and e.payload.scope == src.main.scope:
                continue  # the other half of a link this log already shows
            rows.append((e.at, 1, scope, e.seq, _line(src, e, "")))
    rows.sort(key=lambda r: (r[0], r[1], r[2], r[3]))
    return tuple(r[4] for r in rows)


def _line(src: Source, e: Entry, thread_permalink: str) -> TimelineLine:
    return TimelineLine(
        scope=e.scope,
        seq=e.seq,
        at=iso(e.at),
        offset_s=src.offset(e.at),
        origin=origin(e.actor),
        actor=e.actor,
        kind=e.kind,
        text=e.text,
        link=src.link_for(e, thread_permalink),
        refs=e.refs,
    )


def decisions(src: Source) -> tuple[DecisionLine, ...]:
    return tuple(
        DecisionLine(
            seq=e.seq,
            at=iso(e.at),
            by=e.actor,
            origin=origin(e.actor),
            text=e.payload.text,
            rationale=e.payload.rationale,
            expected_outcome=e.payload.expected_outcome,
            link=src.link_for(e),
        )
        for e in src.entries
        if isinstance(e.payload, Decision)
    )
