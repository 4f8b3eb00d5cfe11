"""Every CLI command works against either backend with the same output (DESIGN §9).

The same session of commands runs once on SQLite files (``DECKLOG_DATA_DIR``) and once on PostgreSQL
(``DECKLOG_DATABASE_URL``); the outputs must be equal once what differs by nature is masked (entry ids, times,
hashes, and where reindex wrote).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.unit.test_cli import run

MASKS = [
    (re.compile(r"\be[0-9a-f]{22}\b"), "<id>"),
    (re.compile(r"\b[0-9a-f]{64}\b"), "<hash>"),
    (re.compile(r"\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(\.\d+)?(Z|\+00:00)?"), "<time>"),
    (re.compile(r"into .*$", re.M), "into <index>"),
    (re.compile(r"\b\d\d:\d\d:\d\d\b"), "<hh:mm:ss>"),
    (re.compile(r"T\+\d+s"), "T+<n>s"),
    (re.compile(r'"offset_s": [\d.]+'), '"offset_s": <n>'),
    (re.compile(r"head `[0-9a-f]{16}`"), "head `<hash>`"),
]


def mask(text: str) -> str:
    for pattern, replacement in MASKS:
        text = pattern.sub(replacement, text)
    return text


def session(data: Path, env: dict[str, str]) -> list[tuple[str, int, str, str]]:
    """Run the operator's commands; return (command, exit code, masked stdout, masked stderr) for each."""
    outputs: list[tuple[str, int, str, str]] = []

    def do(*args: str) -> str:
        out = run(data, *args, env=env)
        outputs.append((" ".join(args), out.returncode, mask(out.stdout), mask(out.stderr)))
        return out.stdout

    scope = do("declare", "--title", "Payments 5xx elevated", "--severity", "2").splitlines()[0]
    do("declare", "--title", "Payments 5xx elevated")
    do("append", scope, "message", "--json", '{"text": "looking at the LB"}')
    do("append", scope, "observation", "--json", '{"text": "5xx at 12%", "service": "payments"}', "--ref", "2")
    do("append", scope, "message", "--json", '{"text": "again"}', "--idempotency-key", "k1")
    do("append", scope, "message", "--json", '{"text": "again"}', "--idempotency-key", "k1")
    do("append", scope, "message", "--json", "{not json")
    do("append", "incident/nope", "message", "--json", '{"text": "x"}')
    do("timeline", scope)
    do("timeline", scope, "--json")
    do("timeline", scope, "--after", "2", "--limit", "1", "--json")
    do("verify", scope)
    do("export", scope, "--format", "json")
    do("export", scope, "--format", "md")
    do("scopes")
    do("scopes", "--json")
    do("doctor")
    do("reindex")
    do("scopes")
    do("verify", "incident/nope")
    return outputs


def test_every_command_gives_the_same_output_on_sqlite_and_postgresql(tmp_path: Path, pg_url: str) -> None:
    on_sqlite = session(tmp_path / "sqlite-data", {})
    on_postgres = session(tmp_path / "pg-data", {"DECKLOG_DATABASE_URL": pg_url})
    assert [c for c, *_ in on_sqlite] == [c for c, *_ in on_postgres]
    for (command, *sqlite_out), (_, *pg_out) in zip(on_sqlite, on_postgres, strict=True):
        if command.startswith(("append incident/nope", "verify incident/nope")):
            # the same exit code and message; SQLite also names the data directory it looked in
            assert sqlite_out[0] == pg_out[0] == 1, (command, sqlite_out, pg_out)
            assert "no such scope: incident/nope" in sqlite_out[2] and "no such scope: incident/nope" in pg_out[2]
            continue
        assert sqlite_out == pg_out, command
    assert not (tmp_path / "pg-data" / "scopes").exists()  # nothing went to files on PostgreSQL
    timeline = json.loads(next(o for c, _, o, _ in on_postgres if c.endswith("--json") and "after" not in c))
    assert [e["kind"] for e in timeline] == ["declared", "message", "observation", "message"]


