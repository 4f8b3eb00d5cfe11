"""Shared set-up for the action, approval, executor and obligation tests: a real log store, index and dispatcher
(index sender) on a temporary directory, the action desk with real HTTP executors, and the fake deploy service on
loopback. Nothing is mocked; time is a ``ManualClock`` where a test needs to jump (expiry), else the wall clock.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from decklog.adapters.executors import EXECUTOR_TYPES, build_executor
from decklog.adapters.local.services import FakeDeployService
from decklog.adapters.slack.outcomes import SlackDesk
from decklog.core.actions import ActionDesk, ApproverPolicy, Catalog
from decklog.core.actions.runner import Checkpoint, Runner
from decklog.core.clock import Clock, SystemClock
from decklog.core.egress import EgressPolicy
from decklog.core.entries import Actor, Entry, NewEntry
from decklog.core.index.sender import IndexSender
from decklog.core.obligations import open_obligation
from decklog.core.outbox.dispatcher import Dispatcher
from decklog.core.service import ScopeService
from decklog.core.state import ScopeState
from decklog.core.store.ports import IndexPort
from decklog.core.store.sqlite.index import SqliteIndex
from decklog.core.store.sqlite.log_store import SqliteLogStore

ALICE = Actor.human("U0ALICE", "alice")
BOB = Actor.human("U0BOB", "bob")
CAROL = Actor.human("U0CAROL", "carol")
MALLORY = Actor.human("U0MALLORY", "mallory")
AGENT = Actor.agent("triage", "rule-based")


def rollback_action(**overrides: Any) -> dict[str, Any]:
    """Like the shipped rollback_deploy, against ``${DEPLOY}``."""
    action: dict[str, Any] = {
        "name": "rollback_deploy",
        "description": "Roll a service back to its previous deploy",
        "risk": "R2",
        "safety_conditions": ["alert_still_firing", "change_is_latest_on_service", "no_other_run_in_flight"],
        "expected_outcome": "the alerts on {service} resolve",
        "verify": "alerts_resolved",
        "params": {
            "service": {"type": "string", "required": True, "lowercase": True},
            "change": {"type": "string"},
            "to_version": {"type": "string"},
        },
        "executor": {
            "type": "http",
            "url": "${DEPLOY}/rollback",
            "reconcile_url": "${DEPLOY}/reconcile",
            "timeout_s": 2,
        },
        "compensation": {
            "action": "restore_deploy",
            "params": {"service": "{params.service}", "to_version": "{effect.rolled_back_from}"},
        },
    }
    action.update(overrides)
    return action


def restore_action() -> dict[str, Any]:
    return {
        "name": "restore_deploy",
        "description": "Return a service to a version it ran before",
        "risk": "R2",
        "safety_conditions": ["no_other_run_in_flight"],
        "verify": "manual",
        "params": {"service": {"type": "string", "required": True}, "to_version": {"type": "string", "required": True}},
        "executor": {
            "type": "http",
            "url": "${DEPLOY}/rollback",
            "reconcile_url": "${DEPLOY}/reconcile",
            "timeout_s": 2,
        },
    }


def effect_action(
    name: str = "poke", risk: str = "R1", *, reconcile: bool = True, timeout: float = 2
) -> dict[str, Any]:
    """A generic action on the fake's ``/effect`` path (echoes its params)."""
    executor: dict[str, Any] = {"type": "http", "url": "${DEPLOY}/effect", "timeout_s": timeout}
    if reconcile:
        executor["reconcile_url"] = "${DEPLOY}/reconcile"
    return {
        "name": name,
        "description": f"a {risk} test action",
        "risk": risk,
        "verify": "none",
        "params": {"target": {"type": "string", "required": True}, "n": {"type": "integer", "default": 1}},
        "executor": executor,
    }


