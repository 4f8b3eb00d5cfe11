"""``decklog serve``: one aiohttp server — Bolt at ``/slack/events``, receivers, the REST API, health and metrics.

``DecklogServer`` is the process's composition root on top of ``Runtime``: it picks the Slack (real over HTTP,
real over Socket Mode, or the local sandbox), builds the Slack client, sender and Bolt app, registers the feature
routes, starts the dispatcher and the scheduler, and stops all of it in reverse order.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import secrets
import signal
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web
from slack_bolt.async_app import AsyncApp
from slack_sdk.web.async_client import AsyncWebClient

from adapters.slack.app import build_http_session, build_slack_app, build_web_client
from adapters.slack.deps import SlackDeps
from adapters.slack.hooks import SlackHooks
from adapters.slack.intake import SlackIntake
from adapters.slack.runner import CommandRunner
from adapters.slack.sender import ChannelPacer, SlackSender
from bot import metrics as prom
from bot.config import DecklogConfig
from bot.runtime import Runtime
from bot.scheduler import SchedulerAlarm
from bot.settings import Settings, SlackMode
from core.clock import Clock
from core.inbox import Inbox
from core.store import SqliteInbox

log = logging.getLogger("decklog")

Feature = Callable[["DecklogServer"], Awaitable[None]]
SANDBOX_ALERTS_CHANNEL = "C0ALERTS"
SERVER_KEY: web.AppKey[DecklogServer] = web.AppKey("decklog")
STOP_GRACE_S = 3.0


def json_error(status: int, message: str) -> web.Response:
    return web.json_response({"error": message}, status=status)


@web.middleware
async def _errors_and_metrics(request: web.Request, handler: Any) -> web.StreamResponse:
    server = request.app[SERVER_KEY]
    route = request.match_info.route.resource.canonical if request.match_info.route.resource else "unmatched"
    started = time.perf_counter()
    try:
        response: web.StreamResponse = await handler(request)
    except web.HTTPException as exc:
        if exc.status >= 400 and exc.content_type != "application/json":
            response = json_error(exc.status, exc.reason or "error")
        else:
            raise
    except Exception:
        ref = secrets.token_hex(5)
        log.exception("unhandled error on %s %s (ref %s)", request.method, request.path, ref)
        response = json_error(500, f"internal error (ref {ref})")
    server.metrics.observe_request(route, request.method, response.status)
    if route == "/slack/events":
        server.metrics.observe_slack_ack(response.status, time.perf_counter() - started)
    return response


class DecklogServer:
    """Start with ``await server.start()``; ``server.url`` is then the base URL (port 0 picks a free port)."""

    def __init__(
        self,
        settings: Settings,
        *,
        socket_mode: bool = False,
        config: DecklogConfig | None = None,
        clock: Clock | None = None,
        features: list[Feature] | None = None,
    ) -> None:
        self.settings = settings
        self.mode: SlackMode = settings.slack_mode(socket_mode=socket_mode)  # fails fast on bad credentials
        self._config = config
        self._clock = clock
        self.features = features if features is not None else default_features()
        self.metrics = prom.Metrics()
        self.web = web.Application(middlewares=[_errors_and_metrics], client_max_size=8 * 1024 * 1024)
        self.web[SERVER_KEY] = self
        self.runtime: Runtime
        self.alarm = SchedulerAlarm()
        self.hooks = SlackHooks()
        self.slack_client: AsyncWebClient
        self.slack_sender: SlackSender
        self.slack_deps: SlackDeps
        self.bolt: AsyncApp
        self.inbox: Inbox
        self.intake: SlackIntake
        self.sandbox: Any = None  # adapters.local.slack.FakeSlack in sandbox mode
        self.socket_handler: Any = None
        self.actions: Any = None  # core.actions.ActionDesk, set by the actions feature
        self.url = ""
        self.started_at = time.time()
        self._runner: web.AppRunner | None = None
        self._http: aiohttp.ClientSession | None = None
        self._background: set[asyncio.Task[Any]] = set()
        self._stoppers: list[Callable[[], Awaitable[None]]] = []
        self.signing_secret: str | None = None
        self._stopped = False

    @property
    def config(self) -> DecklogConfig:
        return self.runtime.config

    # -- lifecycle ----------------------------------------------------------------------------------------------

    async def start(self) -> str:
        self.alarm.start()
        self.runtime = await Runtime.open(self.settings, config=self._config, clock=self._clock, alarm=self.alarm)
        rt = self.runtime
        token, base_url = await self._slack_endpoint()
        self._http = build_http_session()
        self.slack_client = build_web_client(token, base_url, session=self._http)
        alerts_channel = (
            self.settings.alerts_channel
            or rt.config.slack.alerts_channel
            or (SANDBOX_ALERTS_CHANNEL if self.mode == "sandbox" else None)
        )
        self.slack_sender = SlackSender(
            self.slack_client,
            rt.store,
            rt.index,
            alerts_channel=alerts_channel,
            pacer=ChannelPacer(rt.config.slack.pace_per_channel_s),
            channel_prefix=rt.config.slack.dedicated_channel_prefix,
            alarm=self.alarm,
            header_interval=rt.config.slack.header_update_interval_s,
        )
        rt.dispatcher.register(self.slack_sender, first=True)  # what the people in the channel wait for
        counters: dict[str, int] = {}
        deps = SlackDeps(
            rt.service,
            rt.store,
            rt.index,
            self.hooks,
            CommandRunner(rt.service, rt.store, rt.index, self.hooks),
            counters,
            client=self.slack_client,
        )
        self.slack_counters = counters
        self.slack_deps = deps
        # Bolt only routes requests the intake stored and acknowledged (it verified them): no verification here.
        self.bolt = build_slack_app(client=self.slack_client, signing_secret=None, deps=deps)
        self.inbox = await SqliteInbox.open(self.settings.data_dir)
        self.intake = SlackIntake(
            inbox=self.inbox,
            bolt=self.bolt,
            deps=deps,
            signing_secret=None if self.mode == "socket" else self.signing_secret,
        )
        self.web.router.add_post("/slack/events", self._slack_events)
        self.web.router.add_get("/healthz", self._healthz)
        self.web.router.add_get("/metrics", self._metrics)
        for feature in self.features:
            await feature(self)
        self._runner = web.AppRunner(self.web, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.settings.host, self.settings.port)
        await site.start()
        port = self._runner.addresses[0][1]
        self.url = f"http://{self.settings.host}:{port}"
        if self.sandbox is not None:
            self.sandbox.use_http(f"{self.url}/slack/events", self.signing_secret)
        if self.mode == "socket":
            await self._start_socket_mode(base_url)
        rt.dispatcher.start()
        rt.store.refill_spares()
        self.spawn(self._boot_sweep())
        await self.intake.replay()  # acknowledged before a stop or a crash: processed now, oldest first
        self.alarm.every("sweep", 30.0, self._periodic_sweep)
        self.alarm.every("inbox-prune", 3600.0, self._prune_inbox)
        self.spawn(self._prune_inbox())
        return self.url

    async def stop(self) -> None:
        if self._stopped:
            return
        self._stopped = True
        for stopper in reversed(self._stoppers):
            try:
                await stopper()
            except Exception:
                log.exception("error while stopping")
        if self.socket_handler is not None:
            await self.socket_handler.close_async()
        for task in list(self._background):
            task.cancel()
        await asyncio.gather(*self._background, return_exceptions=True)
        if self._runner is not None:
            await self._runner.cleanup()
        if hasattr(self, "slack_deps"):
            # What is unfinished stays in the inbox and is replayed at the next start; the grace only saves a replay.
            cancelled = await self.slack_deps.finish_work(STOP_GRACE_S)
            if cancelled:
                log.info("stopped with %d Slack requests unfinished; they stay in the inbox", cancelled)
        if hasattr(self, "inbox"):
            await self.inbox.close()
        await self.alarm.shutdown()
        if hasattr(self, "runtime"):
            await self.runtime.close()
        if self._http is not None:
            await self._http.close()
        if self.sandbox is not None:
            await self.sandbox.stop()

    def on_stop(self, stopper: Callable[[], Awaitable[None]]) -> None:
        self._stoppers.append(stopper)

    def spawn(self, coro: Awaitable[Any]) -> asyncio.Task[Any]:
        """A background task that is logged if it fails and cancelled at stop (never fire-and-forget)."""
        task: asyncio.Task[Any] = asyncio.ensure_future(coro)
        self._background.add(task)

        def done(t: asyncio.Task[Any]) -> None:
            self._background.discard(t)
            if not t.cancelled() and t.exception() is not None:
                log.error("background task failed", exc_info=t.exception())

        task.add_done_callback(done)
        return task

    async def __aenter__(self) -> DecklogServer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # -- Slack --------------------------------------------------------------------------------------------------

    async def _slack_endpoint(self) -> tuple[str, str]:
        s = self.settings
        if self.mode == "sandbox":
            from adapters.local.slack import FakeSlack

            # Credentials that only the loopback fake accepts: nothing here could reach a real workspace.
            self.signing_secret = secrets.token_hex(16)
            self.sandbox = FakeSlack(bot_token=f"xoxb-sandbox-{secrets.token_hex(8)}")
            await self.sandbox.start()
            return self.sandbox.server.bot_token, self.sandbox.base_url
        assert s.slack_bot_token is not None
        if self.mode == "http":
            assert s.slack_signing_secret is not None
            self.signing_secret = s.slack_signing_secret.get_secret_value()
        return s.slack_bot_token.get_secret_value(), s.slack_base_url

    async def _start_socket_mode(self, base_url: str) -> None:
        from slack_bolt.adapter.socket_mode.aiohttp import AsyncSocketModeHandler

        assert self.settings.slack_app_token is not None
        self.socket_handler = AsyncSocketModeHandler(
            self.bolt,
            app_token=self.settings.slack_app_token.get_secret_value(),
            web_client=AsyncWebClient(base_url=base_url),
        )
        # Bolt's own listener would dispatch before acking; the intake stores the envelope, then acks it.
        self.socket_handler.client.socket_mode_request_listeners[:] = [self.intake.socket_listener()]
        await self.socket_handler.connect_async()

    async def _slack_events(self, request: web.Request) -> web.StreamResponse:
        if self.mode == "socket":
            return json_error(404, "this server talks to Slack over Socket Mode; /slack/events is off")
        answer = await self.intake.http(await request.read(), request.headers)
        if isinstance(answer.body, dict):
            return web.json_response(answer.body, status=answer.status)
        return web.Response(status=answer.status, text=answer.body)

    async def _prune_inbox(self) -> None:
        pruned = await self.inbox.prune()
        if pruned:
            log.info("inbox: forgot %d requests done more than a day ago", pruned)

    # -- sweeps -------------------------------------------------------------------------------------------------

    async def _boot_sweep(self) -> None:
        """Re-arm everything pending in the log (outbox rows of every scope), then refresh open headers."""
        woken = await self.runtime.dispatcher.sweep()
        log.info("boot sweep: %d scopes with pending deliveries", woken)
        self._last_sweep = time.time()

    async def _periodic_sweep(self) -> None:
        """Catch what another process (the CLI) appended: scopes whose index rows moved since the last sweep."""
        rows = await self.runtime.index.list_scopes(open_only=False, limit=10_000)
        since = getattr(self, "_last_sweep", 0.0)
        recent = [r.id for r in rows if r.updated_at and _epoch(r.updated_at) >= since - 60]
        self._last_sweep = time.time()
        await self.runtime.dispatcher.sweep(recent)

    # -- health and metrics -------------------------------------------------------------------------------------

    async def _healthz(self, _request: web.Request) -> web.Response:
        checks: dict[str, str] = {}
        data_dir = Path(self.settings.data_dir)
        probe = data_dir / f".healthz-{os.getpid()}"
        try:
            await asyncio.to_thread(probe.write_bytes, b"ok")
            await asyncio.to_thread(probe.unlink)
            checks["data_dir"] = "writable"
        except OSError as exc:
            checks["data_dir"] = f"not writable: {exc.strerror}"
        try:
            await self.runtime.index.file.write(lambda _c, _x: None)
            checks["index"] = "writable"
        except Exception as exc:
            checks["index"] = f"not writable: {exc}"
        checks["dispatcher"] = "alive" if self.runtime.dispatcher.alive else "stopped"
        ok = checks["data_dir"] == "writable" and checks["index"] == "writable" and checks["dispatcher"] == "alive"
        body = {
            "status": "ok" if ok else "unhealthy",
            "checks": checks,
            "slack": self.mode,
            "uptime_s": round(time.time() - self.started_at, 1),
        }
        return web.json_response(body, status=200 if ok else 503)

    async def _metrics(self, _request: web.Request) -> web.Response:
        rt = self.runtime
        pending: dict[str, float] = {}
        parked: dict[str, float] = {}
        for row in await rt.index.list_scopes(open_only=True, limit=2000):
            try:
                summary = await rt.store.outbox_summary(row.id)
            except Exception:
                continue
            for topic, n in summary.pending.items():
                pending[topic] = pending.get(topic, 0) + n
            for topic, n in summary.parked.items():
                parked[topic] = parked.get(topic, 0) + n
        stats = rt.dispatcher.stats
        inbox_pending = await self.inbox.pending_count()
        m = self.metrics
        text = prom.render(
            [
                (
                    "decklog_http_requests_total",
                    "counter",
                    "HTTP requests by route, method and status",
                    [
                        ({"route": r, "method": meth, "status": str(st)}, float(n))
                        for (r, meth, st), n in sorted(m.requests.items())
                    ],
                ),
                (
                    "decklog_slack_acks_total",
                    "counter",
                    "Responses to Slack deliveries on /slack/events by status",
                    [({"status": str(st)}, float(n)) for st, n in sorted(m.slack_acks.items())],
                ),
                (
                    "decklog_slack_ack_seconds",
                    "summary",
                    "Time to answer a Slack delivery",
                    prom.quantiles(m.ack_latencies),
                ),
                (
                    "decklog_slack_listener_calls_total",
                    "counter",
                    "Slack listener invocations by family",
                    [({"family": k}, float(v)) for k, v in sorted(self.slack_counters.items())],
                ),
                (
                    "decklog_slack_work_in_flight",
                    "gauge",
                    "Acknowledged Slack requests whose work has not finished (waiting for a slot or running)",
                    [({}, float(self.slack_deps.work_in_flight))],
                ),
                (
                    "decklog_inbox_persisted_total",
                    "counter",
                    "Slack requests stored in the inbox before their ack",
                    [({}, float(self.inbox.stats.persisted))],
                ),
                (
                    "decklog_inbox_duplicates_total",
                    "counter",
                    "Slack requests whose key was already in the inbox (retries, duplicates): acked, not processed",
                    [({}, float(self.inbox.stats.duplicates))],
                ),
                (
                    "decklog_inbox_fsyncs_total",
                    "counter",
                    "Durable inbox commits (one fsync each; concurrent requests share one)",
                    [({}, float(self.inbox.stats.fsyncs))],
                ),
                ("decklog_inbox_pending", "gauge", "Stored Slack requests not done yet", [({}, float(inbox_pending))]),
                (
                    "decklog_appends_total",
                    "counter",
                    "Entries appended by this process",
                    [({}, float(rt.store.appended_total))],
                ),
                (
                    "decklog_outbox_pending",
                    "gauge",
                    "Outbox rows waiting for delivery (open scopes)",
                    [({"sender": t}, v) for t, v in sorted(pending.items())],
                ),
                (
                    "decklog_outbox_parked",
                    "gauge",
                    "Outbox rows parked after their retry budget (open scopes)",
                    [({"sender": t}, v) for t, v in sorted(parked.items())],
                ),
                ("decklog_deliveries_total", "counter", "Outbox deliveries", [({}, float(stats.delivered))]),
                (
                    "decklog_delivery_failures_total",
                    "counter",
                    "Failed delivery attempts",
                    [({}, float(stats.failures))],
                ),
                (
                    "decklog_delivery_rate_limited_total",
                    "counter",
                    "Deliveries postponed by a rate limit",
                    [({}, float(stats.rate_limited))],
                ),
                (
                    "decklog_sender_latency_seconds",
                    "summary",
                    "Commit to delivered, per entry",
                    prom.quantiles(stats.latencies),
                ),
                (
                    "decklog_slack_posts_total",
                    "counter",
                    "Messages posted to Slack",
                    [({}, float(self.slack_sender.stats.posts))],
                ),
                (
                    "decklog_slack_updates_total",
                    "counter",
                    "Header updates (chat.update)",
                    [({}, float(self.slack_sender.stats.updates))],
                ),
                (
                    "decklog_open_scope_files",
                    "gauge",
                    "Scope databases open right now",
                    [({}, float(rt.store.open_files))],
                ),
            ]
        )
        return web.Response(text=text, content_type="text/plain", charset="utf-8")


def _epoch(at: str) -> float:
    from core.clock import parse_iso

    return parse_iso(at).timestamp()


def default_features() -> list[Feature]:
    """The feature modules wired into ``decklog serve``; each registers routes, senders and hooks."""
    from bot import features

    return features.all_features()


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
        await server.start()
        # Everything made so far (modules, schemas, the app) lives as long as the process: move it out of the
        # garbage collector's reach, so that a full collection walks only what requests created. Unfrozen, full
        # collections paused the event loop for 120-300 ms under load (acks and deliveries wait behind them).
        gc.collect()
        gc.freeze()
        mode = {
            "sandbox": "the local sandbox workspace",
            "http": "Slack over HTTP",
            "socket": "Slack over Socket Mode",
        }[server.mode]
        print(f"decklog is serving on {server.url} ({mode}); data in {Path(settings.data_dir).resolve()}", flush=True)
        if server.mode == "sandbox":
            print(f"open {server.url}/ in a browser to use the sandbox workspace", flush=True)
        await stop.wait()
        print("decklog: stopping…", flush=True)
        await server.stop()
        return 0

    return asyncio.run(main())