def test_a_bad_database_url_is_one_clear_line(tmp_path: Path) -> None:
    out = run(tmp_path / "data", "scopes", env={"DECKLOG_DATABASE_URL": "mysql://x/y"})
    assert out.returncode == 2
    assert "DECKLOG_DATABASE_URL" in out.stderr and "Traceback" not in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("url", ["postgresql://127.0.0.1:1/none"])
def test_an_unreachable_database_fails_without_a_traceback(tmp_path: Path, url: str) -> None:
    out = run(tmp_path / "data", "scopes", env={"DECKLOG_DATABASE_URL": url})
    assert out.returncode != 0
    assert "Traceback" not in out.stderr


def test_migrate_copies_a_data_dir_verifies_it_and_is_idempotent(tmp_path: Path, pg_url: str) -> None:
    data = tmp_path / "data"
    scope = run(data, "declare", "--title", "Disk full", "--severity", "1").stdout.splitlines()[0]
    assert run(data, "append", scope, "message", "--json", '{"text": "node-3 at 99%"}').returncode == 0
    other = run(data, "declare", "--title", "Disk full").stdout.splitlines()[0]
    before = {c: run(data, *c.split()).stdout for c in (f"timeline {scope} --json", "scopes --json", "doctor")}

    first = run(data, "migrate", "--to", pg_url)
    assert first.returncode == 0, first.stderr
    assert "copied 2 scopes (3 entries" in first.stdout and "verified 2 chains" in first.stdout
    again = run(data, "migrate", "--to", pg_url)
    assert again.returncode == 0, again.stderr
    assert "copied 0 scopes (0 entries" in again.stdout and "2 already there" in again.stdout

    on_pg = {"DECKLOG_DATABASE_URL": pg_url}
    elsewhere = tmp_path / "empty"
    for command, output in before.items():
        assert run(elsewhere, *command.split(), env=on_pg).stdout == output, command
    for s in (scope, other):
        verified = run(elsewhere, "verify", s, env=on_pg)
        assert verified.returncode == 0 and "hash chain intact" in verified.stdout
    hits = run(elsewhere, "append", scope, "message", "--json", '{"text": "after the move"}', env=on_pg)
    assert json.loads(hits.stdout.splitlines()[0])["seq"] == 3  # the chain goes on in the database


def test_migrate_refuses_a_bad_url_and_a_missing_data_dir(tmp_path: Path, pg_url: str) -> None:
    bad = run(tmp_path / "data", "migrate", "--to", "sqlite:///x")
    assert bad.returncode == 2 and "--to must be a postgresql://" in bad.stderr
    missing = run(tmp_path / "nothing", "migrate", "--to", pg_url)
    assert missing.returncode == 1 and "nothing to migrate" in missing.stderr


def test_verify_all_on_postgresql_compares_the_whole_index_as_on_sqlite(tmp_path: Path, pg_url: str) -> None:
    """``verify --all`` rebuilds the index from the logs and compares every routing row on both backends: a route
    to a scope that has no log, or a scope whose kind drifted, fails it on PostgreSQL just as it does on index.db."""
    import psycopg

    data = tmp_path / "data"
    scope = run(data, "declare", "--title", "Disk full", "--severity", "1").stdout.splitlines()[0]
    assert run(data, "append", scope, "message", "--json", '{"text": "node-3 at 99%"}').returncode == 0
    assert run(data, "migrate", "--to", pg_url).returncode == 0
    on_pg, elsewhere = {"DECKLOG_DATABASE_URL": pg_url}, tmp_path / "empty"
    clean = run(elsewhere, "verify", "--all", env=on_pg)
    assert clean.returncode == 0, clean.stderr
    assert "1 of 1 scopes verify; the index agrees with the scopes" in clean.stdout

    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("INSERT INTO routes (key, scope) VALUES ('slack:C0STRAY:1700000000.000100', 'incident/gone')")
        conn.execute("UPDATE scopes SET kind = 'change' WHERE id = %s", (scope,))
    drifted = run(elsewhere, "verify", "--all", env=on_pg)
    assert drifted.returncode != 0
    assert f"index: {scope}: kind is 'change', the log says 'incident'" in drifted.stderr
    assert "index: route slack:C0STRAY:1700000000.000100 → incident/gone is in no log" in drifted.stderr
    assert "verify --all: 2 problems; 1 of 1 scopes verify" in drifted.stderr
