"""Follow-ups in the team's tracker: the command grammar, and the outbox sender that files each one.

``follow-up <text> [@owner] [due YYYY-MM-DD]`` (in a thread, ``/incident follow-up …``, or the report's button on an
open obligation) appends a ``follow_up`` entry. The ``trackers`` outbox topic takes only those entries
(bot.runtime ``TOPIC_KINDS``); :class:`FollowUpsSender` files the issue exactly once, even across crashes and
retries:

1. a ``follow_up_synced`` entry for that seq already in the log → nothing to do;
2. else the tracker is asked for an issue carrying the follow-up's marker (``decklog-follow-up:<scope>#<seq>``,
   written into every issue it creates) → a crash between "created" and "recorded" finds it here;
3. else the issue is created; then ``follow_up_synced`` (its ``text`` contains the issue's URL) is appended under
   the idempotency key ``follow_up_synced:<seq>``, so a repeated delivery records nothing new.

A tracker's refusals map to the outbox's: rate limited → ``RetryAfter``; bad credentials, unknown repository or
project, invalid fields → ``PermanentFailure`` (the row parks with a ``delivery_failed`` entry, visible in
``decklog outbox``); anything else (5xx, a lost connection) is retried with backoff.

Closing (:class:`FollowUpCloser`): a GitHub ``issues`` webhook (``closed`` / ``reopened``, on ``/changes/github``)
appends ``follow_up_closed`` (``state`` ``closed`` / ``open``) to the incident whose follow-up was filed as that
issue. The issue is matched by the marker in its body (``decklog-follow-up:<scope>#<seq>``: the scope and the
follow-up's seq), else by its URL among the ``follow_up_synced`` entries (the index's full-text search finds the
candidates, the log decides). An issue decklog did not file, a change older than the last one recorded (GitHub does
not promise delivery order) and a redelivery record nothing.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from decklog.core.entries import Actor, Entry, FollowUp, FollowUpClosed, FollowUpSynced, NewEntry, parse_payload
from decklog.core.errors import InvalidInput
from decklog.core.outbox.sender import PermanentFailure, RetryAfter
from decklog.core.store.ports import LogStore, SearchHit

TRACKER_LABEL = "incident-follow-up"
_DUE = re.compile(r"(?:^|\s)due\s+(\S+)\s*$", re.IGNORECASE)
_OWNER = re.compile(r"(?:^|\s)(<@[A-Z0-9]+(?:\|[^>]*)?>|@[\w.-]+)\s*$")


def parse_follow_up(text: str) -> FollowUp:
    """``<text> [@owner] [due YYYY-MM-DD]`` (owner and due in either order, at the end) → a valid payload.

    >>> parse_follow_up("add a canary for checkout <@U123> due 2026-12-24").model_dump()
    {'text': 'add a canary for checkout', 'owner': 'U123', 'due': '2026-12-24', 'obligation_id': ''}
    """
    rest, owner, due = text.strip(), "", ""
    for _ in range(2):
        if not due and (m := _DUE.search(rest)):
            due, rest = m.group(1), rest[: m.start()].rstrip()
        elif not owner and (m := _OWNER.search(rest)):
            owner, rest = _user(m.group(1)), rest[: m.start()].rstrip()
    if not rest:
        raise InvalidInput("a follow-up needs a text: follow-up <text> [@owner] [due YYYY-MM-DD]")
    payload = parse_payload("follow_up", {"text": rest, "owner": owner, "due": due})
    assert isinstance(payload, FollowUp)
    return payload


def _user(token: str) -> str:
    if token.startswith("<@"):
        return token[2:-1].split("|", 1)[0]
    return token[1:]


def marker(scope: str, seq: int) -> str:
    """What every filed issue carries, so that a retry finds it instead of filing it again."""
    return f"decklog-follow-up:{scope}#{seq}"


@dataclass(frozen=True)
class IssueDraft:
    title: str
    body: str
    marker: str
    owner: str = ""
    due: str = ""


@dataclass(frozen=True)
class FiledIssue:
    url: str
    number: str  # GitHub's number, Jira's key
    state: str = "open"


class TrackerError(Exception):
    """A tracker's answer that is not a success. ``retry_after`` set: rate limited; ``permanent``: retrying cannot
    help (401/403/404/400/422)."""

    def __init__(self, message: str, *, status: int = 0, permanent: bool = False, retry_after: float | None = None):
        super().__init__(message)
        self.status = status
        self.permanent = permanent
        self.retry_after = retry_after


class Tracker(Protocol):
    @property
    def name(self) -> Literal["github", "jira"]: ...

    async def find(self, marker: str) -> FiledIssue | None:
        """The issue that carries ``marker``, if one exists (raises ``TrackerError``)."""

    async def create(self, draft: IssueDraft) -> FiledIssue:
        """File a new issue (raises ``TrackerError``)."""


def draft_of(scope: str, seq: int, p: FollowUp, incident_url: str) -> IssueDraft:
    lines = [p.text, "", f"Follow-up from incident `{scope}`: {incident_url}"]
    if p.owner:
        lines.append(f"Owner: {p.owner}")
    if p.due:
        lines.append(f"Due: {p.due}")
    mark = marker(scope, seq)
    lines += ["", f"<!-- {mark} -->"]
    return IssueDraft(title=p.text[:250], body="\n".join(lines), marker=mark, owner=p.owner, due=p.due)


class FollowUpsSender:
    """Outbox topic ``trackers``: files each ``follow_up`` entry's issue, once."""

    name = "trackers"
    batch_size = 8

    def __init__(self, store: LogStore, tracker: Tracker, incident_url: Callable[[str], str]) -> None:
        self.store = store
        self.tracker = tracker
        self.incident_url = incident_url
        self.actor = Actor.system(f"tracker:{tracker.name}")

    async def deliver(self, scope: str, entries: Sequence[Entry]) -> None:
        wanted = [e for e in entries if isinstance(e.payload, FollowUp)]
        if not wanted:
            return
        synced = await self.synced(scope)
        for entry in wanted:
            if entry.seq not in synced:
                await self._file(scope, entry)

    async def synced(self, scope: str) -> set[int]:
        done = await self.store.read(scope, kinds=("follow_up_synced",))
        return {e.payload.follow_up for e in done if isinstance(e.payload, FollowUpSynced)}

    async def _file(self, scope: str, entry: Entry) -> None:
        assert isinstance(entry.payload, FollowUp)
        draft = draft_of(scope, entry.seq, entry.payload, self.incident_url(scope))
        try:
            issue = await self.tracker.find(draft.marker) or await self.tracker.create(draft)
        except TrackerError as exc:
            if exc.retry_after is not None:
                raise RetryAfter(exc.retry_after, f"{self.tracker.name}: {exc}") from None
            if exc.permanent:
                raise PermanentFailure(f"{self.tracker.name}: {exc}") from None
            raise
        text = f"Follow-up #{entry.seq} filed as {self.tracker.name} {issue.number}: {issue.url}"
        payload = FollowUpSynced(
            follow_up=entry.seq, tracker=self.tracker.name, url=issue.url, number=issue.number, text=text
        )
        await self.store.append(
            scope,
            [NewEntry.make("follow_up_synced", self.actor, payload, refs=(entry.seq,))],
            idempotency_key=f"follow_up_synced:{entry.seq}",
        )


