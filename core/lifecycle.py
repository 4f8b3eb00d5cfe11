"""Channel lifecycle, and the periodic job that appends every lifecycle due item.

A dedicated incident channel is archived ``archive_after`` after the incident resolves (``[slack] archive_after``,
default 7 days; ``DECKLOG_ARCHIVE_AFTER`` in seconds wins). The due times are derived from the log, never kept in
memory:

1. the clock starts at the resolve, or at the last activity after it (a person's entry: a message in the channel,
   a command) — ``since``;
2. ``archive_notice`` before the archive (``[slack] archive_notice``, default one day, never more than the whole
   wait), an ``archive_notice`` entry is appended under the key ``archive_notice:<since>``; it names the archive
   time (never less than the notice's lead from when it went out, so a late notice still gives people that long);
3. at that time, if the notice is still the current one (no activity since, still resolved), a ``channel_archive``
   entry is appended under ``channel_archive:<notice seq>``.

New activity moves ``since`` past the notice, and a reopen makes the incident open: either cancels the pending
archive (the next resolve, or the quiet after the activity, starts a new notice). The Slack sender delivers both
entries through the outbox: the notice as a post, the archive as ``conversations.archive`` (it checks again, at
delivery, that nothing happened since the notice).

``LifecycleJob.tick`` runs periodically (bot.ops; on PostgreSQL under a lease, so one replica fires): it reads the
index for open incidents with a status-update interval and for resolved incidents touched within the scan window,
and appends whatever has fallen due (archive, status reminders, follow-up reminders — core.reminders).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta

from decklog.core.clock import Clock, iso, parse_iso
from decklog.core.entries import Actor, NewEntry
from decklog.core.entries.lifecycle import ArchiveNotice, ChannelArchive
from decklog.core.reminders import Due, LifecyclePolicy, follow_up_reminder_due, status_reminder_due
from decklog.core.state import ScopeState
from decklog.core.store.ports import IndexPort, LogStore, ScopeRow

log = logging.getLogger(__name__)

ACTOR = Actor.system("lifecycle")
Check = Callable[[LogStore, ScopeState, datetime, LifecyclePolicy], Awaitable[Due | datetime | None]]
NEVER = datetime.max.replace(tzinfo=UTC)


async def activity_since(store: LogStore, state: ScopeState) -> datetime:
    """When the archive clock of a resolved incident started: the resolve, or a person's later entry."""
    since = parse_iso(state.resolved_at)
    if state.last_human_seq:
        for entry in await store.read_seqs(state.scope, [state.last_human_seq]):
            since = max(since, entry.at)
    return since


def _when(at: datetime) -> str:
    return at.strftime("%Y-%m-%d %H:%M UTC")


async def archive_due(
    store: LogStore, state: ScopeState, now: datetime, policy: LifecyclePolicy
) -> Due | datetime | None:
    """The notice or the archive that has fallen due for ``state``'s dedicated channel, if any."""
    thread = state.thread
    if state.kind != "incident" or state.status != "resolved" or not state.resolved_at:
        return None
    if thread is None or not thread.dedicated_channel or policy.archive_after_s < 0:
        return None
    since = await activity_since(store, state)
    notices = await store.read_last(state.scope, limit=1, kinds=["archive_notice"])
    notice = notices[0] if notices else None
    if notice is None or not isinstance(notice.payload, ArchiveNotice) or notice.payload.since != iso(since):
        lead = timedelta(seconds=policy.notice_lead_s)
        archive_at = since + timedelta(seconds=policy.archive_after_s)
        if now < archive_at - lead:
            return archive_at - lead
        archive_at = max(archive_at, now + lead)
        text = (
            f"This channel will be archived on {_when(archive_at)}, as the incident is resolved. "
            "Post here or reopen the incident to keep it open."
        )
        payload = ArchiveNotice(channel=thread.channel, since=iso(since), archive_at=iso(archive_at), text=text)
        return Due("archive_notice", payload, f"archive_notice:{iso(since)}")
    assert isinstance(notice.payload, ArchiveNotice)
    if now < parse_iso(notice.payload.archive_at):
        return parse_iso(notice.payload.archive_at)
    for done in await store.read_last(state.scope, limit=4, kinds=["channel_archive"]):
        p = done.payload
        if isinstance(p, ChannelArchive) and p.notice == notice.seq and p.channel == thread.channel:
            return None  # this notice's archive is in the log already: nothing more to do
    text = f"Archived the incident channel (notice #{notice.seq}, no activity since)."
    archive = ChannelArchive(channel=thread.channel, notice=notice.seq, text=text)
    return Due("channel_archive", archive, f"channel_archive:{notice.seq}", refs=(notice.seq,))


