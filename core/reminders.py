"""Reminders: durable due times derived from the log, never a timer kept in memory.

- **Status updates.** An open incident whose severity has an interval (``[reminders] status_update``, default
  SEV1 30 min, SEV2 60 min) gets a ``reminder`` (purpose ``status_update``) mentioning its commander when no status
  update has been posted for that long. A *status update* is a ``status_changed`` entry (``/incident status …``; the
  API and the CLI may also append one that keeps the status and carries a summary). The clock starts at the
  latest of: the declaration, the last status update, the last status reminder — so a quiet incident is nudged
  once per interval, and a status update resets the clock.
- **Follow-ups.** ``[reminders] follow_ups_after_days`` after an incident resolves, one ``reminder`` (purpose
  ``follow_up``) lists the follow-ups still open (a ``follow_up`` entry with no ``follow_up_closed``) and mentions
  their owners. Once per resolve: a reopen and a new resolve start a new one.

Each due item is appended under an idempotency key made of its clock's start (``reminder:status_update:<since>``,
``reminder:follow_up:<resolved_at>``): a restart, a second replica or a repeated tick appends it once. The entry is
delivered by the Slack sender through the outbox (exactly once, like every post).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from decklog.core.clock import iso, parse_iso
from decklog.core.entries import FollowUp, FollowUpClosed, Payload
from decklog.core.entries.lifecycle import Reminder
from decklog.core.state import ScopeState
from decklog.core.store.ports import LogStore

DAY_S = 86_400.0
DEFAULT_STATUS_UPDATE_S: Mapping[int, float] = {1: 30 * 60.0, 2: 60 * 60.0}


@dataclass(frozen=True)
class LifecyclePolicy:
    """The due times' settings (bot.config ``[slack] archive_after``/``archive_notice`` and ``[reminders]``)."""

    archive_after_s: float = 7 * DAY_S
    archive_notice_s: float = DAY_S
    status_update_s: Mapping[int, float] = field(default_factory=lambda: dict(DEFAULT_STATUS_UPDATE_S))
    follow_up_after_s: float = 3 * DAY_S
    horizon_s: float = 7 * DAY_S  # resolved incidents untouched for longer than every delay plus this are not read

    @property
    def notice_lead_s(self) -> float:
        """How long before the archive the notice goes out (never longer than the whole wait)."""
        return min(self.archive_notice_s, self.archive_after_s)

    def scan_window_s(self) -> float:
        return max(self.archive_after_s + self.archive_notice_s, self.follow_up_after_s) + self.horizon_s


@dataclass(frozen=True)
class Due:
    """An entry that has fallen due: appended under ``key`` (once per due time). A check returns a ``Due``, or the
    time it will fall due if the log does not change (a ``datetime``), or None (nothing until the log changes)."""

    kind: str
    payload: Payload
    key: str
    refs: tuple[int, ...] = ()


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:g} min" if seconds < 2 * 3600 else f"{seconds / 3600:g} h"


async def status_reminder_due(
    store: LogStore, state: ScopeState, now: datetime, policy: LifecyclePolicy
) -> Due | datetime | None:
    """The status-update nudge that has fallen due for ``state``, if any."""
    if state.kind != "incident" or not state.is_open or state.severity is None or not state.created_at:
        return None
    interval = policy.status_update_s.get(state.severity)
    if not interval or interval <= 0:
        return None
    since = parse_iso(state.created_at)
    for entry in await store.read_last(state.scope, limit=1, kinds=["status_changed"]):
        since = max(since, entry.at)
    for entry in await store.read_last(state.scope, limit=4, kinds=["reminder"]):
        if isinstance(entry.payload, Reminder) and entry.payload.purpose == "status_update":
            since = max(since, entry.at)
            break
    due = since + timedelta(seconds=interval)
    if now < due:
        return due
    commander = state.roles.get("commander")
    who = f"commander {commander.user_name or commander.user_id}" if commander else "nobody is commander"
    text = (
        f"No status update for {_minutes(interval)} on this SEV{state.severity} incident ({who}): "
        "post one with `/incident status <status>`."
    )
    payload = Reminder(
        purpose="status_update",
        due_at=iso(due),
        since=iso(since),
        users=(commander.user_id,) if commander else (),
        text=text,
    )
    return Due("reminder", payload, f"reminder:status_update:{iso(since)}")


async def follow_up_reminder_due(
    store: LogStore, state: ScopeState, now: datetime, policy: LifecyclePolicy
) -> Due | datetime | None:
    """The reminder about open follow-ups that has fallen due after the resolve, if any."""
    if state.kind != "incident" or state.status != "resolved" or not state.resolved_at:
        return None
    if policy.follow_up_after_s <= 0 or not state.kind_counts.get("follow_up"):
        return None
    due = parse_iso(state.resolved_at) + timedelta(seconds=policy.follow_up_after_s)
    if now < due:
        return due
    for entry in await store.read_last(state.scope, limit=4, kinds=["reminder"]):
        if isinstance(entry.payload, Reminder) and entry.payload.purpose == "follow_up":
            if entry.payload.since == state.resolved_at:
                return None  # this resolve's reminder went out already
            break
    entries = await store.read(state.scope, kinds=("follow_up", "follow_up_closed"))
    closed = {e.payload.follow_up for e in entries if isinstance(e.payload, FollowUpClosed)}
    still_open = [e for e in entries if isinstance(e.payload, FollowUp) and e.seq not in closed]
    if not still_open:
        return None
    owners: list[str] = []
    lines = []
    for e in still_open:
        assert isinstance(e.payload, FollowUp)
        if e.payload.owner and e.payload.owner not in owners:
            owners.append(e.payload.owner)
        lines.append(f"#{e.seq} {e.payload.text}" + (f" → {e.payload.owner}" if e.payload.owner else ""))
    days = policy.follow_up_after_s / DAY_S
    text = f"{len(still_open)} follow-up(s) still open {days:g} day(s) after the resolve: " + "; ".join(lines)
    payload = Reminder(
        purpose="follow_up",
        due_at=iso(due),
        since=state.resolved_at,
        users=tuple(owners),
        follow_ups=tuple(e.seq for e in still_open),
        text=text[:3000],
    )
    return Due("reminder", payload, f"reminder:follow_up:{state.resolved_at}", refs=tuple(e.seq for e in still_open))
