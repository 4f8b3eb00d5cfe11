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
- a turn running longer than ``progress_after`` (1 s) is shown through the ``TurnProgress`` port until it ends.
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
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from core.agents.context import ContextAgents
from core.agents.ports import ActionCatalogView, Proposer, SuggestingProposer, TurnProgress
from core.agents.reasoner import Reasoner, ReasonerError, TurnInput, TurnOutput
from core.agents.tools import ToolBox
from core.agents.triggers import QUIET_KINDS, only_agents, warranting
from core.clock import Clock, SystemClock
from core.entries import PAYLOADS as ENTRY_KINDS
from core.entries import (
    Actor,
    AgentTurn,
    Answer,
    Entry,
    NewEntry,
    ObligationClaimed,
    Question,
    Suggestion,
    Verification,
)
from core.errors import Conflict, InvalidInput, NotFound
from core.index import Index
from core.obligations import claim, fulfil, open_obligation, release
from core.state import ScopeState
from core.store import LogStore
from core.views import DEFAULT_BUDGET, View, ViewCache, build_view

log = logging.getLogger(__name__)

WARRANT_KINDS = tuple(sorted(set(ENTRY_KINDS) - QUIET_KINDS))
_TEXT_MAX = 3000


class TurnRaced(Conflict):
    """Another runtime recorded a turn over this range first; this turn's outputs are discarded."""


class TurnViews:
    """The views of one turn: each built at most once, all accounted for in the turn's provenance."""

    def __init__(self, store: LogStore, state: ScopeState, budget: int, cache: ViewCache | None = None) -> None:
        self.store = store
        self.state = state
        self.budget = budget
        self.cache = cache
        self._built: dict[tuple[str, str | None], View] = {}

    async def view(self, name: str, *, obligation_id: str | None = None) -> View:
        key = (name, obligation_id)
        if key not in self._built:
            self._built[key] = await build_view(
                self.store,
                self.state.scope,
                name,
                budget=self.budget,
                obligation_id=obligation_id,
                state=self.state,
                cache=self.cache,
            )
        return self._built[key]

    @property
    def built(self) -> list[View]:
        return list(self._built.values())

    @property
    def names(self) -> str:
        return "+".join(dict.fromkeys(v.name for v in self._built.values()))


@dataclass
class TurnResult:
    """What ``run_turn`` / ``ask`` did: ``recorded`` (``output.outcome`` ``ok`` or ``nothing``) | ``failed`` /
    ``refused`` — all recorded as an ``agent_turn`` — or ``skipped`` | ``raced`` | ``duplicate`` (nothing recorded)."""

    scope: str
    status: str
    reason: str = ""
    turn_seq: int = 0
    appended: tuple[int, ...] = ()
    output: TurnOutput | None = None
    proposals: list[str] = field(default_factory=list)


@dataclass
class TurnStats:
    runs: int = 0
    recorded: int = 0
    failed: int = 0
    noop: int = 0
    skipped: int = 0
    raced: int = 0
    asks: int = 0
    reasoner_calls: int = 0


