"""The experiment through decklog's Slack part: the timeline's human messages are posted in the
incident's thread of the local fake Slack and reach the log through the Slack receiver (signed Events API
requests, the durable intake, Bolt); the scripted approver clicks the Approve button the Slack sender posted
(``block_actions``) and denies with ``/incident deny <id> <reason>``; under ``dup_delivery`` Slack retries the
message event and the approver double-clicks."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from decklog.bot.runtime import Runtime
from decklog.bot.settings import load_settings
from research.experiment import scenario
from research.experiment.desk_hands import APPROVER
from research.experiment.one import run_one
from research.experiment.reasoner import HOLD
from research.experiment.run import Spec


def _by_id(sid: str) -> scenario.Scenario:
    return next(s for s in scenario.builtin() if s.id == sid)


def _run(tmp_path: Path, sid: str, arm: str = "rules", fault: str = "none", seed: int = 1) -> dict[str, Any]:
    return asyncio.run(run_one(Spec(_by_id(sid), arm, fault, seed), tmp_path / "run", "scripted"))


def _entries(r: dict[str, Any]) -> list[dict[str, Any]]:
    async def read() -> list[dict[str, Any]]:
        rt = await Runtime.open(load_settings(data_dir=Path(r["data_dir"]), database_url=None))
        try:
            return [
                {"kind": e.kind, "actor": e.actor.id, "actor_name": e.actor.name, **e.payload.model_dump()}
                for s in r["scopes"]
                for e in await rt.store.read(s)
            ]
        finally:
            await rt.close()

    return asyncio.run(read())


def test_messages_are_posted_in_the_incident_thread_and_recorded_by_the_slack_receiver(tmp_path: Path) -> None:
    r = _run(tmp_path, "storm")
    assert r["correct"] is True, r["checks"]
    said = [s for s in _by_id("storm").timeline if s.type == "message"]
    entries = _entries(r)
    thread = next(e for e in entries if e["kind"] == "thread_linked")  # the Slack sender posted the header
    messages = [e for e in entries if e["kind"] == "message"]
    assert [(m["actor"], m["text"]) for m in messages] == [(s.user, s.text) for s in said]
    assert all(m["channel"] == thread["channel"] and m["thread_ts"] == thread["ts"] and m["ts"] for m in messages)
    assert r["slack"]["events_api"] == r["slack"]["events"] == len(said)
    assert not r["slack"].get("errors")


def test_the_approver_clicks_approve_on_the_posted_proposal_and_denies_with_a_reason(tmp_path: Path) -> None:
    r = _run(tmp_path, "bad-deploy")
    assert r["correct"] is True, r["checks"]
    approvals = [e for e in _entries(r) if e["kind"] == "approval"]
    approved = [a for a in approvals if a["decision"] == "approved"]
    denied = [a for a in approvals if a["decision"] == "denied"]
    assert approved and denied
    assert {(a["actor"], a["actor_name"]) for a in approvals} == {(APPROVER.id, APPROVER.name)}  # users.info
    assert [a["reason"] for a in denied] == ["restart(service=payments-db)"]  # the policy reads the reason
    slack = r["slack"]
    assert slack["did"]["approve"] == len(approved) and slack["did"]["deny"] == len(denied)
    assert slack["did"]["accept"] == 1  # the agents' suggestion to resolve, accepted on its message
    assert slack["interactive"] == slack["actions"] == len(approved) + 1  # one block_actions per click
    assert slack["slash_commands"] == slack["commands"] == len(denied)
    assert slack["buttons_left"] == 0  # every decided proposal's message was updated with its outcome
    assert not slack.get("errors")


def test_the_on_call_accepts_a_hold_and_records_it_as_a_decision_from_slack(tmp_path: Path) -> None:
    r = _run(tmp_path, "do-not-act")
    assert r["correct"] is True, r["checks"]
    entries = _entries(r)
    decisions = [e for e in entries if e["kind"] == "decision"]
    assert [(d["actor"], d["text"]) for d in decisions] == [(APPROVER.id, HOLD)]  # /incident decision <scope> …
    accepted = [e for e in entries if e["kind"] == "suggestion_feedback" and e["verdict"] == "accepted"]
    assert len(accepted) == r["slack"]["did"]["accept"] == 2  # the hold, then the resolve
    assert r["slack"]["did"]["decision"] == 1 and not r["slack"].get("errors")


@pytest.mark.parametrize("arm", ["central", "rules", "nm"])
def test_dup_delivery_is_a_slack_retry_and_a_double_click(tmp_path: Path, arm: str) -> None:
    r = _run(tmp_path, "bad-deploy", arm, "dup_delivery")
    assert r["correct"] is True and r["duplicate_effects"] == 0
    entries = _entries(r)
    approvals = [e["proposal_id"] for e in entries if e["kind"] == "approval" and e["decision"] == "approved"]
    assert len([e for e in entries if e["kind"] == "message"]) == 1
    assert approvals and len(approvals) == len(set(approvals))
    slack = r["slack"]
    assert slack["events_api"] == 2 and slack["duplicate_requests"] == 1  # the retry is acked, not processed
    assert slack["did"]["approve"] == 2 * len(approvals)  # each Approve clicked twice (on the same rendering)
    assert slack["interactive"] == slack["actions"] == slack["did"]["approve"] + slack["did"]["accept"]
