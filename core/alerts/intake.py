"""Alert notifications acknowledged once they are durable, routed in bulk behind the answer.

The receiver checks a notification (authentication, size, JSON, the source's parser: a malformed one still gets
its 400), then ``accept`` stores the raw body in the alert inbox (``core.store.ports.AlertInbox``, group-committed)
under a new receipt and the sender gets ``202 {"accepted": N, "receipt": ID}``. The parsed alerts wait here, in
memory, for the routing task (``run``): it takes every notification waiting at once and routes them with
``AlertRouter.receive_many`` — the alerts of all of them that go to one known incident in one append — then
records each notification's outcomes under its receipt (``GET /api/alerts/receipts/{id}``) and wakes whoever
waits for them (``?wait=SECONDS``).

Nothing acknowledged is lost: what is still pending in the inbox when the process starts (it died between an
answer and the routing) is parsed again from its stored body and routed first (``replay``), as the Slack intake
replays its inbox; with replicas, ``replay`` runs every few seconds and also takes over the notifications of a
replica whose lease ran out. Routing twice is harmless: every observation carries its notification's
idempotency key. A notification whose routing fails is tried again at the next replay, and given up after
``MAX_ATTEMPTS`` with the error in its receipt (never lost silently, never retried for ever).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import uuid
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from decklog.core.alerts.router import AlertRouter
from decklog.core.alerts.rules import AlertOutcome
from decklog.core.signals import AlertSignal
from decklog.core.store.ports import AlertInbox, AlertReceipt, StoredNotification

log = logging.getLogger(__name__)

#: ``(source, raw body)`` → the notification's signals and the evidence to keep; raises when it cannot be parsed
#: (the adapter's parser: core knows no vendor payload).
Parse = Callable[[str, bytes], Awaitable[tuple[list[AlertSignal], dict[str, Any]]]]
MAX_ATTEMPTS = 3
#: Alerts routed in one ``receive_many`` at most (a bigger backlog is routed in several rounds).
ROUND_ALERTS = 20_000
REPLAY_LIMIT = 500  # stored notifications read per replay


@dataclass
class _Waiting:
    receipt: str
    source: str
    signals: list[AlertSignal] | None  # None: parsed by the routing task (a big group, checked cheaply)
    evidence: dict[str, Any]
    attempts: int = 0
    body: bytes | None = None  # what is parsed when ``signals`` is None
    accepted: int = 0
    done: asyncio.Future[list[AlertOutcome] | None] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )


_PROCESS = uuid.uuid4().hex[:16]  # this process's part of every receipt it issues (random: unique across replicas)
_ISSUED = itertools.count(1)


def new_receipt() -> str:
    """A new receipt id, unique across processes and restarts (not a secret: reading one takes a token)."""
    return f"{_PROCESS}{next(_ISSUED):012x}"


class AlertIntake:
    """``receipt = await intake.accept(source, body, signals, evidence)``; ``await intake.wait(receipt, s)``."""

    def __init__(self, inbox: AlertInbox, router: AlertRouter, parse: Parse) -> None:
        self.inbox = inbox
        self.router = router
        self.parse = parse
        self._queue: deque[_Waiting] = deque()
        self._held: dict[str, _Waiting] = {}  # receipt → queued or being routed here
        self._wake = asyncio.Event()
        self.routed = 0  # notifications this process routed
        self.replayed = 0  # of which stored ones it replayed (its own after a crash, or a dead replica's)
        self.given_up = 0

    # -- the answer ---------------------------------------------------------------------------------------------

    async def accept(
        self,
        source: str,
        body: bytes | bytearray,
        signals: list[AlertSignal] | None,
        evidence: dict[str, Any],
        *,
        accepted: int = 0,
    ) -> str:
        """Store the notification durably (its raw body) and queue its alerts for routing: its receipt. ``signals``
        None: the routing task parses ``body`` (``accepted`` alerts, counted by the caller's cheap check)."""
        receipt = new_receipt()
        raw = bytes(body)
        count = len(signals) if signals is not None else accepted
        waiting = _Waiting(receipt, source, signals, evidence, body=raw if signals is None else None, accepted=count)
        self._held[receipt] = waiting  # before the put: a replay meanwhile must not queue it a second time
        try:
            await self.inbox.put(receipt=receipt, source=source, body=raw, accepted=count)
        except BaseException:
            del self._held[receipt]
            raise
        self._queue.append(waiting)
        self._wake.set()
        return receipt

    async def wait(self, receipt: str, timeout: float) -> list[dict[str, Any]] | None:
        """The notification's outcomes (as its receipt gives them) once routed within ``timeout`` seconds; None
        when it is not routed yet (or its routing was given up)."""
        waiting = self._held.get(receipt)
        if waiting is not None:
            try:
                outcomes = await asyncio.wait_for(asyncio.shield(waiting.done), timeout)
            except TimeoutError:
                return None
            if outcomes is not None:
                return [o.to_json() for o in outcomes]
        stored = await self.inbox.receipt(receipt)
        return None if stored is None else stored.outcomes

    async def receipt(self, receipt: str) -> AlertReceipt | None:
        return await self.inbox.receipt(receipt)

    # -- routing ------------------------------------------------------------------------------------------------

    async def run(self) -> None:
        """The routing task (one per process): replays what the inbox holds, then routes whatever is queued, every
        notification waiting at once, for ever."""
        await self.replay()
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self._queue:
                await self.route_round()

    async def route_round(self) -> int:
        """Route the notifications queued now (up to ``ROUND_ALERTS`` alerts); returns how many."""
        taken: list[_Waiting] = []
        alerts = 0
        while self._queue and (not taken or alerts + self._queue[0].accepted <= ROUND_ALERTS):
            waiting = self._queue.popleft()
            alerts += waiting.accepted
            if waiting.signals is None and not await self._parse_held(waiting):
                continue
            taken.append(waiting)
        if not taken:
            return 0
        routed: list[list[AlertOutcome] | None]
        try:
            routed = list(await self.router.receive_many([(w.source, w.signals or [], w.evidence) for w in taken]))
        except Exception:
            log.exception("alerts: routing %d notifications together failed; routing each on its own", len(taken))
            routed = [await self._route_one(w) for w in taken]
        finished = [(w, outcomes) for w, outcomes in zip(taken, routed, strict=True) if outcomes is not None]
        await self.inbox.finish(
            [
                AlertReceipt(w.receipt, w.source, w.accepted, 0.0, outcomes=[o.to_json() for o in outcomes])
                for w, outcomes in finished
            ]
        )
        for w, outcomes in finished:
            self._release(w, outcomes)
        self.routed += len(finished)
        return len(taken)

    async def _parse_held(self, waiting: _Waiting) -> bool:
        """Parse a notification accepted on a cheap check; a field error fails its receipt (the path named)."""
        try:
            waiting.signals, waiting.evidence = await self.parse(waiting.source, waiting.body or b"")
        except Exception as exc:
            await self._failed(waiting.receipt, waiting.source, waiting.accepted, MAX_ATTEMPTS, exc)
            self._release(waiting, None)
            return False
        waiting.body = None
        return True

    async def _route_one(self, waiting: _Waiting) -> list[AlertOutcome] | None:
        """Route one notification; on an error, count the attempt and leave it stored (the next replay tries it
        again), or give it up after ``MAX_ATTEMPTS`` with the error in its receipt. None when not routed."""
        try:
            return await self.router.receive(waiting.source, waiting.signals or [], raw=waiting.evidence)
        except Exception as exc:
            attempts = waiting.attempts + 1
            log.exception("alerts: routing notification %s failed (attempt %d)", waiting.receipt, attempts)
            await self._failed(waiting.receipt, waiting.source, waiting.accepted, attempts, exc)
            self._release(waiting, None)
            return None

    async def _failed(self, receipt: str, source: str, accepted: int, attempts: int, exc: BaseException) -> None:
        if attempts < MAX_ATTEMPTS:
            await self.inbox.attempt([receipt])
            return
        error = (
            str(exc) if isinstance(exc, ValueError) else f"routing failed {attempts} times: {type(exc).__name__}: {exc}"
        )
        await self.inbox.finish([AlertReceipt(receipt, source, accepted, 0.0, error=error)])
        self.given_up += 1

    def _release(self, waiting: _Waiting, outcomes: list[AlertOutcome] | None) -> None:
        self._held.pop(waiting.receipt, None)
        if not waiting.done.done():
            waiting.done.set_result(outcomes)

    async def replay(self) -> int:
        """Queue the stored notifications not routed yet and not already held here (at start-up: what a crash
        left; with replicas, every few seconds: also a dead replica's, whose lease ran out). Returns how many."""
        stored = await self.inbox.pending(limit=REPLAY_LIMIT)
        queued = 0
        for item in stored:
            if item.receipt in self._held:
                continue
            waiting = await self._parsed(item)
            if waiting is None:
                continue
            self._held[item.receipt] = waiting
            self._queue.append(waiting)
            queued += 1
        if queued:
            self.replayed += queued
            log.info("alerts: %d stored notification(s) queued for routing again", queued)
            self._wake.set()
        return queued

    async def _parsed(self, item: StoredNotification) -> _Waiting | None:
        try:
            signals, evidence = await self.parse(item.source, item.body)
        except Exception as exc:  # it was parsed before its 202: only a changed parser gets here
            await self._failed(item.receipt, item.source, item.accepted, MAX_ATTEMPTS, exc)
            return None
        return _Waiting(item.receipt, item.source, signals, evidence, attempts=item.attempts, accepted=len(signals))

    async def drain(self, timeout: float) -> None:
        """At stop: let what is queued be routed for up to ``timeout`` seconds (the rest stays stored)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while self._held and loop.time() < deadline:
            await asyncio.sleep(0.02)

    @property
    def waiting(self) -> int:
        """Notifications queued or being routed in this process."""
        return len(self._held)
