"""One experiment run: a scenario's timeline on a virtual clock, one arm's agents, one fault, the shared hands.

Held constant across arms: the store, the alert router (the receivers' core door), the policy (``decide``), the
scripted approver, the world, the tools, the clock and the view budget. The arms differ in who holds context
(a journaled transcript, or cold views of the log) and who decides the next step (one orchestrator, a rule per
scope, or M churning workers that find work in the logs).
"""

from __future__ import annotations

import json
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from core.alerts import AlertRouter
from core.clock import ManualClock
from core.entries import Actor, NewEntry
from core.errors import Conflict, NotFound, StaleFence
from core.experiment import policy
from core.experiment.scenario import Scenario, action_key
from core.experiment.view import Cost, Folded, cold_view, entry_lines, header, state_lines
from core.experiment.world import WorldSim
from core.obligations import claim, fulfil, lease_live, open_obligation, reject_stale
from core.signals import AlertSignal
from core.store import LogStore

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
LEASE = 120.0
APPROVER = Actor.human("U0APPROVER", "scripted-approver")
SYS = Actor.system("experiment")

Model = Callable[[str, str], Awaitable[tuple[str, dict[str, int]]]]  # (system, view) → (answer, usage)


class Killed(Exception):
    pass


@dataclass
class Spec:
    scenario: Scenario
    arm: str
    fault: str
    seed: int
    fences: bool = True
    mutation: str = ""
    budget: int = 40
    workers: int = 3


