"""The runner under a paused or vanished holder: a newer fence takes over, settles the older run by asking the
target, and the older authority's writes are rejected and recorded. Pauses are injected at the runner's
checkpoints and last until the lease has passed (polled, never slept)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from decklog.core.actions.run_authority import RunAuthority
from decklog.core.clock import SystemClock
from decklog.core.entries import FenceRejected
from tests.actions_support import AGENT, desk_kit, effect_action, pid_of
from tests.conftest import eventually

LEASE = 0.5


class Crash(Exception):
    """A holder that dies mid-run (its process is gone; nothing it would have written gets written)."""


class Pauses:
    """Hold the run of one receipt at one checkpoint until released; or crash it there."""

    def __init__(self, receipt: str, point: str, *, crash: bool = False) -> None:
        self.receipt, self.point, self.crash = receipt, point, crash
        self.reached = asyncio.Event()
        self.release = asyncio.Event()
        self.auth: RunAuthority | None = None

    async def __call__(self, point: str, auth: RunAuthority) -> None:
        if auth.receipt != self.receipt or point != self.point:
            return
        self.auth = auth
        self.reached.set()
        if self.crash:
            raise Crash(point)
        await self.release.wait()


async def _setup(kit: Any) -> tuple[str, str]:
    scope = await kit.declare()
    line = await kit.desk.propose(
        scope, action="poke", params={"target": "db-1"}, rationale="t", obligation_id=None, actor=AGENT
    )
    return scope, pid_of(line)


async def _lease_passed(auth: RunAuthority | None) -> None:
    assert auth is not None
    clock = SystemClock()
    await eventually(lambda: clock.now() > auth.lease_until, timeout=5, what="the paused holder's lease to pass")


async def _stale_writes(kit: Any, scope: str) -> list[FenceRejected]:
    return list(await kit.payloads(scope, "fence_rejected"))


@pytest.fixture
def actions() -> list[dict[str, Any]]:
    return [effect_action(timeout=0.2)]


async def test_paused_after_the_claim_the_older_holder_never_starts(tmp_path: Path, actions) -> None:
    pauses = Pauses("A", "after_claim")
    async with desk_kit(tmp_path, actions=actions, lease_seconds=LEASE, lease_margin=0.05, checkpoint=pauses) as kit:
        scope, pid = await _setup(kit)
        first = asyncio.ensure_future(kit.desk.execute(scope, pid, receipt="A"))
        await pauses.reached.wait()
        await _lease_passed(pauses.auth)
        second = await kit.desk.execute(scope, pid, receipt="B")
        assert second.status == "applied"
        pauses.release.set()
        assert (await first).status == "stale"
        (rejected,) = await _stale_writes(kit, scope)
        assert rejected.fence == pauses.auth.fence and rejected.attempted.startswith("start run-")
        assert len(kit.deploy.effects) == 1
        (done,) = await kit.payloads(scope, "obligation_fulfilled")
        claims = await kit.payloads(scope, "obligation_claimed")
        assert done.fence == claims[-1].fence > pauses.auth.fence
        assert (await kit.store.verify(scope)).ok


async def test_paused_before_the_call_the_newer_holder_settles_the_run_and_acts_once(tmp_path: Path, actions) -> None:
    pauses = Pauses("A", "before_call")
    async with desk_kit(tmp_path, actions=actions, lease_seconds=LEASE, lease_margin=0.05, checkpoint=pauses) as kit:
        scope, pid = await _setup(kit)
        first = asyncio.ensure_future(kit.desk.execute(scope, pid, receipt="A"))
        await pauses.reached.wait()
        await _lease_passed(pauses.auth)
        second = await kit.desk.execute(scope, pid, receipt="B")
        assert second.status == "applied"
        pauses.release.set()
        assert (await first).status == "stale"
        results = await kit.payloads(scope, "action_result")
        assert [(r.run_id, r.outcome, r.reconciled) for r in results] == [
            (pauses.auth.run_id, "not_applied", True),
            (second.run_id, "applied", False),
        ]
        assert all(r.fence > pauses.auth.fence for r in results)
        (rejected,) = await _stale_writes(kit, scope)
        assert "not made" in rejected.attempted
        assert len(kit.deploy.effects) == 1 and kit.deploy.effects[0].request["run_id"] == second.run_id


async def test_paused_after_the_call_the_result_is_reconciled_and_the_stale_write_rejected(
    tmp_path: Path, actions
) -> None:
    pauses = Pauses("A", "after_call")
    async with desk_kit(tmp_path, actions=actions, lease_seconds=LEASE, lease_margin=0.05, checkpoint=pauses) as kit:
        scope, pid = await _setup(kit)
        first = asyncio.ensure_future(kit.desk.execute(scope, pid, receipt="A"))
        await pauses.reached.wait()
        await _lease_passed(pauses.auth)
        second = await kit.desk.execute(scope, pid, receipt="B")
        assert second.status == "applied" and second.run_id == pauses.auth.run_id  # the older run's effect
        pauses.release.set()
        assert (await first).status == "stale"
        (result,) = await kit.payloads(scope, "action_result")
        assert result.outcome == "applied" and result.reconciled and result.fence > pauses.auth.fence
        (rejected,) = await _stale_writes(kit, scope)
        assert rejected.fence == pauses.auth.fence and "action_result applied" in rejected.attempted
        assert len(kit.deploy.effects) == 1
        assert len([c for c in kit.deploy.calls if c.path == "/effect"]) == 1
        kit.deploy.assert_at_most_once_per_key()


async def test_a_holder_that_dies_mid_run_is_settled_by_the_sweep(tmp_path: Path, actions) -> None:
    pauses = Pauses("A", "after_call", crash=True)
    async with desk_kit(tmp_path, actions=actions, lease_seconds=LEASE, lease_margin=0.05, checkpoint=pauses) as kit:
        scope, pid = await _setup(kit)
        with pytest.raises(Crash):
            await kit.desk.execute(scope, pid, receipt="A")
        await kit.settle()
        assert (await kit.desk.sweep()).runs == []  # the lease is still live: nobody interferes
        await _lease_passed(pauses.auth)
        report = await kit.desk.sweep()
        assert report.leases_expired == 1
        assert [(r.status, r.run_id) for r in report.runs] == [("applied", pauses.auth.run_id)]
        (result,) = await kit.payloads(scope, "action_result")
        assert result.reconciled and len(kit.deploy.effects) == 1
        state = await kit.state(scope)
        assert not state.runs and not state.proposals and not state.obligations


async def test_redelivery_of_an_approval_runs_nothing_twice(tmp_path: Path, actions) -> None:
    async with desk_kit(tmp_path, actions=actions, lease_margin=0.05) as kit:
        scope, pid = await _setup(kit)
        reports = await asyncio.gather(*(kit.desk.execute(scope, pid, receipt=f"r{i}") for i in range(5)))
        assert sorted(r.status for r in reports).count("applied") == 1
        assert (await kit.desk.execute(scope, pid, receipt="later")).status == "not_runnable"
        assert len(kit.deploy.effects) == 1
