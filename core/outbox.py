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
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Sequence

from core.alarm import Alarm, AsyncioAlarm
from core.entries import Entry
from core.errors import NotFound
from core.outbox_cursors import CLAIM_RETRY_S, SharedCursors
from core.outbox_cursors import CURSOR_LEASE_S as CURSOR_LEASE_S
from core.outbox_marks import DoneMarks
from core.outbox_types import DispatchStats as DispatchStats
from core.outbox_types import LeaseLost, OneByOne
from core.outbox_types import PermanentFailure as PermanentFailure
from core.outbox_types import RetryAfter as RetryAfter
from core.outbox_types import RetryPolicy as RetryPolicy
from core.outbox_types import Sender as Sender
from core.store import LogStore, OutboxItem

log = logging.getLogger(__name__)

#: How long a (scope, sender) pair trusts the commit feed before it reads its pending rows again.
CLEAN_TTL_S = 10.0
#: Entries queued in memory for one pair beyond which it reads from the store instead.
FRESH_MAX = 4096
#: The only topics a fork (a scope with a ``forked`` entry, core/fork.py) is delivered to: its other rows are
#: marked done without calling their senders, so a fork never reaches Slack, executors, agents or change links.
FORK_TOPICS = frozenset({"index"})


class Dispatcher(SharedCursors):
    def __init__(
        self,
        store: LogStore,
        senders: Sequence[Sender],
        *,
        policy: RetryPolicy | None = None,
        alarm: Alarm | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self.store = store
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
        self._init_cursors()

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
            listen = getattr(self.store, "on_remote_commit", None)
            if self.shared and callable(listen):  # several replicas: their commits wake this one too
                listen(self.remote_commit)
            self._started = True

    def _on_commit(self, scope: str, entries: Sequence[Entry]) -> None:
        """Wake the senders whose topics the committed entries have rows in (a topic may take only some kinds);
        a clean pair gets the entries themselves."""
        if self._stopped:
            return
        topics_for = getattr(self.store, "topics_for", None)
        now = time.monotonic()
        first = not self.shared and bool(entries) and entries[0].seq == 1  # a new scope: the feed has all of it
        for name in self.senders:
            mine = [e for e in entries if topics_for is None or name in topics_for(e.kind)]
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

    async def sweep(self, scopes: Sequence[str] | None = None) -> int:
        """Wake every scope that has pending outbox rows (at boot: all scope files). Returns how many."""
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
