"""When turns run: debounced per scope with a maximum wait, armed by the ``agents`` outbox sender, re-armed from
the log at boot.

A turn's due time is a function of the log only (``last_turn_seq`` and the ``at`` of the warranting entries after
it), so a restart arms the same due times as the process that died:

- trailing debounce: ``debounce`` after the LAST warranting entry since the last turn (a burst coalesces);
- the first turn of an incident waits for it to settle: ``first_delay`` after the declaration, unless entries keep
  coming after that, when the debounce applies;
- maximum wait: never later than ``max_wait`` after the FIRST warranting entry since the last turn, however busy
  the thread (a trailing debounce alone starves a thread with an entry every few seconds).

- The timer (key ``agents:turn:<scope>``) only *spawns* the turn and returns (an APScheduler job that is still
  running when its next run falls due would be dropped); turns of one scope serialise on the runtime's per-scope
  lock, and each turn covers whatever is new when it starts. Entries that arrive while a turn of their scope runs
  are armed when it ends, from the log (their max wait counts from the first of them, not from an entry the
  running turn covers).
- A reasoner may ask for another look later (``wake_after``: a verification grace period, an idle nudge): a
  forced turn at that time, durable. In one process it is a timer (``agents:wake:<scope>``) whose due time is
  first stored as the scope's ``agents``/``wake`` memo (epoch seconds; ``{"at": null}`` once it has run), and
  re-armed from that memo at boot (an incident with no memo at all, from before wake-ups were kept, gets one
  wake after the debounce, as it always did).
- ``question`` entries (``ask``) are answered by a prompt turn armed at once (``agents:ask:<scope>:<seq>``);
  the answer is appended under the question's key, so a redelivery or a re-run answers once. The unanswered
  question in the log is itself the durable record: every boot answers the ones still unanswered.
- Where the due turns wait is a port (core/store/ports.py). Without one (SQLite, one process) they are the
  timers above, in memory. On PostgreSQL (``PostgresDueTurns``) they are ``due_turns`` rows on the database clock:
  one replica at a time claims a due scope under a lease and runs its turn, a dead holder's turn is taken over
  when its lease runs out, and entries delivered during a turn (on any replica) re-arm the scope from the log.
  Wake-ups (``wake_at``) and questions to answer (``ask_at``) are in the same row, so one replica runs them,
  once, never beside another turn of the scope, and after a restart too.
- Timers live in memory. At boot every incident is looked at: progress a dead process left shown is cleared
  (``TurnProgress.recover``), unanswered questions are answered, and every open incident whose log has warranting
  entries after ``last_turn_seq`` gets its turn armed at its due time (and its stored wake-up re-armed).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from decklog.core.agents.recover_proposals import recover_proposals
from decklog.core.agents.runtime import WARRANT_KINDS, TurnRuntime
from decklog.core.agents.triggers import warranting
from decklog.core.agents.turn_parts import TurnResult
from decklog.core.alarm import KEYS_KEPT, Alarm
from decklog.core.clock import Clock, SystemClock, parse_iso
from decklog.core.entries import Entry, Question
from decklog.core.errors import NotFound
from decklog.core.state import ScopeState
from decklog.core.store.ports import DueTurns

log = logging.getLogger(__name__)

TOPIC = "agents"
WAKE_MEMO = "wake"  # the scope's pending wake-up without due turns: {"at": epoch seconds | None}
_PEEK = 50  # warranting entries read at each end of the pending range


@dataclass(frozen=True)
class Due:
    """When the next turn of a scope is due, and why (``first`` | ``debounce`` | ``max_wait``)."""

    at: datetime
    trigger: str
    first_at: datetime  # the first warranting entry since the last turn: the max wait counts from it
    last_at: datetime  # the last one: the debounce counts from it


class TurnScheduler:
    def __init__(
        self,
        runtime: TurnRuntime,
        alarm: Alarm,
        *,
        first_delay: float = 60.0,
        debounce: float = 13.0,
        max_wait: float = 60.0,
        clock: Clock | None = None,
        due_turns: DueTurns | None = None,
    ) -> None:
        self.runtime = runtime
        self.due_turns = due_turns  # None: in-memory timers (one process)
        self.store = runtime.store
        self.alarm = alarm
        self.first_delay = first_delay
        self.debounce = debounce
        self.max_wait = max_wait
        self.clock: Clock = clock or SystemClock()
        self.armed = 0
        self._tasks: set[asyncio.Task[Any]] = set()
        self._keys: set[str] = set()
        self._running: dict[str, int] = {}  # scope -> scheduled turns in flight (a cache: losing it is harmless)
        self._dirty: set[str] = set()  # scopes with warranting entries delivered while one of their turns ran
        # scope -> (last turn seq, the first _PEEK entries of WARRANT_KINDS after it, the seq examined up to): a
        # busy thread does not re-read the head of its pending range for every delivered entry (a cache of the log).
        self._heads: dict[str, tuple[int, list[Entry], int]] = {}
        self._wakes: dict[str, float] = {}  # scope -> the due time of its armed wake-up timer (epoch seconds)
        self._stopped = False
        runtime.on_wake = self.wake

    # -- due times, from the log -----------------------------------------------------------------------------

    def delay_for(self, state: ScopeState) -> float:
        """Seconds from now until the first turn may run (the settle time, capped by the max wait), else the
        debounce: the delay a warranting entry recorded now would get."""
        if state.last_turn_seq == 0 and state.created_at:
            created = parse_iso(state.created_at)
            settle = created + timedelta(seconds=min(self.first_delay, self.max_wait))
            due = (settle - self.clock.now()).total_seconds()
            if due > 0:
                return due
        return min(self.debounce, self.max_wait)

    def due_at(self, state: ScopeState, first_at: datetime, last_at: datetime) -> Due:
        """The due time of a turn over pending entries first recorded at ``first_at``, last at ``last_at``."""
        base, trigger = last_at + timedelta(seconds=self.debounce), "debounce"
        if state.last_turn_seq == 0:
            trigger = "first"
            if state.created_at:
                settle = parse_iso(state.created_at) + timedelta(seconds=self.first_delay)
                base = settle if settle > last_at else base
        cap = first_at + timedelta(seconds=self.max_wait)
        if cap < base:
            return Due(cap, trigger if trigger == "first" else "max_wait", first_at, last_at)
        return Due(base, trigger, first_at, last_at)

    async def due(self, scope: str, *, batch: Sequence[Entry] = ()) -> Due | None:
        """When the next turn of ``scope`` is due (None: nothing pending, or not an open incident).

        ``batch``: entries just delivered (the newest; spares a read of the log's tail)."""
        try:
            state = await self.store.get_state(scope)
        except NotFound:
            return None
        if state.kind != "incident" or not state.is_open or state.version <= state.last_turn_seq:
            return None
        after = state.last_turn_seq
        head = warranting(await self._head(scope, after, state.version))
        tail = [e for e in warranting(batch) if e.seq > after]
        if not tail:
            tail = [e for e in warranting(await self.store.read_last(scope, limit=_PEEK, kinds=WARRANT_KINDS))]
            tail = [e for e in tail if e.seq > after]
        if not head and not tail:
            return None
        first = head[0] if head else tail[0]
        last = tail[-1] if tail else head[-1]
        return self.due_at(state, first.at, max(last.at, head[-1].at if head else last.at))

    async def _head(self, scope: str, after: int, version: int) -> list[Entry]:
        """The first ``_PEEK`` entries of WARRANT_KINDS after seq ``after`` (the log is append-only: what was read
        stays true, so only entries past the last one examined are read, and nothing once ``_PEEK`` are known)."""
        cached = self._heads.get(scope)
        rows, upto = (cached[1], cached[2]) if cached is not None and cached[0] == after else ([], after)
        if len(rows) >= _PEEK or version <= upto:
            return rows
        more = await self.store.read(scope, after=upto, limit=_PEEK - len(rows), kinds=WARRANT_KINDS)
        rows = rows + more
        self._heads[scope] = (after, rows, max(version, rows[-1].seq if rows else upto))
        return rows

    # -- arming ----------------------------------------------------------------------------------------------

    def arm(self, scope: str, delay: float, trigger: str = "debounce") -> None:
        if self._stopped:
            return
        self.armed += 1

        async def job() -> None:
            self._spawn(self._turn(scope, trigger))

        self._set(f"agents:turn:{scope}", max(delay, 0.0), job)

    def arm_due(self, scope: str, due: Due, trigger: str | None = None) -> None:
        self.arm(scope, (due.at - self.clock.now()).total_seconds(), trigger or due.trigger)

    async def want(self, scope: str, due: Due, trigger: str | None = None) -> None:
        """Arm the turn of ``scope`` at ``due``: a timer, or the durable due turns shared by replicas."""
        if self.due_turns is None:
            self.arm_due(scope, due, trigger)
        elif not self._stopped:
            self.armed += 1
            await self.due_turns.want(scope, (due.at - self.clock.now()).total_seconds(), trigger or due.trigger)

    async def due_in(self, scope: str) -> float | None:
        """Seconds until the next turn of ``scope`` is due, from the log (None: nothing pending)."""
        due = await self.due(scope)
        return None if due is None else (due.at - self.clock.now()).total_seconds()

    async def run_due(self, scope: str, trigger: str) -> TurnResult:
        """A due turn (``wake``: a forced one, as a reasoner's wake-up)."""
        return await self.runtime.run_turn(scope, trigger=trigger, force=trigger == "wake")

    async def wake(self, scope: str, delay: float) -> None:
        """A forced turn of ``scope`` in ``delay`` seconds, replacing an earlier wake-up; stored before it is armed
        (a ``due_turns`` row, or the scope's wake memo and a timer)."""
        if self._stopped:
            return
        if self.due_turns is not None:
            await self.due_turns.wake(scope, delay)
            return
        at = self.clock.now().timestamp() + max(delay, 0.0)
        await self.store.memo_put(scope, TOPIC, WAKE_MEMO, {"at": at})
        self._arm_wake(scope, at)

    def _arm_wake(self, scope: str, at: float) -> None:
        self._wakes[scope] = at

        async def job() -> None:
            self._spawn(self._woken(scope, at))

        self._set(f"agents:wake:{scope}", at - self.clock.now().timestamp(), job)

    async def _woken(self, scope: str, at: float) -> None:
        """Run the wake-up's forced turn, then mark it run (unless the turn, or anyone, asked for the next one)."""
        await self._turn(scope, "wake", force=True)
        if self._wakes.get(scope) == at:
            del self._wakes[scope]
            with contextlib.suppress(NotFound):
                await self.store.memo_put(scope, TOPIC, WAKE_MEMO, {"at": None})

    def answer_later(self, scope: str, question: Entry) -> None:
        """Answer a stored question (at once, in its own task); the runtime answers each key once. With due
        turns: the scope's row is asked to answer (one replica answers, between its turns)."""
        if self._stopped:
            return
        if self.due_turns is not None:
            self._spawn(self.due_turns.ask(scope))
            return

        async def job() -> None:
            self._spawn(self.runtime.answer(scope, question))

        self._set(f"agents:ask:{scope}:{question.seq}", 0.0, job)

    async def unanswered(self, scope: str) -> list[Entry]:
        """The scope's recent questions not answered yet (the log is their durable record)."""
        found = []
        for question in await self.store.read_last(scope, limit=20, kinds=("question",)):
            if isinstance(question.payload, Question) and not await self.runtime.answered(scope, question.payload.key):
                found.append(question)
        return found

    async def answer_due(self, scope: str) -> None:
        """Answer every unanswered question of ``scope`` (a claimed ``due_turns`` row whose ``ask_at`` was due)."""
        try:
            questions = await self.unanswered(scope)
        except NotFound:
            return
        for question in questions:
            await self.runtime.answer(scope, question)

    def _set(self, key: str, delay: float, job: Callable[[], Awaitable[None]]) -> None:
        if len(self._keys) >= KEYS_KEPT:  # only pending alarms need cancelling at stop: forget the fired ones
            self._keys = {k for k in self._keys if self.alarm.pending(k)}
        self._keys.add(key)
        self.alarm.set(key, delay, job)

    async def _turn(self, scope: str, trigger: str, *, force: bool = False) -> TurnResult:
        """Run a turn, then arm the next one from the log if entries came in meanwhile or the turn recorded."""
        self._running[scope] = self._running.get(scope, 0) + 1
        try:
            result = await self.runtime.run_turn(scope, trigger=trigger, force=force)
        finally:
            left = self._running.pop(scope, 1) - 1
            if left:
                self._running[scope] = left
        dirty = scope in self._dirty and not left
        if dirty:
            self._dirty.discard(scope)
        if dirty or result.status not in ("skipped", "raced"):
            due = await self.due(scope)
            if due is not None:
                self.arm_due(scope, due)
        return result

    async def on_entries(self, scope: str, entries: Sequence[Entry]) -> None:
        """Arm a turn at its due time when any of ``entries`` warrants one; answer questions."""
        if not scope.startswith("incident/"):
            return
        for entry in entries:
            if not isinstance(entry.payload, Question):
                continue
            if self.due_turns is not None and not self._stopped:
                await self.due_turns.ask(scope)  # before the delivery is acknowledged: a crash cannot lose it
            else:
                self.answer_later(scope, entry)
        if not warranting(entries):
            return
        if self.due_turns is None and self._running.get(scope):
            self._dirty.add(scope)  # armed from the log when the running turn ends
            return
        due = await self.due(scope, batch=entries)
        if due is not None:
            await self.want(scope, due)

    async def arm_pending(self) -> int:
        """At boot: clear stale progress (not a turn a live replica holds), answer unanswered questions, arm
        every pending turn at its due time (with durable due turns: start claiming them; arming again is an upsert
        that keeps a row's max wait)."""
        if self.due_turns is not None and not self._stopped:
            self.due_turns.start(self.run_due, self.due_in, self._spawn, self.answer_due)
        armed = 0
        for sid in await self.store.scope_ids():
            if sid.kind != "incident":
                continue
            scope = str(sid)
            if self.due_turns is None or not await self.due_turns.held(scope):  # else: a live replica's turn runs
                await self.runtime.recover_progress(scope)
                rt = self.runtime
                await recover_proposals(rt.store, rt.proposer, rt.actor, scope)  # a crash between record and desk
            try:
                questions = await self.unanswered(scope)
                state = await self.store.get_state(scope)
            except NotFound:
                continue
            if questions and self.due_turns is not None:
                await self.due_turns.ask(scope)  # one replica answers them (every replica's boot may ask)
            elif questions:
                for question in questions:
                    self.answer_later(scope, question)
            if not state.is_open:
                continue
            due = await self.due(scope)
            if due is not None:
                await self.want(scope, due, "boot")
                armed += 1
            await self._rearm_wake(scope, pending=due is not None)
        log.info("agents: %d pending turn(s) re-armed from the log", armed)
        return armed

    async def _rearm_wake(self, scope: str, *, pending: bool) -> None:
        """At boot, without due turns: re-arm the wake-up stored in the scope's memo (one whose time has passed
        runs now). An incident with no memo (never woken since wake-ups were kept) gets the old boot wake after the
        debounce, for reasoners that use wake-ups, unless a turn is pending anyway. Due-turn rows need nothing."""
        if self.due_turns is not None or self._stopped:
            return
        memo = await self.store.memo_get(scope, TOPIC, WAKE_MEMO)
        if memo is not None:
            if memo.get("at") is not None:
                self._arm_wake(scope, float(memo["at"]))
        elif self.runtime.reasoner.wants_wakes and not pending:
            await self.wake(scope, self.debounce)

    # -- lifecycle -------------------------------------------------------------------------------------------

    def _spawn(self, coro: Coroutine[Any, Any, Any]) -> None:
        if self._stopped:
            coro.close()
            return
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)

        def done(t: asyncio.Task[Any]) -> None:
            self._tasks.discard(t)
            if not t.cancelled() and t.exception() is not None:
                log.error("agent turn failed", exc_info=t.exception())

        task.add_done_callback(done)

    async def idle(self, timeout: float = 10.0) -> None:
        """Wait until no turn task is running (tests and benchmarks)."""
        async with asyncio.timeout(timeout):
            while self._tasks:
                await asyncio.gather(*list(self._tasks), return_exceptions=True)

    async def stop(self) -> None:
        """Cancel running turns (an unrecorded turn simply runs again after a restart)."""
        self._stopped = True
        if self.due_turns is not None:
            await self.due_turns.stop()
        for key in self._keys:
            self.alarm.cancel(key)
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
