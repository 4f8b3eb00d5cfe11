"""The sandbox page's HTTP routes: the page itself, the workspace as JSON, live updates, and what a person does.

Every person-level input goes through :class:`~adapters.local.slack.FakeSlack`, which changes the fake workspace
as Slack would and delivers a signed request to the bot's ``/slack/events`` — the production path. The two
sample buttons go to the bot's public receivers (:mod:`adapters.local.sandbox.samples`).

    GET  /                                the page (plain HTML, CSS and JavaScript from this package)
    GET  /sandbox/assets/{name}           its CSS and JavaScript
    GET  /sandbox/state                   workspace_snapshot() + version + sandbox info
    GET  /sandbox/events                  Server-Sent Events fed by the workspace change feed
    GET  /sandbox/files/{id}/{name}       a file the bot uploaded (reports)
    POST /sandbox/message                 {user, channel, text, thread_ts?}: a message, @mention or /incident
    POST /sandbox/action                  {user, channel, ts | view_id, action_id, value?, kind: button|select}
    POST /sandbox/reaction                {user, channel, ts, name, remove?}
    POST /sandbox/view/submit             {user, view_id, values: {block_id: {action_id: value}}}
    POST /sandbox/view/close              {user, view_id}
    POST /sandbox/home                    {user}: open the App Home tab
    POST /sandbox/channel                 {user, name}: create a channel (decklog is invited)
    POST /sandbox/sample/alert            {status?: firing|resolved}
    POST /sandbox/sample/deploy           {user}

Errors are JSON ``{"error": "..."}`` with status 400 (what Slack's client would not let a person do).

Every POST (each one changes the workspace or acts as a person) must come from the page itself: 403 unless it
carries the per-run token the server writes into the page (``<meta name="decklog-sandbox-token">``, sent back as
``X-Decklog-Sandbox-Token``), its ``Origin`` (when sent) is this server's own, and its ``Sec-Fetch-Site`` (when
sent) is ``same-origin``. Served on loopback (the default), a request whose ``Host`` is not a loopback name is
refused too (421), so a DNS-rebinding page cannot read the token. Static files come through
``importlib.resources`` (package data: a wheel install finds them too).
"""

from __future__ import annotations

import hmac
import ipaddress
import re
import secrets
from collections.abc import Awaitable, Callable
from importlib import resources
from typing import Any

from aiohttp import web

from decklog.adapters.local.sandbox.environment import SAMPLE_SERVICE, SandboxEnvironment
from decklog.adapters.local.sandbox.live import LiveFeed
from decklog.adapters.local.sandbox.samples import ALERT_PATH, CHANGE_PATH, SampleSender, installed
from decklog.adapters.local.slack import FakeSlack, FakeSlackWorkspace, Outcome, SlackError, workspace_snapshot
from decklog.adapters.slack.ids import COMMAND

JSON = dict[str, Any]
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

TOKEN_HEADER = "X-Decklog-Sandbox-Token"
TOKEN_PLACEHOLDER = "{{TOKEN}}"
ASSETS = {
    "sandbox.css": "text/css",
    "sandbox.js": "text/javascript",
    "mrkdwn.js": "text/javascript",
    "blocks.js": "text/javascript",
}
PAGE_CSP = (
    "default-src 'self'; img-src 'self' data: http: https:; style-src 'self'; script-src 'self'; "
    "frame-src 'self'; connect-src 'self'; object-src 'none'; base-uri 'none'"
)
_REACTION = re.compile(r"^[a-z0-9_+'-]{1,100}$")
_CHANNEL_REF = re.compile(r"(?<![\w&<#])#([a-z0-9_-]{1,80})\b")


class Invalid(Exception):
    """A request the page should not have sent; answered 400 with the message."""


def _error(status: int, message: str) -> web.Response:
    return web.json_response({"error": message}, status=status)


def _static(name: str) -> bytes:
    return (resources.files("decklog.adapters.local.sandbox") / name).read_bytes()


