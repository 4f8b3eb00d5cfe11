"""Where a scope's next scheduled turn waits until it runs: the port the scheduler arms turns through.

Two implementations:

- in one process (SQLite, the CLI, tests): the scheduler's own timers on the ``Alarm`` (``agents:turn:<scope>``),
  re-armed from the log at boot; the scheduler uses them when it is given no ``DueTurns``. A reasoner's wake-up
  is kept as the scope's ``agents``/``wake`` memo (its due time, epoch seconds) and re-armed from it at boot;
  questions are answered from the log (an unanswered ``question`` entry is its own durable record).
- across replicas (PostgreSQL): ``core/store/due_turns_postgres.py``, one ``due_turns`` row per scope with its due
  time on the database clock, claimed by one replica at a time (``FOR UPDATE SKIP LOCKED``) under a lease that a
  dead holder stops renewing, so that another replica runs the turn once the lease has run out. The same row
  holds the scope's wake-up (``wake_at``) and its unanswered questions (``ask_at``): whoever holds the row runs
  all of them, so a wake-up, an answer and a debounced turn of one scope never run at once on two replicas.

The scheduler still decides *when* (``TurnScheduler.due``, from the log); a ``DueTurns`` only keeps that time
durable, hands each due scope to one runner, and re-arms it when entries were delivered while its turn ran.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, Protocol

RunTurn = Callable[[str, str], Awaitable[object]]
"""Run the scheduled turn of ``scope`` (``trigger``: debounce | first | max_wait | boot | takeover, or ``wake``:
a forced turn, run even when nothing new warrants one)."""

DueIn = Callable[[str], Awaitable[float | None]]
"""Seconds until the next turn of ``scope`` is due, from the log (None: nothing pending)."""

Spawn = Callable[[Coroutine[Any, Any, Any]], None]
"""Run a coroutine as a task the scheduler tracks (``idle``, ``stop``)."""

Answer = Callable[[str], Awaitable[object]]
"""Answer every unanswered question of ``scope`` (each once: the runtime answers a question's key once)."""


class DueTurns(Protocol):
    async def want(self, scope: str, delay: float, trigger: str) -> None:
        """A turn of ``scope`` is wanted in ``delay`` seconds (a later call moves it: the trailing debounce),
        never later than the max wait after the first call since its last turn. While a turn of ``scope`` runs,
        the call is remembered and the scope re-armed, from the log, when the turn ends."""

    async def wake(self, scope: str, delay: float) -> None:
        """A reasoner asked for a forced turn of ``scope`` in ``delay`` seconds (replacing an earlier wake-up)."""

    async def ask(self, scope: str) -> None:
        """``scope`` has a question to answer now (the question itself is in the log)."""

    def start(self, run: RunTurn, due_in: DueIn, spawn: Spawn, answer: Answer | None = None) -> None:
        """Begin running due turns with ``run`` (``due_in`` re-arms a scope after its turn; ``answer`` answers
        its questions)."""

    async def stop(self) -> None:
        """Stop claiming; a claimed turn that has not finished is left to its lease (another replica runs it)."""

    async def held(self, scope: str) -> bool:
        """A replica holds ``scope``'s turn now, under a live lease (its progress reaction is not stale)."""
