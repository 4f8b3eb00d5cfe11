"""The vocabulary of a turn: its views (each built once, all accounted for), its result, the runtime's counters,
and the small helpers the runtime shares (core/agents/runtime.py)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from decklog.core.agents.reasoner import TurnOutput
from decklog.core.agents.shared_slots import SharedSlots
from decklog.core.errors import Conflict
from decklog.core.state import ScopeState
from decklog.core.store.ports import LogStore
from decklog.core.views import ScopeListing, View, ViewCache, build_view

log = logging.getLogger(__name__)


class TurnRaced(Conflict):
    """Another runtime recorded a turn over this range first; this turn's outputs are discarded."""


class TurnViews:
    """The views of one turn: each built at most once, all accounted for in the turn's provenance."""

    def __init__(
        self,
        store: LogStore,
        state: ScopeState,
        budget: int,
        cache: ViewCache | None = None,
        index: ScopeListing | None = None,
    ) -> None:
        self.store = store
        self.state = state
        self.budget = budget
        self.cache = cache
        self.index = index  # related incidents (core/views/related.py); without one, the linked incidents only
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
                index=self.index,
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
    slot_waits: int = 0  # turns and asks that waited for a reasoner slot (TurnSlots)


def failed_output(out: TurnOutput, error: str) -> TurnOutput:
    """A failed turn records its provenance (usage, tool calls) and nothing else."""
    out.hypotheses, out.suggestions, out.obligations, out.proposals, out.verifications = [], [], [], [], []
    out.answer = None
    out.outcome, out.error = "failed", error
    return out


async def quietly(call: Any, what: str) -> Any:
    """Await a progress call; progress is cosmetic, so its failure is logged and never fails the turn."""
    try:
        return await call
    except asyncio.CancelledError:
        raise
    except Exception:
        log.warning("%s failed", what, exc_info=True)
        return None


def ask_key(key: str) -> str:
    return f"ask:{key}"[:480]


class TurnSlots:
    """At most ``limit`` turns and asks at a time in this process (None: no limit), so that an alert storm opening
    many incidents at once does not send the model API as many conversations at once. A turn takes its slot before
    it reads the log, so that the view it reasons over is as fresh as the moment it may run. With ``shared`` (several
    replicas on PostgreSQL: core/agents/shared_slots.py) it then takes one of the replicas' ``limit`` slots too."""

    def __init__(self, limit: int | None, stats: TurnStats, *, shared: SharedSlots | None = None) -> None:
        if limit is not None and limit < 1:
            raise ValueError(f"max concurrent turns must be at least 1, not {limit}")
        self.limit = limit
        self.stats = stats
        self.shared = shared
        self.waiting = 0  # turns and asks waiting for a slot right now (the decklog_turns_waiting gauge)
        self._semaphore = asyncio.Semaphore(limit) if limit is not None else None

    def share(self, shared: SharedSlots) -> None:
        """From now on, also take one of the replicas' shared slots (the composition root, once it knows)."""
        self.shared = shared

    @contextlib.asynccontextmanager
    async def hold(self, scope: str) -> AsyncIterator[None]:
        if self._semaphore is None:
            yield
            return
        if self._semaphore.locked():
            self.stats.slot_waits += 1
            log.info("turn on %s waits: %d turns are running (agents.max_concurrent_turns)", scope, self.limit)
        self.waiting += 1
        try:
            await self._semaphore.acquire()
        finally:
            self.waiting -= 1
        try:
            if self.shared is None:
                yield
            else:
                async with self._across_replicas(scope, self.shared):
                    yield
        finally:
            self._semaphore.release()

    @contextlib.asynccontextmanager
    async def _across_replicas(self, scope: str, shared: SharedSlots) -> AsyncIterator[None]:
        lease = await shared.try_take()
        if lease is None:
            self.stats.slot_waits += 1
            log.info("turn on %s waits: %d turns are running across the replicas", scope, shared.limit)
            self.waiting += 1
            try:
                lease = await shared.take()
            finally:
                self.waiting -= 1
        async with shared.kept(lease):
            yield