def _host_is_loopback(request: web.Request) -> bool:
    host = request.host.rsplit(":", 1)[0] if not request.host.endswith("]") else request.host
    name = host.strip("[]").lower().rstrip(".")
    if name == "localhost" or name.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def _refusal(request: web.Request, token: str) -> str | None:
    """Why a POST did not come from this run's page (None: it did)."""
    site = request.headers.get("Sec-Fetch-Site")
    if site is not None and site not in ("same-origin", "none"):
        return f"refused a {site} request (Sec-Fetch-Site: {site}): only the sandbox page may act"
    origin = request.headers.get("Origin")
    if origin is not None and origin != f"{request.scheme}://{request.host}":
        return f"refused a request from origin {origin!r}: only the sandbox page may act"
    sent = request.headers.get(TOKEN_HEADER, "")
    if not sent or not hmac.compare_digest(sent.encode("utf-8"), token.encode("utf-8")):
        return f"the page token is missing or wrong ({TOKEN_HEADER}); reload the sandbox page"
    return None


def _guarded(handler: Handler, token: str) -> Handler:
    async def run(request: web.Request) -> web.StreamResponse:
        refusal = _refusal(request, token)
        if refusal is not None:
            return _error(403, refusal)
        try:
            return await handler(request)
        except (Invalid, SlackError) as exc:  # a SlackError reads "code" or "code: detail"
            return _error(400, str(exc))
        except (LookupError, ValueError, PermissionError) as exc:
            return _error(400, str(exc).strip("'\""))

    return run


async def _body(request: web.Request) -> JSON:
    try:
        data = await request.json()
    except ValueError:
        raise Invalid("the body must be a JSON object") from None
    if not isinstance(data, dict):
        raise Invalid("the body must be a JSON object")
    return data


def _text(data: JSON, name: str, *, required: bool = True) -> str:
    value = data.get(name)
    if value is None or value == "":
        if required:
            raise Invalid(f"{name} is required")
        return ""
    if not isinstance(value, str):
        raise Invalid(f"{name} must be a string")
    return value


def _choice(data: JSON) -> str | list[str] | None:
    value = data.get("value")
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return list(value)
    raise Invalid("value must be a string or a list of strings")


def _done(outcome: Outcome, **extra: Any) -> web.Response:
    """The person's action happened; ``bot_status`` is the HTTP status the bot answered Slack with."""
    body: JSON = {"ok": True, "bot_status": outcome.status, **extra}
    if outcome.message is not None:
        body["ts"] = outcome.message.ts
    if outcome.result is not None:
        body["result"] = outcome.result
    return web.json_response(body)


