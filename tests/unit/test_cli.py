"""The ``decklog`` CLI as operators use it: a subprocess, from another working directory, only env + options."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def run(
    data: Path, *args: str, cwd: Path | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("DECKLOG_", "SLACK_"))}
    base.update({"DECKLOG_DATA_DIR": str(data), "DECKLOG_ACTOR": "oncall"})
    base.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "decklog.bot.cli", *args],
        cwd=str(cwd or data.parent),
        env={**base, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.fixture
def data(tmp_path: Path) -> Path:
    return tmp_path / "data"


def test_declare_prints_the_scope_id_first_and_append_timeline_scopes_verify(data: Path, tmp_path: Path) -> None:
    elsewhere = tmp_path / "somewhere" / "else"
    elsewhere.mkdir(parents=True)
    out = run(data, "declare", "--title", "Payments 5xx elevated", "--severity", "2", cwd=elsewhere)
    assert out.returncode == 0, out.stderr
    scope = out.stdout.splitlines()[0]
    assert scope == "incident/payments-5xx-elevated"
    again = run(data, "declare", "--title", "Payments 5xx elevated")
    assert again.stdout.splitlines()[0] == "incident/payments-5xx-elevated-2"  # ids are never reused

    appended = run(data, "append", scope, "message", "--json", '{"text": "looking at the LB"}')
    assert appended.returncode == 0, appended.stderr
    assert json.loads(appended.stdout.splitlines()[0])["seq"] == 2
    run(data, "append", scope, "observation", "--json", '{"text": "5xx at 12%", "service": "payments"}', "--ref", "2")

    timeline = run(data, "timeline", scope, "--json")
    entries = json.loads(timeline.stdout)
    assert [e["kind"] for e in entries] == ["declared", "message", "observation"]
    first = entries[0]
    assert {"seq", "id", "kind", "at", "actor", "text", "payload", "refs"} <= set(first)
    assert first["actor"] == {"type": "human", "id": "cli:oncall", "name": "oncall"}
    assert first["at"].endswith("Z") and "T" in first["at"]
    assert entries[1]["payload"]["text"] == "looking at the LB"
    assert entries[2]["refs"] == [2]
    human = run(data, "timeline", scope)
    assert "oncall: looking at the LB" in human.stdout

    scopes = json.loads(run(data, "scopes", "--json").stdout)
    assert {s["id"] for s in scopes} == {scope, "incident/payments-5xx-elevated-2"}
    assert next(s for s in scopes if s["id"] == scope)["severity"] == 2

    verified = run(data, "verify", scope)
    assert verified.returncode == 0 and verified.stdout.startswith("ok:")


def test_explicit_scope_and_idempotent_append(data: Path) -> None:
    out = run(data, "declare", "--title", "Checkout latency", "--scope", "incident/checkout-2026-11-29")
    assert out.stdout.splitlines()[0] == "incident/checkout-2026-11-29"
    args = (
        "append",
        "incident/checkout-2026-11-29",
        "decision",
        "--json",
        '{"text": "roll back"}',
        "--idempotency-key",
        "k1",
    )
    first, second = run(data, *args), run(data, *args)
    assert json.loads(first.stdout)["seq"] == json.loads(second.stdout)["seq"] == 2
    assert "duplicate" in second.stderr
    assert len(json.loads(run(data, "timeline", "incident/checkout-2026-11-29", "--json").stdout)) == 2


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (("declare",), "--title"),
        (("declare", "--title", "x", "--severity", "7"), "severity must be 1-4"),
        (("declare", "--title", "   "), "must not be empty"),
        (("declare", "--title", "x", "--scope", "nonsense"), "not a scope id"),
        (("append", "incident/nope", "message", "--json", '{"text": "x"}'), "no such scope"),
        (("append", "incident/x", "message", "--json", "{not json"), "not valid JSON"),
        (("append", "incident/x", "message", "--json", '{"text": 1}'), "payload.text"),
        (("append", "incident/x", "messag", "--json", "{}"), "unknown entry kind"),
        (("append", "incident/x", "message", "--json", '{"text": "x", "extra": 1}'), "payload.extra"),
        (("timeline", "nonsense"), "not a scope id"),
        (("timeline", "incident/absent"), "no such scope"),
        (("verify", "incident/absent"), "no such scope"),
        (("export", "incident/absent", "--format", "pdf"), "invalid choice"),
        (("frobnicate",), "unknown command 'frobnicate'"),
    ],
)
def test_bad_input_is_one_clear_line_a_nonzero_exit_and_nothing_written(
    data: Path, args: tuple[str, ...], needle: str
) -> None:
    out = run(data, *args)
    assert out.returncode != 0
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr
    assert needle in lines[0] and "Traceback" not in out.stderr
    assert not (data / "scopes").exists() or not list((data / "scopes").glob("*.db"))


def test_bad_input_loses_nothing_already_accepted(data: Path) -> None:
    scope = run(data, "declare", "--title", "Keep me").stdout.splitlines()[0]
    run(data, "append", scope, "message", "--json", '{"text": "first"}')
    bad = run(data, "append", scope, "message", "--json", '{"text": ["no"]}')
    assert bad.returncode == 2
    entries = json.loads(run(data, "timeline", scope, "--json").stdout)
    assert [e["payload"].get("text") for e in entries[1:]] == ["first"]
    assert run(data, "verify", scope).returncode == 0


def test_bad_environment_names_the_variable(data: Path) -> None:
    out = run(data, "scopes", env={"DECKLOG_PORT": "eighty"})
    assert out.returncode == 2 and "DECKLOG_PORT" in out.stderr
    serve = run(data, "serve", env={"SLACK_BOT_TOKEN": "xoxb-1"})
    assert serve.returncode == 2 and "SLACK_SIGNING_SECRET" in serve.stderr
    sock = run(data, "serve", "--socket-mode", env={"SLACK_BOT_TOKEN": "xoxb-1"})
    assert sock.returncode == 2 and "SLACK_APP_TOKEN" in sock.stderr
    cfg = run(data, "scopes", env={"DECKLOG_CONFIG": str(data.parent / "missing.toml")})
    assert cfg.returncode == 2 and "DECKLOG_CONFIG" in cfg.stderr


def test_verify_fails_naming_the_seq_and_reindex_rebuilds_the_index(data: Path) -> None:
    scope = run(data, "declare", "--title", "Tamper").stdout.splitlines()[0]
    for i in range(3):
        run(data, "append", scope, "message", "--json", json.dumps({"text": f"m{i}"}))
    (data / "index.db").unlink()
    for suffix in ("-wal", "-shm"):
        (data / f"index.db{suffix}").unlink(missing_ok=True)
    rebuilt = run(data, "reindex")
    assert rebuilt.returncode == 0 and "1 scopes (4 entries)" in rebuilt.stdout
    assert json.loads(run(data, "scopes", "--json").stdout)[0]["id"] == scope
    db = sqlite3.connect(data / "scopes" / "incident~tamper.db")
    db.execute("update entries set payload = ? where seq = 3", ('{"text":"m9"}',))
    db.commit()
    db.close()
    out = run(data, "verify", scope)
    assert out.returncode == 1 and "seq 3" in out.stderr


def test_doctor_lists_pending_rows_per_sender(data: Path) -> None:
    scope = run(data, "declare", "--title", "Pending").stdout.splitlines()[0]
    out = run(data, "doctor")
    assert out.returncode == 0
    assert f"{scope}  slack    pending 1" in out.stdout  # nothing delivers to Slack until `decklog serve` runs
    assert "index" not in out.stdout.split("scopes;")[0]  # the CLI keeps the index current itself


def test_a_scope_on_disk_but_missing_from_the_index_is_never_reused(data: Path) -> None:
    first = run(data, "declare", "--title", "Disk only").stdout.splitlines()[0]
    (data / "index.db").unlink()
    for suffix in ("-wal", "-shm"):
        (data / f"index.db{suffix}").unlink(missing_ok=True)
    second = run(data, "declare", "--title", "Disk only").stdout.splitlines()[0]
    assert (first, second) == ("incident/disk-only", "incident/disk-only-2")


def test_verify_all_names_each_index_disagreement_and_each_bad_scope(data: Path) -> None:
    scope = run(data, "declare", "--title", "Payments 5xx", "--severity", "2").stdout.splitlines()[0]
    other = run(data, "declare", "--title", "Checkout").stdout.splitlines()[0]
    run(data, "append", scope, "observation", "--json", '{"text": "5xx", "service": "payments", "fingerprint": "fp1"}')
    ok = run(data, "verify", "--all")
    assert ok.returncode == 0 and ok.stdout.startswith("ok: 2 of 2 scopes verify"), ok.stderr
    with sqlite3.connect(data / "index.db") as db:
        db.execute("UPDATE scopes SET title = 'Renamed' WHERE id = ?", (scope,))
        db.execute("DELETE FROM fingerprints")
        db.execute("INSERT INTO routes (key, scope) VALUES ('slack:C9', ?)", (other,))
    db.close()
    with sqlite3.connect(data / "scopes" / "incident~checkout.db") as raw:
        raw.execute("UPDATE entries SET payload = replace(payload, 'Checkout', 'Forged') WHERE seq = 1")
    raw.close()
    out = run(data, "verify", "--all")
    lines = out.stderr.strip().splitlines()
    assert out.returncode == 1, out.stderr
    assert any(f"{scope}: title is 'Renamed', the log says 'Payments 5xx'" in line for line in lines), lines
    assert any("fingerprint fp1/" in line and "missing" in line for line in lines), lines
    assert any("route slack:C9" in line and "in no log" in line for line in lines), lines
    assert any(line.startswith(f"decklog: {other}: seq 1:") for line in lines), lines
    assert "problems" in lines[-1] and "Traceback" not in out.stderr


def test_verify_usage_and_a_keyed_scope_without_its_key(data: Path) -> None:
    scope = run(data, "declare", "--title", "Keyed", env={"DECKLOG_LOG_KEY": "s3cret"}).stdout.splitlines()[0]
    keyed = run(data, "verify", scope, env={"DECKLOG_LOG_KEY": "s3cret"})
    assert keyed.returncode == 0 and "keyed hash chain" in keyed.stdout, keyed.stderr
    bare = run(data, "verify", scope)
    assert bare.returncode == 1 and "DECKLOG_LOG_KEY" in bare.stderr
    refused = run(data, "append", scope, "message", "--json", '{"text": "x"}')
    assert refused.returncode == 1 and "DECKLOG_LOG_KEY" in refused.stderr
    for args in (("verify",), ("verify", scope, "--all")):
        usage = run(data, *args)
        assert usage.returncode == 2 and "SCOPE, or --all" in usage.stderr


def test_scopes_never_cuts_its_list_without_saying_so(data: Path) -> None:
    made = [run(data, "declare", "--title", f"Old incident {i}").stdout.splitlines()[0] for i in range(3)]
    cut = run(data, "scopes", "--json", "--limit", "2")
    assert cut.returncode == 0, cut.stderr
    assert len(json.loads(cut.stdout)) == 2  # stdout stays one JSON array
    assert "newest 2" in cut.stderr and "--all" in cut.stderr
    every = run(data, "scopes", "--json", "--all")
    assert {s["id"] for s in json.loads(every.stdout)} == set(made) and every.stderr == ""
    exact = run(data, "scopes", "--limit", "3")
    assert len(exact.stdout.strip().splitlines()) == 3 and exact.stderr == ""
    bad = run(data, "scopes", "--limit", "0")
    assert bad.returncode == 2 and "--limit" in bad.stderr
