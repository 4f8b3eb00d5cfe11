"""The tables of a scope file (``DATA_DIR/scopes/<kind>~<name>.db``), owned by SQLAlchemy Core.

The same table definitions serve SQLite today and PostgreSQL later (a ``scope`` column would be added there).
"""

from __future__ import annotations

import hashlib

import sqlalchemy as sa
from sqlalchemy.dialects import sqlite
from sqlalchemy.schema import CreateIndex, CreateTable

SCHEMA_VERSION = 1

#: The page size of a scope file, set before its first table is made (SQLite fixes it then; in WAL mode not even a
#: VACUUM changes it). Each of a scope file's B-trees (tables, indexes, the schema) takes at least one page, and a
#: resolved 33-entry incident holds about 24 KB of rows in eleven of them: 4 KB pages made it 60 KB, 1 KB pages
#: make it about 37 KB once its delivered outbox rows are dropped (core/store/sqlite/compaction.py). Appends write
#: fewer bytes per commit (bench/append.py). Files made before keep their 4 KB pages.
PAGE_SIZE = 1024

metadata = sa.MetaData()

entries = sa.Table(
    "entries",
    metadata,
    sa.Column("seq", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("id", sa.String, nullable=False, unique=True),
    sa.Column("kind", sa.String, nullable=False),
    sa.Column("at", sa.String, nullable=False),
    sa.Column("actor", sa.Text, nullable=False),
    sa.Column("payload", sa.Text, nullable=False),
    sa.Column("refs", sa.Text, nullable=False),
    sa.Column("idempotency_key", sa.String, nullable=True),
    sa.Column("prev_hash", sa.String, nullable=False),
    sa.Column("hash", sa.String, nullable=False),
)

# Unique where set: most entries have no key, and a partial index costs them no page write (bench/append.py).
# Lookups (``key = ?``, key ranges, ``IN``) imply ``IS NOT NULL``, so SQLite's planner uses it.
sa.Index(
    "entries_idempotency_key",
    entries.c.idempotency_key,
    unique=True,
    sqlite_where=entries.c.idempotency_key.is_not(None),
)

# Views read the newest entries of a few kinds (read_last(kinds=...)): without this, a rare kind scans the log.
sa.Index("entries_kind_seq", entries.c.kind, entries.c.seq)

state = sa.Table(
    "state",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("scope", sa.String, nullable=False),
    sa.Column("schema_version", sa.Integer, nullable=False),
    sa.Column("version", sa.Integer, nullable=False),
    sa.Column("head_hash", sa.String, nullable=False),
    sa.Column("head_at", sa.String, nullable=False),
    sa.Column("body", sa.Text, nullable=False),
)

outbox = sa.Table(
    "outbox",
    metadata,
    sa.Column("topic", sa.String, primary_key=True),
    sa.Column("seq", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("attempts", sa.Integer, nullable=False, server_default="0"),
    sa.Column("next_attempt_at", sa.Float, nullable=False, server_default="0"),
    sa.Column("published_at", sa.Float, nullable=True),
    sa.Column("parked_at", sa.Float, nullable=True),
    sa.Column("last_error", sa.Text, nullable=False, server_default=""),
    # One B-tree keyed (topic, seq) instead of a rowid table plus its primary-key index: an append writes one
    # page fewer per commit (measured: bench/append.py, docs/decisions/0068-group-commit-without-a-writer-task.md).
    sqlite_with_rowid=False,
)
sa.Index(
    "outbox_pending",
    outbox.c.topic,
    outbox.c.seq,
    sqlite_where=sa.and_(outbox.c.published_at.is_(None), outbox.c.parked_at.is_(None)),
    postgresql_where=sa.and_(outbox.c.published_at.is_(None), outbox.c.parked_at.is_(None)),
)
# Parked rows are few: the outbox summary counts them here instead of scanning every delivered row (decision 128).
sa.Index("outbox_parked", outbox.c.topic, outbox.c.seq, sqlite_where=outbox.c.parked_at.is_not(None))

sender_memo = sa.Table(
    "sender_memo",
    metadata,
    sa.Column("topic", sa.String, primary_key=True),
    sa.Column("key", sa.String, primary_key=True),
    sa.Column("value", sa.Text, nullable=False),
    sa.Column("updated_at", sa.Float, nullable=False),
)


def ddl() -> list[str]:
    """The SQLite statements that make an empty scope file (what ``metadata.create_all`` would run)."""
    dialect = sqlite.dialect()
    tables = metadata.sorted_tables
    statements = [str(CreateTable(table).compile(dialect=dialect)).strip() for table in tables]
    for table in tables:
        for index in sorted(table.indexes, key=lambda i: str(i.name)):
            statements.append(str(CreateIndex(index).compile(dialect=dialect)).strip())
    return statements


def layout_version(statements: list[str]) -> int:
    """A file's ``PRAGMA user_version``: a digest of its DDL, so that any change to the tables or indexes makes
    an open re-check the schema (``create_all``), and an unchanged schema costs one pragma per open."""
    return int(hashlib.sha256("\n".join(statements).encode()).hexdigest()[:7], 16)
