"""Replay a recorded incident against a reasoner: fork, re-deliver the world's inputs on a virtual clock, diff.

``replay`` forks the source at ``at`` (core/fork.py), then walks the source's later entries in time order and
re-appends the *world inputs* among them — what people, alert sources and change feeds recorded (``WORLD_KINDS``
by a human or system actor) — each at its original time. Everything the agents wrote after ``at`` is left out:
the real ``TurnScheduler`` (debounce, first-turn delay, wakes) arms turns on a ``VirtualAlarm`` that fires in
virtual time, fast-forwarded, and the chosen reasoner writes its own entries into the fork. Then
``diff_decisions`` compares the agents' decisions BY MEANING (kind plus normalized text, suspect, action and
params; never ids, seqs or times).

Limit: the inputs are the ones recorded against the ORIGINAL agents. After the first divergence (a different
hypothesis, an action the original never proposed), people and the world would have answered differently; the
replay cannot know how, so later differences are an upper bound of what a new reasoner changes, not a forecast.
Approvals, action runs and their results are not world inputs here: nothing in a fork runs (core/outbox/dispatcher.py).
"""

from __future__ import annotations

import asyncio
import difflib
import heapq
import itertools
import re
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from decklog.core.agents.scheduler import TurnScheduler
from decklog.core.entries import Entry, NewEntry, Retracted
from decklog.core.fork import check_seq, fork_scope
from decklog.core.store.ports import IndexPort, LogStore

#: Kinds that the world (people, alert sources, change feeds) records, re-delivered by a replay.
WORLD_KINDS = frozenset(
    {
        "message",
        "message_edited",
        "observation",
        "evidence",
        "goal",
        "constraint",
        "decision",
        "hypothesis",
        "severity_changed",
        "status_changed",
        "role_assigned",
        "scope_linked",
        "question",
    }
)
#: Agent entries that are bookkeeping, not decisions.
NOT_DECISIONS = frozenset({"agent_turn", "obligation_claimed", "obligation_released", "answer"})

Job = Callable[[], Awaitable[None]]


class VirtualClock:
    """A clock the replay moves: ``set(at)`` never goes backwards."""

    def __init__(self, start: datetime) -> None:
        self._now = start

    def now(self) -> datetime:
        return self._now

    def set(self, at: datetime) -> None:
        self._now = max(self._now, at)


@dataclass
class VirtualAlarm:
    """The ``Alarm`` port in virtual time: jobs fire when ``run_until`` passes their due time."""

    clock: VirtualClock
    _due: dict[str, tuple[datetime, int]] = field(default_factory=dict)
    _heap: list[tuple[datetime, int, str, Job]] = field(default_factory=list)
    _order: itertools.count[int] = field(default_factory=itertools.count)

    def set(self, key: str, delay: float, job: Job) -> None:
        at, n = self.clock.now() + timedelta(seconds=max(0.0, delay)), next(self._order)
        self._due[key] = (at, n)
        heapq.heappush(self._heap, (at, n, key, job))

    def cancel(self, key: str) -> None:
        self._due.pop(key, None)

    def pending(self, key: str) -> bool:
        return key in self._due

    async def run_until(self, until: datetime, settle: Callable[[], Awaitable[None]]) -> None:
        """Fire every job due by ``until`` in time order (the clock set to each due time), settling after each."""
        while self._heap and self._heap[0][0] <= until:
            at, n, key, job = heapq.heappop(self._heap)
            if self._due.get(key) != (at, n):
                continue  # replaced or cancelled
            del self._due[key]
            self.clock.set(at)
            await job()
            await settle()
        self.clock.set(until)


def world_inputs(entries: Sequence[Entry]) -> list[Entry]:
    """The recorded inputs a replay re-delivers: world kinds not written by an agent."""
    return [e for e in entries if (e.kind in WORLD_KINDS or _evidence_taken_back(e)) and e.actor.type != "agent"]


def _evidence_taken_back(entry: Entry) -> bool:
    """A person's withdrawn pin is a world input; a verdict taken back is not (nor is the verdict: the
    suggestions it answered were the original agents')."""
    return isinstance(entry.payload, Retracted) and entry.payload.what == "evidence"


def replay_input(entry: Entry) -> NewEntry:
    """A recorded input as a new entry of the fork, at its original time (refs dropped: seqs differ)."""
    return NewEntry(kind=entry.kind, actor=entry.actor, payload=entry.payload, at=entry.at)


