"""Post-incident reports: golden Markdown and JSON for the 03:12 story, determinism, uncertain effects,
compensations, and what the HTML page may (not) contain.

The story's log is written through the real store with a ManualClock and sequential entry ids, so its hash chain
(and therefore the report, which shows the head hash) is the same on every run. ``UPDATE_GOLDEN=1`` rewrites the
golden files after an intended change; review the diff.
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from decklog.core.clock import ManualClock
from decklog.core.entries import Actor, NewEntry
from decklog.core.reports import ScopeLog, build_report, render
from decklog.core.reports.export import read_logs, render_report
from decklog.core.store.sqlite.log_store import SqliteLogStore
from tests.helpers.golden import golden_text

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "reports"
INCIDENT = "incident/payments-5xx"
CHANGE = "change/r2026-09-19-4"
ALICE = Actor.human("U0ALICE", "alice")
BOB = Actor.human("U0BOB", "bob")
ALERTS = Actor.system("alertmanager")
SLACK = Actor.system("slack")
TRIAGE = Actor.agent("triage", "triage agent")
ACTIONS = Actor.agent("actions", "action agent")
VERIFIER = Actor.agent("verifier", "verification agent")
DEPLOYS = Actor.system("deploys")
THREAD = "https://acme.slack.com/archives/C0ALERTS/p1789787520000100"
EFFECT = "sha256:" + "ab" * 32
UNDONE = "sha256:" + "cd" * 32


@pytest.fixture
def fixed_ids(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Entry ids are random in production; here they count up, so hashes (and reports) are reproducible."""
    counter = itertools.count(1)
    monkeypatch.setattr("decklog.core.store.sqlite.log_store.new_entry_id", lambda: f"e{next(counter):022x}")
    yield


@pytest.fixture
async def store(tmp_path: Path, fixed_ids: None) -> AsyncIterator[SqliteLogStore]:
    start = datetime(2026, 9, 19, 3, 7, tzinfo=UTC)  # the deploy; the alert fires at 03:12
    s = SqliteLogStore(tmp_path / "data", topics=("index",), clock=ManualClock(start))
    yield s
    await s.close()


class Story:
    """Appends entries one minute-ish apart, each through the store like any receiver would."""

    def __init__(self, store: SqliteLogStore) -> None:
        self.store = store
        clock = store.clock
        assert isinstance(clock, ManualClock)
        self.clock = clock

    async def add(
        self,
        kind: str,
        actor: Actor,
        payload: dict[str, Any],
        *,
        scope: str = INCIDENT,
        after: float = 30,
        refs: tuple[int, ...] = (),
        key: str | None = None,
    ) -> int:
        self.clock.advance(seconds=after)
        entry = NewEntry.make(kind, actor, payload, refs=refs, idempotency_key=key)
        result = await self.store.append(scope, [entry], create=kind == "declared")
        return result.entries[-1].seq


