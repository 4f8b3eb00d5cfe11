"""`decklog demo` tells the 03:12 story end to end and exits 0 only if every step happened."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def decklog(*args: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "decklog.bot.cli", *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=300
    )


@pytest.mark.slow
def test_demo_plays_the_whole_story_and_leaves_an_inspectable_data_dir(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DECKLOG_", "SLACK_", "ANTHROPIC_"))}
    env.update({"PYTHONPATH": str(ROOT), "TMPDIR": str(tmp_path)})
    out = decklog("demo", env=env, cwd=tmp_path)  # no --data-dir: a new temporary directory, kept and printed
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    text = out.stdout
    for step in (
        "change linked",
        "investigation turn",
        "proposal parked",
        "approved rollback ran",
        "verified",
        "resolved",
        "report exported",
    ):
        assert step in text
    assert (
        "#alerts, as a person reads it" in text
        and "Payments 5xx" in text
        and "[Approve] [Deny]" not in text.split("every step")[1]
    )
    data = Path(re.search(r"data directory \(kept\): (\S+)", text).group(1))  # type: ignore[union-attr]
    assert data.is_relative_to(tmp_path) and (data / "scopes" / "incident~payments-5xx.db").exists()
    report = Path(re.search(r"report: (\S+)", text).group(1))  # type: ignore[union-attr]
    assert report.read_text().startswith("#")

    env["DECKLOG_DATA_DIR"] = str(data)
    assert decklog("verify", "incident/payments-5xx", env=env, cwd=tmp_path).returncode == 0
    assert decklog("verify", "change/r2026-09-19-4", env=env, cwd=tmp_path).returncode == 0
    timeline = json.loads(decklog("timeline", "incident/payments-5xx", "--json", env=env, cwd=tmp_path).stdout)
    kinds = [e["kind"] for e in timeline]
    for kind in (
        "declared",
        "scope_linked",
        "hypothesis",
        "obligation_opened",
        "proposal",
        "approval",
        "action_started",
        "action_result",
        "verification",
        "status_changed",
        "report_exported",
    ):
        assert kind in kinds, kind
    started = next(e for e in timeline if e["kind"] == "action_started")["payload"]
    assert started["fence"] >= 1 and started["approvers"] == ["U0ALICE"]
    first = decklog("export", "incident/payments-5xx", "--format", "json", env=env, cwd=tmp_path)
    second = decklog("export", "incident/payments-5xx", "--format", "json", env=env, cwd=tmp_path)
    assert first.returncode == 0 and first.stdout == second.stdout
    assert json.loads(first.stdout)


def test_demo_refuses_a_data_dir_that_already_holds_a_demo(tmp_path: Path) -> None:
    (tmp_path / "scopes").mkdir()
    (tmp_path / "scopes" / "incident~payments-5xx.db").write_bytes(b"")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DECKLOG_", "SLACK_"))}
    env["PYTHONPATH"] = str(ROOT)
    out = decklog("demo", "--data-dir", str(tmp_path), env=env, cwd=tmp_path)
    assert out.returncode == 1 and "already holds a demo" in out.stderr
