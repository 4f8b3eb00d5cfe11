"""Power-loss simulation for the log store, shared by tests/reliability/test_power_loss.py and bench/power_loss.py.

1. ``record_store_sql`` runs a real :class:`~core.store.SqliteLogStore` (stdlib sqlite3 under SQLAlchemy, WAL,
   ``synchronous=FULL``, group commit) through a workload of concurrent appends and outbox bookkeeping, and
   records — through sqlite3's trace callback, which hands over each statement as SQLite ran it, with the bound
   values expanded — every statement its writer connection executed on the scope file: the connect pragmas, the
   schema, each batch's ``BEGIN IMMEDIATE`` … entries + outbox rows + state row … ``COMMIT``, the switches to
   ``synchronous=NORMAL`` for non-durable batches (delivered marks) and back.
2. ``replay`` runs those statements, in order, on an APSW connection whose VFS (``LossyVFS``) keeps every write
   since a file's last ``xSync`` in memory only, and at a chosen I/O operation cuts the power: from then on every
   write and sync fails, and of the un-synced writes each 512-byte sector independently reaches the disk or not
   (a torn, reordered page cache). The entries committed by every ``COMMIT`` that returned before the cut are the
   acknowledged ones: the store acknowledges an append exactly when its batch's COMMIT returns.
3. ``inspect`` opens what is on disk afterwards with the stdlib sqlite3 (its WAL recovery) and reports the entries
   found, whether seqs are contiguous, the state row agrees, the hash chain links, and every entry has its outbox row.
"""

from __future__ import annotations

import asyncio
import random
import sqlite3
from collections.abc import Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import apsw
import sqlalchemy as sa
from sqlalchemy import event

from decklog.core.entries import Actor, NewEntry
from decklog.core.store.sqlite.log_store import SqliteLogStore

SECTOR = 512
SCOPE = "incident/power-loss"
WHO = Actor.human("U0POWER", "power")


# -- 1. the store's own SQL ------------------------------------------------------------------------------------


async def _workload(data_dir: Path, appends: int, rng: random.Random) -> None:
    store = SqliteLogStore(data_dir, topics=("index", "slack"), spare_files=0)
    try:
        declared = NewEntry.make("declared", WHO, {"title": "power loss", "severity": 2})
        await store.append(SCOPE, [declared], create=True)
        done = 0
        while done < appends:
            wave = min(appends - done, rng.randint(1, 12))

            async def one(i: int) -> None:
                n = 1 + (i % 3 == 0)
                news = [
                    NewEntry.make("message", WHO, {"text": f"update {i}.{k} " + "x" * rng.randint(0, 600)})
                    for k in range(n)
                ]
                await store.append(SCOPE, news)

            await asyncio.gather(*(one(done + i) for i in range(wave)))
            done += wave
            if rng.random() < 0.3:  # non-durable bookkeeping between durable batches, as the dispatcher does
                items = await store.outbox_pending(SCOPE, "index", limit=rng.randint(1, 20))
                await store.outbox_done(SCOPE, "index", [i.entry.seq for i in items])
    finally:
        await store.close()


def record_store_sql(data_dir: Path, *, appends: int, seed: int) -> tuple[list[str], Path]:
    """Run the workload on a real store; the scope file's writer statements, in order, and the file's path."""
    return record_sql(_workload(data_dir, appends, random.Random(seed)))


def record_sql(workload: Coroutine[Any, Any, None]) -> tuple[list[str], Path]:
    """Run ``workload`` (a real store on one scope file); that file's writer statements, in order, and its path."""
    traced: list[tuple[str, int, str]] = []

    def on_connect(dbapi_conn: Any, _record: Any) -> None:
        path = dbapi_conn.execute("PRAGMA database_list").fetchall()[0][2]
        cid = id(dbapi_conn)
        dbapi_conn.set_trace_callback(lambda sql: traced.append((path, cid, sql)))

    event.listen(sa.engine.Engine, "connect", on_connect)
    try:
        asyncio.run(workload)
    finally:
        event.remove(sa.engine.Engine, "connect", on_connect)
    scope_files = {p for p, _, _ in traced if "/scopes/" in p}
    assert len(scope_files) == 1, scope_files
    (path,) = scope_files
    writers = {cid for p, cid, sql in traced if p == path and sql.strip().upper() == "BEGIN IMMEDIATE"}
    return [sql for p, cid, sql in traced if p == path and cid in writers], Path(path)


