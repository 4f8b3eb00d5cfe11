"""At boot: hand the desk the proposals a recorded turn made that never reached it.

A turn records its outputs and its ``agent_turn`` in one compare-and-set append, and only then hands its proposals
to the ``Proposer`` (core/agents/runtime.py). A process that dies in between leaves the turn's obligation open with
nothing that warrants another turn: nobody would propose it again until a new input arrives. The ``agent_turn``
names its proposals (``tool_calls``: ``{"tool": "propose", …}``), so a boot that finds the scope's newest turn with
proposals and no ``proposal`` entry after it for that obligation proposes them again.

Once per turn, across replicas: a marker observation keyed ``recover-proposals:<turn seq>`` is appended first, and
only the replica whose append was not a duplicate proposes. A process that dies between the marker and the desk
loses them again (the next boot sees the marker); that window is one desk call long.
"""

from __future__ import annotations

import logging
from typing import Any

from decklog.core.agents.ports import Proposer
from decklog.core.entries import Actor, NewEntry
from decklog.core.errors import Conflict, NotFound
from decklog.core.store.ports import LogStore

log = logging.getLogger(__name__)


async def recover_proposals(store: LogStore, proposer: Proposer, actor: Actor, scope: str) -> int:
    """Propose again what the newest turn of ``scope`` proposed and the desk never got. Returns how many."""
    try:
        state = await store.get_state(scope)
        if not state.is_open or not state.obligations:  # boot looks at every scope: most need no read
            return 0
        turns = await store.read_last(scope, limit=1, kinds=["agent_turn"])
    except NotFound:
        return 0
    if not turns or turns[0].payload.model_dump().get("outcome") != "ok":
        return 0
    turn = turns[0]
    wanted = [dict(c) for c in turn.payload.model_dump().get("tool_calls", ()) if c.get("tool") == "propose"]
    made = {
        e.payload.model_dump().get("obligation_id") for e in await store.read(scope, after=turn.seq, kinds=["proposal"])
    }
    lost = [c for c in wanted if c.get("obligation_id") and c["obligation_id"] not in made]
    lost = [c for c in lost if c["obligation_id"] in state.obligations]  # still open: not fulfilled or cancelled
    if not lost or not await _mark(store, actor, scope, turn.seq, len(lost)):
        return 0
    for call in lost:
        await _propose(proposer, actor, scope, turn.seq, call)
    return len(lost)


async def _mark(store: LogStore, actor: Actor, scope: str, seq: int, count: int) -> bool:
    text = (
        f"turn #{seq} recorded {count} proposal(s) that never reached the desk (a restart in between): proposing them"
    )
    entry = NewEntry.make("observation", actor, {"text": text, "source": "agent", "data": {"recovered_turn": seq}})
    try:
        result = await store.append(scope, [entry], idempotency_key=f"recover-proposals:{seq}")
    except (Conflict, NotFound):
        return False
    return not result.duplicate


async def _propose(proposer: Proposer, actor: Actor, scope: str, seq: int, call: dict[str, Any]) -> None:
    rationale = f"proposed by turn #{seq}; re-proposed after a restart lost it before it reached the desk"
    try:
        line = await proposer.propose(
            scope,
            action=str(call.get("action", "")),
            params=dict(call.get("params") or {}),
            rationale=rationale,
            obligation_id=str(call["obligation_id"]),
            actor=actor,
        )
        log.info("agents: %s: recovered a proposal of turn #%d: %s", scope, seq, line)
    except Exception:
        log.exception("agents: %s: re-proposing %s of turn #%d failed", scope, call.get("action"), seq)
