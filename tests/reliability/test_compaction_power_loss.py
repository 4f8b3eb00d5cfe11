"""Power loss while a resolved incident's file is compacted (core/store/sqlite/compaction.py) loses nothing.

The machinery is tests/helpers/power_loss.py (see tests/reliability/test_power_loss.py for what it proves and what
it does not): the real ``SqliteLogStore`` declares an incident, records entries, resolves it, delivers every row
(the last delivery drops the delivered rows) and closes (the close rewrites the file: VACUUM); its writer
statements are recorded and replayed on a VFS that loses un-synced writes, with the power cut at EVERY I/O
operation from the VACUUM on (its writes to the WAL, its sync, the close's checkpoint and truncation). After each
cut the stdlib sqlite3 must find the file intact, every entry with its hash chain, a state row that agrees, and no
outbox row naming no entry. The delivered marks and the drop commit without an fsync of their own (like every
delivered mark), so a cut may also take them back: then the rows wait again and are delivered again, as anywhere.
"""

from __future__ import annotations

import sqlite3
from collections import Counter
from contextlib import closing
from pathlib import Path

import pytest

from decklog.core.entries import Actor, NewEntry
from decklog.core.store.sqlite.log_store import SqliteLogStore
from tests.helpers.power_loss import record_sql, replay

SCOPE = "incident/power-loss"
WHO = Actor.human("U0POWER", "power")
MESSAGES = 40
ENTRIES = MESSAGES + 2  # declared, the messages, resolved


async def _resolve_and_compact(data_dir: Path) -> None:
    store = SqliteLogStore(data_dir, topics=("index", "slack"), spare_files=0)
    try:
        await store.append(SCOPE, [NewEntry.make("declared", WHO, {"title": "power loss", "severity": 2})], create=True)
        for i in range(MESSAGES):
            await store.append(SCOPE, [NewEntry.make("message", WHO, {"text": f"update {i} " + "x" * (i * 13 % 500)})])
        await store.append(
            SCOPE, [NewEntry.make("status_changed", WHO, {"status": "resolved", "previous": "investigating"})]
        )
        for topic in ("index", "slack"):
            items = await store.outbox_pending(SCOPE, topic, limit=1000)
            await store.outbox_done(SCOPE, topic, [i.entry.seq for i in items])
    finally:
        await store.close()


def _check(path: Path) -> list[str]:
    problems: list[str] = []
    with closing(sqlite3.connect(path)) as db:
        if db.execute("PRAGMA integrity_check").fetchone()[0] != "ok":
            problems.append("integrity_check failed")
        rows = db.execute("SELECT seq, prev_hash, hash FROM entries ORDER BY seq").fetchall()
        if [r[0] for r in rows] != list(range(1, ENTRIES + 1)):
            problems.append(f"entries {[r[0] for r in rows][:3]}… ({len(rows)}), not 1..{ENTRIES}")
        if any(rows[i][1] != rows[i - 1][2] for i in range(1, len(rows))):
            problems.append("the hash chain is broken")
        state = db.execute("SELECT version, head_hash, body FROM state WHERE id = 1").fetchone()
        if state is None or state[0] != ENTRIES or not rows or state[1] != rows[-1][2] or '"resolved"' not in state[2]:
            problems.append("the state row disagrees with the entries")
        orphans = db.execute("SELECT count(*) FROM outbox WHERE seq NOT IN (SELECT seq FROM entries)").fetchone()[0]
        if orphans:
            problems.append(f"{orphans} outbox rows name no entry")
    return problems


def _outcome(path: Path) -> str:
    """Where the cut left the file: rewritten; rows dropped but not rewritten yet; or delivered marks lost (they are
    committed without an fsync of their own (``durable=False`` in core/store/sqlite/file.py): their loss means the rows are delivered again, as for any
    scope; the rows come back pending, and their next delivery compacts the file again)."""
    with closing(sqlite3.connect(path)) as db:
        waiting = db.execute("SELECT count(*) FROM outbox WHERE published_at IS NULL AND parked_at IS NULL").fetchone()
        if waiting[0]:
            return "marks lost"
        if db.execute("SELECT count(*) FROM outbox").fetchone()[0]:
            return "delivered rows kept"
        return "dropped" if db.execute("PRAGMA freelist_count").fetchone()[0] else "rewritten"


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[str], Path]:
    work = tmp_path_factory.mktemp("compaction-power-loss")
    return record_sql(_resolve_and_compact(work / "data"))


def test_the_recorded_close_rewrites_the_file(recorded: tuple[list[str], Path], tmp_path: Path) -> None:
    statements, store_file = recorded
    upper = [s.strip().upper() for s in statements]
    assert upper.count("VACUUM") == 1 and any(s.startswith("DELETE FROM OUTBOX") for s in upper)
    run = replay(statements, tmp_path / "replayed.db", synchronous="FULL", cut_at=None, seed=1)
    assert not run.cut and _check(tmp_path / "replayed.db") == [] and _check(store_file) == []
    with closing(sqlite3.connect(tmp_path / "replayed.db")) as db:
        assert db.execute("SELECT count(*) FROM outbox").fetchone()[0] == 0
        assert db.execute("PRAGMA freelist_count").fetchone()[0] == 0


def test_a_power_cut_anywhere_in_the_rewrite_loses_nothing(recorded: tuple[list[str], Path], tmp_path: Path) -> None:
    statements, _ = recorded
    before = statements[: [s.strip().upper() for s in statements].index("VACUUM")]
    start = replay(before, tmp_path / "dry-before.db", synchronous="FULL", cut_at=None, seed=1).io
    total = replay(statements, tmp_path / "dry-all.db", synchronous="FULL", cut_at=None, seed=1).io
    assert total - start > 20  # the rewrite's own I/O: its WAL frames, sync, the checkpoint, the truncation
    problems: list[str] = []
    outcomes: Counter[str] = Counter()
    for cut in range(start + 1, total + 1):
        path = tmp_path / f"cut-{cut}.db"
        run = replay(statements, path, synchronous="FULL", cut_at=cut, seed=cut)
        assert run.cut and run.acked == ENTRIES
        problems += [f"cut at I/O {cut}: {p}" for p in _check(path)]
        outcomes[_outcome(path)] += 1
    assert problems == []
    assert outcomes["rewritten"] > 0 and outcomes["marks lost"] > 0, outcomes  # cuts on both sides of the rewrite
