"""A replica's liveness, as PostgreSQL sees it: a session-level advisory lock that goes the moment its connection does.

Each drainer (``Dispatcher.owner``) holds ``pg_advisory_lock(lock_id("holder:" + owner))`` on one dedicated
connection, and pings that connection every ``PING_S`` from its own thread. When the process dies (SIGKILL, a
crash, a lost host) the server ends the session and frees the lock at once, instead of letting the cursor leases
it held run their ``CURSOR_LEASE_S``.

Fencing stays as safe as the lease alone, by the same rule on both sides:

* a ping on the lock's session that succeeds is a lease of ``GRACE_S``, counted on the holder's monotonic clock from
  before the ping was sent; the holder starts no delivery within ``MARGIN_S`` of it (``confirmed_until`` is the
  last moment one may start), as it starts none within ``LEASE_MARGIN_S`` of its cursor lease. A ping that fails
  ends that at once: a holder whose session ended (a dead connection, a restarted server) stops as soon as it
  learns of it, and in any case before anyone takes over;
* a taker that finds a holder's lock free (``take_cursor``) does not take the cursor then: it shortens the lease
  to at most ``GRACE_S`` from that moment on the database clock, and takes it once that ran out. Every ping the
  holder saw succeed was answered before its session ended, so before the taker looked: the holder's last start
  comes at least ``MARGIN_S`` before the taker's first, and a call the holder had on the wire when it died has at
  least ``GRACE_S`` to land before the taker looks for it.

Only owners whose name says they hold such a lock (``LIVE_PREFIX``) are judged by it: a process that does not
(an older version during a rolling upgrade) keeps the plain lease.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import psycopg

from decklog.core.store.postgres.locks import libpq_url, lock_id

log = logging.getLogger(__name__)

#: The lease one confirmed ping gives: a dead holder's cursors move this long after another replica first finds
#: its lock free (decision 176). A call a holder had on the wire when it died has at least this long to land before
#: the taker looks for it: the 2 s a call started at the edge of a cursor lease has (``LEASE_MARGIN_S``).
GRACE_S = 2.0
#: The holder starts no delivery within this of its liveness lease: its run window after each confirmed ping is
#: ``GRACE_S - MARGIN_S``. It spans what one fenced step takes from its check to its effect: one Slack call,
#: checked right before it (decision 121). A holder whose session the server ended while it lives on learns of it
#: at its next ping, ``PING_S`` later, and stops then.
MARGIN_S = 0.5
#: How often the holder confirms its session (seven pings fit in its 1.5 s window: a slow one does not stop it).
PING_S = 0.2
#: The owner names of drainers that hold a liveness lock.
LIVE_PREFIX = "live:"


def holder_lock(owner: str) -> int:
    return lock_id(f"holder:{owner}")


class Liveness:
    """The liveness lock of one owner on its own connection and thread; ``close`` gives it up."""

    def __init__(self, url: str, owner: str) -> None:
        self.url = libpq_url(url)
        self.owner = owner
        self._confirmed_at = float("-inf")  # monotonic time a successful ping was sent
        self._session_at = float("inf")  # monotonic time the current session's lock was granted
        self._stop = threading.Event()
        self._conn: psycopg.Connection[tuple[Any, ...]] | None = None
        self._thread = threading.Thread(target=self._run, name="decklog-liveness", daemon=True)
        self.reconnects = 0

    def start(self) -> None:
        self._thread.start()

    def confirmed_until(self, asked: float) -> float:
        """The monotonic time after which this process must start no delivery under a cursor lease it asked for at
        ``asked``: ``MARGIN_S`` before the liveness lease of its last confirmed ping. A lease asked for before the
        current session began is over: while the lock was gone, another replica may have cut it short (it takes a
        new one, as after a lapse)."""
        if asked < self._session_at:
            return float("-inf")
        return self._confirmed_at + GRACE_S - MARGIN_S

    def close(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)

    # -- on the liveness thread ------------------------------------------------------------------------------

    def _run(self) -> None:
        while not self._stop.is_set():
            sent = time.monotonic()
            try:
                self._ping()
                self._confirmed_at = max(sent, self._session_at)
            except psycopg.Error:
                self._confirmed_at = float("-inf")  # the session may be gone: start nothing until one is confirmed
                log.warning("liveness: the lock connection of %s failed; reconnecting", self.owner, exc_info=True)
                self._drop()
            self._stop.wait(PING_S)
        self._drop()

    def _ping(self) -> None:
        if self._conn is None or self._conn.closed:
            conn = psycopg.connect(self.url, autocommit=True, application_name="decklog-liveness", connect_timeout=5)
            row = conn.execute("SELECT pg_try_advisory_lock(%s)", (holder_lock(self.owner),)).fetchone()
            if not row or not row[0]:  # another session has this owner's lock: never judge by it
                conn.close()
                raise psycopg.OperationalError(f"the liveness lock of {self.owner} is held by another session")
            self._conn = conn
            self._confirmed_at = float("-inf")
            self._session_at = time.monotonic()
            self.reconnects += 1
        self._conn.execute("SELECT 1")

    def _drop(self) -> None:
        if self._conn is not None:
            try:
                self._conn.close()  # the session's lock goes with it
            except psycopg.Error:
                pass
            self._conn = None