class TurnRuntime:
    def __init__(
        self,
        store: LogStore,
        *,
        reasoner: Reasoner,
        clock: Clock | None = None,
        index: Index | None = None,
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
        self.on_wake: Callable[[str, float], None] | None = None
        self.progress = progress
        self.progress_after = progress_after
        self._locks: dict[str, asyncio.Lock] = {}
        self.view_cache = ViewCache()  # what earlier turns' views read and rendered (entries never change)

    # -- wiring (the action desk plugs in here once it exists) ----------------------------------------------

    def use_proposer(self, proposer: Proposer) -> None:
        self.proposer = proposer

    def use_catalog(self, catalog: ActionCatalogView | None) -> None:
        self.catalog = catalog

    def use_progress(self, progress: TurnProgress | None) -> None:
        self.progress = progress

    def lock(self, scope: str) -> asyncio.Lock:
        return self._locks.setdefault(scope, asyncio.Lock())

    # -- scheduled turns -------------------------------------------------------------------------------------

    async def run_turn(self, scope: str, *, trigger: str = "debounce", force: bool = False) -> TurnResult:
        """Run one turn over what is new since the last one (``force``: even if nothing new warrants it)."""
        async with self.lock(scope), self._showing(scope):
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
                await _quietly(progress.done(scope), f"progress done on {scope}")
            else:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)

    async def recover_progress(self, scope: str) -> None:
        if self.progress is not None:
            await _quietly(self.progress.recover(scope), f"progress recovery on {scope}")

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
        probe = await self.store.append(scope, lambda _s: [], idempotency_key=_ask_key(key))
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
            shown = await _quietly(self.progress.working(scope, question_seq=question.seq), f"ask on {scope}")
            where = shown or where
        result = await self.ask(scope, p.text, question.actor, key=p.key, question_ts=where, question_seq=question.seq)
        log.info("ask on %s#%d: %s %s", scope, question.seq, result.status, result.reason)
        return result

    async def ask(
        self, scope: str, question: str, actor: Actor, *, key: str, question_ts: str = "", question_seq: int = 0
    ) -> TurnResult:
        """A prompt turn: answer ``question`` from the scope's views; idempotent by ``key``.

        ``question_seq``: the ``question`` entry being answered (the answer and the turn refer to it)."""
        async with self.lock(scope):
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

            result = await self.store.append(scope, decide, idempotency_key=_ask_key(key))
            if result.duplicate:
                return TurnResult(scope, "duplicate", "this question was already answered")
            return await self._after_record(scope, result.entries, out)

    # -- internals -------------------------------------------------------------------------------------------

    def _turn_input(
        self, state: ScopeState, trigger: str, *, seq_from: int, seq_to: int, question: str = ""
    ) -> tuple[TurnInput, TurnViews]:
        views = TurnViews(self.store, state, self.budget, self.view_cache)
        catalog = self.catalog.available() if self.catalog is not None else None
        now = self.clock.now()
        tools = ToolBox(
            store=self.store,
            state=state,
            views=views,
            now=now,
            index=self.index,
            catalog=catalog,
            change_window_hours=self.change_window_hours,
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
        )
        return turn, views

    async def _reason(self, turn: TurnInput) -> TurnOutput:
        self.stats.reasoner_calls += 1
        try:
            out = await asyncio.wait_for(self.reasoner.run(turn), timeout=self.timeout_s)
        except TimeoutError:
            out = _failed(TurnOutput(), f"the turn timed out after {self.timeout_s:g}s")
        except ReasonerError as exc:
            out = _failed(exc.partial or TurnOutput(), exc.message)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.exception("reasoner %s failed on %s", self.reasoner.name, turn.scope)
            out = _failed(TurnOutput(), f"{exc.__class__.__name__}: {exc}")
        if turn.tools is not None:
            out.tool_calls = [*turn.tools.calls, *out.tool_calls]
        return out

    async def _claim(self, scope: str, out: TurnOutput) -> dict[str, int]:
        """Claim each obligation a verification is about (a fenced lease); skip those someone else holds."""
        fences: dict[str, int] = {}
        for v in out.verifications:
            try:
                result = await self.store.append(scope, self._claiming(v.obligation_id))
            except (Conflict, NotFound) as exc:
                note = {"tool": "claim", "obligation_id": v.obligation_id, "status": "error", "error": str(exc)}
                out.tool_calls.append(note)
                continue
            payload = result.entries[0].payload if result.entries else None
            if isinstance(payload, ObligationClaimed):
                fences[v.obligation_id] = payload.fence
        return fences

    def _claiming(self, obligation_id: str) -> Callable[[ScopeState], list[NewEntry]]:
        def decide(state: ScopeState) -> list[NewEntry]:
            now = self.clock.now()
            return claim(
                state, obligation_id, holder=self.holder, now=now, lease_seconds=self.lease_seconds, actor=self.actor
            )

        return decide

    async def _release(self, scope: str, fences: dict[str, int]) -> None:
        for oid, fence in fences.items():

            def decide(state: ScopeState, oid: str = oid, fence: int = fence) -> list[NewEntry]:
                now = self.clock.now()
                return release(state, oid, fence=fence, now=now, actor=self.actor, reason="lost the turn race")

            try:
                await self.store.append(scope, decide)
            except (Conflict, NotFound):
                pass

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
        made: list[NewEntry] = []
        notes: list[dict[str, Any]] = []
        base = current.version

        def refs(values: Sequence[int]) -> tuple[int, ...]:
            return tuple(sorted({r for r in values if 0 < r <= base}))

        def add(kind: str, payload: Any, refs_: tuple[int, ...] = ()) -> int:
            try:
                made.append(NewEntry.make(kind, self.actor, payload, refs=refs_))
            except InvalidInput as exc:
                notes.append({"tool": "record", "kind": kind, "status": "error", "error": str(exc)})
                return 0
            return base + len(made)

        hypothesis_seqs: list[int] = []
        for h in out.hypotheses:
            payload = {"text": h.text[:_TEXT_MAX], "confidence": h.confidence, "suspect_scope": h.suspect_scope}
            hypothesis_seqs.append(add("hypothesis", payload, refs(h.refs)) if h.text.strip() else 0)
        for o in out.obligations:
            extra = []
            if o.hypothesis_index is not None and 0 <= o.hypothesis_index < len(hypothesis_seqs):
                extra = [hypothesis_seqs[o.hypothesis_index]]
            try:
                opened = open_obligation(
                    current,
                    text=o.text[:_TEXT_MAX],
                    actor=self.actor,
                    purpose=o.purpose,
                    conditions=o.conditions,
                    action=o.action,
                    params=dict(o.params),
                    expected_outcome=o.expected_outcome,
                    obligation_id=o.obligation_id or None,
                    refs=sorted({*refs(o.refs), *(r for r in extra if r)}),
                )
            except InvalidInput as exc:
                notes.append({"tool": "record", "kind": "obligation_opened", "status": "error", "error": str(exc)})
                continue
            made.extend(opened)
        now = self.clock.now()
        for v in out.verifications:
            fence = fences.get(v.obligation_id)
            if fence is None:
                continue
            verification = NewEntry.make(
                "verification",
                self.actor,
                Verification(
                    obligation_id=v.obligation_id,
                    run_id=v.run_id,
                    outcome=v.outcome,
                    expected=v.expected,
                    observed=v.observed[:_TEXT_MAX],
                ),
                refs=refs(v.refs),
            )
            try:
                made.extend(
                    fulfil(
                        current,
                        v.obligation_id,
                        fence=fence,
                        now=now,
                        actor=self.actor,
                        note=f"verification {v.outcome}",
                        run_id=v.run_id,
                        before=[verification],
                    )
                )
            except (Conflict, NotFound) as exc:
                notes.append({"tool": "verify", "obligation_id": v.obligation_id, "status": "error", "error": str(exc)})
        for sg in out.suggestions:
            if sg.text.strip():
                sid = sg.suggestion_id or f"sg-{secrets.token_hex(4)}"
                add(
                    "suggestion",
                    Suggestion(
                        suggestion_id=sid, text=sg.text[:_TEXT_MAX], action=sg.action, rationale=sg.rationale[:1000]
                    ),
                    refs(sg.refs),
                )
        if turn.question and out.answer:
            add(
                "answer",
                Answer(question=turn.question[:_TEXT_MAX], text=out.answer[:_TEXT_MAX], question_ts=question_ts),
                refs((question_seq,)),
            )
        made = _with_turn(made, base + len(made) + 1)
        appended = tuple(range(base + 1, base + len(made) + 1))
        proposals = [
            {"tool": "propose", "action": p.action, "params": p.params, "obligation_id": p.obligation_id}
            for p in out.proposals
        ]
        turn_entry = AgentTurn(
            reasoner=self.reasoner.name,
            model=out.model or self.reasoner.model,
            view=views.names,
            view_bytes=sum(v.bytes for v in views.built),
            view_tokens=sum(v.tokens for v in views.built),
            seq_from=turn.seq_from,
            seq_to=turn.seq_to,
            trigger=turn.trigger,
            tool_calls=tuple([*out.tool_calls, *proposals, *notes]),
            input_tokens=out.usage.input_tokens,
            output_tokens=out.usage.output_tokens,
            cache_read_input_tokens=out.usage.cache_read_input_tokens,
            cache_creation_input_tokens=out.usage.cache_creation_input_tokens,
            cost_usd=round(out.cost_usd, 6),
            duration_ms=duration_ms,
            outcome=out.outcome,
            error=out.error[:1000],
            appended=appended,
        )
        turn_refs = refs((question_seq,)) if question_seq else ()
        return [*made, NewEntry.make("agent_turn", self.actor, turn_entry, refs=turn_refs)]

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
        self._wake(scope, out)
        return TurnResult(
            scope,
            out.outcome if failed else "recorded",
            out.error,
            turn_seq=turn_entry.seq if turn_entry is not None else 0,
            appended=tuple(e.seq for e in entries[:-1]),
            output=out,
            proposals=lines,
        )

    def _wake(self, scope: str, out: TurnOutput) -> None:
        if out.wake_after is not None and self.on_wake is not None:
            self.on_wake(scope, out.wake_after)


