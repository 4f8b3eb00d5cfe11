"""The coordination experiment (``python -m research.experiment``): the --quick slice end to end, the judge's
mutation tests, fences off, bad input, and the hint the product's CLI gives for the command that left it."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from decklog.bot.runtime import Runtime
from decklog.bot.settings import load_settings
from decklog.core.errors import InvalidInput
from decklog.core.outbox.dispatcher import Dispatcher
from research.experiment import itbench, policy, scenario
from research.experiment.one import run_one
from research.experiment.run import Spec

ITBENCH = Path(__file__).resolve().parents[2] / "shared" / "scenarios" / "itbench"
ITBENCH = ITBENCH if ITBENCH.is_dir() else Path("/work/shared/scenarios/itbench")


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
            return [{"kind": e.kind, **e.payload.model_dump()} for s in r["scopes"] for e in await rt.store.read(s)]
        finally:
            await rt.close()

    return asyncio.run(read())


def test_builtin_scenarios_cover_the_issue() -> None:
    ids = {s.id for s in scenario.builtin()}
    assert len(ids) >= 8
    assert not _by_id("do-not-act").act


@pytest.mark.parametrize("arm", ["central", "rules", "nm"])
def test_a_clean_run_is_judged_correct(tmp_path: Path, arm: str) -> None:
    r = _run(tmp_path, "bad-deploy", arm)
    assert r["correct"] is True, r["checks"]
    assert r["duplicate_effects"] == 0 and r["tokens"] > 0 and r["units"] >= 3


@pytest.mark.parametrize("arm", ["central", "rules", "nm"])
def test_every_arm_turns_through_the_product_runtime_and_tools(tmp_path: Path, arm: str) -> None:
    """Each step is a TurnRuntime turn: one agent_turn per turn (the cold arms read the product's views), the
    findings name their turn, and the proposal went through propose_action to the desk."""
    r = _run(tmp_path, "bad-deploy", arm)
    entries = _entries(r)
    turns = [e for e in entries if e["kind"] == "agent_turn"]
    assert turns and r["model_calls"] == len(turns)
    calls = [c for t in turns for c in t["tool_calls"]]
    assert any(c["tool"] == "propose_action" and c["status"] == "success" for c in calls)
    assert any(c["tool"] == "record_hypothesis" and c["status"] == "success" for c in calls)
    views = {t["view"] for t in turns}
    if arm == "central":
        assert views <= {"", "action"}  # its transcript; the action view only when it re-checks before proposing
    else:
        assert all("triage" in v and "joiner" in v for v in views)
    findings = [e for e in entries if e["kind"] in ("hypothesis", "obligation_opened")]
    assert findings and all(e["turn"] > 0 for e in findings)
    assert [e["kind"] for e in entries].count("proposal") >= 2  # the denied restart, then the rollback


@pytest.mark.parametrize(
    ("mutation", "check"),
    [
        ("drop_obligations", "obligations"),
        ("repropose_denied", "effects"),
        ("no_claim", "claims"),
        ("skip_conditions", "obligations"),
    ],
)
def test_the_judge_flags_each_broken_policy(tmp_path: Path, mutation: str, check: str) -> None:
    r = _run(tmp_path, "bad-deploy", mutation=mutation)
    assert r["correct"] is False
    assert r["checks"][check] is False


def test_fences_off_produces_duplicate_effects_under_lease_expiry(tmp_path: Path) -> None:
    on = _run(tmp_path / "on", "bad-deploy", fault="lease_expiry")
    off = _run(tmp_path / "off", "bad-deploy", fault="lease_expiry", fences=False)
    assert on["duplicate_effects"] == 0 and on["correct"] is True
    assert off["duplicate_effects"] >= 1 and off["correct"] is False


def test_sibling_incidents_see_the_mitigation_applied_next_door_and_do_not_run_it_again(tmp_path: Path) -> None:
    """The storm: one DNS change breaks four services, and each gets its own incident. A fresh turn reads
    decklog's views of its own incident; their ``related_actions`` section (incidents declared within the hour)
    shows the revert applied in the first one, so each sibling records a finding citing that run instead of running
    it again — as the warm transcript (which reads every incident's results) does."""
    rules = _run(tmp_path / "rules", "storm", "rules")
    assert rules["correct"] is True and rules["duplicate_effects"] == 0 and len(rules["scopes"]) == 4
    entries = _entries(rules)
    applied = [e for e in entries if e["kind"] == "action_result" and e["outcome"] == "applied"]
    assert len(applied) == 1
    findings = [e["text"] for e in entries if e["kind"] == "suggestion" and e["text"].startswith("already applied:")]
    assert len(findings) == 3  # one per sibling, once each
    assert all(f.startswith("already applied: revert_config(key=ndots,service=dns) in incident/") for f in findings)
    assert _run(tmp_path / "central", "storm", "central")["correct"] is True


def test_a_view_without_the_related_section_runs_the_mitigation_again() -> None:
    """The scripted policy acts only on what its view shows: the same lines without the RELATED line (the section
    cut by the budget) open the fix again; with it, a finding that cites the run."""
    lines = [
        "TOOLS\tnames=dns_logs",
        "CONDITIONS\tlist=alert still firing",
        "EVIDENCE\tseq=4\ttool=dns_logs\tkind=logs\tsuspect=dns\thold=0\tkey=revert_config(key=ndots,service=dns)"
        '\tfix={"action": "revert_config", "params": {"key": "ndots", "service": "dns"}}\ttext=NXDOMAIN',
        "HYPOTHESIS\tentity=dns",
        "ALERT\tfp=api-errors\tstatus=firing",
    ]
    related = (
        "RELATED\tkey=revert_config(key=ndots,service=dns)\toutcome=applied\tscope=incident/web\t"
        "at=2026-09-19T03:12:30Z\tref=incident/web#15\trelation=declared within 1 h"
    )
    cut = policy.decide("\n".join(lines))
    assert cut["open"]["action"] == "revert_config" and "finding" not in cut
    shown = policy.decide("\n".join([*lines, related]))
    assert "open" not in shown and shown["finding"].startswith("already applied: revert_config(key=ndots,")
    assert "incident/web#15" in shown["finding"]
    noted = policy.decide("\n".join([*lines, related, "NOTED\tkey=revert_config(key=ndots,service=dns)"]))
    assert noted == {}  # said once; the alert still fires: wait for it to clear
    obligation = 'OBLIGATION\tid=ob-1\tstatus=open\taction=revert_config\tparams={"key": "ndots", "service": "dns"}'
    cancelled = policy.decide("\n".join([*lines, related, obligation + "\tconditions=alert still firing"]))
    assert cancelled["cancel"]["obligation_id"] == "ob-1" and "incident/web#15" in cancelled["cancel"]["reason"]


def _chatty_deploy() -> scenario.Scenario:
    """bad-deploy, where the alert never clears after the rollback and people keep talking: two dozen messages push
    the denial of the restart and the applied rollback out of the joiner view's timeline."""
    data = _by_id("bad-deploy").model_dump()
    data["id"] = "chatty-deploy"
    chatter = [
        {"at": 200 + 10 * i, "type": "message", "text": f"still seeing errors on checkout ({i})"} for i in range(24)
    ]
    data["timeline"] = [*data["timeline"], *chatter]
    data["world"]["resolves"] = []
    return scenario.parse_scenario(data, "test:chatty-deploy")


def test_a_view_that_lost_the_denial_re_proposes_the_denied_action(tmp_path: Path) -> None:
    chatty = _chatty_deploy()
    cold = asyncio.run(run_one(Spec(chatty, "rules", "none", 1), tmp_path / "rules", "scripted"))
    assert cold["reproposed_denied"] >= 1 and cold["checks"]["effects"] is False
    warm = asyncio.run(run_one(Spec(chatty, "central", "none", 1), tmp_path / "central", "scripted"))
    assert warm["reproposed_denied"] == 0 and warm["checks"]["effects"] is True


@pytest.mark.parametrize("arm", ["central", "rules", "nm"])
def test_a_5xx_before_applying_is_reconciled_then_run_once(tmp_path: Path, arm: str) -> None:
    r = _run(tmp_path, "bad-deploy", arm, "executor_timeout", seed=1)  # seed 1: the 5xx variant
    assert r["correct"] is True, r["checks"]
    results = [e for e in _entries(r) if e["kind"] == "action_result"]
    assert [e["outcome"] for e in results] == ["uncertain", "not_applied", "applied"]
    assert results[1]["reconciled"] is True


def test_a_lost_response_is_reconciled_not_retried(tmp_path: Path) -> None:
    r = _run(tmp_path, "bad-deploy", "rules", "executor_timeout", seed=2)  # seed 2: applied, the response lost
    assert r["correct"] is True and r["duplicate_effects"] == 0
    outcomes = [e["outcome"] for e in _entries(r) if e["kind"] == "action_result"]
    assert outcomes == ["uncertain", "applied"]


@pytest.mark.parametrize("arm", ["rules", "nm"])
def test_dup_delivery_records_each_input_and_approval_once(tmp_path: Path, arm: str) -> None:
    """A webhook twice, a Slack retry of the same event, a double-clicked Approve (and, for nm, one item to two
    workers): one entry each, one effect."""
    r = _run(tmp_path, "bad-deploy", arm, "dup_delivery")
    assert r["correct"] is True and r["duplicate_effects"] == 0
    entries = _entries(r)
    assert len([e for e in entries if e["kind"] == "message"]) == 1
    fired = [e for e in entries if e["kind"] == "observation" and e.get("alert_status") == "firing"]
    assert len(fired) == 1  # POSTed twice to /alerts/generic with one event_id
    approvals = [e["proposal_id"] for e in entries if e["kind"] == "approval"]
    assert approvals and len(approvals) == len(set(approvals))


def test_table_reports_the_break_even_with_and_without_faults() -> None:
    from research.experiment.table import table

    rows = [
        {
            "arm": a,
            "scenario": "s",
            "fault": f,
            "seed": 1,
            "correct": True,
            "duplicate_effects": 0,
            "tokens": 10,
            "context_bytes": 1,
            "reconstruction_bytes": 1,
            "units": 2,
            "usd": usd,
            "entries": n,
        }
        for a, f, n, usd in [
            ("central", "none", 10, 0.2),
            ("rules", "none", 10, 0.1),
            ("central", "lease_expiry", 40, 0.1),
            ("rules", "lease_expiry", 40, 0.3),
        ]
    ]
    text = table(rows)
    assert "| rules | none | 1 | 0/1 |" in text and "| rules | with faults | 1 | 1/1 |" in text


def test_scripted_http_runs_the_real_claude_reasoner_loop_and_replays_from_a_recording(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each decision is a ClaudeReasoner turn over the SDK to the loopback fake: tool_use (get_state + suggest),
    then end_turn. Same decisions as in process; a recording replays to the same log."""
    spec = Spec(_by_id("bad-deploy"), "rules", "kill_after_claim", 1)
    inproc = asyncio.run(run_one(spec, tmp_path / "a", "scripted"))
    monkeypatch.setenv("DECKLOG_EXPERIMENT_RECORD", str(tmp_path / "rec"))
    http = asyncio.run(run_one(spec, tmp_path / "b", "scripted-http"))
    monkeypatch.delenv("DECKLOG_EXPERIMENT_RECORD")
    rows = [json.loads(line) for line in (tmp_path / "rec" / "exchanges.jsonl").read_text().splitlines()]
    stops = [r["reply"]["stop_reason"] for r in rows]
    assert stops == ["tool_use", "end_turn"] * http["model_calls"]
    assert http["correct"] is True and http["entries"] == inproc["entries"]
    assert http["model_calls"] == inproc["model_calls"] and http["cache_read_input_tokens"] > 0
    replayed = asyncio.run(run_one(spec, tmp_path / "c", f"recorded:{tmp_path / 'rec'}"))
    assert replayed["entries"] == http["entries"] and replayed["tokens"] == http["tokens"]


def test_itbench_import_converts_every_folder() -> None:
    scns = itbench.import_dir(ITBENCH)
    assert len(scns) == len([p for p in ITBENCH.iterdir() if p.is_dir()])
    for s in scns:
        assert s.root_cause.entity and s.tools and s.timeline


def test_itbench_import_names_what_is_missing(tmp_path: Path) -> None:
    (tmp_path / "scenario_x").mkdir()
    (tmp_path / "scenario_x" / "groundtruth.yaml").write_text("spec:\n  alerts: []\n  entities: []\n")
    with pytest.raises(InvalidInput, match="no alerts"):
        itbench.import_dir(tmp_path)


ROOT = Path(__file__).resolve().parents[2]


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "research.experiment", *args], capture_output=True, text=True, timeout=600, cwd=ROOT
    )


def test_quick_writes_results_and_table(tmp_path: Path) -> None:
    out = tmp_path / "out"
    p = _cli("--quick", "--out", str(out))
    assert p.returncode == 0, p.stderr
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert len(rows) == 36
    for r in rows:
        assert {
            "arm",
            "scenario",
            "fault",
            "seed",
            "correct",
            "duplicate_effects",
            "tokens",
            "context_bytes",
            "units",
        } <= r.keys()
        assert Path(r["data_dir"], "scopes").is_dir()
    main, _, rest = (out / "table.md").read_text().partition("\n\n")
    assert len([ln for ln in main.splitlines()[2:] if ln.startswith("| ")]) == 3 * 4  # one row per arm × fault
    assert "Break-even" in rest


def test_bad_input_is_one_line_and_non_zero(tmp_path: Path) -> None:
    for args in (
        ["--arms", "bogus"],
        ["--budget", "0"],
        ["--model", "claude"],
        ["--model", "recorded:/nonexistent"],
        ["--import-itbench", str(tmp_path)],
    ):
        p = _cli(*args, "--out", str(tmp_path / "o"))
        assert p.returncode != 0
        assert len(p.stderr.strip().splitlines()) == 1 and "Traceback" not in p.stderr
        assert not (tmp_path / "o").exists()


def test_the_product_cli_points_at_the_research_entry_point(tmp_path: Path) -> None:
    """``decklog experiment`` left the product: one line naming ``python -m research.experiment``, exit 2, and
    nothing run or written."""
    p = subprocess.run(
        [sys.executable, "-m", "decklog.bot.cli", "experiment", "--quick", "--out", str(tmp_path / "o")],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert p.returncode == 2
    assert len(p.stderr.strip().splitlines()) == 1 and "Traceback" not in p.stderr
    assert "python -m research.experiment" in p.stderr
    assert not (tmp_path / "o").exists()


def test_a_recording_replays_when_concurrent_senders_number_their_entries_differently(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After one commit several senders append (a change link, the Slack sender's records) in whatever order their
    drains run; on a loaded machine that order changes, and so do the seqs in the next view. The recording's keys
    mask the seqs, so a replay whose change links land later still finds every exchange (it once found none, and
    stopped after 8 entries)."""
    spec = Spec(_by_id("bad-deploy"), "rules", "kill_after_claim", 1)
    monkeypatch.setenv("DECKLOG_EXPERIMENT_RECORD", str(tmp_path / "rec"))
    http = asyncio.run(run_one(spec, tmp_path / "b", "scripted-http"))
    monkeypatch.delenv("DECKLOG_EXPERIMENT_RECORD")
    drain = Dispatcher._drain_local

    async def late_links(self: Dispatcher, scope: str, topic: str) -> None:
        if topic == "changes":
            await asyncio.sleep(0.05)  # the change link lands after the other senders' entries
        await drain(self, scope, topic)

    monkeypatch.setattr(Dispatcher, "_drain_local", late_links)
    replayed = asyncio.run(run_one(spec, tmp_path / "c", f"recorded:{tmp_path / 'rec'}"))
    assert replayed["entries"] == http["entries"] and replayed["tokens"] == http["tokens"] > 0
