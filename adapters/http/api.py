"""The read-only REST API (DESIGN §9): scopes, their timelines and their reports, as JSON over HTTP.

    GET /api/scopes?kind=&status=&severity=&text=&limit=
    GET /api/scopes/{kind}/{name}
    GET /api/scopes/{kind}/{name}/timeline?after=SEQ&limit=N[&kind=K,K]
    GET /api/scopes/{kind}/{name}/report.{md,json,html}
    GET /api/insights?since=DAYS                  (core/insights.py)
    GET /api/search?q=TEXT&limit=N                (core/search.py)

Every error is ``{"error": "..."}`` with its status: 400 (a bad parameter, named), 401 (a bearer token is
required when ``DECKLOG_API_TOKEN`` is set), 404 (no such scope or route), 405 (only GET and HEAD). Reading a
report appends nothing: a GET is safe, so only explicit exports (CLI, Slack) are recorded in the log.

Without ``DECKLOG_API_TOKEN`` the API answers a request only when it cannot have come from elsewhere (401 with
the reason otherwise): its peer is a loopback address, its ``Host`` header names a loopback address (a page that
DNS rebinding points at 127.0.0.1 still sends its own name), and it carries no forwarding header (``Forwarded``,
``X-Forwarded-*``, ``X-Real-IP``, ``Via``, …: a proxy on the same host makes every client look loopback).
``protection_line`` is the start-up line that says which of the two applies.
"""

from __future__ import annotations

import hmac
import ipaddress
import re
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web
from pydantic import SecretStr

from decklog.adapters.http.hosts import is_loopback_host
from decklog.core.clock import Clock
from decklog.core.entries import CHANGE_STATUSES, INCIDENT_STATUSES, PAYLOADS
from decklog.core.errors import InvalidInput, NotFound
from decklog.core.ids import SCOPE_KINDS, ScopeId
from decklog.core.insights import DEFAULT_DAYS, parse_days
from decklog.core.insights import compute as compute_insights
from decklog.core.reports import FORMATS, MEDIA_TYPES, filename
from decklog.core.reports.export import render_report
from decklog.core.reports.templating import ReportTemplates
from decklog.core.search import SEARCH_LIMIT, SEARCH_MAX, SEARCH_MAX_LEN, search_incidents
from decklog.core.service import parse_severity
from decklog.core.state import ScopeState
from decklog.core.store.ports import IndexPort, LogStore, ScopeRow

PREFIX = "/api/scopes"
ALLOWED = "GET, HEAD"
STATUSES = ("open", "recorded", *INCIDENT_STATUSES, *CHANGE_STATUSES)
MAX_SEQ = 2**53
LIST_LIMIT, LIST_MAX = 100, 500
TIMELINE_LIMIT, TIMELINE_MAX = 100, 1000
_INT = re.compile(r"^[0-9]{1,16}$")

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class ApiError(Exception):
    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers = headers or {}


def error(status: int, message: str, headers: dict[str, str] | None = None) -> web.Response:
    return web.json_response({"error": message}, status=status, headers=headers)


# -- query parameters ---------------------------------------------------------------------------------------------


class Query:
    """The query string, checked: unknown or repeated parameters are refused, each error names its parameter."""

    def __init__(self, request: web.Request, known: tuple[str, ...]) -> None:
        self.values: dict[str, str] = {}
        for name in request.query:
            if name not in known:
                allowed = ", ".join(known) if known else "none"
                raise InvalidInput(f"unknown query parameter {name!r} (allowed: {allowed})", field=name)
            values = request.query.getall(name)
            if len(values) > 1:
                raise InvalidInput("given more than once", field=name)
            self.values[name] = values[0]

    def text(self, name: str, *, max_len: int = 200) -> str | None:
        value = self.values.get(name)
        if value is None:
            return None
        value = value.strip()
        if not value:
            raise InvalidInput("must not be empty", field=name)
        if len(value) > max_len:
            raise InvalidInput(f"at most {max_len} characters", field=name)
        return value

    def integer(self, name: str, *, default: int, low: int, high: int) -> int:
        raw = self.values.get(name)
        if raw is None:
            return default
        if not _INT.match(raw.strip()):
            raise InvalidInput(f"must be an integer from {low} to {high}, not {raw!r}", field=name)
        value = int(raw.strip())
        if not low <= value <= high:
            raise InvalidInput(f"must be from {low} to {high}, not {value}", field=name)
        return value

    def choice(self, name: str, choices: tuple[str, ...]) -> str | None:
        value = self.text(name)
        if value is not None and value not in choices:
            raise InvalidInput(f"must be one of {', '.join(choices)}, not {value!r}", field=name)
        return value


