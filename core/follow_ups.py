"""Follow-ups in the team's tracker (issue 18): the command grammar, and the outbox sender that files each one.

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
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

from core.entries import Actor, Entry, FollowUp, FollowUpSynced, NewEntry, parse_payload
from core.errors import InvalidInput
from core.outbox import PermanentFailure, RetryAfter
from core.store import LogStore

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