@dataclass
class Kit:
    store: SqliteLogStore
    index: IndexPort
    service: ScopeService
    dispatcher: Dispatcher
    desk: ActionDesk
    deploy: FakeDeployService
    clock: Clock
    session: aiohttp.ClientSession
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def slack(self) -> SlackDesk:
        """The desk as the Slack hooks call it: the replies are the texts the person sees."""
        return SlackDesk(self.desk)

    async def declare(self, title: str = "Payments 5xx", **kw: Any) -> str:
        result = await self.service.declare(title=title, actor=ALICE, **kw)
        return result.state.scope

    async def alert(self, scope: str, status: str = "firing", *, service: str = "payments", fp: str = "fp-5xx") -> None:
        payload = {
            "text": "payments 5xx above 5%",
            "source": "alertmanager",
            "service": service,
            "fingerprint": fp,
            "alert_status": status,
        }
        await self.service.record(scope, "observation", payload, Actor.system("alertmanager"))

    async def change(self, incident: str, change_id: str = "r2026-09-19-4", *, service: str = "payments") -> str:
        """A change scope on ``service``, linked to the incident as the suspected cause."""
        result = await self.service.declare(
            title=f"deploy {change_id}",
            kind="change",
            scope=f"change/{change_id}",
            services=[service],
            actor=Actor.system("ci"),
        )
        await self.service.link(incident, result.state.scope, Actor.system("linker"), relation="suspected_cause")
        await self.settle()
        return result.state.scope

    async def obligation(
        self, scope: str, text: str = "roll back only if the safety conditions hold", **kw: Any
    ) -> str:
        made: list[str] = []

        def decide(s: ScopeState) -> list[NewEntry]:
            entries = open_obligation(s, text=text, actor=AGENT, **kw)
            made.append(entries[0].payload.obligation_id)  # type: ignore[attr-defined]
            return entries

        await self.store.append(scope, decide)
        return made[0]

    async def state(self, scope: str) -> ScopeState:
        return await self.store.get_state(scope)

    async def entries(self, scope: str, *kinds: str) -> list[Entry]:
        return await self.store.read(scope, kinds=list(kinds))

    async def payloads(self, scope: str, kind: str) -> list[Any]:
        return [e.payload for e in await self.entries(scope, kind)]

    async def settle(self) -> None:
        await self.dispatcher.idle()


@asynccontextmanager
async def desk_kit(
    tmp_path: Path,
    *,
    actions: list[dict[str, Any]] | None = None,
    clock: Clock | None = None,
    approvers: tuple[str, ...] = ("U0ALICE", "U0BOB", "U0CAROL"),
    groups: dict[str, tuple[str, ...]] | None = None,
    r3_approvals: int = 1,
    lease_seconds: float = 30.0,
    lease_margin: float = 1.0,
    checkpoint: Checkpoint | None = None,
    deploy: FakeDeployService | None = None,
    env: dict[str, str] | None = None,
    egress: EgressPolicy | None = None,
) -> AsyncIterator[Kit]:
    clock = clock or SystemClock()
    fake = deploy or FakeDeployService(extra_paths=("/effect",))
    base = await fake.start()
    fake.record_deploy("payments", "r40")
    fake.record_deploy("payments", "r41")
    data = tmp_path / "data"
    store = SqliteLogStore(data, topics=("index",), clock=clock)
    index = SqliteIndex(data / "index.db", store.executor)
    await index.open()
    dispatcher = Dispatcher(store, [IndexSender(index, store)])
    dispatcher.start()
    catalog = Catalog.from_config(
        copy.deepcopy(actions if actions is not None else [rollback_action(), restore_action(), effect_action()]),
        env={"DEPLOY": base, **(env or {})},
        executors=EXECUTOR_TYPES,
    )
    session = aiohttp.ClientSession()
    executors = {spec.name: build_executor(spec.executor, session, egress) for spec in catalog if spec.available}
    policy = ApproverPolicy(approvers=approvers, groups=groups or {}, r3_approvals=r3_approvals, expiry_minutes=30)
    desk = ActionDesk(
        store,
        index,
        catalog,
        executors,
        policy,
        clock=clock,
        lease_seconds=lease_seconds,
        checkpoint=checkpoint,
        runner=functools.partial(Runner, reconcile_backoff=0.05, lease_margin=lease_margin),
    )
    kit = Kit(store, index, ScopeService(store, index), dispatcher, desk, fake, clock, session)
    try:
        yield kit
    finally:
        await session.close()
        await dispatcher.stop()
        await index.close()
        await store.close()
        await fake.stop()


def pid_of(line: str) -> str:
    """The proposal id in ``propose``'s one-line outcome."""
    import re

    found = re.search(r"\bp-[0-9a-f]{6}\b", line)
    assert found, line
    return found.group(0)
