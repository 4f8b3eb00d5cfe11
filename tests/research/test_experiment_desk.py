"""The experiment on the real action desk: proposals, approvals and runs through ``ActionDesk`` and
its ``Runner``, the world reached by the ``http`` executor on loopback. The judge's meaning is unchanged: a clean
run is correct, each broken policy is flagged, ``--fences off`` yields duplicates, uncertain effects reconcile."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from decklog.adapters.executors.http import HttpExecutor
from decklog.bot.runtime import Runtime
from decklog.bot.settings import load_settings
from decklog.core.actions.executor import ExecutionRequest
from research.experiment import catalog, scenario
from research.experiment.one import run_one
from research.experiment.run import Spec
from research.experiment.world import WorldSim
from research.experiment.world_http import WorldApp


def _by_id(sid: str) -> scenario.Scenario:
    return next(s for s in scenario.builtin() if s.id == sid)


def _run(
    tmp_path: Path, sid: str, arm: str = "rules", fault: str = "none", seed: int = 1, **kw: object
) -> dict[str, Any]:
    spec = Spec(_by_id(sid), arm, fault, seed, **kw)  # type: ignore[arg-type]
    return asyncio.run(run_one(spec, tmp_path / "run", "scripted"))


def _entries(r: dict[str, Any]) -> list[dict[str, Any]]:
    async def read() -> list[dict[str, Any]]:
        rt = await Runtime.open(load_settings(data_dir=Path(r["data_dir"]), database_url=None))
        try:
            return [
                {"kind": e.kind, "actor": e.actor.id, **e.payload.model_dump()}
                for s in r["scopes"]
                for e in await rt.store.read(s)
            ]
        finally:
            await rt.close()

    return asyncio.run(read())


def test_the_catalog_maps_free_text_conditions_to_desk_conditions() -> None:
    built = catalog.build(_by_id("bad-deploy"), "http://127.0.0.1:9")
    assert {a.name for a in built} == {"rollback", "restart"}
    assert built.get("rollback").safety_conditions == ("alert_still_firing", "no_other_run_in_flight")
    assert catalog.desk_condition("whatever the agent says") == ""


@pytest.mark.parametrize("arm", ["central", "rules", "nm"])
def test_a_clean_run_goes_through_the_desk_and_is_correct(tmp_path: Path, arm: str) -> None:
    r = _run(tmp_path, "bad-deploy", arm)
    assert r["correct"] is True, r["checks"]
    entries = _entries(r)
    kinds = [e["kind"] for e in entries]
    assert "proposal" in kinds and "approval" in kinds
    started = [e for e in entries if e["kind"] == "action_started"]
    assert started and all(e["actor"] == "runner" and e["fence"] >= 1 for e in started)
    denied = [e for e in entries if e["kind"] == "approval" and e["decision"] == "denied"]
    assert [e["reason"] for e in denied] == ["restart(service=payments-db)"]  # the harmful one, by the approver


@pytest.mark.parametrize(
    ("mutation", "check"),
    [
        ("drop_obligations", "obligations"),
        ("repropose_denied", "effects"),
        ("no_claim", "claims"),
        ("skip_conditions", "obligations"),
    ],
)
def test_the_judge_flags_each_broken_policy_on_the_desk(tmp_path: Path, mutation: str, check: str) -> None:
    r = _run(tmp_path, "bad-deploy", mutation=mutation)
    assert r["correct"] is False
    assert r["checks"][check] is False


@pytest.mark.parametrize("arm", ["central", "rules", "nm"])
def test_fences_off_on_the_desk_produces_duplicate_effects_under_lease_expiry(tmp_path: Path, arm: str) -> None:
    """The paused holder resumes after the takeover: with the runner's fence check it is rejected; without it
    (the experiment's ``FencelessRunner``, a subclass of the product's runner) it calls the world again."""
    on = _run(tmp_path / "on", "bad-deploy", arm, fault="lease_expiry")
    off = _run(tmp_path / "off", "bad-deploy", arm, fault="lease_expiry", fences=False)
    assert on["duplicate_effects"] == 0 and on["correct"] is True
    assert any(e["kind"] == "fence_rejected" for e in _entries(on))
    assert off["duplicate_effects"] >= 1 and off["correct"] is False


@pytest.mark.parametrize("arm", ["central", "rules", "nm"])
@pytest.mark.parametrize(
    ("seed", "outcomes"), [(1, ["uncertain", "not_applied", "applied"]), (2, ["uncertain", "applied"])]
)
def test_an_uncertain_call_is_reconciled_by_the_runner_not_retried(
    tmp_path: Path, arm: str, seed: int, outcomes: list[str]
) -> None:
    """Seed 1: the world answers 502 before applying; seed 2: it applies and drops the connection."""
    r = _run(tmp_path, "bad-deploy", arm, "executor_timeout", seed=seed)
    assert r["correct"] is True, r["checks"]
    results = [e for e in _entries(r) if e["kind"] == "action_result"]
    assert [e["outcome"] for e in results] == outcomes
    assert results[1]["reconciled"] is True


@pytest.mark.parametrize("arm", ["central", "rules", "nm"])
def test_kill_after_claim_on_the_desk_is_taken_over_once(tmp_path: Path, arm: str) -> None:
    r = _run(tmp_path, "bad-deploy", arm, "kill_after_claim")
    assert r["correct"] is True and r["duplicate_effects"] == 0
    claims = [e for e in _entries(r) if e["kind"] == "obligation_claimed"]
    assert [c["fence"] for c in claims] == [1, 2]


def test_the_world_target_speaks_the_http_executor_protocol() -> None:
    """Through the real ``HttpExecutor``: applied once per idempotency key, a stale fence refused, a bad body a
    400 with the reason and nothing applied; the reconcile lookup answers what the world applied."""

    async def no_fault(_scope: str) -> str:
        return ""

    async def go() -> None:
        world = WorldSim(_by_id("bad-deploy"))
        app = WorldApp(world, no_fault)
        await app.start()
        try:
            async with aiohttp.ClientSession() as session:
                ex = HttpExecutor(session, url=app.base + "/act", reconcile_url=app.base + "/reconcile")
                params = {"service": "payments", "to": "r-100"}
                req = ExecutionRequest("rollback", params, "incident/x", "run-1", 2, "run-1-f2-x")
                assert (await ex.execute(req)).outcome == "applied"
                assert (await ex.execute(req)).outcome == "applied"  # a replay of the key: not applied again
                assert world.applied["rollback(service=payments,to=r-100)"] == 1
                stale = ExecutionRequest("rollback", params, "incident/x", "run-2", 1, "run-2-f1-x")
                assert (await ex.execute(stale)).outcome == "refused"
                assert (await ex.reconcile(req)).status == "applied"
                assert (await ex.reconcile(stale)).status == "not_applied"
                async with session.post(app.base + "/act", json={"action": "rollback"}) as resp:
                    assert resp.status == 400 and "bad request body" in (await resp.json())["error"]
                assert world.applied.total() == 1
        finally:
            await app.stop()

    asyncio.run(go())
