"""Due agent turns shared by every replica on one PostgreSQL database (the ``DueTurns`` of core/store/ports.py).

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

Wake-ups and answers share the row (one holder per scope, so one turn at a time per scope):

- ``wake`` sets ``wake_at`` (a reasoner's ``wake_after``: replacing an earlier one, as a timer would), creating the
  row with ``due_at`` +Infinity when no debounced turn waits; ``ask`` sets ``ask_at`` to now and counts ``asks``;
- a row is due when the earliest of ``due_at``, ``wake_at`` and ``ask_at`` has passed. Its holder answers the
  scope's unanswered questions (read from the log) when ``ask_at`` was due, then runs one turn if the debounced
  turn or the wake-up was due (forced, trigger ``wake``, when the wake-up was);
- at the end it clears ``wake_at`` / ``ask_at`` only if they are still what it claimed (a turn that asks for the
  next wake-up, or a question delivered meanwhile, stays armed), and keeps the row while either is set.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import Sequence
from dataclasses import dataclass

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.engine import Connection

from decklog.core.alarm import KEYS_KEPT, Alarm
from decklog.core.alarm import Job as AlarmJob
from decklog.core.store.ports import Answer, DueIn, RunTurn, Spawn
from decklog.core.store.postgres import schema as pg
from decklog.core.store.postgres.log_store import DB_NOW, PostgresLogStore

log = logging.getLogger(__name__)
D = pg.due_turns
#: ``due_at`` of a row with no debounced turn pending (only a wake-up or a question waits).
NEVER: sa.ColumnElement[float] = sa.literal_column("'Infinity'::float8")


@dataclass(frozen=True)
class Claim:
    scope: str
    trigger: str
    wants: int
    turn: bool = True  # the debounced turn was due
    wake: float | None = None  # the wake-up that was due (its ``wake_at``), else None
    asks: int | None = None  # questions were due: ``asks`` as claimed, else None


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
        self._answer: Answer | None = None
        self._due_in: DueIn | None = None
        self._spawn: Spawn | None = None
        self._keys: set[str] = set()
        self._serving: set[str] = set()  # scopes whose claimed turn runs in this replica now
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
        free, idle = D.c.holder.is_(None), D.c.due_at == NEVER  # idle: only a wake-up or a question waits
        stmt = ins.on_conflict_do_update(
            index_elements=[D.c.scope_id],
            set_={
                "wants": D.c.wants + 1,
                "due_at": sa.case(
                    (sa.and_(free, idle), ins.excluded.due_at),
                    (free, sa.func.least(ins.excluded.due_at, D.c.first_wanted_at + self.max_wait)),
                    else_=D.c.due_at,
                ),
                "first_wanted_at": sa.case(
                    (sa.and_(free, idle), ins.excluded.first_wanted_at), else_=D.c.first_wanted_at
                ),
                "trigger": sa.case((free, ins.excluded.trigger), else_=D.c.trigger),
            },
        )
        await self.store.run(lambda conn: conn.execute(stmt))
        self._poll_in(scope, delay)

    async def wake(self, scope: str, delay: float) -> None:
        delay = max(delay, 0.0)
        ins = pg_insert(D).values(
            scope_id=scope, due_at=NEVER, first_wanted_at=DB_NOW, trigger="wake", wants=0, wake_at=DB_NOW + delay
        )
        stmt = ins.on_conflict_do_update(index_elements=[D.c.scope_id], set_={"wake_at": ins.excluded.wake_at})
        await self.store.run(lambda conn: conn.execute(stmt))
        self._poll_in(scope, delay, "due-wake")

    async def ask(self, scope: str) -> None:
        ins = pg_insert(D).values(
            scope_id=scope, due_at=NEVER, first_wanted_at=DB_NOW, trigger="ask", wants=0, ask_at=DB_NOW, asks=1
        )
        stmt = ins.on_conflict_do_update(
            index_elements=[D.c.scope_id],
            set_={"asks": D.c.asks + 1, "ask_at": sa.func.coalesce(D.c.ask_at, ins.excluded.ask_at)},
        )
        await self.store.run(lambda conn: conn.execute(stmt))
        self._poll_in(scope, 0.0, "due-ask")

    def _poll_in(self, scope: str, delay: float, what: str = "due") -> None:
        if self._run is not None and not self._stopped:
            self._set(f"agents:{what}:{scope}", delay, self._wake)  # wake this replica at the due time

    def start(self, run: RunTurn, due_in: DueIn, spawn: Spawn, answer: Answer | None = None) -> None:
        self._run, self._due_in, self._spawn, self._answer = run, due_in, spawn, answer
        self._set("agents:due-poll", 0.0, self._tick)

    async def stop(self) -> None:
        self._stopped = True
        for key in self._keys:
            self.alarm.cancel(key)

    async def held(self, scope: str) -> bool:
        stmt = sa.select(D.c.scope_id).where(D.c.scope_id == scope, D.c.holder.is_not(None), D.c.lease_until >= DB_NOW)
        return await self.store.run(lambda conn: conn.execute(stmt).first() is not None)

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
            claims = await self.store.run(functools.partial(self._claim, serving=sorted(self._serving)))
            self._serving.update(c.scope for c in claims)
            for claim in claims:
                self._spawn(self._serve(claim))
            taken += len(claims)
            if len(claims) < self.batch:
                break
        return taken

    def _claim(self, conn: Connection, *, serving: Sequence[str] = ()) -> list[Claim]:
        at = sa.func.least(D.c.due_at, D.c.wake_at, D.c.ask_at)  # least() skips NULLs
        free = sa.or_(D.c.holder.is_(None), D.c.lease_until < DB_NOW)
        if serving:  # never take over from itself: its own turn there still runs (hung, or not renewing)
            free = sa.and_(free, D.c.scope_id.not_in(serving))
        due = (
            sa.select(D.c.scope_id, D.c.holder.label("was"), DB_NOW.label("now"))
            .where(at <= DB_NOW, free)
            .order_by(at)
            .limit(self.batch)
            .with_for_update(skip_locked=True)
            .cte("due")
        )
        trigger = sa.case((due.c.was.is_(None), D.c.trigger), else_=sa.literal("takeover"))
        stmt = (
            D.update()
            .where(D.c.scope_id == due.c.scope_id)
            .values(holder=self.owner, lease_until=DB_NOW + self.lease_s)
            .returning(
                D.c.scope_id,
                trigger,
                D.c.wants,
                D.c.due_at <= due.c.now,
                sa.case((D.c.wake_at <= due.c.now, D.c.wake_at)),
                sa.case((D.c.ask_at <= due.c.now, D.c.asks)),
            )
        )
        claims = [Claim(r[0], r[1], int(r[2]), bool(r[3]), r[4], r[5]) for r in conn.execute(stmt)]
        self.claimed += len(claims)
        return claims

    async def _serve(self, claim: Claim) -> None:
        try:
            await self._serve_claim(claim)
        finally:
            self._serving.discard(claim.scope)

    async def _serve_claim(self, claim: Claim) -> None:
        """Run the claimed turn, then delete the row or re-arm it from the log (a turn that raised is not
        re-armed, as with the in-process timers, unless entries were delivered while it ran)."""
        assert self._run is not None and self._due_in is not None
        renew = asyncio.ensure_future(self._renew(claim.scope))
        failed = False
        try:
            if claim.asks is not None and self._answer is not None:
                await self._answer(claim.scope)
            if claim.wake is not None:  # forced (it covers the debounced turn too, if that was due)
                await self._run(claim.scope, "wake")
            elif claim.turn:
                await self._run(claim.scope, claim.trigger)
        except Exception:
            failed = True
            log.exception("agent turn on %s failed", claim.scope)
        finally:
            renew.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await renew
        if not claim.turn and claim.wake is None:  # only answers: the debounced turn's due time stays as it was
            delay = await self._due_in(claim.scope)
            await self.store.run(functools.partial(self._release, scope=claim.scope, claim=claim, delay=delay))
            return
        wants, delay = claim.wants, None
        done = functools.partial(self._finish, scope=claim.scope, wake=claim.wake, asks=claim.asks)
        for attempt in range(5):  # deliveries during the turn: look at the log again (bounded: then re-arm)
            delay = None if failed and attempt == 0 else await self._due_in(claim.scope)
            final = attempt == 4
            left = await self.store.run(functools.partial(done, wants=wants, delay=delay, final=final))
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

    def _finish(
        self,
        conn: Connection,
        *,
        scope: str,
        wants: int,
        delay: float | None,
        final: bool,
        wake: float | None = None,
        asks: int | None = None,
    ) -> int | None:
        """With ``delay`` None: delete the row when nothing changed since ``wants`` (None), else return the new
        count. With a ``delay`` (or ``final``): re-arm the row that far from now and free it. ``wake`` / ``asks``
        (what was claimed) are cleared if unchanged; a row with a wake-up or a question left is kept, freed."""
        row = conn.execute(
            sa.select(D.c.wants, D.c.wake_at, D.c.ask_at, D.c.asks)
            .where(D.c.scope_id == scope, D.c.holder == self.owner)
            .with_for_update()
        ).first()
        if row is None:
            return None  # the lease ran out and another replica holds it now
        wake_at = None if wake is not None and row[1] == wake else row[1]
        ask_at = None if asks is not None and int(row[3]) == asks else row[2]
        freed = {"holder": None, "lease_until": None, "wake_at": wake_at, "ask_at": ask_at}
        if delay is None and not final:
            if int(row[0]) != wants:
                return int(row[0])
            if wake_at is None and ask_at is None:
                conn.execute(D.delete().where(D.c.scope_id == scope))
            else:
                conn.execute(D.update().where(D.c.scope_id == scope).values(due_at=NEVER, trigger="wake", **freed))
            return None
        conn.execute(
            D.update()
            .where(D.c.scope_id == scope)
            .values(due_at=DB_NOW + (delay or 0.0), first_wanted_at=DB_NOW, trigger="debounce", **freed)
        )
        return None

    def _release(self, conn: Connection, *, scope: str, claim: Claim, delay: float | None) -> None:
        """After answering only: clear ``ask_at`` if no question came meanwhile and free the row (deleted when
        nothing is left; a delivery during the answers that found no turn pending arms one ``delay`` from now)."""
        row = conn.execute(
            sa.select(D.c.wants, D.c.due_at, D.c.wake_at, D.c.ask_at, D.c.asks)
            .where(D.c.scope_id == scope, D.c.holder == self.owner)
            .with_for_update()
        ).first()
        if row is None:
            return
        ask_at = None if int(row[4]) == claim.asks else row[3]
        idle = row[1] == float("inf")
        if idle and int(row[0]) != claim.wants and delay is not None:
            values = {"due_at": DB_NOW + delay, "first_wanted_at": DB_NOW, "trigger": "debounce"}
        elif idle and row[2] is None and ask_at is None:
            conn.execute(D.delete().where(D.c.scope_id == scope))
            return
        else:
            values = {}
        conn.execute(
            D.update().where(D.c.scope_id == scope).values(holder=None, lease_until=None, ask_at=ask_at, **values)
        )

    def _set(self, key: str, delay: float, job: AlarmJob) -> None:
        if len(self._keys) >= KEYS_KEPT:  # only pending alarms need cancelling at stop: forget the fired ones
            self._keys = {k for k in self._keys if self.alarm.pending(k)}
        self._keys.add(key)
        self.alarm.set(key, max(delay, 0.0), job)

    # -- inspection (tests, ops) ------------------------------------------------------------------------------

    async def rows(self) -> list[dict[str, object]]:
        """Every due row, with ``due_in`` / ``lease_in`` / ``wake_in`` / ``ask_in`` in seconds from the database's
        now (``due_in`` infinite: no debounced turn pending) and ``after_first`` (the due time from the first want
        since the last turn: at most the max wait)."""

        def q(conn: Connection) -> list[dict[str, object]]:
            stmt = sa.select(
                D.c.scope_id,
                D.c.trigger,
                D.c.wants,
                D.c.holder,
                (D.c.due_at - DB_NOW).label("due_in"),
                (D.c.due_at - D.c.first_wanted_at).label("after_first"),
                (D.c.lease_until - DB_NOW).label("lease_in"),
                (D.c.wake_at - DB_NOW).label("wake_in"),
                (D.c.ask_at - DB_NOW).label("ask_in"),
                D.c.asks,
            ).order_by(D.c.scope_id)
            return [dict(r._mapping) for r in conn.execute(stmt)]

        return await self.store.run(q)
