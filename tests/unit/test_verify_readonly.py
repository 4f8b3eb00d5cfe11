"""``decklog verify`` is read-only: on a read-only copy of a data directory it works and leaves every byte unchanged.

Three shapes of directory: cleanly closed (no ``-wal``/``-shm``: a ``mode=ro`` open would create both), copied
while a store had it open (a ``-wal`` holding committed entries the main file lacks), and live (appends running).
The tests run as whatever user the suite runs as (root ignores ``chmod a-w``), so the proof is the digest of
every file and name in the directory before and after, not the permission error.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sqlite3
import stat
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path

import pytest

from decklog.core.entries import Actor, NewEntry
from decklog.core.ids import ScopeId
from decklog.core.store.sqlite.log_store import SqliteLogStore
from decklog.core.store.sqlite.readonly import verify_scope_file
from tests.unit.test_cli import run

ALICE = Actor.human("U0ALICE", "alice")
SCOPES = ("incident/payments-5xx", "incident/checkout-latency")


def digest(root: Path) -> dict[str, str]:
    """Every file and directory under ``root`` with the sha256 of its bytes (directories: their mode)."""
    out: dict[str, str] = {}
    for path in sorted(root.rglob("*")):
        rel = str(path.relative_to(root))
        out[rel] = f"dir {stat.S_IMODE(path.stat().st_mode):o}" if path.is_dir() else _sha(path)
    return out


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def read_only() -> Iterator[list[Path]]:
    made: list[Path] = []
    yield made
    for root in made:  # let pytest clean up
        for path in [root, *root.rglob("*")]:
            path.chmod(path.stat().st_mode | stat.S_IWUSR)


def make_read_only(root: Path, registry: list[Path]) -> None:
    registry.append(root)
    for path in [*root.rglob("*"), root]:
        path.chmod(path.stat().st_mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))


async def fill(store: SqliteLogStore, per_scope: int = 6) -> None:
    for scope in SCOPES:
        await store.append(scope, [NewEntry.make("declared", ALICE, {"title": scope})], create=True)
        for n in range(2, per_scope + 1):
            await store.append(scope, [NewEntry.make("message", ALICE, {"text": f"note {n}"})])


def path_of(data: Path, scope: str) -> Path:
    return data / "scopes" / f"{ScopeId.parse(scope).file_stem}.db"


async def test_a_cleanly_closed_read_only_directory_verifies_unchanged(tmp_path: Path, read_only: list[Path]) -> None:
    data = tmp_path / "data"
    store = SqliteLogStore(data, spare_files=0)
    await fill(store)
    await store.close()
    assert not list(data.rglob("*-wal")) and not list(data.rglob("*-shm"))  # what makes mode=ro alone write
    make_read_only(data, read_only)
    before = digest(data)
    for scope in SCOPES:
        out = run(data, "verify", scope)
        assert out.returncode == 0 and out.stdout.startswith("ok:"), out.stderr
        assert "6 entries" in out.stdout
    out = run(data, "verify", "--all")
    assert out.returncode == 1 and "index.db: missing" in out.stderr  # reported, not created
    assert digest(data) == before


async def test_a_copy_taken_with_the_store_open_verifies_with_its_wal_and_stays_unchanged(
    tmp_path: Path, read_only: list[Path]
) -> None:
    data, copy = tmp_path / "data", tmp_path / "copy"
    store = SqliteLogStore(data, spare_files=0)
    try:
        await fill(store)
        shutil.copytree(data, copy)  # the way an operator copies a live directory: main file + -wal + -shm
    finally:
        await store.close()
    wal = Path(str(path_of(copy, SCOPES[0])) + "-wal")
    assert wal.stat().st_size > 0
    with sqlite3.connect(f"file:{path_of(copy, SCOPES[0])}?immutable=1", uri=True) as raw:
        has_table = raw.execute("SELECT count(*) FROM sqlite_master WHERE name = 'entries'").fetchone()[0]
        in_main = raw.execute("SELECT count(*) FROM entries").fetchone()[0] if has_table else 0
    assert in_main < 6  # committed entries live only in the -wal: ignoring it would verify a stale log
    make_read_only(copy, read_only)
    before = digest(copy)
    for scope in SCOPES:
        report = verify_scope_file(path_of(copy, scope), scope)
        assert report.ok and report.entries == 6, report
    assert digest(copy) == before


async def test_verify_beside_a_live_store_sees_every_acknowledged_entry(tmp_path: Path) -> None:
    data = tmp_path / "data"
    store = SqliteLogStore(data, spare_files=0)
    try:
        await fill(store)
        for n in range(20):
            acked = await store.append(SCOPES[0], [NewEntry.make("message", ALICE, {"text": f"live {n}"})])
            report = verify_scope_file(path_of(data, SCOPES[0]), SCOPES[0])
            assert report.ok and report.entries >= acked.entries[-1].seq, report
    finally:
        await store.close()


async def test_a_tampered_file_fails_read_only_too(tmp_path: Path) -> None:
    data = tmp_path / "data"
    store = SqliteLogStore(data, spare_files=0)
    await fill(store)
    await store.close()
    with closing(sqlite3.connect(path_of(data, SCOPES[1]))) as raw:
        raw.execute("UPDATE entries SET payload = replace(payload, 'note 4', 'forged') WHERE seq = 4")
        raw.commit()
    assert not [n for n in os.listdir(data / "scopes") if n.endswith(("-wal", "-shm"))]
    report = verify_scope_file(path_of(data, SCOPES[1]), SCOPES[1])
    assert not report.ok and report.first_bad_seq == 4
    out = run(data, "verify", SCOPES[1])
    assert out.returncode == 1 and "seq 4" in out.stderr and "Traceback" not in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1
    assert not [n for n in os.listdir(data / "scopes") if n.endswith(("-wal", "-shm"))]  # no side files made


async def test_an_empty_scope_file_left_by_an_interrupted_declaration_is_noted_not_failed(tmp_path: Path) -> None:
    """A process killed after a (spare) scope file was put in place and before the declaration committed leaves a
    file without entries. Nothing of it was acknowledged: ``verify --all`` notes it and passes, as ``reindex`` does.
    (The SIGKILL test under mixed load produced exactly this.)"""
    data = tmp_path / "data"
    store = SqliteLogStore(data, spare_files=1)
    await fill(store)
    store.spares.fill()
    await store.close()
    spare = next((data / "spare").glob("*.db"))
    shutil.copy(spare, path_of(data, "incident/payments-5xx-2"))
    assert run(data, "reindex").returncode == 0
    out = run(data, "verify", "--all")
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("ok: 2 of 2 scopes verify")
    assert "1 empty scope file(s)" in out.stderr and "incident/payments-5xx-2" in out.stderr
