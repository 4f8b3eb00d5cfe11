"""Which entries warrant an agent turn.

A turn is warranted by what humans and the system record (a declaration, an alert, a message, a link, an approval,
an action result…), never by bookkeeping (``agent_turn`` whatever its outcome, ``thread_linked``,
``delivery_failed``, lease entries…), nor by ``question`` / ``answer`` (an ask runs its own prompt turn), and
never by an agent's own outputs — otherwise every ``agent_turn`` entry would schedule the next turn.

One exception keeps multi-step work durable: an ``obligation_opened`` by an agent that carries an action (a
rollback the agent just asked for) warrants one *follow-up* turn, the one that proposes it. A follow-up turn
whose only input is again agent-authored does not warrant another (see ``TurnRuntime``), so agents cannot loop.
"""

from __future__ import annotations

from collections.abc import Iterable

from decklog.core.entries import Entry, ObligationOpened

QUIET_KINDS = frozenset(
    {
        "agent_turn",
        "thread_linked",
        "page",  # on-call bookkeeping: a page going out, an override, is nothing for an agent to reason about
        "oncall_override",
        "oncall_handoff",
        "delivery_failed",
        "report_exported",
        "message_edited",
        "message_deleted",
        "obligation_claimed",
        "obligation_released",
        "obligation_expired",
        "fence_rejected",
        "question",
        "answer",
        "archive_notice",  # the lifecycle's own notices, archives and reminders (core/entries/lifecycle.py)
        "channel_archive",
        "reminder",
    }
)


def warrants_turn(entry: Entry) -> bool:
    if entry.kind in QUIET_KINDS:
        return False
    if entry.actor.type == "agent":
        return isinstance(entry.payload, ObligationOpened) and bool(entry.payload.action)
    return True


def warranting(entries: Iterable[Entry]) -> list[Entry]:
    return [e for e in entries if warrants_turn(e)]


def only_agents(entries: Iterable[Entry]) -> bool:
    """True when every given entry was recorded by an agent (a follow-up's input)."""
    return all(e.actor.type == "agent" for e in entries)
