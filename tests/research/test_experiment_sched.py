"""The experiment's ``rules`` arm is scheduled by decklog's own TurnScheduler (research/experiment/scheduled.py): its
turns come at the product's due times on the run's virtual clock, a killed process is replaced by one that re-arms
from the log, and a run repeats exactly."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from decklog.bot.runtime import Runtime
from decklog.bot.settings import load_settings
from decklog.core.replay import normalize
from research.experiment import scenario
from research.experiment.hands import LEASE
from research.experiment.one import run_one
from research.experiment.run import Spec

PRODUCT_TRIGGERS = {"first", "debounce", "max_wait", "follow_up", "wake", "boot"}


def _run(tmp_path: Path, sid: str, fault: str = "none", arm: str = "rules", seed: int = 1) -> dict[str, Any]:
    spec = Spec(next(s for s in scenario.builtin() if s.id == sid), arm, fault, seed)
    return asyncio.run(run_one(spec, tmp_path / "run", "scripted"))


def _log(r: dict[str, Any]) -> list[tuple[str, datetime, str, str, dict[str, Any]]]:
    async def read() -> list[tuple[str, datetime, str, str, dict[str, Any]]]:
        rt = await Runtime.open(load_settings(data_dir=Path(r["data_dir"]), database_url=None))
        try:
            return [
                (s, e.at, e.kind, e.actor.id, e.payload.model_dump(mode="json"))
                for s in r["scopes"]
                for e in await rt.store.read(s)
            ]
        finally:
            await rt.close()

    return asyncio.run(read())


def _texts(r: dict[str, Any]) -> list[tuple[str, datetime, str, str, str]]:
    async def read() -> list[tuple[str, datetime, str, str, str]]:
        rt = await Runtime.open(load_settings(data_dir=Path(r["data_dir"]), database_url=None))
        try:
            return [
                (s, e.at, e.kind, e.actor.id, normalize(e.text)) for s in r["scopes"] for e in await rt.store.read(s)
            ]
        finally:
            await rt.close()

    return asyncio.run(read())


def test_rules_turns_come_at_the_schedulers_due_times(tmp_path: Path) -> None:
    """The first turn waits ``first_delay`` (60 s) after the declaration; a human message gets its turn a
    ``debounce`` (13 s) later; the turn after the read tools' answers is the reasoner's wake-up, at once."""
    r = _run(tmp_path, "bad-deploy")
    assert r["correct"] is True and r["duplicate_effects"] == 0
    log = _log(r)
    declared = next(at for _s, at, kind, _a, _p in log if kind == "declared")
    turns = [(at, p["trigger"]) for _s, at, kind, _a, p in log if kind == "agent_turn"]
    assert {t for _at, t in turns} <= PRODUCT_TRIGGERS
    assert turns[0] == (declared + timedelta(seconds=60), "first")
    message = next(at for _s, at, kind, actor, _p in log if kind == "message" and actor == "U0ONCALL")
    assert (message + timedelta(seconds=13), "debounce") in turns
    assert any(t == "follow_up" for _at, t in turns)  # the turn that proposes what an obligation asks for


def test_do_not_act_asks_for_a_wake_up_after_its_read_tools(tmp_path: Path) -> None:
    r = _run(tmp_path, "do-not-act")
    turns = [(at, p["trigger"]) for _s, at, kind, _a, p in _log(r) if kind == "agent_turn"]
    assert turns[0][1] == "first" and turns[1] == (turns[0][0], "wake")
    assert r["correct"] is True


def test_a_killed_process_is_replaced_by_one_that_re_arms_from_the_log(tmp_path: Path) -> None:
    """``kill_after_claim``: the runner's claim is held by a dead process; its replacement boots after the lease,
    re-arms the pending turn from the log (trigger ``boot``), re-checks and runs the action under a new fence."""
    r = _run(tmp_path, "bad-deploy", "kill_after_claim")
    assert r["correct"] is True and r["duplicate_effects"] == 0
    log = _log(r)
    mark = next(at for _s, at, kind, _a, p in log if kind == "observation" and p["source"] == "experiment")
    boot = [(at, a) for _s, at, kind, a, p in log if kind == "agent_turn" and p["trigger"] == "boot"]
    assert boot and boot[0][0] >= mark + timedelta(seconds=LEASE) and boot[0][1] == "agent-2"
    fences = [p["fence"] for _s, _at, kind, _a, p in log if kind == "action_started"]
    assert fences == [2]


def test_the_scheduled_arm_repeats_exactly(tmp_path: Path) -> None:
    """Same spec, same rows and the same log (times, kinds, actors, texts with random ids masked as a replay
    masks them; not the payloads, which carry the fake Slack's wall-clock message ts and the turns' measured
    durations) on a repeat run."""
    a = _run(tmp_path / "a", "storm", "dup_delivery")
    b = _run(tmp_path / "b", "storm", "dup_delivery")
    assert {k: v for k, v in a.items() if k != "data_dir"} == {k: v for k, v in b.items() if k != "data_dir"}
    assert _texts(a) == _texts(b)
    assert a["correct"] is True


@pytest.mark.parametrize("fault", ["lease_expiry", "suspend"])
def test_inputs_arrive_on_time_while_no_agent_process_runs(tmp_path: Path, fault: str) -> None:
    """The flapping alert, with no agent process for a while: ``lease_expiry`` (the paused holder's process is dead
    until its lease runs out) or ``suspend`` (30 minutes). The alert's flaps of the meantime are recorded at their
    own times (not in a burst when the replacement boots), so the mitigation comes after the last flap and the
    alert ends resolved."""
    r = _run(tmp_path, "flapping-alert", fault)
    assert r["correct"] is True and r["duplicate_effects"] == 0
    log = _log(r)
    flaps = [at for _s, at, kind, actor, p in log if kind == "observation" and actor == "generic" and p["data"]]
    steps = next(s for s in scenario.builtin() if s.id == "flapping-alert").timeline
    start = next(at for _s, at, kind, _a, _p in log if kind == "declared")
    assert flaps[: len(steps)] == [start + timedelta(seconds=s.at) for s in steps]
    boot = next(at for _s, at, kind, _a, p in log if kind == "agent_turn" and p["trigger"] == "boot")
    assert boot > flaps[len(steps) - 1]
