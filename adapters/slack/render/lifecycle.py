"""The channel lifecycle's and the reminders' posts: the archive notice, a reminder mentioning the people it names,
and the notice a resolve leaves when obligations are still open (adapters/slack/render/obligations.py)."""

from __future__ import annotations

import re

from decklog.adapters.slack.render.blocks import Outgoing, esc, section
from decklog.adapters.slack.render.obligations import left_open_notice
from decklog.core.entries import Entry
from decklog.core.entries.lifecycle import ArchiveNotice, Reminder
from decklog.core.state import ScopeState

_USER_ID = re.compile(r"^[UW][A-Z0-9]+$")


def mention(user: str) -> str:
    return f"<@{user}>" if _USER_ID.match(user) else f"@{esc(user)}"


def lifecycle_reply(entry: Entry, state: ScopeState | None = None) -> Outgoing | None:
    p = entry.payload
    if isinstance(p, ArchiveNotice):
        return Outgoing(esc(p.text), [section(f":file_cabinet: {esc(p.text)}")])
    if isinstance(p, Reminder) and p.purpose == "obligations" and state is not None:  # what a resolve left open
        return left_open_notice(p, state)
    if isinstance(p, Reminder):
        who = " ".join(mention(u) for u in p.users)
        icon = ":alarm_clock:" if p.purpose == "status_update" else ":memo:"
        line = f"{icon} {who + ' ' if who else ''}{esc(p.text)}"
        return Outgoing(f"{who + ' ' if who else ''}{esc(p.text)}", [section(line)])
    return None