# --- closing: the tracker says the issue was closed or reopened -------------------------------------------------

_MARKER = re.compile(r"decklog-follow-up:([a-z][a-z0-9_-]{0,31}/[A-Za-z0-9][A-Za-z0-9._-]{0,119})#([1-9][0-9]{0,11})")
CANDIDATES = 50


@dataclass(frozen=True)
class IssueEvent:
    """A tracker issue that was closed or reopened (from a GitHub ``issues`` webhook)."""

    action: Literal["closed", "reopened"]
    url: str  # the issue's html_url, as follow_up_synced recorded it
    number: int
    repository: str = ""
    body: str = ""
    reason: str = ""  # state_reason
    by: str = ""  # sender.login
    changed_at: str = ""  # issue.updated_at, ISO 8601 UTC


@dataclass(frozen=True)
class Closing:
    """What the closer did with one event: ``recorded``, or why nothing was (``unknown``, ``stale``,
    ``duplicate``)."""

    outcome: Literal["recorded", "unknown", "stale", "duplicate"]
    reason: str
    scope: str = ""
    follow_up: int = 0
    seq: int = 0

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"outcome": self.outcome, "reason": self.reason}
        if self.scope:
            out.update(scope=self.scope, follow_up=self.follow_up)
        if self.seq:
            out["seq"] = self.seq
        return out


