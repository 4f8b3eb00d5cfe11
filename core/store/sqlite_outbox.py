"""The SQLite backend's outbox and sender memos (the ``Outbox`` and ``SenderMemos`` ports).

A mixin of ``SqliteLogStore``: it uses the store's scope files (``_use``), staging (``_stage``) and commit feed
(``_notify``). The delivery path's reads run as compiled text on the DBAPI cursor (core/store/statements.py).
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from core.entries import Actor, DeliveryFailed, Entry, NewEntry, canonical_json
from core.store import schema as t
from core.store.ports import AppendResult, Decide, OutboxItem, OutboxSummary, ParkedItem, ScopeRef
from core.store.scope_files import SQL, ScopeFile
from core.store.staging import Batch
from core.store.statements import raw_cursor, raw_rows, trusted_row_to_entry


class SqliteOutbox:
    appended_total: int

    def _use(self, scope: ScopeRef, *, create: bool = False) -> AbstractAsyncContextManager[ScopeFile]:
        raise NotImplementedError

    def _notify(self, scope: str, entries: tuple[Entry, ...]) -> None:
        raise NotImplementedError

    def _stage(
        self,
        conn: Connection,
        b: Batch,
        entries: Sequence[NewEntry] | Decide,
        expected_version: int | None,
        request_key: str | None,
    ) -> AppendResult:
        raise NotImplementedError

    # -- outbox -----------------------------------------------------------------------------------------------

    async def outbox_pending(self, scope: ScopeRef, topic: str, *, limit: int = 100) -> list[OutboxItem]:
        async with self._use(scope) as sf:

            def q(conn: Connection) -> list[OutboxItem]:
                rows = raw_rows(conn, SQL.select_pending, {"topic": topic, "limit": limit})
                return [OutboxItem(topic, trusted_row_to_entry(sf.key, r), r.attempts, r.next_attempt_at) for r in rows]

            return await sf.file.read(q, small=True)

    async def outbox_done(self, scope: ScopeRef, topic: str, seqs: Sequence[int]) -> None:
        if not seqs:
            return
        now = time.time()
        async with self._use(scope) as sf:

            def w(conn: Connection, _b: Batch) -> None:
                # compiled text on the cursor: a storm flushes marks for every topic of every incident
                rows = [{"topic": topic, "seq": seq, "now": now} for seq in dict.fromkeys(seqs)]
                raw_cursor(conn).executemany(SQL.mark_done, rows)

            await sf.file.write(w, savepoint=False, durable=False)  # fails only with the file: then the batch does

    async def outbox_failed(
        self, scope: ScopeRef, topic: str, seq: int, *, attempts: int, next_attempt_at: float, error: str
    ) -> None:
        async with self._use(scope) as sf:

            def w(conn: Connection, _b: Batch) -> None:
                conn.execute(
                    t.outbox.update()
                    .where(t.outbox.c.topic == topic, t.outbox.c.seq == seq)
                    .values(attempts=attempts, next_attempt_at=next_attempt_at, last_error=error[:2000])
                )

            await sf.file.write(w, durable=False)

    async def outbox_park(self, scope: ScopeRef, topic: str, seq: int, *, attempts: int, error: str) -> None:
        """Park a row past its retry budget and append a visible ``delivery_failed`` entry, in one transaction."""
        async with self._use(scope) as sf:
            failed: list[Entry] = []

            def w(conn: Connection, b: Batch) -> None:
                conn.execute(
                    t.outbox.update()
                    .where(t.outbox.c.topic == topic, t.outbox.c.seq == seq)
                    .values(attempts=attempts, parked_at=time.time(), last_error=error[:2000])
                )
                kind = conn.execute(sa.select(t.entries.c.kind).where(t.entries.c.seq == seq)).scalar()
                if kind == "delivery_failed":
                    return  # never a failure about a failure
                note = NewEntry.make(
                    "delivery_failed",
                    Actor.system("dispatcher"),
                    DeliveryFailed(sender=topic, seq=seq, attempts=attempts, error=error[:500]),
                    refs=(seq,),
                )
                failed.extend(self._stage(conn, b, [note], None, None).entries)

            await sf.file.write(w, durable=False)
        if failed:
            self.appended_total += len(failed)
            self._notify(str(sf.scope), tuple(failed))

    async def outbox_summary(self, scope: ScopeRef) -> OutboxSummary:
        async with self._use(scope) as sf:

            def q(conn: Connection) -> OutboxSummary:
                # Two counts over the partial indexes (pending, parked): a storm's scope holds tens of thousands
                # of delivered rows, and one pass over all of them ran on the loop every sweep (decision 128).
                cur = raw_cursor(conn)
                pending = cur.execute(SQL.count_pending).fetchall()
                parked = cur.execute(SQL.count_parked).fetchall()
                return OutboxSummary(sf.key, {k: int(n) for k, n in pending if n}, {k: int(n) for k, n in parked if n})

            return await sf.file.read(q, small=True)

    async def outbox_parked(self, scope: ScopeRef) -> list[ParkedItem]:
        async with self._use(scope) as sf:

            def q(conn: Connection) -> list[ParkedItem]:
                o, e = t.outbox, t.entries
                stmt = (
                    sa.select(o.c.topic, o.c.seq, e.c.kind, o.c.attempts, o.c.last_error, o.c.parked_at)
                    .join(e, e.c.seq == o.c.seq)
                    .where(o.c.parked_at.is_not(None))
                    .order_by(o.c.topic, o.c.seq)
                )
                return [ParkedItem(sf.key, r[0], r[1], r[2], r[3], r[4], r[5]) for r in conn.execute(stmt)]

            return await sf.file.read(q)

    async def outbox_retry_parked(self, scope: ScopeRef, topic: str | None = None) -> int:
        async with self._use(scope) as sf:

            def w(conn: Connection, _b: Batch) -> int:
                stmt = t.outbox.update().where(t.outbox.c.parked_at.is_not(None))
                if topic:
                    stmt = stmt.where(t.outbox.c.topic == topic)
                res = conn.execute(stmt.values(parked_at=None, attempts=0, next_attempt_at=0))
                return int(res.rowcount or 0)

            count: int = await sf.file.write(w)
        if count:
            self._notify(str(sf.scope), ())
        return count

    # -- sender memos -----------------------------------------------------------------------------------------

    async def memo_get(self, scope: ScopeRef, topic: str, key: str) -> dict[str, Any] | None:
        async with self._use(scope) as sf:

            def q(conn: Connection) -> dict[str, Any] | None:
                m = t.sender_memo
                value = conn.execute(sa.select(m.c.value).where(m.c.topic == topic, m.c.key == key)).scalar()
                return json.loads(value) if value is not None else None

            return await sf.file.read(q)

    async def memo_all(self, scope: ScopeRef, topic: str) -> dict[str, dict[str, Any]]:
        """Every memo of a sender in a scope (a sender loads them once and keeps them in memory)."""
        async with self._use(scope) as sf:

            def q(conn: Connection) -> dict[str, dict[str, Any]]:
                rows = raw_cursor(conn).execute(SQL.select_memos, {"topic": topic})
                return {str(k): json.loads(v) for k, v in rows}

            return await sf.file.read(q, small=True)  # loaded once per scope by a sender, on its delivery path

    async def memo_put(self, scope: ScopeRef, topic: str, key: str, value: dict[str, Any]) -> None:
        """Durably remember something a sender did (e.g. the Slack ``ts`` it posted an entry as)."""
        async with self._use(scope) as sf:

            def w(conn: Connection, _b: Batch) -> None:
                m = t.sender_memo
                conn.execute(m.delete().where(m.c.topic == topic, m.c.key == key))
                conn.execute(
                    m.insert().values(topic=topic, key=key, value=canonical_json(value), updated_at=time.time())
                )

            await sf.file.write(w)
