"""The ``oncall`` outbox sender: delivers each ``page`` entry to the person (or PagerDuty) by its contact method.

A page is delivered once per (scope, seq) like every outbox row; its ``key`` — (incident, escalation, level,
target, repetition, method) — goes to the vendor as the idempotency key where the vendor takes one (the Slack DM's
message metadata, the email's Message-ID, PagerDuty's ``dedup_key``). Before the effect the sender reads the log
again and drops the page when an acknowledgement has stopped its escalation, the incident is resolved, or (for a
parked approval) the proposal is no longer waiting: a page that lost a race with an acknowledgement never goes
out. A method with no notifier configured (SMS without Twilio settings) parks the row: ``delivery_failed`` is
visible in the thread and in ``decklog doctor``. Notifiers raise ``RetryAfter`` on a rate limit (a Slack 429): the
page waits, it is never sent twice.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from decklog.core.entries import Entry
from decklog.core.entries.oncall import OncallHandoff, Page
from decklog.core.oncall.setup import OncallConfig
from decklog.core.outbox.sender import PermanentFailure
from decklog.core.store.ports import LogStore

log = logging.getLogger(__name__)

TOPIC = "oncall"


@dataclass(frozen=True)
class Notice:
    """What a notifier needs to reach one person about one page."""

    scope: str
    seq: int
    key: str
    method: str
    target: str  # a Slack user id, or a PagerDuty routing key
    address: str  # the phone number or email address for sms / voice / email
    title: str
    severity: int | None
    permalink: str
    escalation: int
    level: int
    repetition: int
    proposal: str = ""
    proposal_preview: str = ""

    @property
    def text(self) -> str:
        sev = f"SEV{self.severity} " if self.severity else ""
        what = f"approval needed: {self.proposal_preview}" if self.proposal else f"{sev}incident: {self.title}"
        link = f" {self.permalink}" if self.permalink else ""
        return f"decklog page ({self.scope}) {what}{link}"


class Notifier(Protocol):
    """One contact method (slack, sms, voice, email, pagerduty). Raises ``RetryAfter`` on a rate limit,
    ``PermanentFailure`` when retrying cannot help, anything else to retry with backoff."""

    async def notify(self, notice: Notice) -> None: ...


class HandoffPoster(Protocol):
    """Says in the team's channel who is now on call (``key``: the handoff's idempotency key)."""

    async def post_handoff(self, handoff: OncallHandoff, key: str) -> None: ...


class OncallSender:
    name = TOPIC
    batch_size = 10

    def __init__(
        self,
        store: LogStore,
        setup: OncallConfig,
        notifiers: Mapping[str, Notifier],
        handoffs: HandoffPoster | None = None,
    ) -> None:
        self.store = store
        self.setup = setup
        self.notifiers = dict(notifiers)
        self.handoffs = handoffs
        self.sent = 0
        self.dropped = 0

    async def deliver(self, scope: str, entries: Sequence[Entry]) -> None:
        for entry in entries:
            if isinstance(entry.payload, Page):
                await self._page(scope, entry, entry.payload)
            elif isinstance(entry.payload, OncallHandoff) and self.handoffs is not None:
                await self.handoffs.post_handoff(entry.payload, entry.idempotency_key or f"{scope}:{entry.seq}")

    async def _page(self, scope: str, entry: Entry, page: Page) -> None:
        why = await self.stopped(scope, page)
        if why:
            self.dropped += 1
            log.info("oncall: page %s not sent: %s", page.key, why)
            return
        notifier = self.notifiers.get(page.method)
        if notifier is None:
            raise PermanentFailure(f"no {page.method} notifier is configured (page {page.key})")
        state = await self.store.get_state(scope)
        person = self.setup.person(page.target)
        address = person.email if page.method == "email" else person.phone
        preview = ""
        if page.proposal and page.proposal in state.proposals:
            p = state.proposals[page.proposal]
            preview = p.preview or p.action
        notice = Notice(
            scope=scope,
            seq=entry.seq,
            key=page.key,
            method=page.method,
            target=page.target,
            address=address,
            title=state.title,
            severity=state.severity,
            permalink=state.thread.permalink if state.thread else "",
            escalation=page.escalation,
            level=page.level,
            repetition=page.repetition,
            proposal=page.proposal,
            proposal_preview=preview,
        )
        await notifier.notify(notice)
        self.sent += 1

    async def stopped(self, scope: str, page: Page) -> str:
        """Why ``page`` must not go out now ("" when it must)."""
        acks = await self.store.read(scope, after=page.escalation, kinds=("acknowledged",), limit=1)
        if acks:
            return f"acknowledged by {getattr(acks[0].payload, 'user', '?')} (#{acks[0].seq})"
        state = await self.store.get_state(scope)
        if not state.is_open:
            return "the incident is resolved"
        if page.proposal:
            p = state.proposals.get(page.proposal)
            if p is None or p.status != "waiting_for_approval":
                return "the proposal no longer waits for approval"
        return ""