def _s(seconds: float) -> timedelta:
    return timedelta(seconds=seconds)


CHECKS: tuple[Check, ...] = (archive_due, status_reminder_due, follow_up_reminder_due)


class LifecycleJob:
    """Finds the lifecycle items that have fallen due and appends them (idempotently: once per due time)."""

    def __init__(self, store: LogStore, index: IndexPort, clock: Clock, policy: LifecyclePolicy) -> None:
        self.store = store
        self.index = index
        self.clock = clock
        self.policy = policy
        self.appended = 0
        # A cache, never the source of truth: scope → (its index version, when its next item falls due) for the
        # scopes the last pass found nothing due in; a new entry (a new version) or that time reads the log again.
        self._quiet: dict[str, tuple[int, datetime]] = {}

    def _candidate(self, row: ScopeRow, now: datetime) -> bool:
        """Whether the row may hold due work (read from the index row alone; the checks then read the log)."""
        policy = self.policy
        if row.is_open:
            interval = policy.status_update_s.get(row.severity) if row.severity is not None else None
            return bool(interval) and bool(row.created_at) and parse_iso(row.created_at) + _s(interval or 0) <= now
        if not row.updated_at or not row.resolved_at:
            return False
        if parse_iso(row.updated_at) < now - _s(policy.scan_window_s()):
            return False
        waits = [policy.archive_after_s - policy.notice_lead_s]
        if policy.follow_up_after_s > 0:
            waits.append(policy.follow_up_after_s)
        return parse_iso(row.resolved_at) + _s(min(waits)) <= now  # nothing is due before the first wait ends

    async def tick(self) -> list[tuple[str, str]]:
        """One pass: returns the (scope, kind) of every entry appended."""
        now = self.clock.now()
        fired: list[tuple[str, str]] = []
        quiet: dict[str, tuple[int, datetime]] = {}
        for row in await self._rows(now):
            if not self._candidate(row, now):
                continue
            known = self._quiet.get(row.id)
            if known is not None and known[0] == row.version and now < known[1]:
                quiet[row.id] = known  # nothing in its log changed, and nothing it holds is due yet
                continue
            try:
                appended, next_at = await self._scope(row.id, now)
            except Exception:  # one bad scope never stops the others; the next tick tries again
                log.exception("lifecycle: checking %s failed", row.id)
                continue
            fired += appended
            if not appended:
                quiet[row.id] = (row.version, next_at)
        self._quiet = quiet
        self.appended += len(fired)
        return fired

    async def _rows(self, now: datetime) -> list[ScopeRow]:
        """Every open incident, and every resolved one touched within the scan window (however many: no cap)."""
        since = iso(now - _s(self.policy.scan_window_s()))
        open_rows = await self.index.list_scopes(kind="incident", open_only=True, limit=None)
        return open_rows + await self.index.list_scopes(
            kind="incident", status="resolved", updated_since=since, limit=None
        )

    async def _scope(self, scope: str, now: datetime) -> tuple[list[tuple[str, str]], datetime]:
        """What fell due in ``scope`` (appended), and when its next item falls due if nothing changes."""
        state = await self.store.get_state(scope)
        if state.forked_from:
            return [], NEVER
        fired = []
        next_at = NEVER
        for check in CHECKS:
            due = await check(self.store, state, now, self.policy)
            if due is None:
                continue
            if isinstance(due, datetime):
                next_at = min(next_at, due)
                continue
            entry = NewEntry.make(due.kind, ACTOR, due.payload, refs=due.refs)
            result = await self.store.append(scope, [entry], idempotency_key=due.key)
            state = result.state
            if result.duplicate:  # another replica (or an earlier pass) appended it: look again next pass
                next_at = now
            else:
                fired.append((scope, due.kind))
        return fired, next_at
