"""Agent inferences, kept apart from the human record: hypotheses, suggestions (with their verdicts), answers."""

from __future__ import annotations

from decklog.core.clock import iso
from decklog.core.entries import (
    Answer,
    Hypothesis,
    Suggestion,
    SuggestionFeedback,
)
from decklog.core.reports.model import (
    InferenceLine,
)
from decklog.core.reports.sections.source import Source, origin


def inferences(src: Source) -> tuple[InferenceLine, ...]:
    verdicts: dict[str, tuple[str, str]] = {}
    for e in src.entries:
        if isinstance(e.payload, SuggestionFeedback):
            verdicts.setdefault(e.payload.suggestion_id, (e.payload.verdict, e.payload.user_id or e.actor.id))
    out: list[InferenceLine] = []
    for e in src.entries:
        p = e.payload
        base = {"seq": e.seq, "at": iso(e.at), "by": e.actor, "origin": origin(e.actor)}
        if isinstance(p, Hypothesis):
            out.append(
                InferenceLine(
                    **base, kind="hypothesis", text=p.text, confidence=p.confidence, suspect_scope=p.suspect_scope
                )
            )
        elif isinstance(p, Suggestion):
            verdict, who = verdicts.get(p.suggestion_id, ("open", ""))
            text = p.text + (f" — {p.rationale}" if p.rationale else "")
            out.append(InferenceLine(**base, kind="suggestion", text=text, verdict=verdict, verdict_by=who))
        elif isinstance(p, Answer):
            out.append(InferenceLine(**base, kind="answer", text=f"Q: {p.question} — A: {p.text}"))
    return tuple(out)
