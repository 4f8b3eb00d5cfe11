"""Catch-up with a model: one bounded summarising call over the joiner view, recorded like a turn.

``ModelCatchUp`` is the Slack ``catchup`` port when a model is configured. It builds the joiner view, asks the
:class:`Summariser` once (no tools, a ``max_tokens`` cap: adapters/anthropic/catchup.py), and appends one
``agent_turn`` with the call's provenance: reasoner, model, view name and size, the seq range the view covered, the
four token fields, cost, duration and the outcome (``ok`` / ``failed``). If the call fails, the answer is the
deterministic catch-up (core/views/catchup.py), saying so.

The call takes one of the turn runtime's slots (``TurnSlots``, ``agents.max_concurrent_turns``) like a turn or an
ask, so catch-ups asked during an alert storm queue with the turns instead of adding to the model API's load; it
builds the view once it has the slot.

The turn is recorded with ``trigger: "ask"`` (a person asked) so that, like an answered question, it does not
cover the seq range of the scheduled turns; ``tool_calls`` names it (``{"tool": "catchup", "asked_by": …}``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Protocol

from decklog.core.agents.reasoner import ReasonerError, Usage
from decklog.core.agents.turn_parts import TurnSlots, TurnStats
from decklog.core.clock import Clock
from decklog.core.entries import Actor, AgentTurn, NewEntry
from decklog.core.store.ports import LogStore
from decklog.core.views import build_view
from decklog.core.views.catchup import catch_up

VIEW = "joiner"


@dataclass
class Summary:
    """What one summarising call returned."""

    text: str
    model: str
    usage: Usage = field(default_factory=Usage)
    cost_usd: float = 0.0
    stop_reason: str = ""


class SummaryError(ReasonerError):
    """The summarising call failed; ``usage`` / ``cost_usd`` are what it spent before failing (often nothing)."""

    def __init__(self, message: str, *, model: str = "", usage: Usage | None = None, cost_usd: float = 0.0) -> None:
        super().__init__(message)
        self.model = model
        self.usage = usage or Usage()
        self.cost_usd = cost_usd


class Summariser(Protocol):
    """One bounded request: the joiner view in, a short summary out. Raises :class:`SummaryError`."""

    name: str
    model: str

    async def summarise(self, *, scope: str, view_name: str, view_text: str, view_bytes: int) -> Summary: ...


class ModelCatchUp:
    """The ``catchup`` Slack port with a model: ``await port(scope=…, actor=…, key=…)`` → the ephemeral text."""

    def __init__(
        self,
        store: LogStore,
        summariser: Summariser,
        clock: Clock,
        *,
        budget: int | None = None,
        slots: TurnSlots | None = None,
    ) -> None:
        self.store = store
        self.summariser = summariser
        self.clock = clock
        self.budget = budget
        self.slots = slots or TurnSlots(None, TurnStats())  # the turn runtime's: counts against its limit

    async def __call__(self, *, scope: str, actor: Actor, key: str) -> str:
        async with self.slots.hold(scope):
            view = await (
                build_view(self.store, scope, VIEW)
                if self.budget is None
                else build_view(self.store, scope, VIEW, budget=self.budget)
            )
            started = time.perf_counter()
            try:
                got = await self.summariser.summarise(
                    scope=scope, view_name=VIEW, view_text=view.text, view_bytes=view.bytes
                )
                failure: SummaryError | None = None
            except SummaryError as exc:
                got, failure = Summary(text="", model=exc.model or self.summariser.model, usage=exc.usage), exc
                got.cost_usd = exc.cost_usd
        turn = AgentTurn(
            reasoner=self.summariser.name,
            model=got.model,
            view=VIEW,
            view_bytes=view.bytes,
            view_tokens=view.tokens,
            seq_from=1 if view.version else 0,
            seq_to=view.version,
            trigger="ask",
            tool_calls=({"tool": "catchup", "asked_by": actor.id, "stop_reason": got.stop_reason},),
            input_tokens=got.usage.input_tokens,
            output_tokens=got.usage.output_tokens,
            cache_read_input_tokens=got.usage.cache_read_input_tokens,
            cache_creation_input_tokens=got.usage.cache_creation_input_tokens,
            cost_usd=got.cost_usd,
            duration_ms=int((time.perf_counter() - started) * 1000),
            outcome="failed" if failure is not None or not got.text.strip() else "ok",
            error=failure.message
            if failure is not None
            else ("" if got.text.strip() else "the model answered nothing"),
        )
        entry = NewEntry.make("agent_turn", Actor.agent(self.summariser.name), turn)
        result = await self.store.append(scope, [entry], idempotency_key=f"catchup:{key}" if key else None)
        seq = result.entries[0].seq if result.entries else 0
        if turn.outcome == "ok":
            return f"*Catch-up on `{scope}`* (by {got.model}, turn #{seq}; ephemeral):\n{got.text.strip()}"
        fallback = catch_up(view, self.clock.now())
        return f"{fallback}\n_(The model could not summarise ({turn.error}); this is the deterministic catch-up.)_"
