"""The dispatcher: drains each scope's outbox, in ``seq`` order per sender, to idempotent senders.

Delivery is at-least-once; senders are idempotent by (scope, seq), so the effect is once. Each (scope, sender)
pair drains independently: a failing or slow sender never blocks another. Failures back off exponentially with
jitter; past the budget a row is parked and a ``delivery_failed`` entry is appended (``decklog doctor`` lists
parked rows, ``--retry`` revives them). ``RetryAfter`` (Slack's 429) reschedules without spending the budget.

Fresh entries from memory: a drain about to read a pair's pending rows starts *listening* first (the commit feed
queues that pair's entries from then on). A read that returned every pending row (fewer than its limit) and was
delivered without a failure makes the pair *clean*: what was committed before the read was in it, what was committed
since is queued, so from then on the entries the commit feed carries are handed to the sender straight from memory,
without re-reading their pending rows (their rows are still written by the append and marked done after delivery;
a queued entry at or below the highest seq delivered is skipped). A storm of commits therefore never keeps a pair
reading from the store. A scope whose first entry (seq 1) the feed carries is clean from that commit on: nothing of
it was committed before. Any failure, retry, explicit ``wake``, an overflowing queue (``FRESH_MAX``) or a stale
clean mark (``CLEAN_TTL_S``: a commit the feed never carried, e.g. another process's) sends the pair back to reading
its durable pending rows, which stays the path at boot, in the sweep and for retries.

Several replicas on one database (``cursors``: the backend's ``CursorClaims``): each drain holds the (scope, topic)
cursor under a lease on the database clock, renewed before every batch and every third of the lease while a batch
is delivered; it is released after its done marks are written, so the next holder never reads what was delivered
as pending. The commit-feed fast path is off (another replica's cursor may hold older entries than those this one
committed), and the other replicas' commits wake this one (``remote_commit``). A cursor taken over from a replica
whose lease ran out (it died mid-delivery) is told to the sender (``handed_over(scope, died=True)``): it reconciles
before it posts again. A holder also keeps its lease's deadline on its own monotonic clock, counted from before the
request that took or renewed it, and starts no delivery within ``LEASE_MARGIN_S`` of it: a replica that stalled past
its lease (a frozen VM, a stuck event loop) while another took the cursor over stops at its next item instead of
delivering the rest of the batch it had read (decision 115). A sender that waits inside one delivery checks the same
deadline right before each effect it cannot take back (``holds``, decision 121).
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
import socket
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field

from decklog.core.alarm import Alarm, AsyncioAlarm
from decklog.core.entries import Entry
from decklog.core.errors import NotFound
from decklog.core.outbox.marks import DoneMarks
from decklog.core.outbox.sender import LeaseLost, OneByOne, PermanentFailure, RetryAfter, Sender
from decklog.core.store.ports import CursorClaims, DeliveryStore, OutboxItem

log = logging.getLogger(__name__)

#: How long a (scope, sender) pair trusts the commit feed before it reads its pending rows again.
CLEAN_TTL_S = 10.0
#: Entries queued in memory for one pair beyond which it reads from the store instead.
FRESH_MAX = 4096
#: The only topics a fork (a scope with a ``forked`` entry, core/fork.py) is delivered to: its other rows are
#: marked done without calling their senders, so a fork never reaches Slack, executors, agents or change links.
FORK_TOPICS = frozenset({"index"})
#: How long a drainer's (scope, topic) cursor stays its own without renewal (renewed before every batch), and how
#: soon a drain that found the cursor taken looks again.
CURSOR_LEASE_S = 10.0
CLAIM_RETRY_S = 0.25
#: A replica that released a cursor this recently is the one another replica's commit may have collided with.
RECENT_S = 1.0
#: No delivery starts with less than this left of the holder's lease by its own clock (a call started just before
#: the deadline could still land after another replica took over).
LEASE_MARGIN_S = CURSOR_LEASE_S / 5


@dataclass(frozen=True)
class RetryPolicy:
    max_attempts: int = 8
    base_delay: float = 0.5
    max_delay: float = 300.0

    def delay(self, attempts: int, rng: random.Random) -> float:
        """Exponential backoff with full jitter: uniform(0, min(max, base * 2**(attempts-1)))."""
        ceiling = min(self.max_delay, self.base_delay * (2 ** max(0, attempts - 1)))
        return max(0.05, rng.uniform(ceiling / 2, ceiling))


@dataclass
class DispatchStats:
    delivered: int = 0
    failures: int = 0
    parked: int = 0
    rate_limited: int = 0
    latencies: list[float] = field(default_factory=list)  # commit → delivered, seconds (bounded ring)

    def observe(self, seconds: float) -> None:
        self.latencies.append(seconds)
        if len(self.latencies) > 4096:
            del self.latencies[:2048]


class Dispatcher:
    """Drains ``store``'s outbox to ``senders``; with ``cursors`` (several replicas on one database), each
    (scope, sender) drain holds its cursor first."""

    def __init__(
        self,
        store: DeliveryStore,
        senders: Sequence[Sender],
        *,
        policy: RetryPolicy | None = None,
        alarm: Alarm | None = None,
        rng: random.Random | None = None,
        cursors: CursorClaims | None = None,
    ) -> None:
        self.store = store
        self.cursors = cursors
        self.senders: dict[str, Sender] = {}
        for sender in senders:
            self.register(sender)
        self.policy = policy or RetryPolicy()
        self.alarm: Alarm = alarm or AsyncioAlarm()
        self.rng = rng or random.Random()
        self.stats = DispatchStats()
        self.marks = DoneMarks(store)
        self._running: dict[tuple[str, str], asyncio.Task[None]] = {}
        self._soon: dict[tuple[str, str], None] = {}  # pairs whose drain starts at the end of this loop turn
        self._again: set[tuple[str, str]] = set()
        # Pairs whose outbox is known to hold nothing but what the commit feed queued in ``_fresh`` (until when).
        self._clean: dict[tuple[str, str], float] = {}
        # Pairs listening to the commit feed (clean, or a drain reading their pending rows): entries it queued.
        self._fresh: dict[tuple[str, str], list[Entry]] = {}
        self._upto: dict[tuple[str, str], int] = {}  # highest seq delivered per pair (a late feed item is skipped)
        self._forks: dict[str, bool] = {}  # scope → is a fork (a fork's rows and its ``forked`` entry commit at once)
        self._started = False
        self._stopped = False
        self.last_activity = time.monotonic()
        # Several replicas on one database: each drain holds the (scope, topic) cursor, and the commit-feed fast
        # path is off (another replica's cursor may hold older entries than those this one committed).
        self.shared = cursors is not None
        self.owner = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"
        if cursors is not None:  # a lock that goes with this process tells the others at once when it dies
            self.owner = cursors.hold_liveness(self.owner)
        self.claims_lost = 0  # drains that found another replica holding the cursor
        self.takeovers = 0  # cursors taken from a replica whose lease ran out
        self.leases_lapsed = 0  # deliveries not started because the cursor lease ran out (a stalled replica)
        self._lease_until: dict[tuple[str, str], float] = {}  # monotonic deadline of each cursor lease held here
        self._quiet: set[tuple[str, str]] = set()  # drains woken by another replica's commit (``remote_commit``)
        self._released: dict[tuple[str, str], float] = {}  # cursors this replica let go of lately (monotonic)

    # -- lifecycle --------------------------------------------------------------------------------------------

    def register(self, sender: Sender, *, first: bool = False) -> None:
        """``first``: woken before the others after each commit (the sender a person is waiting on, e.g. Slack;
        every (scope, sender) still drains independently)."""
        if sender.name not in self.store.topics:
            raise ValueError(f"sender {sender.name!r} has no outbox topic (topics: {self.store.topics})")
        self.senders[sender.name] = sender
        if first:
            self.senders = {sender.name: sender, **self.senders}

    def start(self) -> None:
        if not self._started:
            self.store.subscribe(self._on_commit)
            if self.cursors is not None:  # several replicas: their commits wake this one too
                self.cursors.on_remote_commit(self.remote_commit)
            self._started = True

    def _on_commit(self, scope: str, entries: Sequence[Entry]) -> None:
        """Wake the senders whose topics the committed entries have rows in (a topic may take only some kinds);
        a clean pair gets the entries themselves."""
        if self._stopped:
            return
        topics_for = self.store.topics_for
        now = time.monotonic()
        first = not self.shared and bool(entries) and entries[0].seq == 1  # a new scope: the feed has all of it
        for name in self.senders:
            mine = [e for e in entries if name in topics_for(e.kind)]
            if not mine:
                continue
            key = (scope, name)
            if key in self._clean and self._clean[key] <= now:
                self._dirty(key)  # stale: read the pending rows again
            if first and key not in self._fresh and key not in self._running:
                self._clean[key] = now + CLEAN_TTL_S
                self._fresh[key] = []
            queued = self._fresh.get(key)
            if queued is not None:
                queued.extend(mine)
                if len(queued) > FRESH_MAX:
                    self._dirty(key)
            self._start_soon(key)

    def _start_soon(self, key: tuple[str, str]) -> None:
        """Start the pair's drain at the end of this loop turn: the appends of one group commit all notify in the
        same turn, and they share one drain per pair instead of starting one each."""
        if key in self._running:
            self._again.add(key)
            return
        self._soon[key] = None
        if len(self._soon) == 1:
            asyncio.get_running_loop().call_soon(self._start_woken)

    def _start_woken(self) -> None:
        keys, self._soon = self._soon, {}
        for key in keys:
            self._start(key)

    def _dirty(self, key: tuple[str, str]) -> None:
        self._clean.pop(key, None)
        self._fresh.pop(key, None)

    @property
    def alive(self) -> bool:
        return self._started and not self._stopped

    async def stop(self) -> None:
        self._stopped = True
        tasks = list(self._running.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._running.clear()
        try:
            await self.marks.flush()
        except Exception:  # lost marks: those entries are delivered again at the next start
            log.exception("dispatcher: writing the last done marks failed")
        if isinstance(self.alarm, AsyncioAlarm):
            await self.alarm.shutdown()

    async def sweep(self, scopes: Sequence[str] | None = None, *, found: list[str] | None = None) -> int:
        """Wake every scope of ``scopes`` (default: all) that has pending outbox rows. Returns how many; ``found``
        gets their ids."""
        ids = [str(s) for s in (scopes if scopes is not None else await self.store.scope_ids())]
        await self.marks.flush()
        woken = 0
        for scope in ids:
            try:
                summary = await self.store.outbox_summary(scope)
            except NotFound:
                continue
            if any(summary.pending.get(name) for name in self.senders):
                self.wake(scope)
                woken += 1
                if found is not None:
                    found.append(scope)
        return woken

    async def idle(self, timeout: float = 10.0) -> None:
        """Wait until no drain is running (tests and the CLI use it)."""
        deadline = time.monotonic() + timeout
        while self._running or self._soon:
            if time.monotonic() > deadline:
                raise TimeoutError(f"dispatcher still busy with {sorted(self._running)}")
            if not self._running:
                await asyncio.sleep(0)  # drains about to start (``_start_soon``)
                continue
            await asyncio.gather(*list(self._running.values()), return_exceptions=True)
        await self.marks.flush()

    # -- draining ---------------------------------------------------------------------------------------------

    def wake(self, scope: str, topics: Sequence[str] | None = None) -> None:
        """Drain these senders of ``scope`` from their durable pending rows."""
        if self._stopped:
            return  # shutting down: the boot sweep of the next start delivers what is pending
        for name in list(self.senders) if topics is None else topics:
            if name in self.senders:
                self._dirty((scope, name))
                self._start((scope, name))

    def _start(self, key: tuple[str, str]) -> None:
        if self._stopped:
            return
        if key in self._running:
            self._again.add(key)
            return
        scope, name = key
        task = asyncio.get_running_loop().create_task(self._drain(scope, name), name=f"drain:{scope}:{name}")
        self._running[key] = task
        task.add_done_callback(self._on_done)

    def _on_done(self, task: asyncio.Task[None]) -> None:
        key = next((k for k, v in self._running.items() if v is task), None)
        if key is not None:
            self._finished(key)

    def _finished(self, key: tuple[str, str]) -> None:
        self._running.pop(key, None)
        if key in self._again:
            self._again.discard(key)
            try:
                self._start(key)
            except RuntimeError:  # loop closed during shutdown
                pass

    async def _drain(self, scope: str, topic: str) -> None:
        if not self.shared:
            await self._drain_local(scope, topic)
            return
        claimed = False
        try:
            claimed = await self._claim(scope, topic)
            if claimed:
                beat = asyncio.get_running_loop().create_task(self._keep_lease(scope, topic))
                try:
                    await self._drain_local(scope, topic)
                finally:
                    beat.cancel()
        finally:
            if claimed:
                await self._release(scope, topic)

    async def _drain_local(self, scope: str, topic: str) -> None:
        sender = self.senders[topic]
        key = (scope, topic)
        try:
            linger = float(getattr(sender, "linger", 0.0))  # a sender may take the commits of a moment together
            if linger > 0 and key in self._clean:
                await asyncio.sleep(linger)
            while True:
                self._again.discard(key)
                if self.shared and not await self._claim_more(scope, topic):
                    return
                complete = False
                if key in self._clean:
                    upto = self._upto.get(key, 0)
                    fresh = [e for e in self._fresh.get(key, ()) if e.seq > upto]
                    self._fresh[key] = []
                    if not fresh:
                        return
                    items = [OutboxItem(topic, e, 0, 0.0) for e in fresh]
                else:
                    await self.marks.flush(scope)  # what this process delivered is not read back as pending
                    if not self.shared:
                        self._fresh[key] = []  # listen: what commits from now on is queued (the read may see it too)
                    limit = max(sender.batch_size * 4, 32)
                    items = await self.store.outbox_pending(scope, topic, limit=limit)
                    complete = len(items) < limit and key in self._fresh  # all pending rows, no overflow or wake
                    if not items:
                        if complete:
                            self._clean[key] = time.monotonic() + CLEAN_TTL_S
                            continue  # deliver what was committed while reading
                        self._fresh.pop(key, None)
                        return
                if not await self._deliver_items(scope, sender, items):
                    self._dirty(key)
                    return
                if complete and key in self._fresh:
                    self._clean[key] = time.monotonic() + CLEAN_TTL_S
        except NotFound:
            self._dirty(key)
            return
        except asyncio.CancelledError:
            self._dirty(key)
            raise
        except Exception:
            self._dirty(key)
            log.exception("dispatcher: draining %s to %s failed; the sweep will retry", scope, topic)
            self._arm(scope, topic, 5.0)

    async def _deliver_items(self, scope: str, sender: Sender, items: list[OutboxItem]) -> bool:
        """Deliver ready items in order. False when the drain must stop (waiting for a retry)."""
        now = time.time()
        i = 0
        while i < len(items):
            head = items[i]
            if head.next_attempt_at > now:
                self._arm(scope, sender.name, head.next_attempt_at - now)
                return False
            chunk = _ready_chunk(items, i, sender.batch_size, now)
            if self.shared and not self._lease_left(scope, sender.name):
                return False
            try:
                if sender.name in FORK_TOPICS or not await self._is_fork(scope):
                    await sender.deliver(scope, [it.entry for it in chunk])
            except LeaseLost:  # found inside the delivery, before its effect: nothing of it was started
                self._arm(scope, sender.name, CLAIM_RETRY_S)
                return False
            except RetryAfter as exc:
                await self._rate_limited(scope, sender.name, head, exc)
                return False
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                if len(chunk) > 1:
                    # A poison entry hides in the batch: deliver one by one to find it.
                    if not await self._deliver_items(scope, OneByOne(sender), chunk):
                        return False
                elif not await self._failed(scope, sender.name, head, exc):
                    return False
                i += len(chunk)
                continue
            self._delivered(scope, sender.name, chunk)
            i += len(chunk)
        return True

    async def _rate_limited(self, scope: str, topic: str, head: OutboxItem, exc: RetryAfter) -> None:
        """Slack's 429: the head waits ``Retry-After`` without spending its retry budget."""
        self.stats.rate_limited += 1
        at, seq = time.time() + exc.seconds, head.entry.seq
        await self.store.outbox_failed(scope, topic, seq, attempts=head.attempts, next_attempt_at=at, error=str(exc))
        self._arm(scope, topic, exc.seconds)

    def _delivered(self, scope: str, topic: str, chunk: list[OutboxItem]) -> None:
        """A chunk the sender took: its done marks are queued, its pair's high-water mark and the stats move."""
        self.marks.add(scope, topic, [it.entry.seq for it in chunk])
        key = (scope, topic)
        self._upto[key] = max(self._upto.get(key, 0), chunk[-1].entry.seq)
        done_at = time.time()
        for it in chunk:
            self.stats.delivered += 1
            self.stats.observe(max(0.0, done_at - it.entry.at.timestamp()))
        self.last_activity = time.monotonic()

    async def _is_fork(self, scope: str) -> bool:
        """Whether ``scope`` is a fork (remembered: a fork is one from its first commit, core/fork.py)."""
        known = self._forks.get(scope)
        if known is None:
            known = self._forks[scope] = bool((await self.store.get_state(scope)).forked_from)
        return known

    async def _failed(self, scope: str, topic: str, item: OutboxItem, exc: Exception) -> bool:
        """Record a failure; True when the row was parked (the drain may continue past it)."""
        attempts = item.attempts + 1
        error = f"{exc.__class__.__name__}: {exc}"
        self.stats.failures += 1
        if isinstance(exc, PermanentFailure) or attempts >= self.policy.max_attempts:
            seq = item.entry.seq
            log.warning("dispatcher: parking %s #%d for %s after %d attempts: %s", scope, seq, topic, attempts, error)
            await self.store.outbox_park(scope, topic, item.entry.seq, attempts=attempts, error=error)
            self.stats.parked += 1
            return True
        delay = self.policy.delay(attempts, self.rng)
        seq = item.entry.seq
        log.info("dispatcher: %s #%d for %s failed (%s); retry %d in %.1fs", scope, seq, topic, error, attempts, delay)
        await self.store.outbox_failed(
            scope, topic, item.entry.seq, attempts=attempts, next_attempt_at=time.time() + delay, error=error
        )
        self._arm(scope, topic, delay)
        return False

    def _arm(self, scope: str, topic: str, delay: float) -> None:
        self._dirty((scope, topic))

        async def job() -> None:
            self.wake(scope, [topic])

        self.alarm.set(f"dispatch:{scope}:{topic}", delay, job)

    # -- several replicas: the (scope, topic) cursors ------------------------------------------------------------

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
        assert self.cursors is not None
        asked = time.monotonic()
        claim = await self.cursors.take_cursor(scope, topic, self.owner, lease_s=CURSOR_LEASE_S)
        if claim is None:
            return False
        self._leased(scope, topic, asked)
        if claim.previous:
            if claim.died:
                self.takeovers += 1
                log.info("dispatcher: took %s/%s over from %s (it died or stalled)", scope, topic, claim.previous)
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
        assert self.cursors is not None
        asked = time.monotonic()
        ok = await self.cursors.renew_cursor(scope, topic, self.owner, lease_s=CURSOR_LEASE_S)
        if ok:
            self._leased(scope, topic, asked)
        return ok

    def holds(self, scope: str, topic: str) -> bool:
        """The fence a sender checks right before an effect it cannot take back (``LeaseFence``): False while
        this replica drains (scope, topic) with too little of its lease left. A sender may wait long inside one
        delivery (its channel's next post slot), so the check before the delivery is not enough."""
        until = self._lease_until.get((scope, topic))
        if until is None or time.monotonic() < self._start_by(until):
            return True
        self.leases_lapsed += 1
        log.warning("dispatcher: the lease of %s/%s ran out inside a delivery; its effect is not started", scope, topic)
        return False

    def _start_by(self, lease_until: float) -> float:
        """The last moment a delivery may start under a cursor lease that runs out at ``lease_until``:
        ``LEASE_MARGIN_S`` before it, or this process's liveness deadline when that comes first (another replica
        that finds this one's liveness lock free takes its cursors once a short grace ran out; the backend keeps
        its own margin before it, core/store/postgres/liveness.py)."""
        by = lease_until - LEASE_MARGIN_S
        if self.cursors is None:
            return by
        return min(by, self.cursors.alive_until(lease_until - CURSOR_LEASE_S))

    async def take_over_dead(self) -> int:
        """With replicas: cut the leases of replicas found dead (their liveness lock is free) to a short grace, and
        look at each such cursor again the moment it runs out. How many cursors were found."""
        if self.cursors is None:
            return 0
        cut = await self.cursors.fence_dead_holders()
        for scope, topic, left in cut:
            if topic in self.senders:
                self._arm(scope, topic, left + CLAIM_RETRY_S / 5)
        return len(cut)

    def _leased(self, scope: str, topic: str, asked: float) -> None:
        """A take or renewal asked for at ``asked`` (monotonic) succeeded: the database's deadline is no earlier."""
        self._lease_until[(scope, topic)] = asked + CURSOR_LEASE_S

    def _lease_left(self, scope: str, topic: str) -> bool:
        """Whether a delivery may start (with replicas): while the cursor lease has more than
        ``LEASE_MARGIN_S`` left by this replica's clock. When not, the drain stops and looks again soon (the cursor
        is re-taken, or found taken over)."""
        if time.monotonic() < self._start_by(self._lease_until.get((scope, topic), 0.0)):
            return True
        self.leases_lapsed += 1
        log.warning(
            "dispatcher: the lease of %s/%s ran out during its drain; stopping before the next delivery", scope, topic
        )
        self._arm(scope, topic, CLAIM_RETRY_S)
        return False

    async def _release(self, scope: str, topic: str) -> None:
        """Our done marks go first, so the next holder does not read what we delivered as pending."""
        assert self.cursors is not None
        self._lease_until.pop((scope, topic), None)
        try:
            await asyncio.shield(self.marks.flush(scope))
            await asyncio.shield(self.cursors.release_cursor(scope, topic, self.owner))
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


def _ready_chunk(items: list[OutboxItem], i: int, batch_size: int, now: float) -> list[OutboxItem]:
    """The items from ``i`` that go to the sender together: first attempts that are due, up to its batch size (an
    item being retried always goes alone)."""
    head = items[i]
    chunk = [head]
    while (
        len(chunk) < batch_size
        and i + len(chunk) < len(items)
        and items[i + len(chunk)].next_attempt_at <= now
        and items[i + len(chunk)].attempts == 0
        and head.attempts == 0
    ):
        chunk.append(items[i + len(chunk)])
    return chunk