async def write_story(store: SqliteLogStore) -> Story:
    """03:12 an alert opens the incident; the deploy is linked; agents suspect it; a rollback is approved, runs under
    a fence and is verified; resolved, with a follow-up."""
    s = Story(store)
    await s.add(
        "declared",
        DEPLOYS,
        {"title": "payments r2026-09-19-4", "services": ["payments"], "via": "change"},
        scope=CHANGE,
        after=0,
    )
    await s.add(
        "observation",
        DEPLOYS,
        {
            "text": "deploy r2026-09-19-4 started: touched payments/config/psp.yaml",
            "source": "change",
            "service": "payments",
        },
        scope=CHANGE,
        after=120,
    )
    await s.add("status_changed", DEPLOYS, {"status": "succeeded", "previous": "recorded"}, scope=CHANGE, after=60)
    await s.add(
        "declared",
        ALERTS,
        {
            "title": "Payments 5xx elevated",
            "severity": 2,
            "services": ["payments"],
            "via": "alert",
            "summary": "5xx ratio above 5% on payments-api",
        },
        after=120,
    )
    await s.add(
        "observation",
        ALERTS,
        {
            "text": "PaymentsHigh5xx firing: 12% of requests fail",
            "source": "alertmanager",
            "service": "payments",
            "fingerprint": "fp-5xx",
            "alert_status": "firing",
        },
        after=0.5,
    )
    await s.add("thread_linked", SLACK, {"channel": "C0ALERTS", "ts": "1789787520.000100", "permalink": THREAD})
    await s.add(
        "scope_linked",
        TRIAGE,
        {"scope": CHANGE, "relation": "suspected_cause", "reason": "touched the payments config path"},
    )
    await s.add("scope_linked", TRIAGE, {"scope": INCIDENT, "relation": "suspected_cause"}, scope=CHANGE, after=0)
    await s.add(
        "message",
        BOB,
        {
            "text": "I see 502s from the *load balancer* | since 03:10",
            "channel": "C0ALERTS",
            "ts": "1789787700.000200",
            "thread_ts": "1789787520.000100",
        },
    )
    await s.add("role_assigned", ALICE, {"role": "commander", "user_id": "U0ALICE", "user_name": "alice"})
    await s.add("severity_changed", ALICE, {"severity": 1, "previous": 2, "reason": "card payments failing"})
    await s.add("goal", ALICE, {"text": "Card payments succeed again"})
    await s.add("constraint", ALICE, {"text": "No schema changes during the incident"})
    await s.add(
        "hypothesis",
        TRIAGE,
        {"text": "r2026-09-19-4 changed the PSP timeout", "confidence": 0.8, "suspect_scope": CHANGE},
    )
    await s.add(
        "obligation_opened",
        TRIAGE,
        {
            "obligation_id": "ob-rollback",
            "text": "Roll back r2026-09-19-4 only if the recorded safety conditions hold",
            "purpose": "rollback",
            "conditions": ["r2026-09-19-4 is the latest deploy of payments", "no migration ran"],
            "action": "rollback-deploy",
            "params": {"deploy": "r2026-09-19-4"},
        },
        after=1,
    )
    await s.add(
        "agent_turn",
        TRIAGE,
        {
            "reasoner": "claude",
            "model": "claude-sonnet-4-5",
            "view": "triage",
            "view_bytes": 5120,
            "view_tokens": 1400,
            "seq_from": 1,
            "seq_to": 13,
            "trigger": "settled",
            "tool_calls": [{"name": "recent_changes"}, {"name": "record_hypothesis"}],
            "input_tokens": 2100,
            "output_tokens": 320,
            "cache_read_input_tokens": 1024,
            "cache_creation_input_tokens": 512,
            "cost_usd": 0.0123,
            "duration_ms": 8400,
        },
        after=1,
    )
    await s.add(
        "proposal",
        ACTIONS,
        {
            "proposal_id": "p-1",
            "action": "rollback-deploy",
            "params": {"deploy": "r2026-09-19-4"},
            "preview": "roll back payments to r2026-09-19-3",
            "args_hash": "sha256:" + "11" * 32,
            "risk": "R2",
            "obligation_id": "ob-rollback",
            "rationale": "the deploy touched the payments config path minutes before the 5xx",
            "safety_conditions": ["r2026-09-19-4 is the latest deploy of payments", "no migration ran"],
            "checks": [
                {"name": "r2026-09-19-4 is the latest deploy of payments", "ok": True, "detail": "latest"},
                {"name": "no migration ran", "ok": True},
            ],
            "inputs_digest": "sha256:" + "22" * 32,
        },
    )
    await s.add(
        "agent_turn",
        ACTIONS,
        {
            "reasoner": "rules",
            "view": "action",
            "seq_from": 1,
            "seq_to": 16,
            "input_tokens": 0,
            "output_tokens": 0,
            "cost_usd": 0.0,
            "duration_ms": 35,
        },
        after=1,
    )
    await s.add(
        "approval",
        ALICE,
        {"proposal_id": "p-1", "decision": "approved", "approver": "U0ALICE", "approver_name": "alice"},
        after=90,
    )
    await s.add(
        "obligation_claimed",
        Actor.system("actions"),
        {
            "obligation_id": "ob-rollback",
            "holder": "runner-1",
            "fence": 1,
            "lease_until": "2026-09-19T03:30:00.000000Z",
        },
        after=1,
    )
    await s.add(
        "action_started",
        Actor.system("actions"),
        {
            "run_id": "run-1",
            "action": "rollback-deploy",
            "proposal_id": "p-1",
            "obligation_id": "ob-rollback",
            "fence": 1,
            "lease_until": "2026-09-19T03:30:00.000000Z",
            "receipt": "sched-7",
            "idempotency_key": "run-1:1",
            "proposer": "actions",
            "approvers": ["U0ALICE"],
            "params": {"deploy": "r2026-09-19-4"},
        },
        after=1,
    )
    await s.add(
        "action_result",
        Actor.system("actions"),
        {"run_id": "run-1", "action": "rollback-deploy", "outcome": "applied", "fence": 1, "effect_digest": EFFECT},
        after=20,
    )
    await s.add(
        "obligation_fulfilled",
        Actor.system("actions"),
        {"obligation_id": "ob-rollback", "fence": 1, "run_id": "run-1"},
        after=0,
    )
    await s.add(
        "obligation_opened",
        Actor.system("actions"),
        {
            "obligation_id": "ob-verify",
            "text": "Verification needed: payments 5xx back under 1%",
            "purpose": "verification",
            "run_id": "run-1",
            "expected_outcome": "5xx ratio under 1% within 10 minutes",
        },
        after=0,
    )
    await s.add(
        "decision",
        ALICE,
        {
            "text": "Freeze payments deploys until the PSP client is fixed",
            "rationale": "the rollback worked",
            "expected_outcome": "no new 5xx",
        },
    )
    await s.add("status_changed", ALICE, {"status": "mitigated", "previous": "investigating"})
    await s.add(
        "observation",
        ALERTS,
        {
            "text": "PaymentsHigh5xx resolved",
            "source": "alertmanager",
            "service": "payments",
            "fingerprint": "fp-5xx",
            "alert_status": "resolved",
        },
        after=240,
    )
    await s.add(
        "verification",
        VERIFIER,
        {
            "obligation_id": "ob-verify",
            "run_id": "run-1",
            "outcome": "verified",
            "expected": "5xx under 1%",
            "observed": "0.2% 5xx over 5 minutes",
        },
        after=300,
    )
    await s.add("obligation_fulfilled", VERIFIER, {"obligation_id": "ob-verify", "note": "verified"}, after=0)
    await s.add(
        "agent_turn",
        VERIFIER,
        {
            "reasoner": "claude",
            "model": "claude-sonnet-4-5",
            "view": "verification",
            "seq_from": 20,
            "seq_to": 27,
            "input_tokens": 900,
            "output_tokens": 120,
            "cache_read_input_tokens": 1024,
            "cost_usd": 0.0041,
            "duration_ms": 3100,
        },
        after=0,
    )
    await s.add(
        "suggestion", VERIFIER, {"suggestion_id": "s-1", "text": "Resolve the incident", "action": "resolve"}, after=1
    )
    await s.add("suggestion_feedback", ALICE, {"suggestion_id": "s-1", "verdict": "accepted", "user_id": "U0ALICE"})
    await s.add(
        "status_changed",
        ALICE,
        {"status": "resolved", "previous": "mitigated", "summary": "rolled back r2026-09-19-4"},
        after=0,
    )
    await s.add(
        "obligation_opened",
        ALICE,
        {"obligation_id": "fu-1", "text": "Add a canary check for payments config changes", "purpose": "follow_up"},
        after=60,
    )
    return s


