"""``FakeSlackServer``: Slack's Web API, file uploads, ``response_url`` and Socket Mode on a loopback port.

Point the real clients at it: ``AsyncWebClient(token="xoxb-...", base_url=await server.start())``. Pace channels
like Slack with ``rate_limit_channels``. Every request passes through ``middlewares`` (aiohttp middlewares, outermost
first, read at each request): whoever runs the fake may observe or change what a request gets there. The fake itself
keeps no record of the calls and injects no faults; tests do both that way (``tests/fakes/slack_calls.py``,
``tests/fakes/slack_faults.py``).

>>> async with FakeSlackServer() as server:          # doctest: +SKIP
...     client = AsyncWebClient(token="xoxb-test", base_url=server.base_url)
...     await client.chat_postMessage(channel="C0ALERTS", text="hi")
...     assert server.workspace.history("C0ALERTS")[-1].text == "hi"
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from types import TracebackType
from typing import Any, Self, TypeVar

from aiohttp import web

from .errors import SlackError
from .methods import CallContext, method_table
from .pacing import ChannelPacer
from .responses import RecordedResponse, ResponseTarget, ResponseUrls
from .socket_mode import SocketModeHub
from .wire import Args, read_args
from .workspace import FakeSlackWorkspace

__all__ = ["FakeSlackServer", "Handler", "Middleware"]

JSON = dict[str, Any]
T = TypeVar("T")
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
Middleware = Callable[[web.Request, Handler], Awaitable[web.StreamResponse]]
"""An aiohttp middleware: ``await middleware(request, handler)`` answers the request, calling ``handler`` or not."""
_SCOPES = (
    "app_mentions:read,channels:history,channels:join,channels:manage,channels:read,chat:write,commands,"
    "files:read,files:write,groups:history,groups:read,im:history,im:write,reactions:read,reactions:write,"
    "users:read"
)


class FakeSlackServer:
    def __init__(
        self,
        workspace: FakeSlackWorkspace | None = None,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        bot_token: str | None = None,
        app_token: str | None = None,
        middlewares: Sequence[Middleware] = (),
    ) -> None:
        """``bot_token``/``app_token``: when given, only that exact token is valid; otherwise any ``xoxb-`` /
        ``xapp-`` token is accepted. ``middlewares``: the first ones of ``self.middlewares``."""
        self.workspace = workspace or FakeSlackWorkspace()
        self.host = host
        self.port = port
        self.bot_token = bot_token
        self.app_token = app_token
        self.middlewares: list[Middleware] = list(middlewares)
        """Every request passes through these, outermost first; read at each request, so one added later applies
        to the requests after it."""
        self.socket = SocketModeHub(identity=self.workspace.identity)
        self._response_urls = ResponseUrls(self.workspace)
        self._methods = method_table()
        self._pacer: ChannelPacer | None = None
        self._runner: web.AppRunner | None = None
        self._root = ""

    # -- lifecycle -------------------------------------------------------------------------------------------

    async def start(self) -> str:
        """Starts listening; returns the Web API base URL ``http://127.0.0.1:PORT/api/``."""
        if self._runner is not None:
            return self.base_url
        app = web.Application(client_max_size=64 * 1024 * 1024, middlewares=[self._through_middlewares])
        app.router.add_get("/socket", self.socket.handle)
        app.router.add_route("*", "/api/{method}", self._handle_api)
        app.router.add_post("/upload/v1/{file_id}", self._handle_upload)
        app.router.add_get("/files/{file_id}/{name}", self._handle_download)
        app.router.add_post("/actions/{team}/{rid}/{token}", self._handle_response_url)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, self.host, self.port)
        await site.start()
        self._runner = runner
        host, port = runner.addresses[0][:2]
        self.port = port
        self._root = f"http://{host}:{port}/"
        return self.base_url

    async def stop(self) -> None:
        if self._runner is None:
            return
        await self.socket.close()
        await self._runner.cleanup()
        self._runner = None

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.stop()

    @property
    def root_url(self) -> str:
        """``http://127.0.0.1:PORT/``."""
        if not self._root:
            raise RuntimeError("the fake Slack server is not started")
        return self._root

    @property
    def base_url(self) -> str:
        """The Web API base URL for ``AsyncWebClient(base_url=...)``: ``http://127.0.0.1:PORT/api/``."""
        return f"{self.root_url}api/"

    # -- inspection ------------------------------------------------------------------------------------------

    @property
    def responses(self) -> list[RecordedResponse]:
        """Every body POSTed to a ``response_url`` (Bolt's ``respond()``), oldest first."""
        return self._response_urls.responses

    # -- pacing --------------------------------------------------------------------------------------------

    def rate_limit_channels(self, burst: int | None = 3, per_second: float = 1.0) -> None:
        """Paces ``chat.postMessage`` per channel like Slack (a burst, then ``per_second``); ``None``: off."""
        self._pacer = None if burst is None else ChannelPacer(burst=burst, per_second=per_second)

    # -- response_url and Socket Mode ------------------------------------------------------------------------

    def response_url(
        self,
        channel: str,
        user: str,
        *,
        message_ts: str | None = None,
        is_ephemeral: bool = False,
        thread_ts: str | None = None,
    ) -> str:
        """A ``response_url`` on this server for a command or interaction by ``user`` in ``channel``."""
        target = ResponseTarget(channel, user, message_ts, is_ephemeral, thread_ts)
        return self._response_urls.issue(self.root_url, target)

    async def socket_send(
        self,
        type: str,
        payload: JSON,
        *,
        timeout: float = 5.0,
        accepts_response_payload: bool | None = None,
        retry_attempt: int | None = None,
        retry_reason: str | None = None,
    ) -> JSON:
        """Delivers an envelope (``slash_commands``/``interactive``/``events_api``) and returns the ack."""
        return await self.socket.send(
            type,
            payload,
            timeout=timeout,
            accepts_response_payload=accepts_response_payload,
            retry_attempt=retry_attempt,
            retry_reason=retry_reason,
        )

    async def socket_disconnect(self, reason: str = "refresh_requested") -> None:
        await self.socket.disconnect(reason)

    async def wait_socket_connected(self, timeout: float = 5.0) -> None:
        await self.socket.wait_connected(timeout=timeout)

    # -- HTTP handlers ---------------------------------------------------------------------------------------

    @web.middleware
    async def _through_middlewares(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        call = handler
        for middleware in reversed(self.middlewares):
            call = _wrapped(middleware, call)
        return await call(request)

    def _answer(self, body: JSON, *, status: int = 200, headers: dict[str, str] | None = None) -> web.Response:
        return web.json_response(
            body,
            status=status,
            headers={"X-OAuth-Scopes": _SCOPES, "X-Accepted-OAuth-Scopes": "", **(headers or {})},
        )

    def _auth_error(self, method: str, token: str | None) -> str | None:
        if not token:
            return "not_authed"
        if method == "apps.connections.open":
            if not token.startswith("xapp-"):
                return "not_allowed_token_type"
            return "invalid_auth" if self.app_token and token != self.app_token else None
        if token.startswith("xapp-"):
            return "not_allowed_token_type"
        if not token.startswith("xoxb-") or (self.bot_token and token != self.bot_token):
            return "invalid_auth"
        return None

    async def _handle_api(self, request: web.Request) -> web.StreamResponse:
        method = request.match_info["method"]
        try:
            raw = await read_args(request)
        except SlackError as exc:
            return self._answer(exc.body())
        header = request.headers.get("Authorization", "")
        token = header[7:].strip() if header.lower().startswith("bearer ") else None
        token = token or (str(raw["token"]) if raw.get("token") else None)
        raw.pop("token", None)
        handler = self._methods.get(method)
        if handler is None:
            return self._answer({"ok": False, "error": "unknown_method"})
        auth_error = self._auth_error(method, token)
        if auth_error:
            return self._answer({"ok": False, "error": auth_error})
        retry_after = self._paced(method, raw)
        if retry_after is not None:
            return self._ratelimited(retry_after)
        ctx = CallContext(
            workspace=self.workspace,
            args=Args(raw),
            base_url=self.root_url,
            token=str(token),
            socket_url=lambda: self.socket.issue_url(self.root_url.replace("http://", "ws://", 1)),
        )
        try:
            body = handler(ctx)
        except SlackError as exc:
            body = exc.body()
        return self._answer(body)

    def _ratelimited(self, retry_after: int) -> web.Response:
        body = {"ok": False, "error": "ratelimited"}
        return self._answer(body, status=429, headers={"Retry-After": str(retry_after)})

    def _paced(self, method: str, raw: JSON) -> int | None:
        if self._pacer is None or method != "chat.postMessage":
            return None
        try:
            channel = self.workspace.channel(str(raw.get("channel", ""))).id
        except SlackError:
            return None  # the handler answers channel_not_found
        return self._pacer.admit(channel)

    async def _handle_upload(self, request: web.Request) -> web.StreamResponse:
        file_id = request.match_info["file_id"]
        file = self.workspace.files.find(file_id)
        if file is None:
            return web.Response(status=404, text="file_not_found", content_type="text/plain")
        if request.content_type == "multipart/form-data":
            form = await request.post()
            field = next((v for v in form.values() if isinstance(v, web.FileField)), None)
            content = field.file.read() if field is not None else b""
        else:
            content = await request.read()
        self.workspace.files.receive(file_id, content)
        return web.Response(text=f"OK - {len(content)}", content_type="text/plain")

    async def _handle_download(self, request: web.Request) -> web.StreamResponse:
        file = self.workspace.files.find(request.match_info["file_id"])
        if file is None or file.content is None:
            raise web.HTTPNotFound(text="file_not_found")
        mimetype = str(file.to_api()["mimetype"])
        return web.Response(body=file.content, content_type=mimetype)

    async def _handle_response_url(self, request: web.Request) -> web.StreamResponse:
        try:
            body = await request.json()
        except ValueError:
            body = dict(await request.post())
        if not isinstance(body, dict):
            return web.Response(status=400, text="invalid_payload", content_type="text/plain")
        status, text = self._response_urls.respond(request.match_info["token"], str(request.url), body)
        return web.Response(status=status, text=text, content_type="text/plain")


def _wrapped(middleware: Middleware, handler: Handler) -> Handler:
    async def call(request: web.Request) -> web.StreamResponse:
        return await middleware(request, handler)

    return call
