"""One experiment run: a scenario's timeline on a virtual clock, one arm's agents, one fault, the shared hands.

Held constant across arms: the store, the alert and change receivers (over HTTP), decklog's Slack part (the people's
messages, clicks and commands reach it as signed requests from the local fake Slack: ``Inputs``), decklog's turn
runtime (``core/agents/runtime.py``, the scripted policy as its reasoner, the agents' tools;
research/experiment/turns.py), decklog's action desk (its policy, the runner, the ``http`` executors and a scripted
approver deciding in Slack), the world, the clock, the reasoner policy (``decide``) and the view budget. The arms
differ in who holds context (a journaled transcript, or the product's cold views of the log) and who decides the
next step (one orchestrator, a rule per scope, or M churning workers that find work in the logs).
"""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol

from decklog.core.actions import ActionDesk
from decklog.core.agents.turn_parts import TurnResult
from decklog.core.clock import ManualClock
from decklog.core.entries import Actor, Entry, NewEntry
from decklog.core.obligations import lease_live
from decklog.core.outbox.dispatcher import Dispatcher
from decklog.core.store.ports import LogStore
from decklog.core.views import DEFAULT_BUDGET
from research.experiment.hands import after_turn
from research.experiment.scenario import Scenario
from research.experiment.view import Cost, Folded, entry_lines, header, state_lines
from research.experiment.world import WorldSim

ARMS = ("central", "rules", "nm")
FAULTS = (
    "none",
    "kill_after_model",
    "kill_after_append",
    "kill_after_claim",
    "dup_delivery",
    "lease_expiry",
    "executor_timeout",
    "suspend",
    "replace_all",
)
SYS = Actor.system("experiment")

#: (system, view, scope) → (answer, usage); usage may carry ``context_bytes`` (what was actually sent)
Model = Callable[[str, str, str], Awaitable[tuple[str, dict[str, int]]]]


class Inputs(Protocol):
    """The receivers' door for world inputs and people (research/experiment/inputs.py: HTTP on loopback, and decklog's
    Slack receiver fed by the local fake Slack). ``alert`` returns the scopes the notification went to."""

    async def alert(self, body: dict[str, Any], *, times: int = 1) -> list[str]: ...

    async def change(self, body: dict[str, Any]) -> None: ...

    async def message(self, scope: str, user: str, text: str, *, times: int = 1) -> None:
        """``user`` posts in the incident's Slack thread; Slack delivers the event ``times`` times (retries)."""

    async def approve(self, scope: str, proposal_id: str, actor: Actor, *, clicks: int = 1) -> None:
        """``actor`` clicks Approve on the proposal's Slack message ``clicks`` times."""

    async def deny(self, scope: str, proposal_id: str, actor: Actor, reason: str) -> None:
        """``actor`` denies the proposal in Slack, with ``reason``."""

    async def accept(self, scope: str, suggestion_id: str, actor: Actor) -> None:
        """``actor`` clicks Accept on the suggestion's Slack message."""

    async def record(self, scope: str, kind: str, text: str, actor: Actor) -> None:
        """``actor`` records ``text`` as an entry of ``kind`` (a decision, …) from Slack."""


class Killed(BaseException):
    """The agent's process dies here: nothing it would have done next happens (a ``BaseException``, so that the
    turn runtime's handling of a failing reasoner does not record it as a failed turn)."""


@dataclass
class Spec:
    scenario: Scenario
    arm: str
    fault: str
    seed: int
    fences: bool = True
    mutation: str = ""
    budget: int = DEFAULT_BUDGET  # the turns' view budget in bytes (``core/views``), held constant across arms
    workers: int = 3