async def report_bytes(store: SqliteLogStore, fmt: str) -> bytes:
    body, _, _ = await render_report(store, INCIDENT, fmt)
    return body


def check_golden(name: str, body: bytes) -> None:
    path = GOLDEN / name
    assert body.decode() == golden_text(path, body.decode()), f"{name} differs from its golden file"


# -- golden -------------------------------------------------------------------------------------------------------


async def test_golden_markdown_of_the_0312_story(store: SqliteLogStore) -> None:
    await write_story(store)
    check_golden("payments-5xx.md", await report_bytes(store, "md"))


async def test_golden_json_of_the_0312_story(store: SqliteLogStore) -> None:
    await write_story(store)
    check_golden("payments-5xx.json", await report_bytes(store, "json"))


async def test_report_json_carries_every_section_of_the_story(store: SqliteLogStore) -> None:
    await write_story(store)
    report = json.loads(await report_bytes(store, "json"))
    milestones = {m["name"]: m for m in report["milestones"]}
    assert milestones["declared"]["by"]["id"] == "alertmanager"
    assert milestones["first_human_response"]["by"]["id"] == "U0BOB"  # bob's message, not the system's declaration
    assert milestones["mitigated"]["reached"] and milestones["resolved"]["reached"]
    assert milestones["resolved"]["since_declared_s"] > milestones["mitigated"]["since_declared_s"] > 0
    (action,) = report["actions"]
    assert action["proposal"]["proposer"] == "actions" and action["proposal"]["status"] == "ran"
    assert [a["approver"] for a in action["proposal"]["approvals"]] == ["U0ALICE"]
    (run,) = action["runs"]
    assert (run["run_id"], run["fence"], run["outcome"], run["effect_digest"]) == ("run-1", 1, "applied", EFFECT)
    assert run["verification"] == "verified"
    assert report["agent_totals"]["turns"] == 3
    assert report["agent_totals"]["cost_usd"] == 0.0164
    assert report["agent_totals"]["total_tokens"] == 2100 + 320 + 1024 + 512 + 900 + 120 + 1024
    assert [f["obligation_id"] for f in report["follow_ups"]] == ["fu-1"]
    assert report["obligations"] == [] and report["open_questions"] == []
    origins = {line["origin"] for line in report["timeline"]}
    assert origins == {"human", "agent", "system"}
    change_lines = [line for line in report["timeline"] if line["scope"] == CHANGE]
    assert change_lines and change_lines[0]["offset_s"] < 0  # the deploy started before the declaration
    message = next(line for line in report["timeline"] if line["kind"] == "message")
    assert (
        message["link"]
        == "https://acme.slack.com/archives/C0ALERTS/p1789787700000200?thread_ts=1789787520.000100&cid=C0ALERTS"
    )
    decision = report["decisions"][0]
    assert decision["link"] == THREAD
    assert [i["ok"] for i in report["integrity"]] == [True, True]


