"""The turn runtime: one short-lived turn = reconstruct views, reason, record the outputs, end. No memory.

``run_turn(scope)`` covers the range ``last_turn_seq+1 .. version`` of the scope's log:

- never two turns at once per scope in this process (a per-scope lock), and never twice over the same range:
  the turn's outputs and its ``agent_turn`` entry are appended in ONE transaction whose decide callable checks
  that ``last_turn_seq`` is still what the turn started from (a compare-and-set). Another runtime — another
  process, or a second server on the same data directory — that recorded a turn in the meantime wins; the loser
  records nothing and releases what it claimed.
- every turn that runs records one ``agent_turn``, a turn that decided nothing too (``outcome: "nothing"``, with
  the same provenance), so that anyone can see it happened; it moves ``last_turn_seq`` like any other, so the
  same range is not looked at again. ``agent_turn`` never warrants a turn (core/agents/triggers.py), so
  recording a turn cannot schedule the next one.
- a turn running longer than ``progress_after`` (1 s) is shown through the ``TurnProgress`` port until it ends;
  at most ``max_concurrent`` turns and asks run at once (``TurnSlots``), each reading the log once it may run.
- verifications are claimed first (a fenced lease, core/obligations.py) and fulfilled under that fence in the
  turn's transaction; proposals go to the ``Proposer`` port only after the turn is recorded (a lost race
  proposes nothing).
- a failing reasoner (API down, 429/529, a timeout) gives a recorded ``agent_turn`` with outcome ``failed``;
  the next turn proceeds as usual.

``ask(scope, question)`` is a prompt turn: same views and reasoner, the answer recorded as an ``answer`` entry,
idempotent by the caller's key. Ask turns do not move ``last_turn_seq`` (they answer, they do not cover).
``answer(scope, question_entry)`` answers a stored ``question`` entry (the durable ask: the scheduler calls it
when the entry is delivered and, for questions still unanswered, at boot); the answer refers to the question.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any

from decklog.core.agents import turn_parts as parts
from decklog.core.agents.context import ContextAgents
from decklog.core.agents.ports import ActionCatalogView, Proposer, SuggestingProposer, TurnProgress
from decklog.core.agents.reasoner import Reasoner, ReasonerError, TurnInput, TurnOutput
from decklog.core.agents.tools import ToolBox
from decklog.core.agents.triggers import QUIET_KINDS, only_agents, warranting
from decklog.core.agents.turn_fences import Fences, claim_verified, release_fences
from decklog.core.agents.turn_parts import TurnRaced, TurnResult, TurnStats, TurnViews, ask_key, failed_output, quietly
from decklog.core.agents.turn_record import TurnFacts, turn_entries
from decklog.core.clock import Clock, SystemClock
from decklog.core.entries import PAYLOADS as ENTRY_KINDS
from decklog.core.entries import Actor, AgentTurn, Entry, NewEntry, Question
from decklog.core.errors import InvalidInput, NotFound
from decklog.core.evidence.observer import Evidence, EvidenceSources
from decklog.core.state import ScopeState
from decklog.core.store.ports import IndexPort, LogStore
from decklog.core.views import DEFAULT_BUDGET, ViewCache

log = logging.getLogger(__name__)

WARRANT_KINDS = tuple(sorted(set(ENTRY_KINDS) - QUIET_KINDS))


class TurnRuntime:
    def __init__(
        self,
        store: LogStore,
        *,
        reasoner: Reasoner,
        clock: Clock | None = None,
        index: IndexPort | None = None,
        budget: int = DEFAULT_BUDGET,
        timeout_s: float = 60.0,
        proposer: Proposer | None = None,
        catalog: ActionCatalogView | None = None,
        context: ContextAgents | None = None,
        lease_seconds: float = 120.0,
        change_window_hours: float = 6.0,
        instance: str | None = None,
        progress: TurnProgress | None = None,
        progress_after: float = 1.0,
        max_concurrent: int | None = None,
        evidence: EvidenceSources | None = None,
    ) -> None:
        self.store = store
        self.reasoner = reasoner
        self.clock: Clock = clock or SystemClock()
        self.index = index
        self.budget = budget
        self.timeout_s = timeout_s
        self.proposer: Proposer = proposer or SuggestingProposer(store)
        self.catalog = catalog
        self.context = context
        self.lease_seconds = lease_seconds
        self.change_window_hours = change_window_hours
        self.instance = instance or secrets.token_hex(3)
        self.actor = Actor.agent(reasoner.name, f"decklog {reasoner.name}")
        self.holder = f"agent:{reasoner.name}:{self.instance}"
        self.stats = TurnStats()
        self.slots = parts.TurnSlots(max_concurrent, self.stats)
        self.on_wake: Callable[[str, float], Awaitable[None] | None] | None = None  # awaited when it is async
        self.progress = progress
        self.progress_after = progress_after
        self._locks: dict[str, asyncio.Lock] = {}
        self.view_cache = ViewCache()  # what earlier turns' views read and rendered (entries never change)
        self.evidence = evidence if evidence is not None and evidence.any else None

    # -- wiring (the action desk plugs in here once it exists) ----------------------------------------------

    def use_proposer(self, proposer: Proposer) -> None:
        self.proposer = proposer

    def use_catalog(self, catalog: ActionCatalogView | None) -> None:
        self.catalog = catalog

    def use_evidence(self, evidence: EvidenceSources | None) -> None:
        """The outside read tools (Prometheus, Alertmanager, the service catalog) every turn may use."""
        self.evidence = evidence if evidence is not None and evidence.any else None

    def use_progress(self, progress: TurnProgress | None) -> None:
        self.progress = progress

    def lock(self, scope: str) -> asyncio.Lock:
        return self._locks.setdefault(scope, asyncio.Lock())

    # -- scheduled turns -------------------------------------------------------------------------------------

    async def run_turn(self, scope: str, *, trigger: str = "debounce", force: bool = False) -> TurnResult:
        """Run one turn over what is new since the last one (``force``: even if nothing new warrants it)."""
        async with self.lock(scope), self.slots.hold(scope), self._showing(scope):
            try:
                return await self._run_turn(scope, trigger, force)
            except NotFound:
                return TurnResult(scope, "skipped", "no such scope")

    @contextlib.asynccontextmanager
    async def _showing(self, scope: str) -> AsyncIterator[None]:
        """Show progress once the turn has run ``progress_after`` seconds; stop showing it when the turn ends."""
        progress = self.progress
        if progress is None:
            yield
            return
        shown = asyncio.Event()

        async def show() -> None:
            await asyncio.sleep(self.progress_after)
            shown.set()
            await progress.working(scope)

        task = asyncio.ensure_future(show())
        try:
            yield
        finally:
            if shown.is_set():
                await asyncio.gather(task, return_exceptions=True)  # let "working" finish, then undo it
                await quietly(progress.done(scope), f"progress done on {scope}")
            else:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)

    async def recover_progress(self, scope: str) -> None:
        if self.progress is not None:
            await quietly(self.progress.recover(scope), f"progress recovery on {scope}")

    async def _run_turn(self, scope: str, trigger: str, force: bool) -> TurnResult:
        state = await self.store.get_state(scope)
        if state.kind != "incident" or not state.is_open:
            return self._skip(scope, f"{state.kind} is {state.status}")
        start = state.last_turn_seq
        if not force:
            if state.version <= start:
                return self._skip(scope, "a turn already covered every entry")
            pending = warranting(await self.store.read(scope, after=start, limit=500, kinds=WARRANT_KINDS))
            if not pending:
                return self._skip(scope, "nothing since the last turn warrants one")
            if only_agents(pending):
                if await self._last_trigger(scope) == "follow_up":
                    return self._skip(scope, "a follow-up turn does not warrant another")
                trigger = "follow_up"
        self.stats.runs += 1
        if self.context is not None:
            try:
                await self.context.gather(state)
                state = await self.store.get_state(scope)
            except Exception:
                log.exception("context agents failed on %s (the turn goes on without them)", scope)
        seq_from = start + 1 if state.version > start else state.version
        turn, views = self._turn_input(state, trigger, seq_from=seq_from, seq_to=state.version)
        started = time.monotonic()
        out = await self._reason(turn)
        duration_ms = int((time.monotonic() - started) * 1000)
        if out.outcome == "ok" and not out.intents:
            out.outcome = "nothing"  # recorded all the same: every turn leaves its agent_turn
        fences = await self._claim(scope, out)

        def decide(current: ScopeState) -> list[NewEntry]:
            if current.last_turn_seq != start:
                raise TurnRaced(
                    f"{scope}: another runtime recorded a turn up to #{current.last_turn_seq} "
                    f"(this one covered #{seq_from}..#{state.version})"
                )
            return self._entries(current, turn, views, out, fences, duration_ms)

        try:
            result = await self.store.append(scope, decide)
        except TurnRaced as exc:
            self.stats.raced += 1
            await self._release(scope, fences)
            log.info("turn discarded: %s", exc.message)
            return TurnResult(scope, "raced", exc.message, output=out)
        return await self._after_record(scope, result.entries, out)

    def _skip(self, scope: str, reason: str) -> TurnResult:
        self.stats.skipped += 1
        return TurnResult(scope, "skipped", reason)

    async def _last_trigger(self, scope: str) -> str:
        for entry in reversed(await self.store.read_last(scope, limit=5, kinds=("agent_turn",))):
            if isinstance(entry.payload, AgentTurn) and entry.payload.trigger != "ask":
                return entry.payload.trigger
        return ""

    # -- asking ----------------------------------------------------------------------------------------------

    async def answered(self, scope: str, key: str) -> bool:
        """Has the question with this key been answered (or tried) already? (a probe that appends nothing)"""
        probe = await self.store.append(scope, lambda _s: [], idempotency_key=ask_key(key))
        return probe.duplicate

    async def answer(self, scope: str, question: Entry) -> TurnResult:
        """Answer a stored ``question`` entry once (its key), showing progress on its message meanwhile."""
        p = question.payload
        if not isinstance(p, Question):
            raise InvalidInput(f"{scope}#{question.seq} is a {question.kind}, not a question")
        if await self.answered(scope, p.key):
            return TurnResult(scope, "duplicate", "this question was already answered")
        where = p.message_ts
        if self.progress is not None:
            shown = await quietly(self.progress.working(scope, question_seq=question.seq), f"ask on {scope}")
            where = shown or where
        result = await self.ask(scope, p.text, question.actor, key=p.key, question_ts=where, question_seq=question.seq)
        log.info("ask on %s#%d: %s %s", scope, question.seq, result.status, result.reason)
        return result

    async def ask(
        self, scope: str, question: str, actor: Actor, *, key: str, question_ts: str = "", question_seq: int = 0
    ) -> TurnResult:
        """A prompt turn: answer ``question`` from the scope's views; idempotent by ``key``.

        ``question_seq``: the ``question`` entry being answered (the answer and the turn refer to it)."""
        async with self.lock(scope), self.slots.hold(scope):
            if await self.answered(scope, key):
                return TurnResult(scope, "duplicate", "this question was already answered")
            self.stats.asks += 1
            state = await self.store.get_state(scope)
            if self.context is not None:
                try:
                    await self.context.gather(state)
                    state = await self.store.get_state(scope)
                except Exception:
                    log.exception("context agents failed on %s", scope)
            turn, views = self._turn_input(state, "ask", seq_from=1, seq_to=state.version, question=question)
            started = time.monotonic()
            out = await self._reason(turn)
            duration_ms = int((time.monotonic() - started) * 1000)
            if out.outcome == "ok" and not (out.answer or "").strip():
                out.answer = "I could not find an answer to that in what is recorded here."
            out.tool_calls.insert(0, {"tool": "ask", "asked_by": actor.id})

            def decide(current: ScopeState) -> list[NewEntry]:
                return self._entries(
                    current, turn, views, out, {}, duration_ms, question_ts=question_ts, question_seq=question_seq
                )

            result = await self.store.append(scope, decide, idempotency_key=ask_key(key))
            if result.duplicate:
                return TurnResult(scope, "duplicate", "this question was already answered")
            return await self._after_record(scope, result.entries, out)

    # -- internals -------------------------------------------------------------------------------------------

    def _turn_input(
        self, state: ScopeState, trigger: str, *, seq_from: int, seq_to: int, question: str = ""
    ) -> tuple[TurnInput, TurnViews]:
        views = TurnViews(self.store, state, self.budget, self.view_cache, index=self.index)
        catalog = self.catalog.available() if self.catalog is not None else None
        now = self.clock.now()
        evidence = Evidence(self.evidence, self.clock.now) if self.evidence is not None else None
        tools = ToolBox(
            store=self.store,
            state=state,
            views=views,
            now=now,
            index=self.index,
            catalog=catalog,
            change_window_hours=self.change_window_hours,
            evidence=evidence,
        )
        turn = TurnInput(
            scope=state.scope,
            state=state,
            trigger=trigger,
            now=now,
            views=views,
            seq_from=seq_from,
            seq_to=seq_to,
            question=question,
            catalog=catalog,
            tools=tools,
            evidence=evidence,
            index=self.index,
            logs=self.store,
        )
        return turn, views

    async def _reason(self, turn: TurnInput) -> TurnOutput:
        self.stats.reasoner_calls += 1
        try:
            out = await asyncio.wait_for(self.reasoner.run(turn), timeout=self.timeout_s)
        except TimeoutError:
            out = failed_output(TurnOutput(), f"the turn timed out after {self.timeout_s:g}s")
        except ReasonerError as exc:
            out = failed_output(exc.partial or TurnOutput(), exc.message)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.exception("reasoner %s failed on %s", self.reasoner.name, turn.scope)
            out = failed_output(TurnOutput(), f"{exc.__class__.__name__}: {exc}")
        if turn.tools is not None:
            out.tool_calls = [*turn.tools.calls, *out.tool_calls]
        return out

    @property
    def _fences(self) -> Fences:  # read at call time: tests change the clock or the lease on a built runtime
        return Fences(self.store, self.clock, self.actor, self.holder, self.lease_seconds)

    async def _claim(self, scope: str, out: TurnOutput) -> dict[str, int]:
        return await claim_verified(self._fences, scope, out)

    async def _release(self, scope: str, fences: dict[str, int]) -> None:
        await release_fences(self._fences, scope, fences)

    def _entries(
        self,
        current: ScopeState,
        turn: TurnInput,
        views: TurnViews,
        out: TurnOutput,
        fences: dict[str, int],
        duration_ms: int,
        *,
        question_ts: str = "",
        question_seq: int = 0,
    ) -> list[NewEntry]:
        """The turn's outputs as entries, then its ``agent_turn`` (runs inside the append's transaction)."""
        facts = TurnFacts(
            reasoner=self.reasoner.name,
            model=self.reasoner.model,
            views=views.names,
            view_bytes=sum(v.bytes for v in views.built),
            view_tokens=sum(v.tokens for v in views.built),
            duration_ms=duration_ms,
            question_ts=question_ts,
            question_seq=question_seq,
        )
        return turn_entries(current, turn, out, fences, actor=self.actor, now=self.clock.now(), facts=facts)

    async def _after_record(self, scope: str, entries: Sequence[Any], out: TurnOutput) -> TurnResult:
        turn_entry = entries[-1] if entries else None
        failed = out.outcome not in ("ok", "nothing")
        if out.outcome == "failed":
            self.stats.failed += 1
        elif out.outcome == "nothing":
            self.stats.noop += 1
        else:
            self.stats.recorded += 1
        lines: list[str] = []
        if not failed:
            for p in out.proposals:
                try:
                    line = await self.proposer.propose(
                        scope,
                        action=p.action,
                        params=dict(p.params),
                        rationale=p.rationale,
                        obligation_id=p.obligation_id,
                        actor=self.actor,
                    )
                except Exception as exc:
                    log.exception("proposing %s on %s failed", p.action, scope)
                    line = f"proposing {p.action} failed: {exc}"
                lines.append(line)
        await self._wake(scope, out)
        return TurnResult(
            scope,
            out.outcome if failed else "recorded",
            out.error,
            turn_seq=turn_entry.seq if turn_entry is not None else 0,
            appended=tuple(e.seq for e in entries[:-1]),
            output=out,
            proposals=lines,
        )

    async def _wake(self, scope: str, out: TurnOutput) -> None:
        """Ask for the wake-up the turn wants (awaited: the scheduler stores it before the turn returns)."""
        pending = self.on_wake(scope, out.wake_after) if out.wake_after is not None and self.on_wake else None
        if pending is not None:
            await quietly(pending, f"storing the wake-up of {scope}")


__all__ = ["TurnRuntime"]