class SandboxPage:
    def __init__(
        self,
        slack: FakeSlack,
        env: SandboxEnvironment,
        samples: SampleSender,
        live: LiveFeed,
        *,
        routes: Callable[[], set[str]],
        public: bool = False,
    ) -> None:
        self.slack = slack
        self.env = env
        self.samples = samples
        self.live = live
        self._routes = routes
        self.public = public
        """Served on a non-loopback address (DECKLOG_SANDBOX_PUBLIC=1): any Host is accepted."""
        self.token = secrets.token_urlsafe(32)
        """Made per run and written into the page; every POST must send it back."""

    @property
    def workspace(self) -> FakeSlackWorkspace:
        return self.slack.workspace

    def routes(self) -> list[tuple[str, str, Handler]]:
        """(method, path, handler) of every route the page serves."""
        gets: list[tuple[str, str, Handler]] = [
            ("GET", "/", self.index),
            ("GET", "/sandbox/assets/{name}", self.asset),
            ("GET", "/sandbox/state", self.state),
            ("GET", "/sandbox/events", self.live.stream),
            ("GET", "/sandbox/files/{file_id}/{name}", self.file),
        ]
        posts: dict[str, Handler] = {
            "/sandbox/message": self.message,
            "/sandbox/action": self.action,
            "/sandbox/reaction": self.reaction,
            "/sandbox/view/submit": self.submit_view,
            "/sandbox/view/close": self.close_view,
            "/sandbox/home": self.home,
            "/sandbox/channel": self.create_channel,
            "/sandbox/sample/alert": self.sample_alert,
            "/sandbox/sample/deploy": self.sample_deploy,
        }
        routes = gets + [("POST", path, _guarded(handler, self.token)) for path, handler in posts.items()]
        return [(method, path, self._host_checked(handler)) for method, path, handler in routes]

    def _host_checked(self, handler: Handler) -> Handler:
        async def run(request: web.Request) -> web.StreamResponse:
            if not self.public and not _host_is_loopback(request):
                return _error(421, f"the sandbox answers loopback names only, not Host {request.host!r}")
            return await handler(request)

        return run

    # -- the page -------------------------------------------------------------------------------------------

    async def index(self, _request: web.Request) -> web.StreamResponse:
        html = _static("index.html").decode("utf-8").replace(TOKEN_PLACEHOLDER, self.token)
        return web.Response(
            text=html,
            content_type="text/html",
            charset="utf-8",
            headers={
                "Cache-Control": "no-store",
                "Content-Security-Policy": PAGE_CSP,
                "Referrer-Policy": "no-referrer",
            },
        )

    async def asset(self, request: web.Request) -> web.StreamResponse:
        name = request.match_info["name"]
        if name not in ASSETS:
            return _error(404, f"no asset named {name!r}")
        return web.Response(
            body=_static(name),
            headers={"Content-Type": f"{ASSETS[name]}; charset=utf-8", "Cache-Control": "no-cache"},
        )

    async def state(self, _request: web.Request) -> web.Response:
        snapshot = workspace_snapshot(self.workspace)
        snapshot["version"] = self.live.version
        snapshot["sandbox"] = self.info()
        return web.json_response(snapshot)

    def info(self) -> JSON:
        env, routes = self.env, self._routes()
        return {
            "receivers": {"alerts": installed(routes, ALERT_PATH), "changes": installed(routes, CHANGE_PATH)},
            "deploy": {
                "url": env.deploy.base_url,
                "used_by_actions": env.deploy_url_is_sandbox,
                "service": SAMPLE_SERVICE,
                "current": env.deploy.current_version(SAMPLE_SERVICE),
                "history": env.deploy.deploys(SAMPLE_SERVICE)[:6],
            },
            "statuspage": {
                "url": env.statuspage_url,  # without its key
                "used_by_actions": env.statuspage is not None,
                "incidents": len(env.statuspage.incidents) if env.statuspage is not None else 0,
            },
            # Only a token made up for this run is shown (for the curl example); an operator's never is.
            "alert_token": env.alert_token if env.alert_token_generated else None,
            "approvers": list(env.approvers_filled),
        }

    async def file(self, request: web.Request) -> web.StreamResponse:
        try:
            found = self.workspace.files.get(request.match_info["file_id"])
        except SlackError:
            return _error(404, "file_not_found")
        if found.content is None or found.name != request.match_info["name"]:
            return _error(404, "file_not_found")
        return web.Response(
            body=found.content,
            headers={
                "Content-Type": str(found.to_api()["mimetype"]),
                "Content-Security-Policy": "sandbox",  # a report is data: never script on this origin
                "X-Content-Type-Options": "nosniff",
            },
        )

    # -- what a person does ---------------------------------------------------------------------------------

    def _person(self, data: JSON) -> str:
        user = self.workspace.user(_text(data, "user"))
        if user.is_bot:
            raise Invalid("the bot cannot be driven from the page")
        return str(user.id)

    def _channel(self, data: JSON) -> str:
        return str(self.workspace.channel(_text(data, "channel")).id)

    def _as_typed(self, text: str) -> str:
        """What Slack's client sends for typed text: ``&<>`` escaped and ``#channel`` names linked (``@name``
        mentions are encoded by FakeSlack.post_message)."""
        escaped = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
        names = {c.name: c.id for c in self.workspace.directory.channels() if not c.is_im}

        def link(match: re.Match[str]) -> str:
            channel_id = names.get(match.group(1))
            return f"<#{channel_id}|{match.group(1)}>" if channel_id else match.group(0)

        return _CHANNEL_REF.sub(link, escaped)

    async def message(self, request: web.Request) -> web.Response:
        data = await _body(request)
        user, channel = self._person(data), self._channel(data)
        text = _text(data, "text").strip()
        thread_ts = _text(data, "thread_ts", required=False) or None
        if text.startswith("/"):
            command, _, rest = text.partition(" ")
            if command != COMMAND:
                raise Invalid(f"{command} is not a valid command here; decklog's is {COMMAND}")
            # Slack sends a slash command with its channel only, even when typed in a thread.
            outcome = await self.slack.run_command(user, channel, rest.strip(), command=COMMAND)
            return _done(outcome, command=True, in_thread=thread_ts is not None)
        outcome = await self.slack.post_message(user, channel, self._as_typed(text), thread_ts=thread_ts)
        return _done(outcome)

    async def action(self, request: web.Request) -> web.Response:
        data = await _body(request)
        user, action_id, value = self._person(data), _text(data, "action_id"), _choice(data)
        kind = _text(data, "kind", required=False) or "button"
        if kind not in ("button", "select"):
            raise Invalid("kind must be button or select")
        view_id = _text(data, "view_id", required=False)
        if view_id:
            if kind == "button":
                outcome = await self.slack.click_view_button(user, view_id, action_id, value=_one(value))
            else:
                outcome = await self.slack.select_view_option(user, view_id, action_id, value)
            return _done(outcome)
        channel, ts = self._channel(data), _text(data, "ts")
        if kind == "button":
            outcome = await self.slack.click_button(user, channel, ts, action_id, value=_one(value))
        else:
            outcome = await self.slack.select_option(user, channel, ts, action_id, value)
        return _done(outcome)

    async def reaction(self, request: web.Request) -> web.Response:
        data = await _body(request)
        user, channel, ts = self._person(data), self._channel(data), _text(data, "ts")
        name = _text(data, "name").strip(":")
        if not _REACTION.match(name):
            raise Invalid(f"{name!r} is not an emoji name")
        react = self.slack.remove_reaction if data.get("remove") else self.slack.add_reaction
        return _done(await react(user, channel, ts, name))

    async def submit_view(self, request: web.Request) -> web.Response:
        data = await _body(request)
        user, view_id = self._person(data), _text(data, "view_id")
        values = data.get("values") or {}
        if not isinstance(values, dict):
            raise Invalid("values must be an object: {block_id: {action_id: value}}")
        return _done(await self.slack.submit_view(user, view_id, values))

    async def close_view(self, request: web.Request) -> web.Response:
        data = await _body(request)
        return _done(await self.slack.close_view(self._person(data), _text(data, "view_id")))

    async def home(self, request: web.Request) -> web.Response:
        data = await _body(request)
        return _done(await self.slack.open_home(self._person(data)))

    async def create_channel(self, request: web.Request) -> web.Response:
        data = await _body(request)
        user = self._person(data)
        name = _text(data, "name").strip().lstrip("#").lower()
        channel = self.workspace.create_channel(name, creator=user, members=(user, self.workspace.bot_user_id))
        return web.json_response({"ok": True, "channel": channel.id})

    async def sample_alert(self, request: web.Request) -> web.Response:
        data = await _body(request)
        status = _text(data, "status", required=False) or "firing"
        if status not in ("firing", "resolved"):
            raise Invalid("status must be firing or resolved")
        sent = await self.samples.alert("firing" if status == "firing" else "resolved")
        return web.json_response({"ok": 200 <= sent.status < 300, **sent.to_json()})

    async def sample_deploy(self, request: web.Request) -> web.Response:
        data = await _body(request)
        author = self.workspace.user(self._person(data)).name
        sent = await self.samples.deploy(str(author))
        return web.json_response({"ok": 200 <= sent.status < 300, **sent.to_json()})


def _one(value: str | list[str] | None) -> str | None:
    if isinstance(value, list):
        raise Invalid("a button has one value")
    return value