FINDING_KINDS = ("hypothesis", "suggestion", "obligation_opened")  # what a turn finds (each names its turn)


def _with_turn(made: list[NewEntry], turn_seq: int) -> list[NewEntry]:
    """Provenance (issue 15): each finding of the turn names the seq its ``agent_turn`` gets in the same append."""
    return [
        e.model_copy(update={"payload": e.payload.model_copy(update={"turn": turn_seq})})
        if e.kind in FINDING_KINDS and hasattr(e.payload, "turn")
        else e
        for e in made
    ]


def _failed(out: TurnOutput, error: str) -> TurnOutput:
    """A failed turn records its provenance (usage, tool calls) and nothing else."""
    out.hypotheses, out.suggestions, out.obligations, out.proposals, out.verifications = [], [], [], [], []
    out.answer = None
    out.outcome, out.error = "failed", error
    return out


async def _quietly(call: Any, what: str) -> Any:
    """Await a progress call; progress is cosmetic, so its failure is logged and never fails the turn."""
    try:
        return await call
    except asyncio.CancelledError:
        raise
    except Exception:
        log.warning("%s failed", what, exc_info=True)
        return None


def _ask_key(key: str) -> str:
    return f"ask:{key}"[:480]


__all__ = ["TurnRaced", "TurnResult", "TurnRuntime", "TurnStats", "TurnViews"]
