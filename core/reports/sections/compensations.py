"""Compensations: which run undid which, proposed, running or recorded."""

from __future__ import annotations

from decklog.core.clock import iso
from decklog.core.entries import (
    EffectCompensated,
    Entry,
)
from decklog.core.reports.model_actions import ActionLine, CompensationLine, ProposalLine, RunLine
from decklog.core.reports.sections.source import Source


def compensations(
    src: Source, runs: dict[str, RunLine], actions: tuple[ActionLine, ...]
) -> tuple[CompensationLine, ...]:
    """Every compensation: proposed but not run yet, run (recorded or not), and recorded for a run seen elsewhere."""
    recorded: dict[str, tuple[int, EffectCompensated]] = {}
    for e in src.entries:
        if isinstance(e.payload, EffectCompensated):
            recorded.setdefault(e.payload.compensating_run, (e.seq, e.payload))
    out: list[CompensationLine] = []
    seen: set[str] = set()
    for action in actions:
        prop = action.proposal
        if prop is not None and prop.compensates_run and not action.runs:
            out.append(_proposed(prop, runs.get(prop.compensates_run)))
        for run in (r for r in action.runs if r.compensates_run):
            seen.add(run.run_id)
            out.append(_ran(run, runs.get(run.compensates_run), recorded.get(run.run_id)))
    for comp_run, (seq, p) in recorded.items():
        if comp_run not in seen:
            entry = next(e for e in src.entries if e.seq == seq)
            out.append(_recorded(entry, p, runs.get(p.original_run), runs.get(comp_run)))
    out.sort(key=lambda c: (c.seq, c.compensating_run))
    return tuple(out)


def _proposed(prop: ProposalLine, original: RunLine | None) -> CompensationLine:
    return CompensationLine(
        original_run=prop.compensates_run,
        original_action=original.action if original else "",
        original_digest=original.effect_digest if original else "",
        compensating_action=prop.action,
        proposal_id=prop.proposal_id,
        status=prop.status,
        seq=prop.seq,
        at=prop.at,
    )


def _ran(run: RunLine, original: RunLine | None, rec: tuple[int, EffectCompensated] | None) -> CompensationLine:
    return CompensationLine(
        original_run=run.compensates_run,
        original_action=original.action if original else "",
        original_digest=(rec[1].original_digest if rec else "") or (original.effect_digest if original else ""),
        compensating_run=run.run_id,
        compensating_action=run.action,
        proposal_id=run.proposal_id,
        status="compensated" if rec else run.outcome,
        compensating_digest=(rec[1].compensating_digest if rec else "") or run.effect_digest,
        recorded_seq=rec[0] if rec else None,
        seq=run.seq,
        at=run.at,
    )


def _recorded(entry: Entry, p: EffectCompensated, original: RunLine | None, comp: RunLine | None) -> CompensationLine:
    return CompensationLine(
        original_run=p.original_run,
        original_action=original.action if original else "",
        original_digest=p.original_digest,
        compensating_run=p.compensating_run,
        compensating_action=comp.action if comp else "",
        status="compensated",
        compensating_digest=p.compensating_digest,
        recorded_seq=entry.seq,
        seq=entry.seq,
        at=iso(entry.at),
    )