# -- 2. a VFS that loses what was not synced -------------------------------------------------------------------


class PowerCut(apsw.IOError):
    pass


class LossyVFS(apsw.VFS):
    """Inherits the default VFS (locks, shared memory, delete); buffers writes until ``xSync``."""

    def __init__(self, name: str, rng: random.Random, *, cut_at: int | None, keep: float) -> None:
        self.vfs_name = name
        self.rng = rng
        self.cut_at = cut_at
        self.keep = keep
        self.io = 0
        self.dead = False
        self.files: list[LossyFile] = []
        super().__init__(name, "")

    def xOpen(self, name: Any, flags: list[int]) -> LossyFile:
        f = LossyFile(self, name, flags)
        self.files.append(f)
        return f

    def xDelete(self, filename: str, syncdir: bool) -> None:
        """Deleting (the WAL, after the last connection's checkpoint) reaches the disk only while the power is on;
        a delete is durable at once (directory operations are not what this simulates)."""
        if not self.dead:
            super().xDelete(filename, syncdir)

    def tick(self) -> bool:
        """Count one I/O operation; False once the power is off (the operation reaches nothing)."""
        if self.dead:
            return False
        self.io += 1
        if self.cut_at is not None and self.io >= self.cut_at:
            self.dead = True
            for f in self.files:
                f.lose_unsynced()
            raise PowerCut("power cut")
        return True


class LossyFile(apsw.VFSFile):
    def __init__(self, vfs: LossyVFS, name: Any, flags: list[int]) -> None:
        super().__init__("", name, flags)
        self.vfs = vfs
        size = super().xFileSize()
        self.image = bytearray(super().xRead(size, 0)) if size else bytearray()
        self.pending: list[tuple[int, bytes | None]] = []  # (offset, data) writes; (size, None) truncates

    def xRead(self, amount: int, offset: int) -> bytes:
        return bytes(self.image[offset : offset + amount])

    def xFileSize(self) -> int:
        return len(self.image)

    def xWrite(self, data: bytes, offset: int) -> None:
        if not self.vfs.tick():
            return
        end = offset + len(data)
        if end > len(self.image):
            self.image.extend(bytes(end - len(self.image)))
        self.image[offset:end] = data
        self.pending.append((offset, bytes(data)))

    def xTruncate(self, newsize: int) -> None:
        if not self.vfs.tick():
            return
        del self.image[newsize:]
        self.pending.append((newsize, None))

    def xSync(self, flags: int) -> None:
        if not self.vfs.tick():
            return
        for offset, data in self.pending:
            self._to_disk(offset, data)
        self.pending.clear()

    def lose_unsynced(self) -> None:
        """The power cut: each un-synced sector (and truncation) independently made it to the disk, or not."""
        for offset, data in self.pending:
            if data is None:
                if self.vfs.rng.random() < self.vfs.keep:
                    self._to_disk(offset, None)
                continue
            for start in range(0, len(data), SECTOR):
                if self.vfs.rng.random() < self.vfs.keep:
                    self._to_disk(offset + start, data[start : start + SECTOR])
        self.pending.clear()

    def _to_disk(self, offset: int, data: bytes | None) -> None:
        if data is None:
            super().xTruncate(offset)
        else:
            super().xWrite(data, offset)


# -- replay and inspection -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Replay:
    acked: int  # the highest seq whose COMMIT returned before the cut
    io: int  # I/O operations (writes, truncates, syncs) the VFS saw
    cut: bool


