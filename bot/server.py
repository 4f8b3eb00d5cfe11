"""``decklog serve``: one aiohttp server — Bolt at ``/slack/events``, receivers, the REST API, health and metrics.

This is the process: the listening site (bot/connections.py), the middlewares, start and stop. The routes are the
doors the composition root (``bot.wiring.build``) built from the adapters (adapters/http, adapters/slack).

``DecklogServer`` starts what the composition root (``bot.wiring.build``) made and stops it in reverse: the
parts' drains (newest first, while the HTTP server still holds its connections), then the serving layer (Socket
Mode, background tasks, the HTTP server), then what the root opened (the Slack work in flight, the inbox, the
alarm, the runtime, the Slack HTTP session, the fake Slack).
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import secrets
import signal
import time
from collections.abc import Callable, Collection
from pathlib import Path
from typing import Any

from aiohttp import web

from decklog.adapters.http.api import protection_line
from decklog.adapters.http.metrics import ServerMetrics
from decklog.adapters.local.slack import FakeSlack
from decklog.adapters.slack.socket_mode import start_socket_mode
from decklog.bot import diagnostics
from decklog.bot.config import DecklogConfig
from decklog.bot.connections import KEEPALIVE_S, BoundedSite, ConnectionGuard, LoopErrors
from decklog.bot.parts import Stopper, Task, http_url
from decklog.bot.runtime import Runtime
from decklog.bot.settings import Settings, SlackMode
from decklog.bot.wiring import ALL_PARTS, PartName, Parts, build
from decklog.core.clock import Clock

log = logging.getLogger("decklog")

#: How long requests in flight at stop may go on before they are cancelled (aiohttp's default is 60 s, twice).
SHUTDOWN_GRACE_S = 5.0
#: How long each step of ``stop`` (a drain, a stopper, a closer) may take before it is abandoned with a warning.
STOP_STEP_S = 10.0


def json_error(status: int, message: str) -> web.Response:
    return web.json_response({"error": message}, status=status)


def errors_and_metrics(metrics: ServerMetrics) -> Any:
    """Middleware: JSON errors (a 500 carries a reference to the log line), request counts, Slack ack latency."""

    @web.middleware
    async def middleware(request: web.Request, handler: Any) -> web.StreamResponse:
        resource = request.match_info.route.resource
        route = resource.canonical if resource else "unmatched"
        started = time.perf_counter()
        try:
            response: web.StreamResponse = await handler(request)
        except web.HTTPException as exc:
            if exc.status >= 400 and exc.content_type != "application/json":
                response = json_error(exc.status, exc.reason or "error")
            else:
                raise
        except Exception as exc:
            if isinstance(exc, ConnectionResetError) and _client_gone(request):
                # The client went away, or was closed for a body too slow (bot/connections.py): no one to answer
                # (this response is never sent), and nothing to log here.
                response = json_error(400, "the connection closed before the request was read")
            else:
                ref = secrets.token_hex(5)
                log.exception("unhandled error on %s %s (ref %s)", request.method, request.path, ref)
                response = json_error(500, f"internal error (ref {ref})")
        metrics.observe_request(route, request.method, response.status)
        if route == "/slack/events":
            metrics.observe_slack_ack(response.status, time.perf_counter() - started)
        return response

    return middleware


def _client_gone(request: web.Request) -> bool:
    transport = request.transport
    return transport is None or transport.is_closing()


class DecklogServer:
    """Start with ``await server.start()``; ``server.url`` is then the base URL (port 0 picks a free port).

    ``parts`` selects the features (default: all); ``on_built(parts)`` runs after the root built them and before
    anything starts (tests tune a part or add a route there)."""

    def __init__(
        self,
        settings: Settings,
        *,
        socket_mode: bool = False,
        config: DecklogConfig | None = None,
        clock: Clock | None = None,
        parts: Collection[PartName] = ALL_PARTS,
        on_built: Callable[[Parts], None] | None = None,
    ) -> None:
        self.mode: SlackMode = settings.slack_mode(socket_mode=socket_mode)  # fails fast on bad credentials
        self._settings = settings
        self._config = config
        self._clock = clock
        self._selected = parts
        self._on_built = on_built
        self._parts: Parts | None = None
        self._runner: web.AppRunner | None = None
        self._serving: list[Stopper] = []
        self._background: set[asyncio.Task[Any]] = set()
        self._stopped = False
        self.connections = ConnectionGuard()
        self._loop_errors = LoopErrors()

    @property
    def parts(self) -> Parts:
        assert self._parts is not None, "the server is not started"
        return self._parts

    @property
    def settings(self) -> Settings:
        """The settings in effect (with the sandbox's overrides once started)."""
        return self._parts.settings if self._parts is not None else self._settings

    @property
    def runtime(self) -> Runtime:
        """The root's storage core (log store, index, service, dispatcher), for the demo and tests to read; no part
        is given it."""
        return self.parts.runtime

    @property
    def config(self) -> DecklogConfig:
        return self.parts.config

    @property
    def sandbox(self) -> FakeSlack | None:
        """The fake Slack this server talks to in sandbox mode."""
        local = self.parts.local_slack
        return local.slack if local is not None else None

    @property
    def url(self) -> str:
        return self.parts.address.url

    # -- lifecycle ----------------------------------------------------------------------------------------------

    async def start(self) -> str:
        parts = self._parts = await build(
            self._settings, self._config, mode=self.mode, parts=self._selected, clock=self._clock
        )
        if self._on_built is not None:
            self._on_built(parts)
        app = web.Application(
            middlewares=[self.connections.middleware, errors_and_metrics(parts.metrics)],
            client_max_size=8 * 1024 * 1024,
        )
        for route in parts.routes:
            app.router.add_route(route.method, route.path, route.handler)
        self._loop_errors.install(asyncio.get_running_loop())
        self._runner = web.AppRunner(
            app, access_log=None, keepalive_timeout=KEEPALIVE_S, shutdown_timeout=SHUTDOWN_GRACE_S
        )
        await self._runner.setup()
        await BoundedSite(self._runner, parts.settings.host, parts.settings.port, guard=self.connections).start()
        parts.address.url = http_url(parts.settings.host, self._runner.addresses[0][1])
        if parts.local_slack is not None:
            parts.local_slack.slack.use_http(f"{self.url}/slack/events", parts.local_slack.signing_secret)
        if self.mode == "socket":
            assert parts.settings.slack_app_token is not None  # settings.slack_mode checked the credentials
            stop_socket = await start_socket_mode(
                parts.slack.bolt,
                parts.slack.intake,
                app_token=parts.settings.slack_app_token.get_secret_value(),
                base_url=parts.settings.slack_base_url,
            )
            self._serving.append(stop_socket)
        parts.start_delivery()
        for provided in parts.provided:
            for task in provided.tasks:
                self.spawn(task)
        await parts.slack.intake.replay()  # acknowledged before a stop or a crash: processed now, oldest first
        for provided in parts.provided:
            for job in provided.jobs:
                parts.alarm.every(job.name, job.every_s, job.run)
        return self.url

    async def stop(self) -> None:
        if self._stopped or self._parts is None:
            return
        self._stopped = True
        drains = [drain for p in self._parts.provided for drain in p.drains]
        for stopper in [*reversed(drains), *reversed(self._serving)]:
            await _quietly(stopper)
        for task in list(self._background):
            task.cancel()
        if self._background:
            await asyncio.wait(list(self._background), timeout=STOP_STEP_S)
        if self._runner is not None:
            await _quietly(self._runner.cleanup, timeout=3 * SHUTDOWN_GRACE_S)
        for close in reversed(self._parts.closers):
            await _quietly(close)
        self._loop_errors.uninstall()

    def spawn(self, task: Task) -> asyncio.Task[Any]:
        """A background task that is logged if it fails and cancelled at stop (never fire-and-forget)."""
        future: asyncio.Task[Any] = asyncio.ensure_future(task())
        self._background.add(future)

        def done(t: asyncio.Task[Any]) -> None:
            self._background.discard(t)
            if not t.cancelled() and t.exception() is not None:
                log.error("background task failed", exc_info=t.exception())

        future.add_done_callback(done)
        return future

    async def __aenter__(self) -> DecklogServer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()


async def _quietly(stopper: Stopper, *, timeout: float = STOP_STEP_S) -> None:
    """Run one step of ``stop``: an error is logged, and a step that does not end in ``timeout`` is abandoned (a
    stop must end, whatever is in flight)."""
    try:
        await asyncio.wait_for(stopper(), timeout)
    except TimeoutError:
        log.warning(
            "stopping: %s did not finish in %.0f s; going on", getattr(stopper, "__qualname__", stopper), timeout
        )
    except Exception:
        log.exception("error while stopping")


#: Allocations between young collections (CPython's default is 700). A request's objects live for tens of
#: milliseconds while they wait for a commit; at 700 most of them survived a collection or two and were promoted,
#: so the older generations filled with garbage and were collected over and over (decision 119).
GC_GEN0 = 10_000


def freeze_heap() -> None:
    """Once the server has started: everything made so far (modules, schemas, the app) lives as long as the
    process, so move it out of the garbage collector's reach, and a full collection walks only what requests
    created. Unfrozen, full collections paused the event loop for 120-300 ms under load (acks and deliveries wait
    behind them). Then collect the young generation less often (``GC_GEN0``): in the 10,000-alert storm the
    collector's pauses went from 2.5-2.9 s to about 1.0 s. ``decklog serve`` calls it; so do the benches that run
    the server in process."""
    gc.collect()
    gc.freeze()
    _, older, oldest = gc.get_threshold()
    gc.set_threshold(GC_GEN0, older, oldest)


def serve_forever(settings: Settings, *, socket_mode: bool = False) -> int:
    logging.basicConfig(
        level=os.environ.get("DECKLOG_LOG_LEVEL", "INFO").upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        force=True,
    )
    logging.getLogger("apscheduler").setLevel(logging.WARNING)  # it logs every timer it adds at INFO

    async def main() -> int:
        server = DecklogServer(
            settings, socket_mode=socket_mode
        )  # bad credentials: SettingsError, before anything starts
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        diagnostics.install(loop)  # kill -USR1: every task's and thread's stack in the log
        await server.start()
        freeze_heap()
        mode = {
            "sandbox": "the local sandbox workspace",
            "http": "Slack over HTTP",
            "socket": "Slack over Socket Mode",
        }[server.mode]
        print(f"decklog is serving on {server.url} ({mode}); data in {Path(settings.data_dir).resolve()}", flush=True)
        print(protection_line(server.settings.api_token), flush=True)
        if server.mode == "sandbox":
            print(f"open {server.url}/ in a browser to use the sandbox workspace", flush=True)
        await stop.wait()
        print("decklog: stopping…", flush=True)
        await server.stop()
        return 0

    return asyncio.run(main())