# -- determinism --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", ["md", "json", "html"])
async def test_report_exported_entries_are_not_part_of_the_report(store: SqliteLogStore, fmt: str) -> None:
    await write_story(store)
    first = await report_bytes(store, fmt)
    story = Story(store)
    await story.add("report_exported", ALICE, {"format": fmt, "sha256": "0" * 64, "destination": "stdout"})
    await story.add(
        "report_exported", SLACK, {"format": fmt, "sha256": "0" * 64, "destination": "slack", "file_id": "F1"}
    )
    assert await report_bytes(store, fmt) == first


async def test_the_same_log_gives_the_same_bytes_from_a_fresh_store(store: SqliteLogStore, tmp_path: Path) -> None:
    await write_story(store)
    first = {fmt: await report_bytes(store, fmt) for fmt in ("md", "json", "html")}
    await store.close()
    again = SqliteLogStore(tmp_path / "data", topics=("index",))
    try:
        for fmt, body in first.items():
            body_again, _, _ = await render_report(again, INCIDENT, fmt)
            assert body_again == body
    finally:
        await again.close()


async def test_a_new_entry_changes_the_report(store: SqliteLogStore) -> None:
    await write_story(store)
    before = await report_bytes(store, "md")
    await Story(store).add("message", BOB, {"text": "all quiet now"})
    assert await report_bytes(store, "md") != before


