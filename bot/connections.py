"""How ``decklog serve`` holds its HTTP connections, so that no client can take the server from the others.

- **Idle connections time out** (``KEEPALIVE_S``): a keep-alive connection with no request, and a new connection
  that has not sent a complete request head (a slow-loris client), are closed after that long.
- **A request body must arrive in time** (``BODY_TIMEOUT_S`` from its head; a route may set a shorter deadline of
  its own, as ``/slack/events`` does): a connection whose body is still trickling in is closed.
- **The number of connections is bounded** (``connection_limit``: half the process's file limit, at most
  ``MAX_CONNECTIONS``), so they never exhaust the file descriptors the log, the index and the outgoing HTTP need. A
  connection over the bound closes the longest-idle connection to make room; when every connection is busy with a
  request it is answered 503 and closed.
- **An error the event loop reports is logged once per ``LOG_EVERY_S``** with the count of the ones left out, never
  in a tight loop (Python's accept loop reports ``Too many open files`` hundreds of thousands of times a minute).

``BoundedSite`` accepts connections through ``ConnectionGuard.make_room``; ``ConnectionGuard.middleware`` tells the
guard which connections are busy and enforces the body deadline.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
import resource
import socket
import time
from collections.abc import Callable
from typing import Any

from aiohttp import web
from aiohttp.web_protocol import RequestHandler

log = logging.getLogger("decklog.http")

KEEPALIVE_S = 75.0
BODY_TIMEOUT_S = 60.0
MAX_CONNECTIONS = 1000
MIN_CONNECTIONS = 8
LOG_EVERY_S = 60.0
ACCEPT_RETRY_S = 0.5
REFUSAL = (
    b"HTTP/1.1 503 Service Unavailable\r\n"
    b"Content-Type: application/json; charset=utf-8\r\n"
    b"Retry-After: 5\r\n"
    b"Connection: close\r\n"
    b"Content-Length: %d\r\n\r\n%s"
)


def connection_limit(maximum: int = MAX_CONNECTIONS) -> int:
    """Half the soft ``RLIMIT_NOFILE`` (the other half is the log's, the index's and the outgoing HTTP's), at most
    ``maximum``."""
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return maximum
    return max(MIN_CONNECTIONS, min(maximum, soft // 2))


class Throttled:
    """A log line at most once per ``every`` seconds per key, saying how many were left out since."""

    def __init__(self, logger: logging.Logger, every: float = LOG_EVERY_S) -> None:
        self.logger = logger
        self.every = every
        self._last: dict[str, float] = {}
        self._left_out: dict[str, int] = {}

    def __call__(self, level: int, key: str, message: str, *args: Any) -> bool:
        """Log ``message % args`` unless ``key`` was logged less than ``every`` seconds ago; True if it was logged."""
        suffix = self.gate(key)
        if suffix is None:
            return False
        self.logger.log(level, message + suffix, *args)
        return True

    def gate(self, key: str) -> str | None:
        """None: ``key`` was let through less than ``every`` seconds ago (counted); else "" or the suffix that
        says how many were left out since the last time."""
        now = time.monotonic()
        last = self._last.get(key)
        if last is not None and now - last < self.every:
            self._left_out[key] = self._left_out.get(key, 0) + 1
            return None
        self._last[key] = now
        left_out = self._left_out.pop(key, 0)
        return f" ({left_out} more like it in the last {now - last:.0f} s)" if left_out and last is not None else ""


class LoopErrors:
    """An event-loop exception handler that passes each kind of error on at most once per ``every`` seconds.

    ``install(loop)`` keeps the previous handler (or the loop's default) and ``uninstall`` puts it back."""

    def __init__(self, every: float = LOG_EVERY_S) -> None:
        self.throttle = Throttled(logging.getLogger("asyncio"), every)
        self._previous: Any = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def install(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._previous = loop.get_exception_handler()
        loop.set_exception_handler(self.handle)

    def uninstall(self) -> None:
        if self._loop is not None and self._loop.get_exception_handler() == self.handle:
            self._loop.set_exception_handler(self._previous)
        self._loop = None

    def handle(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        exc = context.get("exception")
        message = str(context.get("message", ""))
        suffix = self.throttle.gate(f"{message}|{type(exc).__name__ if exc is not None else ''}")
        if suffix is None:
            return
        if suffix:
            context = {**context, "message": message + suffix}
        if self._previous is not None:
            self._previous(loop, context)
        else:
            loop.default_exception_handler(context)


class ConnectionGuard:
    """The connection bound and the body deadline (see the module docstring) for one ``web.Server``."""

    def __init__(
        self, *, limit: int | None = None, body_timeout: float = BODY_TIMEOUT_S, throttled: Throttled | None = None
    ) -> None:
        self.limit = limit if limit is not None else connection_limit()
        self.body_timeout = body_timeout
        self.say = throttled or Throttled(log)
        self.server: web.Server | None = None
        self._busy: dict[RequestHandler, int] = {}
        self._since: dict[RequestHandler, float] = {}  # when each connection was last busy (or opened)
        self.evicted = 0
        self.refused = 0
        self.too_slow = 0

    # -- the bound ------------------------------------------------------------------------------------------------

    def protocol_factory(self, server: web.Server) -> Callable[[], asyncio.BaseProtocol]:
        """The server's own factory, remembering when each connection opened (the idle ones go first)."""
        self.server = server

        def make() -> asyncio.BaseProtocol:
            handler = server()
            self._since[handler] = time.monotonic()
            return handler

        return make

    def make_room(self) -> bool:
        """Before a connection is accepted: True if there is room for it (made by closing the longest-idle one
        when the bound is reached), False if every connection is busy with a request."""
        if self._open() < self.limit:
            return True
        return self._evict_idle()

    def refuse(self, conn: socket.socket) -> None:
        """Answer 503 on an accepted socket there is no room for, and close it (its descriptor is freed now)."""
        self.refused += 1
        self.say(logging.WARNING, "refused", "http: refused a connection: all %d connections are busy", self.limit)
        body = b'{"error": "decklog is serving as many connections as it may; try again shortly"}'
        with contextlib.suppress(OSError):
            conn.send(REFUSAL % (len(body), body))
        conn.close()

    def _open(self) -> int:
        assert self.server is not None
        live = self.server.connections
        if len(self._since) > 2 * len(live) + 64:  # forget closed connections now and then
            alive = set(live)
            self._since = {h: t for h, t in self._since.items() if h in alive}
        return sum(1 for h in live if h.transport is not None)

    def _evict_idle(self) -> bool:
        """Close the connection idle the longest (no request in progress); False if every one is busy."""
        assert self.server is not None
        idle = [h for h in self.server.connections if h.transport is not None and not self._busy.get(h)]
        if not idle:
            return False
        oldest = min(idle, key=lambda h: self._since.get(h, 0.0))
        oldest.force_close()
        self._since.pop(oldest, None)
        self.evicted += 1
        self.say(
            logging.WARNING,
            "evicted",
            "http: %d connections open (the limit): closed the one idle the longest to accept a new one",
            self.limit,
        )
        return True

    # -- busy connections and the body deadline -------------------------------------------------------------------

    @web.middleware
    async def middleware(self, request: web.Request, handler: Any) -> web.StreamResponse:
        protocol = request.protocol
        self._busy[protocol] = self._busy.get(protocol, 0) + 1
        timer = None
        if not request.content.is_eof():
            timer = asyncio.get_running_loop().call_later(self.body_timeout, self._body_late, request)
        try:
            response: web.StreamResponse = await handler(request)
            return response
        finally:
            if timer is not None:
                timer.cancel()
            left = self._busy.get(protocol, 1) - 1
            if left > 0:
                self._busy[protocol] = left
            else:
                self._busy.pop(protocol, None)
            if protocol.transport is not None:
                self._since[protocol] = time.monotonic()

    def _body_late(self, request: web.Request) -> None:
        if request.content.is_eof() or request.protocol.transport is None:
            return
        self.too_slow += 1
        self.say(
            logging.WARNING,
            "slow-body",
            "http: closed the connection of %s %s from %s: its body did not arrive within %.0f s",
            request.method,
            request.path,
            request.remote,
            self.body_timeout,
        )
        request.protocol.force_close()


class BoundedSite(web.TCPSite):
    """``web.TCPSite`` that accepts its connections itself, one at a time, through a ``ConnectionGuard``: a
    connection is accepted only when there is room for it, so the file descriptors never run out, and an accept
    error is logged at most once a minute (asyncio's own accept loop, when they do run out, logs it thousands of
    times a second and accepts nothing for a second each time)."""

    def __init__(self, runner: web.BaseRunner, host: str, port: int, *, guard: ConnectionGuard) -> None:
        super().__init__(runner, host, port)
        self.guard = guard
        self._accepting: list[tuple[socket.socket, asyncio.Task[None]]] = []

    async def start(self) -> None:
        await web.BaseSite.start(self)  # registers the site with its runner
        server = self._runner.server
        assert server is not None
        loop = asyncio.get_running_loop()
        # asyncio binds (every address of the host) but does not listen nor accept: the loops below do.
        self._server = await loop.create_server(
            server, self._host or None, self._port, backlog=self._backlog, start_serving=False
        )
        factory = self.guard.protocol_factory(server)
        for listening in self._server.sockets:
            sock = socket.socket(listening.family, listening.type, listening.proto, fileno=os.dup(listening.fileno()))
            sock.setblocking(False)
            sock.listen(self._backlog)  # (asyncio listens only when it serves)
            self._accepting.append((sock, loop.create_task(self._accept(sock, factory), name="http-accept")))
        if self._server.sockets:
            self._bound_port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        for sock, task in self._accepting:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            sock.close()
        self._accepting = []
        await super().stop()

    async def _accept(self, sock: socket.socket, factory: Callable[[], asyncio.BaseProtocol]) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                room = self.guard.make_room()
                conn, _address = await loop.sock_accept(sock)
            except OSError as exc:
                if exc.errno in (errno.ECONNABORTED, errno.EINTR, errno.EAGAIN):
                    continue
                self.guard.say(logging.ERROR, f"accept:{exc.errno}", "http: accepting a connection failed: %s", exc)
                await asyncio.sleep(ACCEPT_RETRY_S)
                continue
            if not room and not self.guard.make_room():
                self.guard.refuse(conn)
                continue
            try:
                await loop.connect_accepted_socket(factory, conn)
            except OSError as exc:
                self.guard.say(logging.WARNING, "connect", "http: a connection failed as it opened: %s", exc)
                conn.close()