_ID = re.compile(r"\b(?:[a-z]{1,4}-)?[0-9a-f]{6,}\b|#\d+|\bseq \d+\b")


def normalize(text: str) -> str:
    """Lower case, single spaces, ids/hex tokens and seq numbers replaced by a placeholder."""
    return " ".join(_ID.sub("<id>", text.lower()).split())


def meaning(entry: Entry) -> str:
    """What an agent decided, independent of ids, seqs and times."""
    data: dict[str, Any] = entry.payload.model_dump(mode="json")
    parts = [entry.kind, normalize(entry.text)]
    for name in ("suspect_scope", "suspect", "action", "purpose", "verdict", "outcome"):
        if data.get(name):
            parts.append(f"{name}={normalize(str(data[name]))}")
    if isinstance(data.get("params"), dict) and data["params"]:
        parts.append("params=" + ",".join(f"{k}={data['params'][k]}" for k in sorted(data["params"])))
    return " | ".join(parts)


def decisions(entries: Sequence[Entry]) -> list[str]:
    return [meaning(e) for e in entries if e.actor.type == "agent" and e.kind not in NOT_DECISIONS]


@dataclass(frozen=True)
class DecisionDiff:
    original: tuple[str, ...]
    replayed: tuple[str, ...]
    lines: tuple[str, ...]  # "- original only" / "+ replay only"

    @property
    def same(self) -> bool:
        return not self.lines


def diff_decisions(original: Sequence[str], replayed: Sequence[str]) -> DecisionDiff:
    lines: list[str] = []
    matcher = difflib.SequenceMatcher(a=list(original), b=list(replayed), autojunk=False)
    for op, a0, a1, b0, b1 in matcher.get_opcodes():
        if op == "equal":
            continue
        lines.extend(f"- {line}" for line in original[a0:a1])
        lines.extend(f"+ {line}" for line in replayed[b0:b1])
    return DecisionDiff(tuple(original), tuple(replayed), tuple(lines))


async def settle_tasks(idle: Callable[[], Awaitable[None]]) -> None:
    """Let spawned turn tasks start, then wait for them (the scheduler's ``idle``)."""
    await asyncio.sleep(0)
    await idle()


@dataclass(frozen=True)
class ReplayResult:
    source: str
    fork: str
    at: int
    inputs: int
    diff: DecisionDiff


def default_at(entries: Sequence[Entry]) -> int:
    """Fork just before the first agent entry, so that the reasoner regenerates all of them (at least seq 1)."""
    first_agent = next((e.seq for e in entries if e.actor.type == "agent"), len(entries) + 1)
    return max(1, first_agent - 1)


async def replay_scope(
    store: LogStore,
    index: IndexPort,
    source: str,
    *,
    at: int | None,
    clock: VirtualClock,
    alarm: VirtualAlarm,
    scheduler: TurnScheduler,
) -> ReplayResult:
    """Fork ``source`` at ``at`` and replay its world inputs on ``clock``; ``scheduler`` runs the new agents
    (its runtime, store and desk must use ``clock``; its alarm must be ``alarm``)."""
    entries = await store.read(source)
    seq = check_seq(at, len(entries), source) if at is not None else default_at(entries)
    cut = entries[seq - 1]
    clock.set(cut.at)
    forked = await fork_scope(store, index, source, at=seq)
    later = entries[seq:]
    inputs = world_inputs(later)

    async def settle() -> None:
        await settle_tasks(scheduler.idle)

    await scheduler.on_entries(forked.scope, forked.entries)
    await settle()
    for entry in inputs:
        await alarm.run_until(entry.at, settle)
        appended = await store.append(forked.scope, [replay_input(entry)])
        await scheduler.on_entries(forked.scope, appended.entries)
        await settle()
    # Past the last recorded entry by the scheduler's longest wait, so a turn a late input armed still runs;
    # later wakes (idle nudges) are not replayed: nothing recorded happened then.
    horizon = entries[-1].at + timedelta(seconds=max(scheduler.first_delay, scheduler.debounce, scheduler.max_wait))
    await alarm.run_until(max(horizon, clock.now()), settle)
    replayed = await store.read(forked.scope, after=seq + 1)
    diff = diff_decisions(decisions(later), decisions(replayed))
    return ReplayResult(source, forked.scope, seq, len(inputs), diff)