# -- shapes -------------------------------------------------------------------------------------------------------


def row_of(state: ScopeState) -> ScopeRow:
    """The listing row of a scope, from its (fresher) state rather than the index."""
    thread = state.thread
    return ScopeRow(
        id=state.scope,
        kind=state.kind,
        title=state.title,
        status=state.status,
        severity=state.severity,
        services=state.services,
        created_at=state.created_at,
        updated_at=state.updated_at,
        resolved_at=state.resolved_at,
        version=state.version,
        thread_channel=thread.channel if thread else "",
        thread_ts=thread.ts if thread else "",
        permalink=thread.permalink if thread else "",
        pending_approvals=sum(1 for p in state.proposals.values() if p.status == "waiting_for_approval"),
    )


def links(scope: str) -> dict[str, Any]:
    base = f"{PREFIX}/{scope}"
    return {
        "self": base,
        "timeline": f"{base}/timeline",
        "reports": {fmt: f"{base}/report.{fmt}" for fmt in FORMATS},
    }


def scope_json(state: ScopeState) -> dict[str, Any]:
    body = row_of(state).to_json()
    body.update(
        acknowledged_at=state.acknowledged_at or None,
        mitigated_at=state.mitigated_at or None,
        roles={role: {"user_id": h.user_id, "user_name": h.user_name} for role, h in sorted(state.roles.items())},
        linked=list(state.linked),
        obligations=[
            {
                "id": o.id,
                "text": o.text,
                "purpose": o.purpose,
                "status": o.status,
                "holder": o.holder or None,
                "fence": o.fence,
            }
            for o in state.obligations.values()
        ],
        proposals=[
            {"id": p.id, "action": p.action, "risk": p.risk, "status": p.status, "approvals": list(p.approvals)}
            for p in state.proposals.values()
        ],
        alerts={"firing": len(state.firing_alerts), "total": len(state.alerts)},
        links=links(state.scope),
    )
    return body


# -- the API ------------------------------------------------------------------------------------------------------


