"""The SQL of a scope file, built with SQLAlchemy Core over core/store/sqlite/schema.py and compiled once.

The SQLite backend runs the append and delivery paths' statements as compiled text on the DBAPI cursor: measured
on this machine (2026-12-01, see the store's decision note), ``Connection.execute`` of the same Core statement costs
25–40 µs more per call (cache-key generation, result metadata), and each scope file has its own engine, so
SQLAlchemy's per-engine compiled cache misses on the first use in every newly opened file.
"""

from __future__ import annotations

import collections
from dataclasses import dataclass
from functools import cache
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Dialect

from decklog.core.store.sqlite import schema as t

# -- the constructs (backend-neutral) ---------------------------------------------------------------------------------

SELECT_HEAD = sa.select(t.state.c.version, t.state.c.head_hash, t.state.c.head_at).where(
    t.state.c.id == sa.literal_column("1")
)
SELECT_BODY = sa.select(t.state.c.body).where(t.state.c.id == sa.literal_column("1"))
INSERT_ENTRY = t.entries.insert()
INSERT_OUTBOX = t.outbox.insert().values(topic=sa.bindparam("topic"), seq=sa.bindparam("seq"))
UPDATE_STATE = (
    t.state.update()
    .where(t.state.c.id == sa.literal_column("1"))
    .values(
        version=sa.bindparam("version"),
        head_hash=sa.bindparam("head_hash"),
        head_at=sa.bindparam("head_at"),
        body=sa.bindparam("body"),
    )
)
INSERT_STATE = t.state.insert()
SELECT_PENDING = (
    sa.select(t.entries, t.outbox.c.attempts, t.outbox.c.next_attempt_at)
    .join(t.outbox, t.outbox.c.seq == t.entries.c.seq)
    .where(
        t.outbox.c.topic == sa.bindparam("topic"),
        t.outbox.c.published_at.is_(None),
        t.outbox.c.parked_at.is_(None),
    )
    .order_by(t.outbox.c.seq)
    .limit(sa.bindparam("limit", literal_execute=False))
)
SELECT_MEMOS = sa.select(t.sender_memo.c.key, t.sender_memo.c.value).where(
    t.sender_memo.c.topic == sa.bindparam("topic")
)
_KEY = t.entries.c.idempotency_key
#: The stored entries of a request key: the key itself and its ``key#n`` siblings (``#`` < ``$``, nothing between).
SELECT_BY_REQUEST_KEY = (
    sa.select(t.entries)
    .where(sa.or_(_KEY == sa.bindparam("key"), sa.and_(_KEY > sa.bindparam("lo"), _KEY < sa.bindparam("hi"))))  # noqa: SIM300
    .order_by(t.entries.c.seq)
)
_O = t.outbox
#: Rows per topic still to deliver, and parked: each over its partial index (``outbox_pending``, ``outbox_parked``).
COUNT_PENDING = (
    sa.select(_O.c.topic, sa.func.count())
    .where(_O.c.published_at.is_(None), _O.c.parked_at.is_(None))
    .group_by(_O.c.topic)
)
COUNT_PARKED = sa.select(_O.c.topic, sa.func.count()).where(_O.c.parked_at.is_not(None)).group_by(_O.c.topic)
MARK_DONE = (
    t.outbox.update()
    .where(t.outbox.c.topic == sa.bindparam("topic"), t.outbox.c.seq == sa.bindparam("seq"))
    .values(published_at=sa.bindparam("now"))
)


@dataclass(frozen=True)
class Compiled:
    """The hot statements' text for one dialect (named parameters)."""

    select_head: str
    select_body: str
    insert_entry: str
    insert_outbox: str
    update_state: str
    insert_state: str
    select_pending: str
    select_memos: str
    mark_done: str
    select_by_request_key: str
    count_pending: str
    count_parked: str


def _text(stmt: Any, dialect: Dialect) -> str:
    return str(stmt.compile(dialect=dialect))


@cache
def compiled(dialect_name: str = "sqlite") -> Compiled:
    """Compile every hot statement once per dialect (named paramstyle)."""
    if dialect_name != "sqlite":
        raise NotImplementedError(f"no compiled statements for {dialect_name} yet")
    from sqlalchemy.dialects import sqlite

    d = sqlite.dialect(paramstyle="named")
    return Compiled(
        select_head=_text(SELECT_HEAD, d),
        select_body=_text(SELECT_BODY, d),
        insert_entry=_text(INSERT_ENTRY, d),
        insert_outbox=_text(INSERT_OUTBOX, d),
        update_state=_text(UPDATE_STATE, d),
        insert_state=_text(INSERT_STATE, d),
        select_pending=_text(SELECT_PENDING, d).replace(" OFFSET :param_1", ""),
        select_memos=_text(SELECT_MEMOS, d),
        mark_done=_text(MARK_DONE, d),
        select_by_request_key=_text(SELECT_BY_REQUEST_KEY, d),
        count_pending=_text(COUNT_PENDING, d),
        count_parked=_text(COUNT_PARKED, d),
    )


#: ``select_by_keys`` texts are made for up to this many keys; a longer list is looked up in slices.
KEYS_PER_SELECT = 64


@cache
def select_by_keys(n: int, dialect_name: str = "sqlite") -> str:
    """The stored entries whose idempotency key is one of ``:k0`` … ``:k{n-1}`` (1 ≤ n ≤ ``KEYS_PER_SELECT``),
    in seq order: one text per list length, compiled once (the append path's duplicate check; the partial
    unique index on the key serves it)."""
    if not 1 <= n <= KEYS_PER_SELECT or dialect_name != "sqlite":
        raise ValueError(f"no select_by_keys({n}, {dialect_name!r})")
    from sqlalchemy.dialects import sqlite

    stmt = sa.select(t.entries).where(_KEY.in_([sa.bindparam(f"k{i}") for i in range(n)])).order_by(t.entries.c.seq)
    return _text(stmt, sqlite.dialect(paramstyle="named"))


def raw_cursor(conn: Connection) -> Any:
    """The DBAPI cursor of a SQLAlchemy connection, inside its current transaction."""
    return conn.connection.cursor()


@cache
def _row_type(names: tuple[str, ...]) -> Any:
    return collections.namedtuple("Row", names)


def raw_rows(conn: Connection, sql: str, params: dict[str, Any]) -> list[Any]:
    """Rows of a compiled statement run on the DBAPI cursor, each with its columns as attributes."""
    cur = raw_cursor(conn).execute(sql, params)
    rows = cur.fetchall()
    if not rows:
        return []
    make = _row_type(tuple(d[0] for d in cur.description))._make
    return [make(row) for row in rows]
