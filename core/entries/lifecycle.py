"""Entry kinds of the channel lifecycle and the reminders.

- ``archive_notice``: the dedicated channel will be archived at ``archive_at`` unless there is new activity;
  ``since`` is the moment its clock started (the resolve, or the last activity after it).
- ``channel_archive``: archive the channel now (``notice``: the seq of the notice it follows). The Slack sender
  calls ``conversations.archive``; ``already_archived`` counts as done.
- ``reminder``: a nudge in the thread: ``status_update`` (no status update for the severity's interval; ``users``:
  the commander), ``follow_up`` (open follow-ups after the resolve; ``users``: their owners) or ``obligations``
  (the incident was resolved with obligations still open, and someone must be told; ``obligations``: their ids;
  appended with the resolve, in its transaction — people close each one or keep it as a follow-up,
  core/obligations.py).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from decklog.core.entries.base import Payload


class ArchiveNotice(Payload):
    channel: str = Field(min_length=1)
    since: str = Field(min_length=1)
    archive_at: str = Field(min_length=1)
    text: str = Field(min_length=1)


class ChannelArchive(Payload):
    channel: str = Field(min_length=1)
    notice: int = Field(ge=1)
    text: str = Field(min_length=1)


class Reminder(Payload):
    purpose: Literal["status_update", "follow_up", "obligations"]
    due_at: str = Field(min_length=1)
    since: str = ""
    users: tuple[str, ...] = ()
    follow_ups: tuple[int, ...] = ()
    text: str = Field(min_length=1)
    obligations: tuple[str, ...] = ()  # ``obligations``: the ids still open at the resolve