class IssueSearch(Protocol):
    async def search(
        self, text: str, *, limit: int = 20, scope_kind: str | None = None, kinds: Sequence[str] = ()
    ) -> list[SearchHit]: ...


class FollowUpCloser:
    """Records ``follow_up_closed`` for a tracker issue's close / reopen, once, in the incident that filed it."""

    def __init__(self, store: LogStore, index: IssueSearch) -> None:
        self.store = store
        self.index = index
        self.actor = Actor.system("tracker:github")

    async def receive(self, event: IssueEvent) -> Closing:
        found = await self._match(event)
        if found is None:
            return Closing("unknown", f"issue {event.url} is not a follow-up decklog filed: nothing to record")
        scope, seq, changes = found
        state = "closed" if event.action == "closed" else "open"
        latest = max(changes, key=lambda p: p.changed_at, default=None)
        if latest is not None and event.changed_at and event.changed_at <= latest.changed_at:
            why = "already recorded" if latest.state == state else f"older than the {latest.state} state recorded"
            return Closing("stale", f"follow-up #{seq} {event.action} at {event.changed_at}: {why}", scope, seq)
        if latest is None and state == "open":
            return Closing("stale", f"follow-up #{seq} was never recorded closed: it is open already", scope, seq)
        payload = FollowUpClosed(
            follow_up=seq, url=event.url, state=state, by=event.by, reason=event.reason, changed_at=event.changed_at
        )
        key = f"follow_up_closed:{seq}:{event.action}:{event.changed_at}"
        result = await self.store.append(
            scope, [NewEntry.make("follow_up_closed", self.actor, payload, refs=(seq,))], idempotency_key=key
        )
        if result.duplicate:
            return Closing("duplicate", f"follow-up #{seq} {event.action}: already recorded", scope, seq)
        return Closing("recorded", f"follow-up #{seq} {event.action}", scope, seq, result.entries[0].seq)

    async def _match(self, event: IssueEvent) -> tuple[str, int, list[FollowUpClosed]] | None:
        """(scope, follow-up seq, its recorded changes) of the follow-up filed as this issue, if any."""
        marked = _MARKER.search(event.body)
        if marked is not None:
            found = await self._in_scope(marked.group(1), event, int(marked.group(2)))
            if found is not None:
                return found
        hits = await self.index.search(event.url, limit=CANDIDATES, scope_kind="incident", kinds=("follow_up_synced",))
        for scope in dict.fromkeys(h.scope for h in hits):
            found = await self._in_scope(scope, event, None)
            if found is not None:
                return found
        return None

    async def _in_scope(
        self, scope: str, event: IssueEvent, marked: int | None
    ) -> tuple[str, int, list[FollowUpClosed]] | None:
        """The follow-up of ``scope`` synced to ``event.url`` — or, by the marker, the follow-up at seq
        ``marked`` when it is not synced yet (a crash between filing and recording)."""
        try:
            if not self.store.holds(scope):
                return None
        except InvalidInput:  # a marker naming no valid scope (edited by hand)
            return None
        entries = await self.store.read(scope, kinds=("follow_up", "follow_up_synced", "follow_up_closed"))
        synced = {e.payload.follow_up: e.payload.url for e in entries if isinstance(e.payload, FollowUpSynced)}
        seq = next((s for s, url in synced.items() if url == event.url), None)
        if seq is None and marked is not None and marked not in synced:
            seq = marked if any(e.seq == marked and isinstance(e.payload, FollowUp) for e in entries) else None
        if seq is None:
            return None
        changes = [e.payload for e in entries if isinstance(e.payload, FollowUpClosed) and e.payload.follow_up == seq]
        return scope, seq, changes