# -- uncertain effects and compensations ---------------------------------------------------------------------------


async def start_run(s: Story, run_id: str, *, compensates: str = "", proposal: str = "") -> None:
    await s.add(
        "action_started",
        Actor.system("actions"),
        {
            "run_id": run_id,
            "action": "rollback-deploy" if not compensates else "redeploy",
            "fence": 2,
            "idempotency_key": f"{run_id}:2",
            "proposal_id": proposal,
            "compensates_run": compensates,
            "proposer": "actions",
            "approvers": ["U0ALICE"],
        },
    )


async def test_an_uncertain_effect_is_an_open_question_until_reconciled(store: SqliteLogStore) -> None:
    s = await write_story(store)
    await start_run(s, "run-2")
    await s.add(
        "action_result",
        Actor.system("actions"),
        {"run_id": "run-2", "outcome": "uncertain", "fence": 2, "error": "timeout after 10s"},
    )
    report = build_report(*await read_logs(store, INCIDENT))
    (question,) = report.open_questions
    assert (question.kind, question.run_id, question.idempotency_key) == ("uncertain_effect", "run-2", "run-2:2")
    md = render(report, "md").decode()
    assert "## Open questions" in md and "the outcome is unknown (timeout after 10s)" in md

    await s.add(
        "action_result",
        Actor.system("actions"),
        {"run_id": "run-2", "outcome": "abandon_uncertain", "fence": 2, "error": "no reconcile lookup"},
    )
    report = build_report(*await read_logs(store, INCIDENT))
    assert [q.kind for q in report.open_questions] == ["abandoned_uncertain"]
    assert "abandoned as uncertain" in render(report, "html").decode()

    await s.add(
        "action_result",
        Actor.system("actions"),
        {"run_id": "run-2", "outcome": "applied", "fence": 2, "reconciled": True, "effect_digest": EFFECT},
    )
    report = build_report(*await read_logs(store, INCIDENT))
    assert report.open_questions == ()
    run = report.actions[-1].runs[0]
    assert [r.outcome for r in run.results] == ["uncertain", "abandon_uncertain", "applied"] and run.results[
        -1
    ].reconciled


async def test_a_run_without_a_result_is_an_open_question(store: SqliteLogStore) -> None:
    s = await write_story(store)
    await start_run(s, "run-3")
    report = build_report(*await read_logs(store, INCIDENT))
    assert [(q.kind, q.run_id) for q in report.open_questions] == [("no_result", "run-3")]


async def test_a_compensation_is_bound_to_the_original_effect(store: SqliteLogStore) -> None:
    s = await write_story(store)
    await s.add(
        "proposal",
        BOB,
        {
            "proposal_id": "p-2",
            "action": "redeploy",
            "risk": "R3",
            "compensates_run": "run-1",
            "preview": "redeploy r2026-09-19-4",
        },
    )
    report = build_report(*await read_logs(store, INCIDENT))
    (pending,) = report.compensations
    assert (pending.original_run, pending.status, pending.original_digest) == ("run-1", "waiting_for_approval", EFFECT)

    await s.add("approval", ALICE, {"proposal_id": "p-2", "decision": "approved", "approver": "U0ALICE"})
    await start_run(s, "run-4", compensates="run-1", proposal="p-2")
    await s.add(
        "action_result",
        Actor.system("actions"),
        {"run_id": "run-4", "outcome": "applied", "fence": 2, "effect_digest": UNDONE},
    )
    await s.add(
        "effect_compensated",
        Actor.system("actions"),
        {
            "original_run": "run-1",
            "original_digest": EFFECT,
            "compensating_run": "run-4",
            "compensating_digest": UNDONE,
        },
    )
    report = build_report(*await read_logs(store, INCIDENT))
    (done,) = report.compensations
    assert (done.original_run, done.compensating_run, done.status) == ("run-1", "run-4", "compensated")
    assert (done.original_digest, done.compensating_digest, done.original_action) == (EFFECT, UNDONE, "rollback-deploy")
    assert done.recorded_seq is not None
    md = render(report, "md").decode()
    section = md.split("## Compensations", 1)[1].split("## Open questions", 1)[0]
    assert "`run-1`" in section and "`run-4`" in section and "compensated" in section
    assert "`cdcdcdcdcdcdcdcd`" in section and "`abababababababab`" in section


