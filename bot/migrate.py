"""``decklog migrate --to URL``: copy a SQLite data directory into a PostgreSQL database.

Every scope file's rows are copied as stored (the exact text the chain hashed): entries, the state row, outbox rows
(published, pending, parked: delivery positions carry over) and sender memos; then the index's tables from
index.db. Each scope is one transaction; a scope already in the database with the same head is skipped (re-running
is idempotent), one with a different head stops the migration. Every chain is verified in the database after.
The source is opened read-only and never written.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.engine import Connection

from decklog.core.errors import Conflict, NotFound
from decklog.core.ids import ScopeId
from decklog.core.store.postgres import schema as pg
from decklog.core.store.verify import verify_rows

ENTRY_COLUMNS = ("seq", "id", "kind", "at", "actor", "payload", "refs", "idempotency_key", "prev_hash", "hash")
INDEX_COPIES = {
    "scopes": pg.index_scopes,
    "routes": pg.routes,
    "fingerprints": pg.fingerprints,
    "subscriptions": pg.subscriptions,
    "inbound": pg.inbound,
}


@dataclass
class MigrationCounts:
    scopes: int = 0
    skipped: int = 0
    entries: int = 0
    outbox_rows: int = 0
    memos: int = 0
    index_rows: dict[str, int] = field(default_factory=dict)
    verified: int = 0


def _read_only(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    conn.row_factory = sqlite3.Row
    return conn


def _scope_files(data_dir: Path) -> Iterator[tuple[str, Path]]:
    scopes_dir = data_dir / "scopes"
    for path in sorted(scopes_dir.glob("*.db")) if scopes_dir.is_dir() else []:
        yield str(ScopeId.from_file_stem(path.stem)), path


def _copy_scope(conn: Connection, scope: str, src: sqlite3.Connection, counts: MigrationCounts) -> None:
    state = src.execute("SELECT version, head_hash, head_at, body FROM state WHERE id = 1").fetchone()
    if state is None or not state["version"]:
        return  # an empty (spare or failed) file: nothing was ever declared in it
    h = pg.scope_heads
    found = conn.execute(sa.select(h.c.version, h.c.head_hash).where(h.c.scope_id == scope).with_for_update()).first()
    if found is not None and found.version:
        if (found.version, found.head_hash) != (state["version"], state["head_hash"]):
            raise Conflict(f"{scope} is already in the database with another head (version {found.version})")
        counts.skipped += 1
        return
    entries = [
        dict(zip(ENTRY_COLUMNS, row, strict=True))
        for row in src.execute(f"SELECT {', '.join(ENTRY_COLUMNS)} FROM entries ORDER BY seq")
    ]
    conn.execute(
        pg_insert(h).values(scope_id=scope, version=0, head_hash="", head_at="", body="").on_conflict_do_nothing()
    )
    if entries:
        conn.execute(pg.entries.insert(), [{"scope_id": scope, **e} for e in entries])
    outbox = [
        {"scope_id": scope, **dict(r)}
        for r in src.execute(
            "SELECT topic, seq, attempts, next_attempt_at, published_at, parked_at, last_error FROM outbox"
        )
    ]
    if outbox:
        conn.execute(pg.outbox.insert(), outbox)
        topics = sorted({r["topic"] for r in outbox})
        conn.execute(
            pg_insert(pg.outbox_cursors).on_conflict_do_nothing(), [{"scope_id": scope, "topic": t} for t in topics]
        )
    memos = [
        {"scope_id": scope, **dict(r)} for r in src.execute("SELECT topic, key, value, updated_at FROM sender_memo")
    ]
    if memos:
        conn.execute(pg.sender_memos.insert(), memos)
    conn.execute(
        h.update()
        .where(h.c.scope_id == scope)
        .values(version=state["version"], head_hash=state["head_hash"], head_at=state["head_at"], body=state["body"])
    )
    counts.scopes += 1
    counts.entries += len(entries)
    counts.outbox_rows += len(outbox)
    counts.memos += len(memos)


def _copy_index(conn: Connection, index_db: Path, counts: MigrationCounts) -> None:
    if not index_db.exists():
        return
    with closing(_read_only(index_db)) as src:
        for name, table in INDEX_COPIES.items():
            rows = [dict(r) for r in src.execute(f"SELECT * FROM {name}")]
            columns = set(table.c.keys())
            rows = [{k: v for k, v in r.items() if k in columns} for r in rows]
            if rows:
                conn.execute(pg_insert(table).on_conflict_do_nothing(), rows)
            counts.index_rows[name] = len(rows)
        fts = [dict(r) for r in src.execute("SELECT scope, seq, kind, text FROM entries_fts")]
        if fts:
            conn.execute(pg_insert(pg.entries_fts).on_conflict_do_nothing(), fts)
        counts.index_rows["entries_fts"] = len(fts)


def _verify_all(engine: sa.Engine, scopes: list[str]) -> int:
    e, h = pg.entries, pg.scope_heads
    with engine.connect() as conn:
        for scope in scopes:
            head = conn.execute(sa.select(h).where(h.c.scope_id == scope)).first()
            rows = conn.execute(sa.select(e).where(e.c.scope_id == scope).order_by(e.c.seq))
            report = verify_rows(scope, rows, head)
            if not report.ok:
                raise Conflict(f"verify failed after copying {scope}: seq {report.first_bad_seq}: {report.reason}")
    return len(scopes)


def migrate(data_dir: Path, url: str) -> MigrationCounts:
    """Copy ``data_dir`` (SQLite) into the database at ``url``; return what was copied (blocking: run it off-loop)."""
    if not (data_dir / "scopes").is_dir():
        raise NotFound(f"no scopes under {data_dir} (nothing to migrate)")
    counts = MigrationCounts()
    engine = pg.make_engine(url, pool_size=2)
    try:
        with engine.begin() as conn:
            pg.ensure_schema(conn)
        copied: list[str] = []
        for scope, path in _scope_files(data_dir):
            with closing(_read_only(path)) as src, engine.begin() as conn:
                _copy_scope(conn, scope, src, counts)
            copied.append(scope)
        with engine.begin() as conn:
            _copy_index(conn, data_dir / "index.db", counts)
            h = pg.scope_heads
            present = [
                str(r[0])
                for r in conn.execute(sa.select(h.c.scope_id).where(h.c.scope_id.in_(copied), h.c.version > 0))
            ]
        counts.verified = _verify_all(engine, present)
    finally:
        engine.dispose()
    return counts


def describe(counts: MigrationCounts) -> list[str]:
    index = ", ".join(f"{n} {name}" for name, n in counts.index_rows.items()) or "no index.db"
    return [
        f"copied {counts.scopes} scopes ({counts.entries} entries, {counts.outbox_rows} outbox rows, "
        f"{counts.memos} memos); {counts.skipped} already there",
        f"index: {index}",
        f"verified {counts.verified} chains in the database",
    ]
