"""Replay as a regression test, on a real incident: the 03:12 story (``decklog demo``) opens an incident from an
Alertmanager alert, posts in its Slack thread on the local fake Slack, and runs the rollback alice approved with
a click. Replaying it with the same reasoner and the timing it ran with reproduces every agent decision: the
incident's own rollback is no related incident's, and the recorded approval and run answer the replay's proposal."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCOPE = "incident/payments-5xx"
#: The demo's own turn timing (bot/demo/entry.py: first turn and debounce 0.3 s).
DEMO_DELAYS = {"DECKLOG_FIRST_TURN_DELAY": "0.3", "DECKLOG_TURN_DEBOUNCE": "0.3"}


def _decklog(data: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("DECKLOG_", "SLACK_", "ANTHROPIC_"))}
    base.update({"PYTHONPATH": str(ROOT), "DECKLOG_DATA_DIR": str(data), **(env or {})})
    return subprocess.run(
        [sys.executable, "-m", "decklog.bot.cli", *args],
        env=base,
        cwd=data.parent,
        capture_output=True,
        text=True,
        timeout=300,
    )


def _timeline(data: Path, scope: str) -> list[dict[str, Any]]:
    out = _decklog(data, "timeline", scope, "--json")
    assert out.returncode == 0, out.stderr
    entries: list[dict[str, Any]] = json.loads(out.stdout)
    return entries


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    data = tmp_path_factory.mktemp("demo") / "data"
    out = _decklog(data, "demo", "--data-dir", str(data))
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    source = _timeline(data, SCOPE)
    kinds = [e["kind"] for e in source]
    assert "thread_linked" in kinds and "approval" in kinds  # a Slack thread, a person's click
    assert any(e["kind"] == "action_result" and e["payload"]["outcome"] == "applied" for e in source)
    return data


def test_replaying_with_the_recorded_timing_reproduces_every_decision(demo: Path) -> None:
    out = _decklog(demo, "replay", SCOPE, "--fail-on-diff", env=DEMO_DELAYS)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "no difference in the agents' decisions" in out.stdout
    assert "6 agent decisions originally, 6 in the replay, 6 of the original reproduced" in out.stdout
    fork = _timeline(demo, out.stdout.splitlines()[0])
    # The replay proposed the rollback itself (no related incident had run it: the source is not one) ...
    mine = [e for e in fork if e["kind"] == "proposal" and e["actor"]["type"] == "agent"]
    assert len(mine) == 1
    pid = mine[0]["payload"]["proposal_id"]
    # ... and alice's recorded approval and the runner's recorded run answer it under its new ids.
    approval = next(e for e in fork if e["kind"] == "approval")
    assert approval["payload"]["proposal_id"] == pid and approval["actor"]["id"] == "U0ALICE"
    started = next(e for e in fork if e["kind"] == "action_started")
    assert started["payload"]["proposal_id"] == pid
    assert started["payload"]["obligation_id"] == mine[0]["payload"]["obligation_id"]
    source_pid = next(e for e in _timeline(demo, SCOPE) if e["kind"] == "proposal")["payload"]["proposal_id"]
    assert source_pid != pid and all(source_pid not in json.dumps(e["payload"]) for e in fork)
    assert any(e["kind"] == "verification" and e["actor"]["type"] == "agent" for e in fork)
    assert _decklog(demo, "verify", out.stdout.splitlines()[0]).returncode == 0


def test_replaying_with_other_timing_shows_what_changed(demo: Path) -> None:
    """At the default delays (the first turn a minute after the alert) the recorded incident resolved three
    seconds in: no turn ran while it was open, so the replay makes none of the decisions, and says so."""
    out = _decklog(demo, "replay", SCOPE, "--fail-on-diff")
    assert out.returncode == 1, out.stdout + out.stderr
    assert "6 agent decisions originally, 0 in the replay, 0 of the original reproduced" in out.stdout
    assert "(4 skipped: answers to decisions the replay did not make)" in out.stdout
    assert "- proposal | decklog rules proposed rollback_deploy" in out.stdout
