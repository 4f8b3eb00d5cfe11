"""Ports the turn runtime uses to reach the action desk and the chat it shows progress in, without
depending on either.

``TurnProgress``: a turn that runs longer than a second shows it (Slack: :fire: on the incident header; an ask
shows it on the question's message at once). Progress is not record: it is the one effect allowed outside the
outbox, so an implementation notes durably what it shows before showing it, and ``recover`` clears at boot what a
process that died mid-turn left shown.

``Proposer``: how a proposal intent becomes a parked proposal. A model or a rule never executes anything; the
desk validates, previews, parks for approval and runs under delegated authority. Until a desk is wired, the
``SuggestingProposer`` records a plain ``suggestion`` "would propose <action>(params)" so the humans see it.

``ActionCatalogView``: which actions may be proposed at all (an action whose executor is not configured is
unavailable and never proposed). When no catalog is wired the runtime passes ``None`` to reasoners, meaning
"unknown": proposals are then allowed, because the default proposer only suggests.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field
from typing import Any, Protocol

from decklog.core.entries import Actor, NewEntry, Suggestion
from decklog.core.state import ScopeState
from decklog.core.store.ports import LogStore


@dataclass(frozen=True)
class ActionInfo:
    """An action as agents see it. ``safety_conditions``: the names of the checks the desk runs before acting."""

    name: str
    description: str = ""
    risk: str = "R2"
    params_schema: dict[str, Any] = field(default_factory=dict)
    safety_conditions: tuple[str, ...] = ()


class ActionCatalogView(Protocol):
    def available(self) -> list[ActionInfo]: ...


class Proposer(Protocol):
    async def propose(
        self, scope: str, *, action: str, params: dict[str, Any], rationale: str, obligation_id: str, actor: Actor
    ) -> str:
        """Propose ``action``; returns a one-line outcome (``parked p-1a2b for approval``, ``refused: …``)."""
        ...


class TurnProgress(Protocol):
    async def working(self, scope: str, *, question_seq: int = 0) -> str:
        """Show that a turn works on ``scope`` (``question_seq``: an ask answering that ``question`` entry).

        Returns where it is shown for a question (a Slack message ts), else ""."""
        ...

    async def done(self, scope: str) -> None:
        """The scheduled turn of ``scope`` ended: stop showing it (idempotent). An ask's progress ends when its
        answer is delivered (the chat adapter's business)."""
        ...

    async def recover(self, scope: str) -> None:
        """At boot: stop showing whatever a previous process left shown on ``scope``."""
        ...


class EmptyCatalog:
    """No actions available."""

    def available(self) -> list[ActionInfo]:
        return []


def describe_call(action: str, params: dict[str, Any]) -> str:
    """``rollback_deploy(change=change/x, service=payments)``: a stable one-line rendering of a call."""
    args = ", ".join(f"{k}={params[k]}" for k in sorted(params))
    return f"{action}({args})"


class SuggestingProposer:
    """The default proposer: records a suggestion "would propose …" (refs: the obligation it serves)."""

    def __init__(self, store: LogStore) -> None:
        self.store = store

    async def propose(
        self, scope: str, *, action: str, params: dict[str, Any], rationale: str, obligation_id: str, actor: Actor
    ) -> str:
        text = f"would propose {describe_call(action, params)}"
        if obligation_id:
            text += f" for obligation {obligation_id}"

        def decide(state: ScopeState) -> list[NewEntry]:
            ob = state.obligations.get(obligation_id) if obligation_id else None
            refs = (ob.opened_seq,) if ob is not None and ob.opened_seq else ()
            payload = Suggestion(
                suggestion_id=f"sg-{secrets.token_hex(4)}",
                text=text + " (no action desk is wired: nothing will run)",
                action=action,
                rationale=rationale[:500],
            )
            return [NewEntry.make("suggestion", actor, payload, refs=refs)]

        await self.store.append(scope, decide)
        return f"recorded a suggestion: {text}"
