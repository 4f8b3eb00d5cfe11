"""A turn's outputs as entries: hypotheses, obligations, verifications (fulfilled under their fences),
suggestions, the answer, then the turn's own ``agent_turn``. Pure: it runs inside the append's transaction (the
runtime's decide callable), over the state as it is then.

An output that does not validate is not recorded; the reason goes into the ``agent_turn``'s ``tool_calls``, so the
turn's provenance says what it tried.
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from decklog.core.agents.reasoner import TurnInput, TurnOutput
from decklog.core.entries import Actor, AgentTurn, Answer, NewEntry, Suggestion, Verification
from decklog.core.errors import Conflict, InvalidInput, NotFound
from decklog.core.obligations import fulfil, open_obligation
from decklog.core.state import ScopeState

TEXT_MAX = 3000
FINDING_KINDS = ("hypothesis", "suggestion", "obligation_opened")  # what a turn finds (each names its turn)


@dataclass(frozen=True)
class TurnFacts:
    """What the ``agent_turn`` says about how the turn was made, besides its outputs."""

    reasoner: str
    model: str
    views: str
    view_bytes: int
    view_tokens: int
    duration_ms: int
    question_ts: str = ""
    question_seq: int = 0


@dataclass
class _Recorder:
    current: ScopeState
    actor: Actor
    made: list[NewEntry] = field(default_factory=list)
    notes: list[dict[str, Any]] = field(default_factory=list)

    @property
    def base(self) -> int:
        return self.current.version

    def refs(self, values: Sequence[int]) -> tuple[int, ...]:
        return tuple(sorted({r for r in values if 0 < r <= self.base}))

    def add(self, kind: str, payload: Any, refs: tuple[int, ...] = ()) -> int:
        """Stage one entry; its future seq, or 0 when its payload is refused (noted)."""
        try:
            self.made.append(NewEntry.make(kind, self.actor, payload, refs=refs))
        except InvalidInput as exc:
            self.notes.append({"tool": "record", "kind": kind, "status": "error", "error": str(exc)})
            return 0
        return self.base + len(self.made)

    def observations(self, turn: TurnInput) -> list[int]:
        """The turn's outside reads (core/evidence/observer.py), first: its findings refer to them."""
        if turn.evidence is None:
            return []
        return [self.add("observation", o.payload()) for o in turn.evidence.observations]

    def hypotheses(self, out: TurnOutput, observed: list[int]) -> list[int]:
        seqs: list[int] = []
        for h in out.hypotheses:
            payload = {
                "text": h.text[:TEXT_MAX],
                "confidence": h.confidence,
                "suspect_scope": h.suspect_scope,
                "subject": h.subject,
                "rank": h.rank,
            }
            on = [observed[i] for i in h.observations if 0 <= i < len(observed) and observed[i]]
            seqs.append(
                self.add("hypothesis", payload, tuple(sorted({*self.refs(h.refs), *on}))) if h.text.strip() else 0
            )
        return seqs

    def obligations(self, out: TurnOutput, hypothesis_seqs: list[int]) -> None:
        for o in out.obligations:
            extra = []
            if o.hypothesis_index is not None and 0 <= o.hypothesis_index < len(hypothesis_seqs):
                extra = [hypothesis_seqs[o.hypothesis_index]]
            try:
                opened = open_obligation(
                    self.current,
                    text=o.text[:TEXT_MAX],
                    actor=self.actor,
                    purpose=o.purpose,
                    conditions=o.conditions,
                    action=o.action,
                    params=dict(o.params),
                    expected_outcome=o.expected_outcome,
                    obligation_id=o.obligation_id or None,
                    refs=sorted({*self.refs(o.refs), *(r for r in extra if r)}),
                )
            except InvalidInput as exc:
                self.notes.append({"tool": "record", "kind": "obligation_opened", "status": "error", "error": str(exc)})
                continue
            self.made.extend(opened)

    def verifications(self, out: TurnOutput, fences: dict[str, int], now: datetime) -> None:
        for v in out.verifications:
            fence = fences.get(v.obligation_id)
            if fence is None:
                continue
            payload = Verification(
                obligation_id=v.obligation_id,
                run_id=v.run_id,
                outcome=v.outcome,
                expected=v.expected,
                observed=v.observed[:TEXT_MAX],
            )
            verification = NewEntry.make("verification", self.actor, payload, refs=self.refs(v.refs))
            try:
                self.made.extend(
                    fulfil(
                        self.current,
                        v.obligation_id,
                        fence=fence,
                        now=now,
                        actor=self.actor,
                        note=f"verification {v.outcome}",
                        run_id=v.run_id,
                        before=[verification],
                    )
                )
            except (Conflict, NotFound) as exc:
                note = {"tool": "verify", "obligation_id": v.obligation_id, "status": "error", "error": str(exc)}
                self.notes.append(note)

    def suggestions(self, out: TurnOutput) -> None:
        for sg in out.suggestions:
            if sg.text.strip():
                sid = sg.suggestion_id or f"sg-{secrets.token_hex(4)}"
                payload = Suggestion(
                    suggestion_id=sid, text=sg.text[:TEXT_MAX], action=sg.action, rationale=sg.rationale[:1000]
                )
                self.add("suggestion", payload, self.refs(sg.refs))

    def answer(self, turn: TurnInput, out: TurnOutput, facts: TurnFacts) -> None:
        if turn.question and out.answer:
            payload = Answer(
                question=turn.question[:TEXT_MAX], text=out.answer[:TEXT_MAX], question_ts=facts.question_ts
            )
            self.add("answer", payload, self.refs((facts.question_seq,)))

    @staticmethod
    def evidence_summary(turn: TurnInput) -> list[dict[str, Any]]:
        return [turn.evidence.summary()] if turn.evidence is not None and turn.evidence.observations else []

    def agent_turn(self, turn: TurnInput, out: TurnOutput, facts: TurnFacts) -> NewEntry:
        appended = tuple(range(self.base + 1, self.base + len(self.made) + 1))
        proposals = [
            {"tool": "propose", "action": p.action, "params": p.params, "obligation_id": p.obligation_id}
            for p in out.proposals
        ]
        payload = AgentTurn(
            reasoner=facts.reasoner,
            model=out.model or facts.model,
            view=facts.views,
            view_bytes=facts.view_bytes,
            view_tokens=facts.view_tokens,
            seq_from=turn.seq_from,
            seq_to=turn.seq_to,
            trigger=turn.trigger,
            tool_calls=tuple([*out.tool_calls, *proposals, *self.notes, *self.evidence_summary(turn)]),
            input_tokens=out.usage.input_tokens,
            output_tokens=out.usage.output_tokens,
            cache_read_input_tokens=out.usage.cache_read_input_tokens,
            cache_creation_input_tokens=out.usage.cache_creation_input_tokens,
            cost_usd=round(out.cost_usd, 6),
            duration_ms=facts.duration_ms,
            outcome=out.outcome,
            error=out.error[:1000],
            appended=appended,
        )
        turn_refs = self.refs((facts.question_seq,)) if facts.question_seq else ()
        return NewEntry.make("agent_turn", self.actor, payload, refs=turn_refs)


def turn_entries(
    current: ScopeState,
    turn: TurnInput,
    out: TurnOutput,
    fences: dict[str, int],
    *,
    actor: Actor,
    now: datetime,
    facts: TurnFacts,
) -> list[NewEntry]:
    """The turn's outputs as entries, each finding naming its turn, then its ``agent_turn``."""
    r = _Recorder(current, actor)
    r.obligations(out, r.hypotheses(out, r.observations(turn)))
    r.verifications(out, fences, now)
    r.suggestions(out)
    r.answer(turn, out, facts)
    r.made = with_turn(r.made, r.base + len(r.made) + 1)
    return [*r.made, r.agent_turn(turn, out, facts)]


def with_turn(made: list[NewEntry], turn_seq: int) -> list[NewEntry]:
    """Provenance: each finding of the turn names the seq its ``agent_turn`` gets in the same append."""
    return [
        e.model_copy(update={"payload": e.payload.model_copy(update={"turn": turn_seq})})
        if e.kind in FINDING_KINDS and hasattr(e.payload, "turn")
        else e
        for e in made
    ]
