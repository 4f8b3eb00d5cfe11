"""The PostgreSQL backend's outbox, delivery cursors and sender memos (the ``Outbox`` and ``SenderMemos`` ports).

A mixin of ``PostgresLogStore`` (core/store/postgres.py): it uses the store's transactions (``run``), its head
lock and staging (``lock_head``, ``stage``, ``write_batch``) and its commit feed (``_notify``). Times written here
(published, parked, leases) come from the database clock, so replicas on machines whose clocks disagree agree.
``claim_cursor`` takes a (scope, topic) cursor row ``FOR UPDATE SKIP LOCKED`` under a lease: the building block
for several drainers on one database (one drains a (scope, topic) at a time; a dead one's lease runs out).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.engine import Connection

from core.entries import Actor, DeliveryFailed, Entry, NewEntry, canonical_json
from core.errors import NotFound
from core.ids import ScopeId
from core.store import postgres_schema as pg
from core.store.ports import AppendResult, Decide, OutboxItem, OutboxSummary, ParkedItem, ScopeRef
from core.store.staging import Batch
from core.store.statements import row_to_entry

T = TypeVar("T")
OB, E, M, C = pg.outbox, pg.entries, pg.sender_memos, pg.outbox_cursors
DB_NOW = sa.func.extract("epoch", sa.func.clock_timestamp())


@dataclass(frozen=True)
class CursorClaim:
    """A cursor taken. ``previous``: the replica that drained it last, when not the taker; ``died``: its lease
    ran out while it held the cursor (it died or stalled mid-delivery, so its last posts may lack memos and marks).
    """

    previous: str | None = None
    died: bool = False


def scope_key(scope: ScopeRef) -> str:
    return str(scope if isinstance(scope, ScopeId) else ScopeId.parse(scope))


_key = scope_key


def _require(conn: Connection, key: str) -> None:
    h = pg.scope_heads
    if not conn.execute(sa.select(h.c.version).where(h.c.scope_id == key)).scalar():
        raise NotFound(f"no such scope: {key}")


class PostgresOutbox:
    appended_total: int

    async def run(self, fn: Callable[[Connection], T]) -> T:
        raise NotImplementedError

    def _notify(self, scope: str, entries: tuple[Entry, ...]) -> None:
        raise NotImplementedError

    def lock_head(self, conn: Connection, key: str, *, create: bool) -> Batch:
        raise NotImplementedError

    def stage(
        self,
        conn: Connection,
        b: Batch,
        entries: Sequence[NewEntry] | Decide,
        expected_version: int | None,
        request_key: str | None,
    ) -> AppendResult:
        raise NotImplementedError

    def write_batch(self, conn: Connection, b: Batch) -> None:
        raise NotImplementedError

    # -- outbox -----------------------------------------------------------------------------------------------

    async def outbox_pending(self, scope: ScopeRef, topic: str, *, limit: int = 100) -> list[OutboxItem]:
        key = _key(scope)
        stmt = (
            sa.select(E, OB.c.attempts, OB.c.next_attempt_at)
            .join(OB, sa.and_(OB.c.scope_id == E.c.scope_id, OB.c.seq == E.c.seq))
            .where(OB.c.scope_id == key, OB.c.topic == topic, OB.c.published_at.is_(None), OB.c.parked_at.is_(None))
            .order_by(OB.c.seq)
            .limit(limit)
        )

        def q(conn: Connection) -> list[OutboxItem]:
            rows = conn.execute(stmt).all()
            if not rows:
                _require(conn, key)
            return [OutboxItem(topic, row_to_entry(key, r), r.attempts, r.next_attempt_at) for r in rows]

        return await self.run(q)

    async def outbox_done(self, scope: ScopeRef, topic: str, seqs: Sequence[int]) -> None:
        if not seqs:
            return
        key = _key(scope)
        stmt = (
            OB.update()
            .where(OB.c.scope_id == key, OB.c.topic == topic, OB.c.seq.in_(list(seqs)))
            .values(published_at=DB_NOW)
        )
        await self.run(lambda conn: conn.execute(stmt))

    async def outbox_failed(
        self, scope: ScopeRef, topic: str, seq: int, *, attempts: int, next_attempt_at: float, error: str
    ) -> None:
        key = _key(scope)
        stmt = (
            OB.update()
            .where(OB.c.scope_id == key, OB.c.topic == topic, OB.c.seq == seq)
            .values(attempts=attempts, next_attempt_at=next_attempt_at, last_error=error[:2000])
        )
        await self.run(lambda conn: conn.execute(stmt))

    async def outbox_park(self, scope: ScopeRef, topic: str, seq: int, *, attempts: int, error: str) -> None:
        """Park a row past its retry budget and append a visible ``delivery_failed`` entry, in one transaction."""
        key = _key(scope)

        def w(conn: Connection) -> tuple[Entry, ...]:
            b = self.lock_head(conn, key, create=False)
            if not b.existed:
                raise NotFound(f"no such scope: {key}")
            conn.execute(
                OB.update()
                .where(OB.c.scope_id == key, OB.c.topic == topic, OB.c.seq == seq)
                .values(attempts=attempts, parked_at=DB_NOW, last_error=error[:2000])
            )
            kind = conn.execute(sa.select(E.c.kind).where(E.c.scope_id == key, E.c.seq == seq)).scalar()
            if kind == "delivery_failed":
                return ()  # never a failure about a failure
            note = NewEntry.make(
                "delivery_failed",
                Actor.system("dispatcher"),
                DeliveryFailed(sender=topic, seq=seq, attempts=attempts, error=error[:500]),
                refs=(seq,),
            )
            made = self.stage(conn, b, [note], None, None).entries
            self.write_batch(conn, b)
            return made

        failed = await self.run(w)
        if failed:
            self.appended_total += len(failed)
            self._notify(key, failed)

    async def outbox_summary(self, scope: ScopeRef) -> OutboxSummary:
        key = _key(scope)
        waiting = sa.and_(OB.c.published_at.is_(None), OB.c.parked_at.is_(None))
        stmt = (
            sa.select(
                OB.c.topic,
                sa.func.count().filter(waiting),
                sa.func.count().filter(OB.c.parked_at.is_not(None)),
            )
            .where(OB.c.scope_id == key)
            .group_by(OB.c.topic)
        )

        def q(conn: Connection) -> OutboxSummary:
            _require(conn, key)
            rows = conn.execute(stmt).all()
            return OutboxSummary(key, {r[0]: int(r[1]) for r in rows if r[1]}, {r[0]: int(r[2]) for r in rows if r[2]})

        return await self.run(q)

    async def outbox_parked(self, scope: ScopeRef) -> list[ParkedItem]:
        key = _key(scope)
        stmt = (
            sa.select(OB.c.topic, OB.c.seq, E.c.kind, OB.c.attempts, OB.c.last_error, OB.c.parked_at)
            .join(E, sa.and_(E.c.scope_id == OB.c.scope_id, E.c.seq == OB.c.seq))
            .where(OB.c.scope_id == key, OB.c.parked_at.is_not(None))
            .order_by(OB.c.topic, OB.c.seq)
        )

        def q(conn: Connection) -> list[ParkedItem]:
            _require(conn, key)
            return [ParkedItem(key, r[0], r[1], r[2], r[3], r[4], r[5]) for r in conn.execute(stmt)]

        return await self.run(q)

    async def outbox_retry_parked(self, scope: ScopeRef, topic: str | None = None) -> int:
        key = _key(scope)
        stmt = OB.update().where(OB.c.scope_id == key, OB.c.parked_at.is_not(None))
        if topic:
            stmt = stmt.where(OB.c.topic == topic)
        stmt = stmt.values(parked_at=None, attempts=0, next_attempt_at=0)

        def w(conn: Connection) -> int:
            _require(conn, key)
            return int(conn.execute(stmt).rowcount or 0)

        count = await self.run(w)
        if count:
            self._notify(key, ())
        return count

    # -- delivery cursors (several drainers on one database) --------------------------------------------------

    async def claim_cursor(self, scope: ScopeRef, topic: str, owner: str, *, lease_s: float = 30.0) -> bool:
        """Take the (scope, topic) cursor for ``owner`` until the database clock passes ``lease_s`` from now.

        False when another owner holds an unexpired lease, or is taking the row right now (``SKIP LOCKED``)."""
        return await self.take_cursor(scope, topic, owner, lease_s=lease_s) is not None

    async def take_cursor(
        self, scope: ScopeRef, topic: str, owner: str, *, lease_s: float = 30.0
    ) -> CursorClaim | None:
        """``claim_cursor`` that says which replica drained last (``CursorClaim``). A release keeps the owner and
        clears the lease, so a claim tells a clean handover (no lease) from a dead holder's (an expired lease)."""
        key = _key(scope)
        now = sa.func.clock_timestamp()

        def w(conn: Connection) -> CursorClaim | None:
            row = conn.execute(
                sa.select(C.c.owner, C.c.lease_until, now.label("now"))
                .where(C.c.scope_id == key, C.c.topic == topic)
                .with_for_update(skip_locked=True)
            ).first()
            if row is None:
                return None
            other = row.owner not in (None, owner)
            if other and row.lease_until is not None and row.lease_until > row.now:
                return None
            until = now + sa.func.make_interval(0, 0, 0, 0, 0, 0, lease_s)
            conn.execute(
                C.update().where(C.c.scope_id == key, C.c.topic == topic).values(owner=owner, lease_until=until)
            )
            if not other:
                return CursorClaim()
            return CursorClaim(previous=str(row.owner), died=row.lease_until is not None)

        return await self.run(w)

    async def renew_cursor(self, scope: ScopeRef, topic: str, owner: str, *, lease_s: float = 30.0) -> bool:
        """The holder extends its own lease. Unlike a take it waits for the row lock (another replica's take looks
        at the row for a moment): a renewal skipped for that reason could let a live holder's lease run out in
        the middle of a delivery (decision 121). False once another replica has taken the cursor, or it was let go."""
        until = sa.func.clock_timestamp() + sa.func.make_interval(0, 0, 0, 0, 0, 0, lease_s)
        stmt = (
            C.update()
            .where(C.c.scope_id == _key(scope), C.c.topic == topic, C.c.owner == owner, C.c.lease_until.is_not(None))
            .values(lease_until=until)
        )
        return await self.run(lambda conn: int(conn.execute(stmt).rowcount or 0) == 1)

    async def outbox_pending_scopes(self) -> list[str]:
        """Scopes with rows waiting for delivery (any topic), from the partial pending index: the replicas' sweep
        (a dead replica's deliveries are found here, whoever committed them)."""
        stmt = (
            sa.select(OB.c.scope_id)
            .where(OB.c.published_at.is_(None), OB.c.parked_at.is_(None))
            .group_by(OB.c.scope_id)
            .order_by(OB.c.scope_id)
        )
        return await self.run(lambda conn: [str(r[0]) for r in conn.execute(stmt)])

    async def release_cursor(self, scope: ScopeRef, topic: str, owner: str) -> None:
        key = _key(scope)
        stmt = (
            C.update()
            .where(C.c.scope_id == key, C.c.topic == topic, C.c.owner == owner)
            .values(lease_until=None)  # the owner stays: who drained last (``take_cursor``)
        )
        await self.run(lambda conn: conn.execute(stmt))

    # -- named leases (periodic jobs, pacers: one replica at a time) ------------------------------------------------

    async def try_lease(self, name: str, owner: str, *, lease_s: float) -> bool:
        """Hold lease ``name`` for ``owner`` until the database clock passes ``lease_s`` from now: True when it was
        free, expired or already ``owner``'s (renewed), False while another owner's lease runs."""
        L = pg.leases
        ins = pg_insert(L).values(name=name, owner=owner, lease_until=DB_NOW + lease_s)
        stmt = ins.on_conflict_do_update(
            index_elements=[L.c.name],
            set_={"owner": ins.excluded.owner, "lease_until": ins.excluded.lease_until},
            where=sa.or_(L.c.owner == owner, L.c.lease_until < DB_NOW),
        ).returning(L.c.owner)
        return await self.run(lambda conn: conn.execute(stmt).first() is not None)

    async def release_lease(self, name: str, owner: str) -> None:
        """Give lease ``name`` up now, if ``owner`` still holds it."""
        L = pg.leases
        stmt = L.delete().where(L.c.name == name, L.c.owner == owner)
        await self.run(lambda conn: conn.execute(stmt))

    # -- sender memos -----------------------------------------------------------------------------------------

    async def memo_get(self, scope: ScopeRef, topic: str, key: str) -> dict[str, Any] | None:
        sk = _key(scope)

        def q(conn: Connection) -> dict[str, Any] | None:
            value = conn.execute(
                sa.select(M.c.value).where(M.c.scope_id == sk, M.c.topic == topic, M.c.key == key)
            ).scalar()
            if value is None:
                _require(conn, sk)
                return None
            return dict(json.loads(value))

        return await self.run(q)

    async def memo_all(self, scope: ScopeRef, topic: str) -> dict[str, dict[str, Any]]:
        sk = _key(scope)

        def q(conn: Connection) -> dict[str, dict[str, Any]]:
            rows = conn.execute(sa.select(M.c.key, M.c.value).where(M.c.scope_id == sk, M.c.topic == topic)).all()
            if not rows:
                _require(conn, sk)
            return {str(k): json.loads(v) for k, v in rows}

        return await self.run(q)

    async def memo_put(self, scope: ScopeRef, topic: str, key: str, value: dict[str, Any]) -> None:
        sk = _key(scope)
        ins = pg_insert(M).values(scope_id=sk, topic=topic, key=key, value=canonical_json(value), updated_at=DB_NOW)
        stmt = ins.on_conflict_do_update(
            index_elements=[M.c.scope_id, M.c.topic, M.c.key],
            set_={"value": ins.excluded.value, "updated_at": ins.excluded.updated_at},
        )

        def w(conn: Connection) -> None:
            _require(conn, sk)
            conn.execute(stmt)

        await self.run(w)
