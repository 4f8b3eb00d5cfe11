"""Where a scope's next scheduled turn waits until it runs: the port the scheduler arms turns through.

Two implementations:

- in one process (SQLite, the CLI, tests): the scheduler's own timers on the ``Alarm`` (``agents:turn:<scope>``),
  re-armed from the log at boot; the scheduler uses them when it is given no ``DueTurns``;
- across replicas (PostgreSQL): ``core/store/due_turns_postgres.py``, one ``due_turns`` row per scope with its due
  time on the database clock, claimed by one replica at a time (``FOR UPDATE SKIP LOCKED``) under a lease that a
  dead holder stops renewing, so that another replica runs the turn once the lease has run out.

The scheduler still decides *when* (``TurnScheduler.due``, from the log); a ``DueTurns`` only keeps that time
durable, hands each due scope to one runner, and re-arms it when entries were delivered while its turn ran.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, Protocol

RunTurn = Callable[[str, str], Awaitable[object]]
"""Run the scheduled turn of ``scope`` (``trigger``: debounce | first | max_wait | boot | takeover)."""

DueIn = Callable[[str], Awaitable[float | None]]
"""Seconds until the next turn of ``scope`` is due, from the log (None: nothing pending)."""

Spawn = Callable[[Coroutine[Any, Any, Any]], None]
"""Run a coroutine as a task the scheduler tracks (``idle``, ``stop``)."""


class DueTurns(Protocol):
    async def want(self, scope: str, delay: float, trigger: str) -> None:
        """A turn of ``scope`` is wanted in ``delay`` seconds (a later call moves it: the trailing debounce),
        never later than the max wait after the first call since its last turn. While a turn of ``scope`` runs,
        the call is remembered and the scope re-armed, from the log, when the turn ends."""

    def start(self, run: RunTurn, due_in: DueIn, spawn: Spawn) -> None:
        """Begin running due turns with ``run`` (``due_in`` re-arms a scope after its turn)."""

    async def stop(self) -> None:
        """Stop claiming; a claimed turn that has not finished is left to its lease (another replica runs it)."""
