"""Every agent finding can be answered in the thread, and says which turn made it.

Buttons (value ``<scope>|<seq of the finding>``): Confirm / Rule out on a hypothesis, Take it / Done on an
obligation (Accept / Dismiss on suggestions and Approve / Deny on proposals live with their renderers). The
context line names the ``agent_turn`` (``decklog timeline SCOPE --json`` has the view it read and its seq range).
"""

from __future__ import annotations

from decklog.adapters.slack.ids import Action
from decklog.adapters.slack.render.blocks import Block, button, context, esc
from decklog.core.entries import Entry

ANSWERABLE_PURPOSES = ("task", "rollback", "follow_up")  # obligations a person should weigh (not the desk's own)


def answer_buttons(entry: Entry, scope: str) -> Block | None:
    """The answer buttons of an agent's hypothesis or obligation (None for other entries, or a person's)."""
    if entry.actor.type != "agent":
        return None
    value = f"{scope}|{entry.seq}"
    if entry.kind == "hypothesis":
        pair = [
            button("Confirm", Action.HYPOTHESIS_CONFIRM, value, style="primary"),
            button("Rule out", Action.HYPOTHESIS_RULE_OUT, value, style="danger"),
        ]
    elif entry.kind == "obligation_opened" and getattr(entry.payload, "purpose", "") in ANSWERABLE_PURPOSES:
        pair = [
            button("Take it", Action.OBLIGATION_TAKE, value, style="primary"),
            button("Done", Action.OBLIGATION_DONE, value),
        ]
    else:
        return None
    return {"type": "actions", "block_id": f"finding:{entry.seq}", "elements": pair}


def turn_line(entry: Entry) -> Block | None:
    """``decklog rules · turn #14 · #12``: which agent turn produced the finding (None if none did)."""
    turn = getattr(entry.payload, "turn", 0)
    if entry.actor.type != "agent" or not turn:
        return None
    return context(f":robot_face: {esc(entry.actor.label())} · turn #{turn} · finding #{entry.seq}")


def finding_blocks(entry: Entry, scope: str) -> list[Block]:
    return [b for b in (answer_buttons(entry, scope), turn_line(entry)) if b is not None]