async def test_a_denied_r4_proposal_shows_the_policy_reason(store: SqliteLogStore) -> None:
    s = await write_story(store)
    await s.add(
        "proposal",
        TRIAGE,
        {
            "proposal_id": "p-9",
            "action": "drop-table",
            "risk": "R4",
            "status": "denied",
            "reason": "R4 actions are never run",
        },
    )
    report = build_report(*await read_logs(store, INCIDENT))
    prop = report.actions[-1].proposal
    assert prop is not None and (prop.status, prop.reason) == ("denied", "R4 actions are never run")
    assert "Policy: R4 actions are never run" in render(report, "md").decode()


# -- rendering ---------------------------------------------------------------------------------------------------


async def test_html_is_self_contained_and_escapes_recorded_text(store: SqliteLogStore) -> None:
    s = await write_story(store)
    await s.add(
        "message",
        BOB,
        {"text": "<script>alert(1)</script> see [x](javascript:alert(1))", "permalink": "javascript:alert(1)"},
    )
    html = (await report_bytes(store, "html")).decode()
    assert html.startswith("<!DOCTYPE html>") and "<style>" in html and "@media print" in html
    assert "<script" not in html and "javascript:" not in html.replace("javascript:alert(1))", "")
    assert 'href="javascript' not in html
    assert "&lt;script&gt;" in html
    for external in ("<link", "src=", "@import", "url("):
        assert external not in html
    for section in (
        "Summary",
        "Impact",
        "Milestones",
        "Timeline",
        "Decisions",
        "Actions",
        "Compensations",
        "Open questions",
        "Open obligations and follow-ups",
        "Participants",
        "Agent turns and cost",
        "Integrity",
    ):
        assert f"<h2>{section}</h2>" in html
    md = (await report_bytes(store, "md")).decode()
    assert "\\<script\\>" in md and "\\[x\\](javascript" in md  # inert text, not a link
    assert re.search(r"(?<!\\)\]\(javascript", md) is None


async def test_a_broken_chain_is_reported(store: SqliteLogStore) -> None:
    await write_story(store)
    main, linked = await read_logs(store, INCIDENT)
    from decklog.core.store.ports import VerifyReport

    broken = ScopeLog(
        main.scope, main.entries, VerifyReport(INCIDENT, False, 40, 7, "entry 7 was altered (hash mismatch)")
    )
    report = build_report(broken, linked)
    assert not report.verified
    md = render(report, "md").decode()
    assert "DOES NOT verify" in md and "**BROKEN** at #7: entry 7 was altered" in md


async def test_a_linked_scope_that_is_gone_is_marked_not_found(store: SqliteLogStore) -> None:
    s = await write_story(store)
    await s.add("scope_linked", ALICE, {"scope": "incident/older-one", "relation": "related"})
    report = build_report(*await read_logs(store, INCIDENT))
    gone = next(x for x in report.linked_scopes if x.scope == "incident/older-one")
    assert not gone.found and [i.scope for i in report.integrity] == [INCIDENT, CHANGE]


async def test_golden_html_of_the_0312_story(store: SqliteLogStore) -> None:
    await write_story(store)
    check_golden("payments-5xx.html", await report_bytes(store, "html"))