@dataclass
class Run:
    spec: Spec
    store: LogStore
    inputs: Inputs
    clock: ManualClock
    model: Model
    journal_dir: Path
    world: WorldSim = field(init=False)
    cost: Cost = field(default_factory=Cost)
    rng: random.Random = field(init=False)
    scopes: list[str] = field(default_factory=list)
    steps: int = 0
    fault_at: int = 0
    fired: bool = False
    paused: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    transcripts: dict[str, list[str]] = field(default_factory=dict)
    seen: dict[str, int] = field(default_factory=dict)
    agent: str = "agent-1"
    generation: int = 1
    desk: ActionDesk | None = (
        None  # the ActionDesk (``Spec.desk``), built by the composition (research/experiment/one.py)
    )
    pausing: asyncio.Future[Any] | None = None  # set while a desk run may pause (``lease_expiry``)
    agents: Any = None  # the turn runtimes (research/experiment/turns.py ``Agents``), built by the composition
    # ``rules``: decklog's outbox dispatcher (its ``agents`` sender arms the TurnScheduler's turns) and the
    # scheduler's (first_delay, debounce, max_wait), the product's settings; research/experiment/scheduled.py
    dispatcher: Dispatcher | None = None
    delays: tuple[float, float, float] = (60.0, 13.0, 60.0)
    died: str = ""  # ``rules``: the fault point that killed the scheduled turn's process, until it is replaced
    away_until: datetime | None = None  # ``central`` / ``nm``: no agent runs before this (a kill's lease, ``suspend``)

    def __post_init__(self) -> None:
        self.world = WorldSim(self.spec.scenario, fences=self.spec.fences)
        self.rng = random.Random(f"{self.spec.seed}:{self.spec.scenario.id}:{self.spec.fault}")
        self.fault_at = self.rng.randint(1, 3)

    # -- inputs, through the receivers' core door -------------------------------------------------------------

    async def deliver(self, step: Any) -> None:
        """A timeline input, through the receivers (``Inputs``): an alert notification (sent twice under
        ``dup_delivery``: a webhook retry with the same ``event_id``), a change, or a human message in Slack."""
        if step.type == "alert":
            body = {
                "title": step.title or step.fingerprint,
                "fingerprint": step.fingerprint,
                "status": step.status,
                "service": step.service,
                "event_id": f"{step.fingerprint}:{step.status}:{step.at:g}",
            }
            if step.status == "firing":
                self.world.fired(step.fingerprint, self.clock.now())
            for scope in await self.inputs.alert(body, times=2 if self.spec.fault == "dup_delivery" else 1):
                if scope not in self.scopes:
                    self.scopes.append(scope)
            return
        if step.type == "change":
            change = {"id": f"chg-{step.at:g}", "service": step.service, "description": step.title}
            await self.inputs.change({**change, "status": "succeeded", "at": self.clock.now().isoformat()})
            return
        for scope in self.scopes[:1] or []:
            self.rng.getrandbits(40)  # the draw of the old event id: the seed's later choices (nm's workers) stay
            # posted in the incident's Slack thread; under dup_delivery Slack retries the event (X-Slack-Retry-Num: 1)
            await self.inputs.message(scope, step.user, step.text, times=2 if self.spec.fault == "dup_delivery" else 1)

    # -- faults -----------------------------------------------------------------------------------------------

    async def maybe(self, point: str, scope: str) -> None:
        if self.spec.fault != point or not self.due():
            return
        self.fired = True
        await self.mark(scope, point)
        raise Killed(point)

    async def mark(self, scope: str, fault: str) -> None:
        entry = NewEntry.make(
            "observation",
            SYS,
            {"text": f"experiment fault injected: {fault}", "source": "experiment", "data": {"fault": fault}},
        )
        await self.store.append(scope, [entry])

    def due(self) -> bool:
        return not self.fired and self.steps >= self.fault_at

    def variant(self, fault: str) -> str:
        """The seed's variant of a fault (``executor_timeout``: ``lost`` or ``5xx``)."""
        options = {"executor_timeout": ("lost", "5xx")}.get(fault, ("",))
        return options[self.spec.seed % len(options)]

    async def executor_fault(self, scope: str) -> str:
        """The world's answer to a call under ``executor_timeout``: '' (none), ``lost`` or ``5xx``."""
        if self.spec.fault != "executor_timeout" or not self.due():
            return ""
        self.fired = True
        variant = self.variant("executor_timeout")
        await self.mark(scope, f"executor_timeout:{variant}")
        return variant

    @staticmethod
    def killed(point: str) -> Killed:
        return Killed(point)

    # -- context: who holds it ------------------------------------------------------------------------------------

    async def view(self, scope: str) -> str:
        """The central orchestrator's context: its warm transcript (the cold arms read the product's views)."""
        return await self._transcript(scope, await self._folded(scope))

    async def _folded(self, scope: str) -> Folded:
        state = await self.store.get_state(scope)
        self.cost.reconstruction_bytes += len(state.model_dump_json())
        now = self.clock.now()
        folded = Folded(alerts=_alerts(state))
        folded.obligations = [
            {**ob.model_dump(), "status": "claimed" if lease_live(ob, now) else "open"}
            for ob in state.obligations.values()
        ]
        return folded

    async def _transcript(self, scope: str, folded: Folded) -> str:
        """The orchestrator's warm transcript: every event since it started, appended, journaled after each step."""
        if scope not in self.transcripts:
            self.transcripts[scope] = self._reload(scope)
        for other in [scope, *(o for o in self.scopes if o != scope)]:  # its own log, and the others' effects
            key = scope if other == scope else f"{scope}>{other}"
            kinds = [] if other == scope else ["action_result"]
            new = await self.store.read(other, after=self.seen.get(key, 0), kinds=kinds)
            self.cost.reconstruction_bytes += _size(new)
            if new:
                self.seen[key] = new[-1].seq
            # another incident's result names its incident: the policy tells a sibling's run from this one's
            tail = "" if other == scope else f"\tscope={other}"
            self.transcripts[scope].extend(ln + tail for e in new for ln in entry_lines(e))
        return "\n".join([*header(self.spec.scenario), *self.transcripts[scope], *state_lines(folded)])

    def forget(self) -> None:
        """The orchestrator dies: its in-memory transcript is gone; the next one reloads the journal."""
        self.transcripts.clear()
        self.seen.clear()

    def _journal(self, scope: str) -> Path:
        return self.journal_dir / (scope.replace("/", "_") + ".json")

    def _reload(self, scope: str) -> list[str]:
        path = self._journal(scope)
        if not path.exists():
            return []
        data = path.read_bytes()
        self.cost.reconstruction_bytes += len(data)
        got = json.loads(data)
        self.seen.update(got["seen"])
        return list(got["lines"])

    def journal(self, scope: str) -> None:
        self.journal_dir.mkdir(parents=True, exist_ok=True)
        seen = {k: v for k, v in self.seen.items() if k == scope or k.startswith(scope + ">")}
        data = {"seen": seen, "lines": self.transcripts.get(scope, [])}
        self._journal(scope).write_text(json.dumps(data))

    # -- one step: a product turn (view → model → tools → append → proposals), then the hands -----------------

    async def step(self, scope: str) -> bool:
        self.steps += 1
        result = await self.agents.runtime().run_turn(scope, trigger="experiment", force=True)
        return await self.after(scope, result)

    async def after(self, scope: str, result: TurnResult) -> bool:
        """What follows every arm's turn: the ``kill_after_append`` point, then the hands (research/experiment/hands.py)."""
        await self.maybe("kill_after_append", scope)
        return await after_turn(self, scope, result)


def _size(entries: list[Entry]) -> int:
    return sum(len(json.dumps(e.to_json(), default=str)) for e in entries)


def _alerts(state: Any) -> dict[str, str]:
    return {fp: "resolved" if a.status == "resolved" else "firing" for fp, a in state.alerts.items()}