def replay(
    statements: list[str], path: Path, *, synchronous: str, cut_at: int | None, seed: int, keep: float = 0.5
) -> Replay:
    """Run the recorded statements on ``path`` through ``LossyVFS``; ``synchronous`` FULL runs them as the store
    did, NORMAL rewrites every ``PRAGMA synchronous`` to NORMAL (the control)."""
    name = f"lossy-{seed}-{cut_at}"
    vfs = LossyVFS(name, random.Random(seed), cut_at=cut_at, keep=keep)
    conn = apsw.Connection(str(path), vfs=name)
    acked = 0
    try:
        for sql in statements:
            if sql.strip().upper().startswith("PRAGMA SYNCHRONOUS=") and synchronous != "FULL":
                sql = f"PRAGMA synchronous={synchronous}"
            for _row in conn.execute(sql):
                pass
            if sql.strip().upper() == "COMMIT":
                acked = conn.execute("SELECT coalesce(max(seq), 0) FROM entries").get
    except apsw.Error:
        if not vfs.dead:
            raise
    finally:
        try:
            conn.close(True)  # the last connection checkpoints on close: the cut may fall there too
        except apsw.Error:
            if not vfs.dead:
                raise
        vfs.unregister()
    return Replay(acked, vfs.io, vfs.dead)


@dataclass(frozen=True)
class Recovered:
    seqs: int
    problems: tuple[str, ...]


def inspect(path: Path) -> Recovered:
    """What the stdlib sqlite3 finds on disk after the cut (it runs WAL recovery on open)."""
    problems: list[str] = []
    db = sqlite3.connect(path)
    try:
        if db.execute("PRAGMA integrity_check").fetchone()[0] != "ok":
            problems.append("integrity_check failed")
        tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if "entries" not in tables:
            return Recovered(0, tuple(problems))
        rows = db.execute("SELECT seq, prev_hash, hash FROM entries ORDER BY seq").fetchall()
        if [r[0] for r in rows] != list(range(1, len(rows) + 1)):
            problems.append("entry seqs are not 1..n")
        if any(rows[i][1] != rows[i - 1][2] for i in range(1, len(rows))):
            problems.append("the hash chain is broken")
        state = db.execute("SELECT version, head_hash FROM state WHERE id = 1").fetchone()
        if rows and (state is None or state[0] != len(rows) or state[1] != rows[-1][2]):
            problems.append(f"the state row ({state}) disagrees with the entries (n={len(rows)})")
        outbox = {r[0] for r in db.execute("SELECT seq FROM outbox WHERE topic = 'index'")}
        if outbox != {r[0] for r in rows}:
            problems.append("entries and their outbox rows differ")
        return Recovered(len(rows), tuple(problems))
    finally:
        db.close()


@dataclass
class Tally:
    trials: int = 0
    cuts: int = 0
    acked: int = 0
    lost: int = 0
    problems: list[str] | None = None


def trials(statements: list[str], work: Path, *, synchronous: str, count: int, seed: int) -> Tally:
    """``count`` power cuts at random I/O operations of the replay; the acknowledged entries each one lost."""
    rng = random.Random(seed)
    dry = work / f"dry-{synchronous}.db"
    total = replay(statements, dry, synchronous=synchronous, cut_at=None, seed=seed).io
    tally = Tally(problems=[])
    for i in range(count):
        path = work / f"{synchronous}-{i}.db"
        run = replay(
            statements, path, synchronous=synchronous, cut_at=rng.randint(1, total), seed=rng.randrange(1 << 30)
        )
        found = inspect(path)
        tally.trials += 1
        tally.cuts += run.cut
        tally.acked += run.acked
        tally.lost += max(0, run.acked - found.seqs)
        assert tally.problems is not None
        tally.problems += [f"trial {i}: {p}" for p in found.problems]
    return tally
