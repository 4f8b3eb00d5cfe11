"""Group commit across scopes for the PostgreSQL log store: when a scope's writer starts a transaction, the
requests waiting for other scopes whose writers are not in a transaction ride along in the same one.

Many quiet scopes (one producer each) otherwise pay one commit per append; together they pay one. The heads are
locked ``FOR UPDATE`` in one statement in ``scope_id`` order (every multi-scope transaction, in every replica,
locks in that order: no deadlock); each scope is staged as in its own transaction (a request that fails staging
fails alone); the rows of every scope go in one INSERT per table. A rider never creates its scope (a create that
failed would leave an empty head row committed beside the others). If the transaction itself fails (a unique key
taken by another replica meanwhile), each scope is retried in its own transaction.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any, Protocol, TypeVar

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from core.errors import NotFound
from core.state import ScopeState, empty_state
from core.store import postgres_bulk as bulk
from core.store import postgres_schema as pg
from core.store.ports import AppendResult, Decide
from core.store.staging import Batch

#: Scopes one transaction takes at most (the lead scope and its riders).
MAX_SCOPES = 32

Outcome = AppendResult | BaseException


class Request(Protocol):
    entries: Any
    expected_version: int | None
    request_key: str | None
    create: bool
    future: asyncio.Future[AppendResult]


R = TypeVar("R", bound=Request)


def riders(pending: dict[str, list[R]], riding: Mapping[str, object], key: str) -> dict[str, list[R]]:
    """Other scopes' waiting requests (popped from ``pending``) that may share ``key``'s next transaction: scopes
    not in a transaction now, none creating a scope, at most ``MAX_SCOPES`` in all."""
    if any(r.create for r in pending.get(key, ())):
        return {}
    found: dict[str, list[R]] = {}
    for k, waiting in list(pending.items()):
        if len(found) >= MAX_SCOPES - 1:
            break
        if k != key and k not in riding and waiting and not any(r.create for r in waiting):
            found[k] = pending.pop(k)
    return found


def settle(batches: Mapping[str, Sequence[Request]], outcomes: Mapping[str, Sequence[Outcome]]) -> None:
    """Resolve each request's future with its outcome."""
    for key, batch in batches.items():
        for r, outcome in zip(batch, outcomes[key], strict=True):
            if r.future.done():
                continue
            if isinstance(outcome, BaseException):
                r.future.set_exception(outcome)
            else:
                r.future.set_result(outcome)


class Staging(Protocol):
    topics: tuple[str, ...]

    def stage(
        self, conn: Connection, b: Batch, entries: Any, expected_version: int | None, request_key: str | None
    ) -> AppendResult: ...


def lock_heads(conn: Connection, keys: Sequence[str]) -> dict[str, Batch]:
    """Lock the head rows of ``keys`` (existing scopes) in ``scope_id`` order; a batch per scope."""
    h = pg.scope_heads
    stmt = sa.select(h).where(h.c.scope_id.in_(sorted(keys))).order_by(h.c.scope_id).with_for_update()
    found: dict[str, Batch] = {}
    for row in conn.execute(stmt):
        key = str(row.scope_id)
        if row.version:
            found[key] = Batch(key, ScopeState.model_validate_json(row.body), row.head_hash, row.head_at, existed=True)
    for key in keys:
        found.setdefault(key, Batch(key, empty_state(key), "", "", existed=False))
    return found


def stage_all(store: Staging, conn: Connection, b: Batch, batch: Sequence[Request]) -> list[Outcome]:
    outcomes: list[Outcome] = []
    for r in batch:
        try:
            if b.state.version == 0:
                raise NotFound(f"no such scope: {b.scope}")
            entries: Sequence[Any] | Decide = r.entries
            outcomes.append(store.stage(conn, b, entries, r.expected_version, r.request_key))
        except Exception as exc:  # staging raises before touching the batch: neighbours are unharmed
            outcomes.append(exc)
    return outcomes


def write_all(conn: Connection, batches: Sequence[Batch]) -> None:
    """Every staged batch's entries, outbox rows and head, one statement per table."""
    entries = [{"scope_id": b.scope, **row} for b in batches for row in b.entry_rows]
    bulk.insert_entries(conn, entries)
    bulk.insert_outbox(conn, [{"scope_id": b.scope, **row} for b in batches for row in b.outbox_rows])
    h = pg.scope_heads
    heads = [
        {"k": b.scope, "v": b.state.version, "hh": b.head_hash, "ha": b.head_at, "body": b.state.model_dump_json()}
        for b in batches
    ]
    conn.execute(
        h.update()
        .where(h.c.scope_id == sa.bindparam("k"))
        .values(
            version=sa.bindparam("v"),
            head_hash=sa.bindparam("hh"),
            head_at=sa.bindparam("ha"),
            body=sa.bindparam("body"),
        ),
        heads,
    )


def run_multi(store: Staging, conn: Connection, batches: Mapping[str, Sequence[Request]]) -> dict[str, list[Outcome]]:
    """Stage and write every scope's requests in the transaction of ``conn`` (its riders' scopes exist already).

    Returns each scope's outcomes; rolls back when nothing was staged."""
    heads = lock_heads(conn, list(batches))
    results = {key: stage_all(store, conn, heads[key], batch) for key, batch in batches.items()}
    staged = [b for b in heads.values() if b.entry_rows]
    if not staged:
        conn.rollback()
        return results
    write_all(conn, staged)
    return results


__all__ = ["MAX_SCOPES", "lock_heads", "riders", "run_multi", "settle", "stage_all", "write_all"]