@dataclass
class Run:
    spec: Spec
    store: LogStore
    router: AlertRouter
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
    sent: dict[str, int] = field(default_factory=dict)
    agent: str = "agent-1"
    generation: int = 1

    def __post_init__(self) -> None:
        self.world = WorldSim(self.spec.scenario, fences=self.spec.fences)
        self.rng = random.Random(f"{self.spec.seed}:{self.spec.scenario.id}:{self.spec.fault}")
        self.fault_at = self.rng.randint(1, 3)

    # -- inputs, through the receivers' core door -------------------------------------------------------------

    async def deliver(self, step: Any) -> None:
        if step.type == "alert":
            sig = AlertSignal(
                source="generic",
                fingerprint=step.fingerprint,
                status=step.status,
                title=step.title or step.fingerprint,
                service=step.service,
            )
            times = 2 if self.spec.fault == "dup_delivery" else 1
            for _ in range(times):
                for out in await self.router.receive("generic", [sig], raw={"fingerprint": step.fingerprint}):
                    if out.scope and out.scope not in self.scopes:
                        self.scopes.append(out.scope)
            return
        for scope in self.scopes[:1] or []:
            kind_text = f"change: {step.title}" if step.type == "change" else step.text
            actor = SYS if step.type == "change" else Actor.human(step.user)
            if step.type == "change":
                await self.store.append(
                    scope,
                    [
                        NewEntry.make(
                            "observation", actor, {"text": kind_text, "source": "change", "service": step.service}
                        )
                    ],
                )
            else:
                await self.store.append(scope, [NewEntry.make("message", actor, {"text": kind_text})])

    # -- faults -----------------------------------------------------------------------------------------------

    async def maybe(self, point: str, scope: str) -> None:
        if self.fired or self.spec.fault != point or self.steps < self.fault_at:
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

    # -- context: who holds it ------------------------------------------------------------------------------------

    async def view(self, scope: str) -> str:
        entries = await self.store.read(scope)
        self.cost.reconstruction_bytes += sum(len(json.dumps(e.to_json(), default=str)) for e in entries)
        folded = Folded()
        for e in entries:
            p = e.payload.model_dump()
            if e.kind == "observation" and p.get("fingerprint"):
                folded.alerts[p["fingerprint"]] = p["alert_status"] or "firing"
        state = await self.store.get_state(scope)
        now = self.clock.now()
        folded.obligations = [
            {**ob.model_dump(), "status": "claimed" if lease_live(ob, now) else "open"}
            for ob in state.obligations.values()
        ]
        for other in self.scopes:  # effects recorded in the other incidents' logs are visible too
            if other != scope:
                for e in await self.store.read(other, kinds=["action_result"]):
                    self.cost.reconstruction_bytes += len(json.dumps(e.to_json(), default=str))
                    entries.append(e)
        if self.spec.arm != "central":
            return cold_view(self.spec.scenario, entries, folded, self.spec.budget)
        # central: the orchestrator's transcript (journaled after every step) grows append-only
        transcript = self.transcripts.setdefault(scope, self._reload(scope))
        lines = [ln for e in entries for ln in entry_lines(e)]
        transcript.extend(ln for ln in lines[len([t for t in transcript if not t.startswith(("ALERT", "OBL"))]) :])
        return "\n".join([*header(self.spec.scenario), *transcript, *state_lines(folded)])

    def _journal(self, scope: str) -> Path:
        return self.journal_dir / (scope.replace("/", "_") + ".jsonl")

    def _reload(self, scope: str) -> list[str]:
        path = self._journal(scope)
        if not path.exists():
            return []
        data = path.read_bytes()
        self.cost.reconstruction_bytes += len(data)
        return [json.loads(line) for line in data.decode().splitlines()]

    def journal(self, scope: str) -> None:
        self.journal_dir.mkdir(parents=True, exist_ok=True)
        lines = self.transcripts.get(scope, [])
        self._journal(scope).write_text("".join(json.dumps(ln) + "\n" for ln in lines))

    # -- one step: view → model → append → claim → executor ---------------------------------------------------

    async def step(self, scope: str) -> bool:
        self.steps += 1
        text = await self.view(scope)
        answer, usage = await self.model(
            policy.SYSTEM, text + ("\nMUTATION\t" + self.spec.mutation if self.spec.mutation else "")
        )
        self.cost.add(usage, len((policy.SYSTEM + text).encode()))
        await self.maybe("kill_after_model", scope)
        decision = json.loads(answer or "{}")
        if self.spec.arm == "central":
            self.journal(scope)
        acted = await self.hands(scope, decision, usage, len(text))
        return acted

    async def hands(self, scope: str, d: dict[str, Any], usage: dict[str, int], view_bytes: int) -> bool:
        me = Actor.agent(self.agent)
        sc = self.spec.scenario
        new: list[NewEntry] = []
        for name in d.get("call", []):
            tool = next((t for t in sc.tools if t.name == name), None)
            if tool:
                data = {
                    "tool": tool.name,
                    "kind": tool.kind,
                    "suspect": tool.suspect,
                    "hold": tool.hold,
                    "fix": tool.fix,
                }
                new.append(
                    NewEntry.make("observation", me, {"text": tool.answer, "source": f"tool:{tool.kind}", "data": data})
                )
        if h := d.get("hypothesis"):
            new.append(
                NewEntry.make(
                    "hypothesis",
                    me,
                    {"text": f"root cause: {h['entity']}", "suspect_scope": h["entity"]},
                    refs=h.get("evidence", []),
                )
            )
        if d.get("hold"):
            new.append(NewEntry.make("decision", me, {"text": "hold: no action, the evidence says this is expected"}))
        if d.get("resolve"):
            new.append(NewEntry.make("status_changed", me, {"status": "resolved", "summary": "alerts cleared"}))
        for oid in d.get("drop", []):
            new.append(NewEntry.make("obligation_cancelled", me, {"obligation_id": oid, "reason": ""}))
        turn = NewEntry.make(
            "agent_turn",
            me,
            {"reasoner": "scripted", "view_bytes": view_bytes, "outcome": "ok" if d else "nothing", **usage},
        )
        state = await self.store.get_state(scope)
        if o := d.get("open"):
            new += open_obligation(
                state,
                text=f"run {action_key(o['action'], o['params'])} if the conditions hold",
                actor=me,
                purpose="rollback",
                conditions=o["conditions"],
                action=o["action"],
                params=o["params"],
                obligation_id=f"ob-{self.rng.getrandbits(24):06x}",
            )
        await self.store.append(scope, [*new, turn])
        await self.maybe("kill_after_append", scope)
        if r := d.get("reconcile"):
            await self.reconcile(scope, r)
        if p := d.get("propose"):
            await self.run_obligation(scope, p["obligation_id"], p["conditions"])
        return bool(d)

    async def reconcile(self, scope: str, keys: list[str]) -> None:
        entries = await self.store.read(scope, kinds=["action_result"])
        for e in entries:
            p = e.payload.model_dump()
            if p["outcome"] == "uncertain" and p["response"].get("key") in keys:
                prm = p["response"]["params"]
                done = self.world.observe(p["action"], prm)
                res = {
                    "run_id": p["run_id"],
                    "action": p["action"],
                    "outcome": "applied" if done else "abandon_uncertain",
                    "reconciled": True,
                    "response": {"key": p["response"]["key"], "params": prm},
                }
                await self.store.append(scope, [NewEntry.make("action_result", Actor.agent(self.agent), res)])

    async def run_obligation(self, scope: str, oid: str, conditions: list[str]) -> None:
        me = Actor.agent(self.agent)
        now = self.clock.now()
        try:
            got = await self.store.append(
                scope, lambda st: claim(st, oid, holder=self.agent, now=now, lease_seconds=LEASE, actor=me)
            )
        except (Conflict, NotFound):
            return
        fence = got.entries[-1].payload.model_dump()["fence"] if got.entries else 0
        if self.spec.mutation == "no_claim":
            fence = 0
        state = got.state
        ob = state.obligations[oid]
        checked = NewEntry.make(
            "observation",
            me,
            {
                "text": "conditions re-checked: " + "; ".join(conditions),
                "source": "agent",
                "data": {"checked": oid, "conditions": list(conditions)},
            },
        )
        key = action_key(ob.action, ob.params)
        harmful = key in {h.key() for h in self.spec.scenario.world.harmful}
        pid = f"p-{oid}-{fence}"
        prop = NewEntry.make(
            "proposal",
            me,
            {
                "proposal_id": pid,
                "action": ob.action,
                "params": ob.params,
                "risk": "R2",
                "obligation_id": oid,
                "safety_conditions": tuple(conditions),
            },
        )
        verdict = "denied" if harmful else "approved"
        appr = NewEntry.make(
            "approval",
            APPROVER,
            {"proposal_id": pid, "decision": verdict, "approver": APPROVER.id, "reason": key if harmful else ""},
            idempotency_key=f"approve:{pid}",
        )
        await self.store.append(scope, [checked, prop])
        for _ in range(2 if self.spec.fault == "dup_delivery" else 1):  # a double-clicked Approve
            await self.store.append(scope, [appr], idempotency_key=f"approve:{pid}")
        if harmful:
            await self.store.append(
                scope,
                [
                    NewEntry.make(
                        "obligation_cancelled", me, {"obligation_id": oid, "reason": f"denied by {APPROVER.name}"}
                    )
                ],
            )
            return
        await self.maybe("kill_after_claim", scope)
        if self.spec.fault == "lease_expiry" and not self.fired and self.steps >= self.fault_at:
            self.fired = True
            await self.mark(scope, "lease_expiry")
            self.paused.append(
                (scope, {"oid": oid, "fence": fence, "action": ob.action, "params": ob.params, "agent": self.agent})
            )
            raise Killed("lease_expiry")
        await self.execute(scope, oid, fence, ob.action, ob.params, self.agent)

    @staticmethod
    def _fenced(st: Any, oid: str, fence: int, now: Any, started: NewEntry) -> list[NewEntry]:
        try:
            fulfil(st, oid, fence=fence, now=now, actor=started.actor)
        except NotFound:
            raise StaleFence(f"{oid} is no longer open (fence {fence})", fence=fence, current=st.max_fence) from None
        return [started]

    async def execute(self, scope: str, oid: str, fence: int, action: str, params: dict[str, Any], agent: str) -> None:
        me = Actor.agent(agent)
        run_id = f"run-{oid}-{fence}"
        key = action_key(action, params)
        started = NewEntry.make(
            "action_started",
            me,
            {"run_id": run_id, "action": action, "obligation_id": oid, "fence": fence, "params": params},
        )
        now = self.clock.now()
        if self.spec.fences and self.spec.mutation != "no_claim":  # the mutant executes without a claim
            try:
                await self.store.append(scope, lambda st: self._fenced(st, oid, fence, now, started))
            except StaleFence as stale:
                err = stale
                await self.store.append(
                    scope,
                    lambda st: reject_stale(
                        st, err, obligation_id=oid, holder=agent, attempted="action_started", actor=me
                    ),
                )
                self.world.apply(action, params, fence=fence, resource=key)  # the fenced resource refuses it too
                return
        else:
            await self.store.append(scope, [started])
        lost = self.spec.fault == "executor_timeout" and not self.fired and self.steps >= self.fault_at
        outcome = self.world.apply(action, params, fence=fence, resource=key)
        if lost:
            self.fired = True
            await self.mark(scope, "executor_timeout")
            outcome = "uncertain"
        res = {
            "run_id": run_id,
            "action": action,
            "outcome": outcome,
            "fence": fence,
            "response": {"key": key, "params": params},
        }
        done = NewEntry.make("obligation_fulfilled", me, {"obligation_id": oid, "fence": fence, "run_id": run_id})
        try:
            await self.store.append(
                scope, lambda st: [NewEntry.make("action_result", me, res), *([done] if oid in st.obligations else [])]
            )
        except StaleFence:
            pass
        if self.world.mitigated:
            for fp in self.spec.scenario.world.resolves:
                sig = AlertSignal(source="generic", fingerprint=fp, status="resolved", title=fp)
                await self.router.receive("generic", [sig], raw={})
