"""Replay a recorded incident against a reasoner: fork, re-deliver the recorded inputs on a virtual clock, diff.

``replay`` forks the source at ``at`` (core/fork.py), then walks the source's later entries in time order and
re-appends the *recorded inputs* among them, each at its original time: what people, alert sources and change
feeds recorded (``WORLD_KINDS``), and what the world answered to the agents' proposals — the approvals, the
runner's claims, runs and results, the obligations it opened (``RUN_KINDS``), by a human or system actor. A fork
runs nothing (core/outbox/dispatcher.py), so the recorded answer stands in for the run. Everything the agents wrote
after ``at`` is left out: the real ``TurnScheduler`` (debounce, first-turn delay, wakes) arms turns on a
``VirtualAlarm`` that fires in virtual time, fast-forwarded, and the chosen reasoner writes its own entries into
the fork. Then ``diff_decisions`` compares the agents' decisions BY MEANING (kind plus normalized text, suspect,
action and params; never ids, seqs or times).

A recorded answer names the ids the original agents' decisions got (an obligation, a proposal); the replay's
decisions get new ones. Before each answer is re-delivered, the replay pairs the original decisions with its own
of the same meaning and renames the ids; an answer to a decision the replay did not make is skipped (and counted),
and one the replay's own process already wrote (an R1 approval at proposal time) is not written twice.

Limit: the inputs are the ones recorded against the ORIGINAL agents. After the first divergence (a different
hypothesis, an action the original never proposed), people and the world would have answered differently; the
replay cannot know how, so later differences are an upper bound of what a new reasoner changes, not a forecast.
"""

from __future__ import annotations

import asyncio
import difflib
import heapq
import itertools
import json
import re
from collections import Counter
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
#: What ran and how the world answered, recorded by people (approvals) or the system (the runner, the verifier,
#: the alert router's suggestions): re-delivered, since nothing in a fork runs.
RUN_KINDS = frozenset(
    {
        "approval",
        "approval_refused",
        "proposal_closed",
        "obligation_opened",
        "obligation_claimed",
        "obligation_released",
        "obligation_expired",
        "obligation_fulfilled",
        "obligation_cancelled",
        "fence_rejected",
        "action_started",
        "action_result",
        "effect_compensated",
        "verification",
        "suggestion",
        "suggestion_feedback",
    }
)
#: Payload fields that carry an id an agent's decision created (the replay's decisions get their own).
ID_FIELDS = ("obligation_id", "proposal_id", "suggestion_id")
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
    """The recorded inputs a replay re-delivers: world and run kinds not written by an agent, and a person's
    withdrawn pin."""
    return [
        e for e in entries if (e.kind in WORLD_KINDS | RUN_KINDS or _evidence_taken_back(e)) and e.actor.type != "agent"
    ]


def _evidence_taken_back(entry: Entry) -> bool:
    """A person's withdrawn pin is a world input; a verdict taken back is not (nor is the verdict: the
    suggestions it answered were the original agents')."""
    return isinstance(entry.payload, Retracted) and entry.payload.what == "evidence"


def replay_input(entry: Entry, renamed: dict[str, str] | None = None) -> NewEntry:
    """A recorded input as a new entry of the fork, at its original time (refs dropped: seqs differ), with the
    original decisions' ids ``renamed`` to the replay's."""
    if not renamed:
        return NewEntry(kind=entry.kind, actor=entry.actor, payload=entry.payload, at=entry.at)
    text = json.dumps(entry.payload.model_dump(mode="json"))
    for old, new in renamed.items():
        text = text.replace(old, new)
    made = NewEntry.make(entry.kind, entry.actor, json.loads(text))
    return NewEntry(kind=made.kind, actor=made.actor, payload=made.payload, at=entry.at)


def _created_ids(entries: Sequence[Entry]) -> set[str]:
    """The ids the agents' decisions created (an obligation they opened, a proposal, a suggestion)."""
    out: set[str] = set()
    for e in entries:
        if e.actor.type == "agent" and e.kind in ("obligation_opened", "proposal", "suggestion"):
            data = e.payload.model_dump()
            out |= {str(data[f]) for f in ID_FIELDS if data.get(f)}
    return out


