"""Due agent turns shared by every replica on one PostgreSQL database (the ``DueTurns`` of core/agents/due_turns.py).

One ``due_turns`` row per scope with a pending turn. Times are on the database clock (epoch seconds), so replicas
whose clocks differ agree on when a turn is due:

- ``want`` upserts the row: ``due_at = now + delay`` (the scheduler's debounce from the log), capped at
  ``first_wanted_at + max_wait``; while a replica holds the row (its turn runs) only ``wants`` is counted up;
- every replica polls (every ``poll_s``, and at the due time of the rows it armed itself) for rows that are due
  and free or whose holder's lease has run out, ``FOR UPDATE SKIP LOCKED``: each due row goes to one replica,
  which sets itself as ``holder`` until ``lease_until`` and renews the lease while the turn runs;
- when the turn ends the holder deletes the row, unless deliveries came in meanwhile (``wants`` changed) or the
  log has more pending: then the row is re-armed at the next due time from the log, and freed.

A replica that dies holding a row stops renewing it; once its lease runs out another replica takes the turn over
(trigger ``takeover``). The runtime's compare-and-set stays the last guard (a holder that lost its lease and still
finishes records nothing twice).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from dataclasses import dataclass

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.engine import Connection

from core.agents.due_turns import DueIn, RunTurn, Spawn
from core.alarm import Alarm
from core.alarm import Job as AlarmJob
from core.store import postgres_schema as pg
from core.store.postgres import PostgresLogStore
from core.store.postgres_outbox import DB_NOW

log = logging.getLogger(__name__)
D = pg.due_turns


@dataclass(frozen=True)
class Claim:
    scope: str
    trigger: str
    wants: int


class PostgresDueTurns:
    """``DueTurns`` on the store's database; ``owner`` names this replica (the dispatcher's owner)."""

    def __init__(
        self,
        store: PostgresLogStore,
        alarm: Alarm,
        owner: str,
        *,
        max_wait: float,
        lease_s: float = 30.0,
        poll_s: float = 1.0,
        batch: int = 8,
    ) -> None:
        self.store = store
        self.alarm = alarm
        self.owner = owner
        self.max_wait = max_wait
        self.lease_s = lease_s
        self.poll_s = poll_s
        self.batch = batch
        self.claimed = 0  # turns this replica claimed (tests, logs)
        self.renewing = True  # False: stop renewing leases (tests: a holder that hangs or dies)
        self._run: RunTurn | None = None
        self._due_in: DueIn | None = None
        self._spawn: Spawn | None = None
        self._keys: set[str] = set()
        self._stopped = False

    # -- the port ---------------------------------------------------------------------------------------------

    async def want(self, scope: str, delay: float, trigger: str) -> None:
        delay = max(delay, 0.0)
        ins = pg_insert(D).values(
            scope_id=scope,
            due_at=DB_NOW + min(delay, self.max_wait),
            first_wanted_at=DB_NOW,
            trigger=trigger,
            wants=1,
        )
        free = D.c.holder.is_(None)
        stmt = ins.on_conflict_do_update(
            index_elements=[D.c.scope_id],
            set_={
                "wants": D.c.wants + 1,
                "due_at": sa.case(
                    (free, sa.func.least(ins.excluded.due_at, D.c.first_wanted_at + self.max_wait)), else_=D.c.due_at
                ),
                "trigger": sa.case((free, ins.excluded.trigger), else_=D.c.trigger),
            },
        )
        await self.store.run(lambda conn: conn.execute(stmt))
        if self._run is not None and not self._stopped:
            self._set(f"agents:due:{scope}", delay, self._wake)  # wake this replica at the due time

    def start(self, run: RunTurn, due_in: DueIn, spawn: Spawn) -> None:
        self._run, self._due_in, self._spawn = run, due_in, spawn
        self._set("agents:due-poll", 0.0, self._tick)

    async def stop(self) -> None:
        self._stopped = True
        for key in self._keys:
            self.alarm.cancel(key)

    # -- claiming ---------------------------------------------------------------------------------------------

    async def _tick(self) -> None:
        try:
            await self.poll()
        finally:
            if not self._stopped:
                self._set("agents:due-poll", self.poll_s, self._tick)

    async def _wake(self) -> None:
        await self.poll()

    async def poll(self) -> int:
        """Claim the due rows this replica can take (up to ``batch`` per query) and run each turn in a task."""
        taken = 0
        while not self._stopped and self._spawn is not None:
            claims = await self.store.run(self._claim)
            for claim in claims:
                self._spawn(self._serve(claim))
            taken += len(claims)
            if len(claims) < self.batch:
                break
        return taken

    def _claim(self, conn: Connection) -> list[Claim]:
        due = (
            sa.select(D.c.scope_id, D.c.holder.label("was"))
            .where(D.c.due_at <= DB_NOW, sa.or_(D.c.holder.is_(None), D.c.lease_until < DB_NOW))
            .order_by(D.c.due_at)
            .limit(self.batch)
            .with_for_update(skip_locked=True)
            .cte("due")
        )
        trigger = sa.case((due.c.was.is_(None), D.c.trigger), else_=sa.literal("takeover"))
        stmt = (
            D.update()
            .where(D.c.scope_id == due.c.scope_id)
            .values(holder=self.owner, lease_until=DB_NOW + self.lease_s)
            .returning(D.c.scope_id, trigger, D.c.wants)
        )
        claims = [Claim(r[0], r[1], int(r[2])) for r in conn.execute(stmt)]
        self.claimed += len(claims)
        return claims

    async def _serve(self, claim: Claim) -> None:
        """Run the claimed turn, then delete the row or re-arm it from the log (a turn that raised is not
        re-armed, as with the in-process timers, unless entries were delivered while it ran)."""
        assert self._run is not None and self._due_in is not None
        renew = asyncio.ensure_future(self._renew(claim.scope))
        failed = False
        try:
            await self._run(claim.scope, claim.trigger)
        except Exception:
            failed = True
            log.exception("agent turn on %s failed", claim.scope)
        finally:
            renew.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await renew
        wants, delay = claim.wants, None
        for attempt in range(5):  # deliveries during the turn: look at the log again (bounded: then re-arm)
            delay = None if failed and attempt == 0 else await self._due_in(claim.scope)
            final = attempt == 4
            left = await self.store.run(
                functools.partial(self._finish, scope=claim.scope, wants=wants, delay=delay, final=final)
            )
            if left is None:
                break
            wants = left
        if delay is not None:
            self._set(f"agents:due:{claim.scope}", delay, self._wake)

    async def _renew(self, scope: str) -> None:
        stmt = (
            D.update()
            .where(D.c.scope_id == scope, D.c.holder == self.owner)
            .values(lease_until=DB_NOW + self.lease_s)
            .returning(D.c.scope_id)
        )
        while True:
            await asyncio.sleep(self.lease_s / 3)
            if not self.renewing:
                continue
            if await self.store.run(lambda conn: conn.execute(stmt).first()) is None:
                log.warning("due turns: the lease on %s was lost (another replica runs its next turn)", scope)
                return

    def _finish(self, conn: Connection, *, scope: str, wants: int, delay: float | None, final: bool) -> int | None:
        """With ``delay`` None: delete the row when nothing changed since ``wants`` (None), else return the new
        count. With a ``delay`` (or ``final``): re-arm the row that far from now and free it."""
        row = conn.execute(
            sa.select(D.c.wants).where(D.c.scope_id == scope, D.c.holder == self.owner).with_for_update()
        ).first()
        if row is None:
            return None  # the lease ran out and another replica holds it now
        if delay is None and not final:
            if int(row[0]) == wants:
                conn.execute(D.delete().where(D.c.scope_id == scope))
                return None
            return int(row[0])
        conn.execute(
            D.update()
            .where(D.c.scope_id == scope)
            .values(
                due_at=DB_NOW + (delay or 0.0),
                first_wanted_at=DB_NOW,
                trigger="debounce",
                holder=None,
                lease_until=None,
            )
        )
        return None

    def _set(self, key: str, delay: float, job: AlarmJob) -> None:
        self._keys.add(key)
        self.alarm.set(key, max(delay, 0.0), job)

    # -- inspection (tests, ops) ------------------------------------------------------------------------------

    async def rows(self) -> list[dict[str, object]]:
        """Every due row, with ``due_in`` / ``lease_in`` in seconds from the database's now and ``after_first``
        (the due time from the first want since the last turn: at most the max wait)."""

        def q(conn: Connection) -> list[dict[str, object]]:
            stmt = sa.select(
                D.c.scope_id,
                D.c.trigger,
                D.c.wants,
                D.c.holder,
                (D.c.due_at - DB_NOW).label("due_in"),
                (D.c.due_at - D.c.first_wanted_at).label("after_first"),
                (D.c.lease_until - DB_NOW).label("lease_in"),
            ).order_by(D.c.scope_id)
            return [dict(r._mapping) for r in conn.execute(stmt)]

        return await self.store.run(q)
