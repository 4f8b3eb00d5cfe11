"""Commits seen by every replica: ``NOTIFY decklog_outbox`` after a commit, ``LISTEN`` in each replica.

``NotifyFeed.publish(scope, topics)`` is called on the event loop after an append committed (the store's own
commit feed, ``PostgresLogStore._notify``). Publications are coalesced — every scope published while the previous
``pg_notify`` was on its way goes into the next one (payload lines ``<replica token>\\t<scope>\\t<topic,…>``) —
and sent on a dedicated autocommit connection, *outside* the append transaction: a notifying transaction would
take PostgreSQL's notification-queue lock at commit and serialise every appender's commit behind it.

``NotifyFeed.listen(callback)`` starts a thread that ``LISTEN``s on another dedicated connection and calls
``callback(scope, topics, drained)`` on the event loop for every other replica's commit (its own are skipped by
token); ``drained`` says whether the committer delivers them itself (a server does; the CLI does not).
A notification can be lost (the committer died between commit and NOTIFY, the listening connection dropped):
the dispatcher's periodic sweep of pending rows (core/outbox/sweeps.py, ``Sweeps.pending``) stays the safety net.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import uuid
from collections.abc import Callable, Collection
from concurrent.futures import ThreadPoolExecutor

import psycopg

from decklog.core.store.postgres.locks import libpq_url

log = logging.getLogger(__name__)

CHANNEL = "decklog_outbox"
PAYLOAD_MAX = 7000  # bytes; PostgreSQL's limit is 8000
RemoteCommit = Callable[[str, tuple[str, ...], bool], None]  # (scope, topics, the committer drains them itself)


def encode(token: str, pending: dict[str, set[str]], *, drains: bool = False) -> list[str]:
    """Payloads (each under ``PAYLOAD_MAX`` bytes) naming every scope and its topics; ``drains``: the committer
    runs a dispatcher that delivers them (a server), else nobody there will (the CLI)."""
    out: list[str] = []
    lines: list[str] = []
    size = 0
    for scope, topics in pending.items():
        line = f"{token}\t{scope}\t{','.join(sorted(topics))}\t{'d' if drains else '-'}"
        if lines and size + len(line.encode()) + 1 > PAYLOAD_MAX:
            out.append("\n".join(lines))
            lines, size = [], 0
        lines.append(line)
        size += len(line.encode()) + 1
    if lines:
        out.append("\n".join(lines))
    return out


def decode(payload: str, own: str) -> list[tuple[str, tuple[str, ...], bool]]:
    """(scope, topics, the committer drains them) of each line of another replica (malformed lines are dropped)."""
    found: list[tuple[str, tuple[str, ...], bool]] = []
    for line in payload.split("\n"):
        parts = line.split("\t")
        if len(parts) == 4 and parts[0] != own and parts[1]:
            found.append((parts[1], tuple(t for t in parts[2].split(",") if t), parts[3] == "d"))
    return found


class NotifyFeed:
    def __init__(self, url: str) -> None:
        self.url = libpq_url(url)
        self.token = uuid.uuid4().hex[:12]  # this process's store: its own notifications are not news
        self._pending: dict[str, set[str]] = {}
        self._sending: asyncio.Task[None] | None = None
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="decklog-pg-notify")
        self._conn: psycopg.Connection[tuple[object, ...]] | None = None
        self._stop = threading.Event()
        self._listener: threading.Thread | None = None
        self._callbacks: list[RemoteCommit] = []  # every listener on this store (one thread serves them all)
        self.sent = 0
        self.received = 0

    # -- publishing -------------------------------------------------------------------------------------------

    def publish(self, scope: str, topics: Collection[str]) -> None:
        if self._stop.is_set():
            return
        self._pending.setdefault(scope, set()).update(topics)
        if self._sending is None or self._sending.done():
            self._sending = asyncio.get_running_loop().create_task(self._send_all(), name="pg-notify")

    async def _send_all(self) -> None:
        loop = asyncio.get_running_loop()
        while self._pending:
            pending, self._pending = self._pending, {}
            try:
                payloads = encode(self.token, pending, drains=self._listener is not None)
                await loop.run_in_executor(self._executor, self._send, payloads)
            except Exception:  # the sweep delivers what this notification would have woken
                log.warning("commit feed: NOTIFY failed; other replicas find these rows by their poll", exc_info=True)

    def _send(self, payloads: list[str]) -> None:
        if self._conn is None or self._conn.closed:
            self._conn = psycopg.connect(self.url, autocommit=True, application_name="decklog-notify")
        try:
            for payload in payloads:
                self._conn.execute("SELECT pg_notify(%s, %s)", (CHANNEL, payload))
                self.sent += 1
        except psycopg.OperationalError:
            self._conn = None
            raise

    async def flush(self) -> None:
        while self._sending is not None and not self._sending.done():
            await asyncio.shield(self._sending)

    # -- listening --------------------------------------------------------------------------------------------

    def listen(self, callback: RemoteCommit) -> None:
        """Call ``callback(scope, topics, drained)`` on this event loop for each commit another replica notifies
        (every callback registered, on the loop of the first: one LISTEN connection per store)."""
        self._callbacks.append(callback)
        if self._listener is not None:
            return
        loop = asyncio.get_running_loop()
        self._listener = threading.Thread(target=self._listen, args=(loop, self._fan_out), name="decklog-pg-listen")
        self._listener.daemon = True
        self._listener.start()

    def _fan_out(self, scope: str, topics: tuple[str, ...], drained: bool) -> None:
        for callback in list(self._callbacks):
            callback(scope, topics, drained)

    def _listen(self, loop: asyncio.AbstractEventLoop, callback: RemoteCommit) -> None:
        pause = 0.1
        while not self._stop.is_set():
            try:
                with psycopg.connect(self.url, autocommit=True, application_name="decklog-listen") as conn:
                    conn.execute(f"LISTEN {CHANNEL}")
                    pause = 0.1
                    while not self._stop.is_set():
                        for n in conn.notifies(timeout=0.5):
                            for scope, topics, drained in decode(n.payload, self.token):
                                self.received += 1
                                loop.call_soon_threadsafe(callback, scope, topics, drained)
            except psycopg.Error:
                log.warning("commit feed: the LISTEN connection failed; reconnecting (the poll covers the gap)")
                self._stop.wait(pause)
                pause = min(pause * 2, 5.0)
            except RuntimeError:  # the event loop is closed: the process is ending
                return

    async def close(self) -> None:
        if self._stop.is_set():
            return  # closed already
        await self.flush()
        self._stop.set()
        if self._listener is not None:
            await asyncio.get_running_loop().run_in_executor(None, self._listener.join, 5.0)

        def shut() -> None:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

        await asyncio.get_running_loop().run_in_executor(self._executor, shut)
        self._executor.shutdown(wait=True)