class ScopesApi:
    def __init__(
        self, store: LogStore, index: IndexPort, token: SecretStr | None, *, templates: ReportTemplates | None = None
    ) -> None:
        self.store = store
        self.index = index
        self.templates = templates
        self.token = token.get_secret_value().encode("utf-8") if token is not None else None

    def guard(self, handler: Handler) -> Handler:
        """Method check (405), bearer token (401), then the handler; core errors become 400 / 404."""

        async def guarded(request: web.Request) -> web.StreamResponse:
            try:
                if request.method not in ("GET", "HEAD"):
                    raise ApiError(
                        405, f"{request.method} is not allowed here (allowed: {ALLOWED})", {"Allow": ALLOWED}
                    )
                self._authorize(request)
                return await handler(request)
            except ApiError as exc:
                return error(exc.status, exc.message, exc.headers)
            except InvalidInput as exc:
                return error(400, exc.message)
            except NotFound as exc:
                return error(404, exc.message)

        return guarded

    def _authorize(self, request: web.Request) -> None:
        if self.token is None:
            reason = _not_loopback(request)
            if reason is not None:
                raise ApiError(
                    401,
                    f"{reason}: without DECKLOG_API_TOKEN the API answers loopback clients only "
                    "(set DECKLOG_API_TOKEN and send Authorization: Bearer <token>)",
                    {"WWW-Authenticate": 'Bearer realm="decklog"'},
                )
            return
        scheme, _, credentials = request.headers.get("Authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not credentials.strip():
            raise ApiError(401, "a bearer token is required", {"WWW-Authenticate": 'Bearer realm="decklog"'})
        if not hmac.compare_digest(credentials.strip().encode("utf-8"), self.token):
            raise ApiError(
                401,
                "the bearer token is not valid",
                {"WWW-Authenticate": 'Bearer realm="decklog", error="invalid_token"'},
            )

    async def _state(self, request: web.Request) -> ScopeState:
        kind, name = request.match_info["kind"], request.match_info["name"]
        try:
            scope = str(ScopeId.parse(f"{kind}/{name}"))
        except InvalidInput:
            raise NotFound(f"no such scope: {kind}/{name}") from None
        state: ScopeState = await self.store.get_state(scope)
        return state

    # -- routes ---------------------------------------------------------------------------------------------------

    async def list_scopes(self, request: web.Request) -> web.StreamResponse:
        q = Query(request, ("kind", "status", "severity", "text", "limit"))
        kind = q.choice("kind", SCOPE_KINDS)
        status = q.choice("status", STATUSES)
        sev = q.text("severity", max_len=10)
        severity = parse_severity(sev, field="severity") if sev is not None else None
        text = q.text("text")
        limit = q.integer("limit", default=LIST_LIMIT, low=1, high=LIST_MAX)
        rows = await self.index.list_scopes(
            kind=kind,
            status=None if status == "open" else status,
            open_only=status == "open",
            severity=severity,
            text=text,
            limit=limit + 1,
        )
        more = len(rows) > limit  # a list cut at ``limit`` says so: ask again with a larger one
        rows = rows[:limit]
        return web.json_response({"scopes": [r.to_json() for r in rows], "count": len(rows), "more": more})

    async def get_scope(self, request: web.Request) -> web.StreamResponse:
        Query(request, ())
        return web.json_response(scope_json(await self._state(request)))

    async def timeline(self, request: web.Request) -> web.StreamResponse:
        q = Query(request, ("after", "limit", "kind"))
        after = q.integer("after", default=0, low=0, high=MAX_SEQ)
        limit = q.integer("limit", default=TIMELINE_LIMIT, low=1, high=TIMELINE_MAX)
        kinds: list[str] = []
        raw_kinds = q.text("kind", max_len=2000)
        if raw_kinds is not None:
            kinds = [k.strip() for k in raw_kinds.split(",") if k.strip()]
            unknown = [k for k in kinds if k not in PAYLOADS]
            if unknown or not kinds:
                raise InvalidInput(f"unknown entry kind {(unknown or [raw_kinds])[0]!r}", field="kind")
        state = await self._state(request)
        entries = await self.store.read(state.scope, after=after, limit=limit + 1, kinds=kinds)
        more = len(entries) > limit
        entries = entries[:limit]
        cursor = entries[-1].seq if more else None
        body: dict[str, Any] = {
            "scope": state.scope,
            "entries": [e.to_json() for e in entries],
            "next": cursor,
            "next_url": None,
        }
        if cursor is not None:
            extra = f"&kind={','.join(kinds)}" if kinds else ""
            body["next_url"] = f"{PREFIX}/{state.scope}/timeline?after={cursor}&limit={limit}{extra}"
        return web.json_response(body)

    async def report(self, request: web.Request) -> web.StreamResponse:
        Query(request, ())
        fmt = request.match_info["fmt"]
        if fmt not in FORMATS:
            raise NotFound(f"no such report format: {fmt!r} (one of: {', '.join(FORMATS)})")
        state = await self._state(request)
        body, sha, parsed = await render_report(self.store, state.scope, fmt, templates=self.templates)
        etag = f'"{sha}"'
        headers = {
            "ETag": etag,
            "X-Decklog-Report-Sha256": sha,
            "Cache-Control": "no-cache",
            "Content-Disposition": f'inline; filename="{filename(state.scope, parsed)}"',
        }
        if etag in [t.strip() for t in request.headers.get("If-None-Match", "").split(",")]:
            return web.Response(status=304, headers=headers)
        headers["Content-Type"] = MEDIA_TYPES[parsed]
        return web.Response(body=body, headers=headers)

    async def no_route(self, request: web.Request) -> web.StreamResponse:
        try:
            self._authorize(request)  # every /api request is authorized, even one for no route
        except ApiError as exc:
            return error(exc.status, exc.message, exc.headers)
        return error(404, f"no such API route: {request.path}")


# -- insights and search ------------------------------------------------------------------------------------------


class InsightsApi:
    """``GET /api/insights?since=DAYS`` and ``GET /api/search?q=TEXT&limit=N`` (behind ``ScopesApi.guard``)."""

    def __init__(self, index: IndexPort, clock: Clock) -> None:
        self.index = index
        self.clock = clock

    async def insights(self, request: web.Request) -> web.StreamResponse:
        q = Query(request, ("since",))
        raw = q.text("since", max_len=10)
        days = parse_days(raw) if raw is not None else DEFAULT_DAYS
        body = await compute_insights(self.index, since_days=days, now=self.clock.now().timestamp())
        return web.json_response(body)

    async def search(self, request: web.Request) -> web.StreamResponse:
        q = Query(request, ("q", "limit"))
        text = q.text("q", max_len=SEARCH_MAX_LEN)
        if text is None:
            raise InvalidInput("is required: the words to search for", field="q")
        limit = q.integer("limit", default=SEARCH_LIMIT, low=1, high=SEARCH_MAX)
        results = await search_incidents(self.index, text, limit=limit)
        return web.json_response({"results": results})


#: Headers a proxy adds (besides any ``X-Forwarded-*``): a request carrying one came from somewhere else.
FORWARDING_HEADERS = (
    "Forwarded",
    "Forwarded-For",
    "X-Real-IP",
    "X-Client-IP",
    "X-Cluster-Client-IP",
    "X-Original-Forwarded-For",
    "X-ProxyUser-Ip",
    "True-Client-IP",
    "CF-Connecting-IP",
    "Fastly-Client-IP",
    "X-Envoy-External-Address",
    "Via",
)


def _not_loopback(request: web.Request) -> str | None:
    """Why ``request`` may not be from a loopback client (None: it is)."""
    known = {h.lower() for h in FORWARDING_HEADERS}
    forwarded = [h for h in request.headers if h.lower() in known or h.lower().startswith("x-forwarded-")]
    if forwarded:
        return f"the request came through a proxy ({forwarded[0]})"
    remote = request.remote or ""
    try:
        loopback = ipaddress.ip_address(remote.split("%", 1)[0]).is_loopback
    except ValueError:
        loopback = False
    if not loopback:
        return f"the client {remote or 'unknown'} is not on loopback"
    hosts = request.headers.getall("Host", [])
    if len(hosts) != 1:
        return "the request has no Host header" if not hosts else "the request has more than one Host header"
    if not is_loopback_host(_host_name(hosts[0])):
        return f"the Host header names {hosts[0][:100]!r}, not a loopback address"
    return None


def _host_name(host: str) -> str:
    """The name in a ``Host`` header, without its port (``[::1]:8080`` → ``::1``)."""
    host = host.strip()
    if host.startswith("["):
        return host[1 : host.find("]")] if "]" in host else host
    name, colon, port = host.rpartition(":")
    return name if colon and port.isdigit() and ":" not in name else host


def protection_line(api_token: SecretStr | None) -> str:
    """The start-up line that says how the REST API is protected (``api_token``: ``DECKLOG_API_TOKEN``)."""
    if api_token is not None:
        return "REST API (/api): every request needs 'Authorization: Bearer <token>' (DECKLOG_API_TOKEN is set)"
    return (
        "REST API (/api): DECKLOG_API_TOKEN is not set, so it answers loopback clients only: a request from another "
        "address, naming another Host, or through a proxy (Forwarded, X-Forwarded-For, …) gets 401; set "
        "DECKLOG_API_TOKEN to reach it otherwise"
    )


def routes(api: ScopesApi, insights: InsightsApi) -> list[tuple[str, str, Handler]]:
    """(method, path, handler) of every route under ``/api``: each guarded by ``api`` (method, token), and a JSON
    404 for any other path there. ``*``: any method (a guarded handler answers 405 itself)."""
    return [
        ("*", "/api/insights", api.guard(insights.insights)),
        ("*", "/api/search", api.guard(insights.search)),
        ("*", PREFIX, api.guard(api.list_scopes)),
        ("*", PREFIX + "/{kind}/{name}", api.guard(api.get_scope)),
        ("*", PREFIX + "/{kind}/{name}/timeline", api.guard(api.timeline)),
        ("*", PREFIX + "/{kind}/{name}/report.{fmt}", api.guard(api.report)),
        ("*", PREFIX + "/{tail:.*}", api.no_route),
        ("*", "/api", api.no_route),
        ("*", "/api/{tail:.*}", api.no_route),
    ]
