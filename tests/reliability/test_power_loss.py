"""Power loss, not just SIGKILL: no acknowledged append is lost when the machine loses power, under the store's
``synchronous=FULL`` — and under ``synchronous=NORMAL`` (the control) some are, so this test can fail.

What it does (the machinery is tests/helpers/power_loss.py):

- It runs the REAL store — ``SqliteLogStore`` on stdlib sqlite3 through SQLAlchemy, WAL, ``BEGIN IMMEDIATE``, group
  commit of concurrent appends (entries + outbox rows + the state row in one transaction), the switch to
  ``synchronous=NORMAL`` for non-durable bookkeeping batches and back — and records, with sqlite3's trace callback,
  every statement its writer connection executed on the scope file, with the bound values expanded.
- It replays exactly those statements, in order, on an APSW connection whose VFS keeps every write since the
  file's last ``xSync`` in memory, and cuts the power at a random I/O operation (a write, truncate or sync — also
  inside a checkpoint, or in the close's final checkpoint): of the un-synced writes, each 512-byte sector reaches
  the disk or not, at random; nothing after the cut does (not even the WAL's deletion).
- An append counts as acknowledged when the COMMIT of its batch returned before the cut — exactly when the store
  acknowledges it. The stdlib sqlite3 then opens what is on disk (WAL recovery) and must find every acknowledged
  entry, with contiguous seqs, an intact hash chain, a state row that agrees, and each entry's outbox row.

What it proves: the store's own SQL, transaction shape and pragmas survive power loss at any point of the I/O
sequence SQLite generates for it. What it does not: it is not the store's Python code running on APSW (APSW's
SQLite is a separate copy of the library; pysqlite cannot use its VFS), so a change that moves a write outside the
recorded statements (say, a second connection writing the scope file) would be covered only once it is recorded
here too; and directory operations (creating or deleting a file) are taken as durable at once. The longer run is
bench/power_loss.py.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers.power_loss import record_store_sql, replay, trials

APPENDS = 600  # enough for the WAL to pass its 1000-page autocheckpoint: cuts also land inside a checkpoint
TRIALS = 40


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[list[str], Path]]:
    work = tmp_path_factory.mktemp("power-loss")
    yield record_store_sql(work / "data", appends=APPENDS, seed=13)


def _rows(path: Path) -> tuple[list[tuple[object, ...]], list[tuple[object, ...]]]:
    db = sqlite3.connect(path)
    try:
        entries = db.execute("SELECT seq, id, kind, payload, prev_hash, hash FROM entries ORDER BY seq").fetchall()
        state = db.execute("SELECT version, head_hash, body FROM state").fetchall()
        return entries, state
    finally:
        db.close()


def test_the_replay_writes_what_the_store_wrote(recorded: tuple[list[str], Path], tmp_path: Path) -> None:
    """Without a cut, replaying the recorded statements makes the same entries and state row as the store did."""
    statements, store_file = recorded
    assert sum(s.strip().upper() == "BEGIN IMMEDIATE" for s in statements) > 50  # many group-committed batches
    assert any(s.strip().upper() == "PRAGMA SYNCHRONOUS=NORMAL" for s in statements)  # the non-durable batches
    run = replay(statements, tmp_path / "replayed.db", synchronous="FULL", cut_at=None, seed=1)
    assert not run.cut
    entries, state = _rows(tmp_path / "replayed.db")
    assert (entries, state) == _rows(store_file)
    assert run.acked == len(entries) > APPENDS


def test_no_acknowledged_append_is_lost_at_a_power_cut_under_synchronous_full(
    recorded: tuple[list[str], Path], tmp_path: Path
) -> None:
    statements, _ = recorded
    tally = trials(statements, tmp_path, synchronous="FULL", count=TRIALS, seed=131)
    assert tally.cuts == TRIALS and tally.acked > 0
    assert tally.problems == []
    assert tally.lost == 0, f"lost {tally.lost} of {tally.acked} acknowledged entries over {TRIALS} power cuts"


def test_the_control_synchronous_normal_loses_acknowledged_appends(
    recorded: tuple[list[str], Path], tmp_path: Path
) -> None:
    """The same statements with every ``PRAGMA synchronous`` set to NORMAL: commits are not synced, and a power
    cut loses acknowledged entries — the simulator can see a loss when there is one."""
    statements, _ = recorded
    tally = trials(statements, tmp_path, synchronous="NORMAL", count=TRIALS, seed=131)
    assert tally.cuts == TRIALS and tally.problems == []
    assert tally.lost > 0