def renames(original: Sequence[Entry], replayed: Sequence[Entry]) -> dict[str, str]:
    """Original id → the replay's, from each original agent decision paired (in order) with the replay's first
    unpaired decision of the same meaning."""
    out: dict[str, str] = {}
    mine = [e for e in replayed if e.actor.type == "agent" and e.kind not in NOT_DECISIONS]
    used: set[int] = set()
    for e in (x for x in original if x.actor.type == "agent" and x.kind not in NOT_DECISIONS):
        m = meaning(e)
        twin = next((r for r in mine if r.seq not in used and meaning(r) == m), None)
        if twin is None:
            continue
        used.add(twin.seq)
        a, b = e.payload.model_dump(), twin.payload.model_dump()
        out.update({str(a[f]): str(b[f]) for f in ID_FIELDS if a.get(f) and b.get(f) and a[f] != b[f]})
    return out


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
    skipped: int = 0  # recorded answers to decisions the replay did not make


def default_at(entries: Sequence[Entry], first_delay: float | None = None) -> int:
    """Fork before the first agent entry, so that the reasoner regenerates all of them (at least seq 1) — and
    before any input recorded after the first turn was due (``first_delay`` after the first entry): the original
    turn read the log as it was then, and a later input is re-delivered at its own time, not copied ahead of it."""
    first_agent = next((e.seq for e in entries if e.actor.type == "agent"), len(entries) + 1)
    cut = max(1, first_agent - 1)
    if first_delay is not None and entries:
        due = entries[0].at + timedelta(seconds=first_delay)
        cut = max([1, *(e.seq for e in entries[:cut] if e.at <= due)])
    return cut


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
    seq = check_seq(at, len(entries), source) if at is not None else default_at(entries, scheduler.first_delay)
    cut = entries[seq - 1]
    clock.set(cut.at)
    forked = await fork_scope(store, index, source, at=seq)
    later = entries[seq:]
    inputs = world_inputs(later)

    async def settle() -> None:
        await settle_tasks(scheduler.idle)

    await scheduler.on_entries(forked.scope, forked.entries)
    await settle()
    created, skipped, ours, absorbed = _created_ids(later), 0, set[int](), Counter[str]()
    for entry in inputs:
        await alarm.run_until(entry.at, settle)
        mine = await store.read(forked.scope, after=seq + 1)
        renamed = renames(later, mine)
        ids = {str(v) for f in ID_FIELDS if (v := entry.payload.model_dump().get(f))}
        if ids & created - renamed.keys():
            skipped += 1  # the answer to a decision this replay did not make
            continue
        new = replay_input(entry, renamed)
        written = Counter(_said(e) for e in mine if e.actor.type != "agent" and e.seq not in ours) - absorbed
        if written[_said(new)] > 0:  # the replay's own process wrote it already (the desk approves R1 at once)
            absorbed[_said(new)] += 1
            continue
        appended = await store.append(forked.scope, [new])
        ours |= {e.seq for e in appended.entries}
        await scheduler.on_entries(forked.scope, appended.entries)
        await settle()
    # Past the last recorded entry by the scheduler's longest wait, so a turn a late input armed still runs;
    # later wakes (idle nudges) are not replayed: nothing recorded happened then.
    horizon = entries[-1].at + timedelta(seconds=max(scheduler.first_delay, scheduler.debounce, scheduler.max_wait))
    await alarm.run_until(max(horizon, clock.now()), settle)
    replayed = await store.read(forked.scope, after=seq + 1)
    diff = diff_decisions(decisions(later), decisions(replayed))
    return ReplayResult(source, forked.scope, seq, len(inputs), diff, skipped)


def _said(entry: Entry | NewEntry) -> str:
    """An entry's kind, actor and payload with its ids normalized: the same record written twice."""
    data = json.dumps(entry.payload.model_dump(mode="json"), sort_keys=True)
    return f"{entry.kind} {entry.actor.type}:{entry.actor.id} {normalize(data)}"
