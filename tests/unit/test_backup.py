"""``decklog backup`` / ``decklog restore``: an online copy under concurrent appends, verified, restorable.

The live case runs appenders on several scopes while the backup runs on a worker thread: every entry
acknowledged before the backup started must be in it, byte for byte (same id, same hash). Bad input goes through
the real CLI: one line on stderr, a non-zero exit, nothing written.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
from contextlib import closing
from pathlib import Path

import pytest

from decklog.core.entries import Actor, NewEntry
from decklog.core.errors import Conflict, InvalidInput, NotFound, StorageError
from decklog.core.store.chain import ChainKey
from decklog.core.store.sqlite.backup import backup, restore
from decklog.core.store.sqlite.log_store import SqliteLogStore
from decklog.core.store.sqlite.readonly import verify_scope_file
from tests.unit.test_cli import run

ALICE = Actor.human("U0ALICE", "alice")
SCOPES = [f"incident/live-{n}" for n in range(4)]


async def _declare_all(store: SqliteLogStore) -> None:
    for scope in SCOPES:
        await store.append(scope, [NewEntry.make("declared", ALICE, {"title": scope})], create=True)


@pytest.mark.parametrize("log_key", [None, "a backup key"])
async def test_a_backup_under_concurrent_appends_holds_everything_acknowledged_before_it(
    tmp_path: Path, log_key: str | None
) -> None:
    data, dest, restored = tmp_path / "data", tmp_path / "backup", tmp_path / "restored"
    key = ChainKey.of(log_key)
    store = SqliteLogStore(data, topics=("index", "slack"), log_key=log_key)
    acked: dict[str, list[tuple[int, str, str]]] = {s: [] for s in SCOPES}
    stop = asyncio.Event()

    async def appender(scope: str) -> None:
        n = 0
        while not stop.is_set():
            n += 1
            result = await store.append(scope, [NewEntry.make("message", ALICE, {"text": f"{scope} {n}"})])
            acked[scope].extend((e.seq, e.id, e.hash) for e in result.entries)

    try:
        await _declare_all(store)
        tasks = [asyncio.create_task(appender(s)) for s in SCOPES]
        while min(len(v) for v in acked.values()) < 20:  # the appenders are well under way
            await asyncio.sleep(0.01)
        before = {s: list(v) for s, v in acked.items()}  # acknowledged before the backup started
        manifest = await asyncio.to_thread(backup, data, dest, key=key, version="test")
        during = min(len(v) for v in acked.values()) - min(len(v) for v in before.values())
        stop.set()
        await asyncio.gather(*tasks)
    finally:
        await store.close()
    assert during > 0, "no append ran while the backup did: the test proved nothing"
    by_scope = {f["scope"]: f for f in manifest["files"] if "scope" in f}
    assert set(by_scope) == set(SCOPES)
    assert all(f["keyed"] is (log_key is not None) for f in by_scope.values())
    restore(dest, restored, key=key)
    for scope in SCOPES:
        path = restored / by_scope[scope]["path"]
        report = verify_scope_file(path, scope, key=key)
        assert report.ok and report.entries == by_scope[scope]["entries"], report
        with closing(sqlite3.connect(path)) as raw:
            stored = {r[0]: (r[0], r[1], r[2]) for r in raw.execute("SELECT seq, id, hash FROM entries")}
        missing = [x for x in before[scope] if stored.get(x[0]) != x]
        assert not missing, f"{scope}: acknowledged before the backup, not in it: {missing[:3]}"
    assert json.loads((dest / "manifest.json").read_text()) == manifest


async def test_backup_and_restore_refuse_bad_targets_and_write_nothing(tmp_path: Path) -> None:
    data, dest = tmp_path / "data", tmp_path / "backup"
    store = SqliteLogStore(data)
    await _declare_all(store)
    await store.close()
    with pytest.raises(InvalidInput, match="inside the data directory"):
        backup(data, data / "scopes" / "bk", key=None, version="t")
    with pytest.raises(NotFound):
        backup(tmp_path / "nothing-here", dest, key=None, version="t")
    backup(data, dest, key=None, version="t")
    with pytest.raises(Conflict, match="not empty"):
        backup(data, dest, key=None, version="t")
    with pytest.raises(Conflict, match="not empty"):
        restore(dest, data, key=None)
    with pytest.raises(NotFound, match="no backup"):
        restore(tmp_path / "absent", tmp_path / "new", key=None)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["backup", "data"]  # no partial directories left


async def test_a_keyed_backup_needs_the_key(tmp_path: Path) -> None:
    data = tmp_path / "data"
    store = SqliteLogStore(data, log_key="k1")
    await _declare_all(store)
    await store.close()
    with pytest.raises(StorageError, match="DECKLOG_LOG_KEY"):
        backup(data, tmp_path / "bk", key=None, version="t")
    assert not (tmp_path / "bk").exists()


def test_cli_backup_restore_and_its_bad_input(tmp_path: Path) -> None:
    data, dest, fresh = tmp_path / "data", tmp_path / "bk", tmp_path / "fresh"
    scope = run(data, "declare", "--title", "Payments 5xx").stdout.splitlines()[0]
    run(data, "append", scope, "message", "--json", '{"text": "one"}')
    out = run(data, "backup", str(dest))
    assert out.returncode == 0, out.stderr
    manifest = json.loads((dest / "manifest.json").read_text())
    assert {f["path"] for f in manifest["files"]} >= {"index.db", f"scopes/{scope.replace('/', '~')}.db"}
    assert manifest["decklog_version"] and all(len(f["sha256"]) == 64 for f in manifest["files"])

    for args, env_dir, needle in [
        (("backup", str(dest)), data, "not empty"),
        (("backup", str(data / "inside")), data, "inside the data directory"),
        (("restore", str(dest)), data, "not empty"),
        (("restore", str(tmp_path / "absent")), fresh, "no backup"),
    ]:
        bad = run(env_dir, *args)
        assert bad.returncode != 0 and needle in bad.stderr, (args, bad.stderr)
        assert len(bad.stderr.strip().splitlines()) == 1 and "Traceback" not in bad.stderr
    assert not fresh.exists() and not (data / "inside").exists()

    scope_copy = dest / f"scopes/{scope.replace('/', '~')}.db"
    original = scope_copy.read_bytes()
    scope_copy.write_bytes(original[:-1] + bytes([original[-1] ^ 1]))  # one bit
    bad = run(fresh, "restore", str(dest))
    assert bad.returncode == 1 and "sha256 does not match" in bad.stderr and not fresh.exists(), bad.stderr
    scope_copy.write_bytes(original)

    out = run(fresh, "restore", str(dest))
    assert out.returncode == 0, out.stderr
    assert run(fresh, "verify", scope).returncode == 0
    assert run(fresh, "verify", "--all").returncode == 0
    timeline = json.loads(run(fresh, "timeline", scope, "--json").stdout)
    assert [e["payload"].get("text") for e in timeline][-1] == "one"
