"""Several replicas on one database: the dispatcher's (scope, topic) delivery cursors (a mixin of ``Dispatcher``).

Each drain holds the cursor row (``claim_cursor``/``take_cursor``, core/store/postgres_outbox.py) under a lease
on the database clock, renewed (``renew_cursor``, which waits for the row lock) before every batch and every third
of the lease while a batch is delivered; it is released after its done marks are written, so the next holder never
reads what was delivered as pending. A cursor taken over from a replica whose lease ran out (it died
mid-delivery) is told to the sender (``handed_over(scope, died=True)``): it reconciles before it posts again.

A holder also keeps its lease's deadline on its own monotonic clock, counted from before the request that took or
renewed it, and starts no delivery within ``LEASE_MARGIN_S`` of it: a replica that stalled past its lease (a frozen
VM, a stuck event loop) while another took the cursor over stops at its next item instead of delivering the rest of
the batch it had read (decision 115). A sender that waits inside one delivery checks the same deadline right
before each effect it cannot take back (``holds``, decision 121).
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
import uuid
from typing import Any

from core.outbox_marks import DoneMarks
from core.outbox_types import Sender

log = logging.getLogger("core.outbox")

#: How long a drainer's (scope, topic) cursor stays its own without renewal (renewed before every batch), and how
#: soon a drain that found the cursor taken looks again.
CURSOR_LEASE_S = 10.0
CLAIM_RETRY_S = 0.25
#: A replica that released a cursor this recently is the one another replica's commit may have collided with.
RECENT_S = 1.0
#: No delivery starts with less than this left of the holder's lease by its own clock (a call started just before
#: the deadline could still land after another replica took over).
LEASE_MARGIN_S = CURSOR_LEASE_S / 5


class SharedCursors:
    store: Any
    shared: bool
    owner: str
    senders: dict[str, Sender]
    marks: DoneMarks
    claims_lost: int
    takeovers: int
    leases_lapsed: int

    _running: dict[tuple[str, str], asyncio.Task[None]]
    _quiet: set[tuple[str, str]]
    _released: dict[tuple[str, str], float]
    _lease_until: dict[tuple[str, str], float]  # monotonic deadline of each cursor lease this replica holds

    def _init_cursors(self) -> None:
        # Several replicas on one database: each drain holds the (scope, topic) cursor, and the commit-feed fast
        # path is off (another replica's cursor may hold older entries than those this one committed).
        self.shared = callable(getattr(self.store, "claim_cursor", None))
        self.owner = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"
        self.claims_lost = 0  # drains that found another replica holding the cursor
        self.takeovers = 0  # cursors taken from a replica whose lease ran out
        self.leases_lapsed = 0  # deliveries not started because the cursor lease ran out (a stalled replica)
        self._lease_until = {}
        self._quiet = set()  # drains woken by another replica's commit (``remote_commit``)
        self._released = {}  # cursors this replica let go of lately (monotonic)

    def _arm(self, scope: str, topic: str, delay: float) -> None:
        raise NotImplementedError

    def _start(self, key: tuple[str, str]) -> None:
        raise NotImplementedError

    def remote_commit(self, scope: str, topics: tuple[str, ...], drained: bool = False) -> None:
        """Another process committed rows for ``topics`` of ``scope`` (LISTEN/NOTIFY). Not ``drained`` (the CLI):
        drain them now. ``drained`` (a replica): it drains them itself unless it found the cursor held — by the
        replica draining it now, or by the one that just let it go — so only those act: a drain running here goes
        round once more; one that ended here within ``RECENT_S`` runs again, quietly (if the cursor is held, no
        retry timer is set: the holder delivers)."""
        now = time.monotonic()
        for name in topics or tuple(self.senders):
            key = (scope, name)
            if name not in self.senders:
                continue
            if key in self._running or not drained:
                self._start(key)
            elif now - self._released.get(key, -RECENT_S) < RECENT_S:
                self._quiet.add(key)
                self._start(key)

    async def _claim(self, scope: str, topic: str) -> bool:
        try:
            ok = await self._take(scope, topic)
        except Exception:
            log.exception("dispatcher: claiming %s/%s failed", scope, topic)
            ok = False
        quiet = (scope, topic) in self._quiet
        self._quiet.discard((scope, topic))
        if not ok:  # another replica drains it now; look again soon in case it finished before our rows landed
            self.claims_lost += 1
            if not quiet:
                self._arm(scope, topic, CLAIM_RETRY_S)
        return ok

    async def _take(self, scope: str, topic: str) -> bool:
        """Take or renew the (scope, topic) cursor. When another replica drained it last, the sender is told
        (``handed_over``): its cached memos may be stale, and if that replica died mid-delivery, it reconciles
        before it posts again."""
        asked = time.monotonic()
        take = getattr(self.store, "take_cursor", None)
        if take is None:
            ok = bool(await self.store.claim_cursor(scope, topic, self.owner, lease_s=CURSOR_LEASE_S))
            if ok:
                self._leased(scope, topic, asked)
            return ok
        claim = await take(scope, topic, self.owner, lease_s=CURSOR_LEASE_S)
        if claim is None:
            return False
        self._leased(scope, topic, asked)
        if claim.previous:
            if claim.died:
                self.takeovers += 1
                log.info("dispatcher: took %s/%s over from %s (its lease ran out)", scope, topic, claim.previous)
            handed_over = getattr(self.senders.get(topic), "handed_over", None)
            if callable(handed_over):
                handed_over(scope, died=claim.died)
        return True

    async def _keep_lease(self, scope: str, topic: str) -> None:
        """While a drain runs, renew its cursor lease every third of the lease: a live replica stalled in a slow
        delivery (a Slack call taking seconds, a wait for the channel's next post slot) keeps its cursor; only a
        dead one (or a frozen process) loses it."""
        while True:
            await asyncio.sleep(CURSOR_LEASE_S / 3)
            try:
                await self._renew(scope, topic)
            except Exception:
                log.warning("dispatcher: renewing the lease of %s/%s failed", scope, topic, exc_info=True)

    async def _renew(self, scope: str, topic: str) -> bool:
        """Extend the lease this replica holds (False: another replica took the cursor over)."""
        asked = time.monotonic()
        renew = getattr(self.store, "renew_cursor", None)
        if renew is None:
            ok = bool(await self.store.claim_cursor(scope, topic, self.owner, lease_s=CURSOR_LEASE_S))
        else:
            ok = bool(await renew(scope, topic, self.owner, lease_s=CURSOR_LEASE_S))
        if ok:
            self._leased(scope, topic, asked)
        return ok

    def holds(self, scope: str, topic: str) -> bool:
        """The fence a sender checks right before an effect it cannot take back (``LeaseFence``): False while
        this replica drains (scope, topic) with too little of its lease left. A sender may wait long inside one
        delivery (its channel's next post slot), so the check before the delivery is not enough."""
        until = self._lease_until.get((scope, topic))
        if until is None or time.monotonic() < until - LEASE_MARGIN_S:
            return True
        self.leases_lapsed += 1
        log.warning("dispatcher: the lease of %s/%s ran out inside a delivery; its effect is not started", scope, topic)
        return False

    def _leased(self, scope: str, topic: str, asked: float) -> None:
        """A take or renewal asked for at ``asked`` (monotonic) succeeded: the database's deadline is no earlier."""
        self._lease_until[(scope, topic)] = asked + CURSOR_LEASE_S

    def _lease_left(self, scope: str, topic: str) -> bool:
        """Whether a delivery may start (with replicas): while the cursor lease has more than
        ``LEASE_MARGIN_S`` left by this replica's clock. When not, the drain stops and looks again soon (the cursor
        is re-taken, or found taken over)."""
        if time.monotonic() < self._lease_until.get((scope, topic), 0.0) - LEASE_MARGIN_S:
            return True
        self.leases_lapsed += 1
        log.warning(
            "dispatcher: the lease of %s/%s ran out during its drain; stopping before the next delivery", scope, topic
        )
        self._arm(scope, topic, CLAIM_RETRY_S)
        return False

    async def _release(self, scope: str, topic: str) -> None:
        """Our done marks go first, so the next holder does not read what we delivered as pending."""
        self._lease_until.pop((scope, topic), None)
        try:
            await asyncio.shield(self.marks.flush(scope))
            await asyncio.shield(self.store.release_cursor(scope, topic, self.owner))
            self._remember_release((scope, topic))
        except asyncio.CancelledError:
            raise
        except Exception:  # the lease runs out on its own
            log.exception("dispatcher: releasing %s/%s failed", scope, topic)

    def _remember_release(self, key: tuple[str, str]) -> None:
        now = time.monotonic()
        self._released[key] = now
        if len(self._released) > 4096:
            for old in [k for k, at in self._released.items() if now - at > RECENT_S]:
                del self._released[old]

    async def _claim_more(self, scope: str, topic: str) -> bool:
        """Renew the cursor's lease before a batch (False: it ran out and another replica took it)."""
        if await self._renew(scope, topic):
            return True
        self.claims_lost += 1
        return False
