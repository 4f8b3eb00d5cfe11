"""Provenance of agent findings: per reasoner and kind, how many findings were confirmed, ruled out,
accepted, dismissed or left unanswered. Pure: the same entries give the same counts.

``finding_outcomes`` classifies each agent finding (hypothesis, suggestion, obligation, proposal) by the people's
answers recorded later; ``findings_counts`` rolls them up — the report's "Findings" table and the
``decklog_findings_total{reasoner,kind,outcome}`` metric both come from it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from decklog.core.entries import (
    AgentTurn,
    Approval,
    Entry,
    FindingAnswer,
    ObligationCancelled,
    ObligationOpened,
    ProposalMade,
    Suggestion,
    SuggestionFeedback,
)
from decklog.core.reports.model import FindingCount
from decklog.core.reports.sections.source import Source

OUTCOMES = ("confirmed", "ruled_out", "accepted", "dismissed", "unanswered")
ANSWERED_AS = {"confirmed": "confirmed", "ruled_out": "ruled_out", "taken": "accepted", "done": "accepted"}
ANSWERABLE_PURPOSES = ("task", "rollback", "follow_up")


@dataclass(frozen=True)
class FindingOutcome:
    seq: int
    reasoner: str
    kind: str  # hypothesis | suggestion | obligation | proposal
    outcome: str  # one of OUTCOMES
    turn: int = 0


def finding_outcomes(entries: Sequence[Entry]) -> list[FindingOutcome]:
    """Every agent finding of one scope's log with what people made of it."""
    reasoners = {e.seq: e.payload.reasoner for e in entries if isinstance(e.payload, AgentTurn)}
    answers: dict[int, str] = {}
    feedback: dict[str, str] = {}
    decided: dict[str, str] = {}
    cancelled: set[str] = set()
    for e in entries:
        p = e.payload
        if isinstance(p, FindingAnswer):
            answers[p.finding] = ANSWERED_AS.get(p.verdict, p.verdict)
        elif isinstance(p, SuggestionFeedback):
            feedback.setdefault(p.suggestion_id, p.verdict)
        elif isinstance(p, Approval):
            decided.setdefault(p.proposal_id, "accepted" if p.decision == "approved" else "dismissed")
        elif isinstance(p, ObligationCancelled) and e.actor.type == "human":
            cancelled.add(p.obligation_id)
    out: list[FindingOutcome] = []
    for e in entries:
        if e.actor.type != "agent":
            continue
        p = e.payload
        turn = getattr(p, "turn", 0)
        reasoner = reasoners.get(turn) or e.actor.id
        if e.kind == "hypothesis":
            out.append(FindingOutcome(e.seq, reasoner, "hypothesis", answers.get(e.seq, "unanswered"), turn))
        elif isinstance(p, Suggestion):
            outcome = feedback.get(p.suggestion_id) or answers.get(e.seq, "unanswered")
            out.append(FindingOutcome(e.seq, reasoner, "suggestion", outcome, turn))
        elif isinstance(p, ObligationOpened) and p.purpose in ANSWERABLE_PURPOSES:
            outcome = answers.get(e.seq) or ("dismissed" if p.obligation_id in cancelled else "unanswered")
            out.append(FindingOutcome(e.seq, reasoner, "obligation", outcome, turn))
        elif isinstance(p, ProposalMade):
            outcome = decided.get(p.proposal_id) or {"approved": "accepted", "denied": "dismissed"}.get(
                p.status, "unanswered"
            )
            out.append(FindingOutcome(e.seq, reasoner, "proposal", outcome, turn))
    return out


def findings_counts(logs: Iterable[Sequence[Entry]]) -> dict[tuple[str, str, str], int]:
    """``{(reasoner, kind, outcome): count}`` over several scopes' logs (what ``/metrics`` exposes)."""
    counts: dict[tuple[str, str, str], int] = {}
    for entries in logs:
        for f in finding_outcomes(entries):
            key = (f.reasoner, f.kind, f.outcome)
            counts[key] = counts.get(key, 0) + 1
    return dict(sorted(counts.items()))


def findings(src: Source) -> tuple[FindingCount, ...]:
    """The report's "Findings" table: one row per reasoner and kind, a count per outcome."""
    rows: dict[tuple[str, str], dict[str, int]] = {}
    for f in finding_outcomes(src.entries):
        row = rows.setdefault((f.reasoner, f.kind), dict.fromkeys(OUTCOMES, 0))
        row[f.outcome] = row.get(f.outcome, 0) + 1
    return tuple(FindingCount(reasoner=r, kind=k, total=sum(c.values()), **c) for (r, k), c in sorted(rows.items()))
