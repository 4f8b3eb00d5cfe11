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

import base64
import ipaddress
import re
import time
from collections import OrderedDict, deque
from collections.abc import Awaitable, Callable, Mapping
from typing import Any
from urllib.parse import quote

from aiohttp import web
from pydantic import SecretStr

from decklog.adapters.http import models as m
from decklog.adapters.http.hosts import is_loopback_host
from decklog.adapters.http.openapi import Answer, ApiDescription, Operation, PathParam
from decklog.adapters.http.writes import ScopeWrites
from decklog.core.clock import Clock
from decklog.core.entries import CHANGE_STATUSES, INCIDENT_STATUSES, PAYLOADS
from decklog.core.errors import Conflict, Forbidden, InvalidInput, NotFound
from decklog.core.ids import SCOPE_KINDS, ScopeId
from decklog.core.insights import DEFAULT_DAYS, parse_days
from decklog.core.insights import compute as compute_insights
from decklog.core.reports import FORMATS, MEDIA_TYPES, filename
from decklog.core.reports.export import render_report
from decklog.core.reports.templating import ReportTemplates
from decklog.core.search import SEARCH_LIMIT, SEARCH_MAX, SEARCH_MAX_LEN, search_incidents
from decklog.core.service import parse_severity
from decklog.core.state import ScopeState
from decklog.core.store.ports import ApiKeys, IndexPort, LogStore, ScopeRow
from decklog.core.tokens import Identity, Tokens, allows

PREFIX = "/api/scopes"
ALLOWED = "GET, HEAD"
STATUSES = ("open", "recorded", *INCIDENT_STATUSES, *CHANGE_STATUSES)
MAX_SEQ = 2**53
LIST_LIMIT, LIST_MAX = 100, 500
TIMELINE_LIMIT, TIMELINE_MAX = 100, 1000
_INT = re.compile(r"^[0-9]{1,16}$")

#: Failed authentications a peer may make per window before it gets 429 (a cache: losing it only resets the count).
AUTH_FAILURES, AUTH_WINDOW_S, AUTH_PEERS = 10, 60.0, 10_000

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
IdentifiedHandler = Callable[[web.Request, Identity], Awaitable[web.StreamResponse]]


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
    """The /api door: authentication (bearer tokens, or loopback only), scope checks, the read routes.

    ``token``: ``DECKLOG_API_TOKEN`` (an admin token); ``keys``: the stored tokens and idempotent replies (None: only
    ``DECKLOG_API_TOKEN`` and loopback count). Without ``DECKLOG_API_TOKEN``, a request with no bearer from a
    loopback client is answered as ``loopback`` with the write scope (the CLI's reach); a bearer token is checked
    whatever the peer."""

    def __init__(
        self,
        store: LogStore,
        index: IndexPort,
        token: SecretStr | None,
        *,
        templates: ReportTemplates | None = None,
        keys: ApiKeys | None = None,
    ) -> None:
        self.store = store
        self.index = index
        self.templates = templates
        self.env_token = token
        self._env = token.get_secret_value() if token is not None else None
        self.tokens = Tokens(keys, env_token=self._env) if keys is not None else None
        self._failures: OrderedDict[str, deque[float]] = OrderedDict()

    def guard(self, handler: Handler, scope: str = "read") -> Handler:
        """Method check (405), bearer token (401) and its scope (403), then the handler; core errors become
        400 / 404 / 409 / 403."""
        return self.door({"GET": (_plain(handler), scope)})

    def door(self, methods: Mapping[str, tuple[IdentifiedHandler, str]]) -> Handler:
        """One path's handlers by method, each with the scope it needs; HEAD answers as GET."""
        allowed = ", ".join([*methods, "HEAD"] if "GET" in methods else methods)

        async def guarded(request: web.Request) -> web.StreamResponse:
            try:
                method = "GET" if request.method == "HEAD" and "GET" in methods else request.method
                if method not in methods:
                    raise ApiError(
                        405, f"{request.method} is not allowed here (allowed: {allowed})", {"Allow": allowed}
                    )
                handler, needed = methods[method]
                identity = await self._authorize(request, needed)
                return await handler(request, identity)
            except ApiError as exc:
                return error(exc.status, exc.message, exc.headers)
            except InvalidInput as exc:
                return error(400, exc.message)
            except NotFound as exc:
                return error(404, exc.message)
            except Conflict as exc:
                return error(409, exc.message)
            except Forbidden as exc:
                return error(403, exc.message)

        return guarded

    async def _authorize(self, request: web.Request, needed: str = "read") -> Identity:
        if needed == "public":
            return Identity("public", "read")
        peer = request.remote or "unknown"
        self._check_failures(peer)
        scheme, _, credentials = request.headers.get("Authorization", "").partition(" ")
        bearer = credentials.strip() if scheme.lower() == "bearer" else ""
        if not bearer and self._env is None:
            reason = _not_loopback(request)
            if reason is not None:
                raise ApiError(
                    401,
                    f"{reason}: without DECKLOG_API_TOKEN the API answers loopback clients only "
                    "(set DECKLOG_API_TOKEN, or make a token with `decklog token create`, and send "
                    "Authorization: Bearer <token>)",
                    {"WWW-Authenticate": 'Bearer realm="decklog"'},
                )
            identity = Identity("loopback", "write")
        elif not bearer:
            raise ApiError(401, "a bearer token is required", {"WWW-Authenticate": 'Bearer realm="decklog"'})
        else:
            found = await self._identify(bearer)
            if found is None:
                self._failed(peer)
                raise ApiError(
                    401,
                    "the bearer token is not valid",
                    {"WWW-Authenticate": 'Bearer realm="decklog", error="invalid_token"'},
                )
            identity = found
        if not allows(identity.scope, needed):
            raise ApiError(
                403,
                f"Authorization: the token {identity.name!r} has the {identity.scope} scope; this needs {needed}",
                {"WWW-Authenticate": f'Bearer realm="decklog", error="insufficient_scope", scope="{needed}"'},
            )
        return identity

    async def _identify(self, bearer: str) -> Identity | None:
        if self.tokens is not None:
            return await self.tokens.identify(bearer)
        if self._env is not None and _same(bearer, self._env):
            return Identity("DECKLOG_API_TOKEN", "admin")
        return None

    def _check_failures(self, peer: str) -> None:
        seen = self._failures.get(peer)
        if seen is None:
            return
        now = time.monotonic()
        while seen and seen[0] <= now - AUTH_WINDOW_S:
            seen.popleft()
        if len(seen) >= AUTH_FAILURES:
            wait = max(1, int(seen[0] + AUTH_WINDOW_S - now) + 1)
            raise ApiError(
                429,
                f"Authorization: {len(seen)} failed attempts from {peer} in {int(AUTH_WINDOW_S)} s; try again later",
                {"Retry-After": str(wait)},
            )

    def _failed(self, peer: str) -> None:
        seen = self._failures.pop(peer, None) or deque()
        seen.append(time.monotonic())
        self._failures[peer] = seen  # most recent last: the oldest peers are dropped first
        while len(self._failures) > AUTH_PEERS:
            self._failures.popitem(last=False)

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
        q = Query(request, ("kind", "status", "severity", "text", "limit", "cursor"))
        kind = q.choice("kind", SCOPE_KINDS)
        status = q.choice("status", STATUSES)
        sev = q.text("severity", max_len=10)
        severity = parse_severity(sev, field="severity") if sev is not None else None
        text = q.text("text")
        limit = q.integer("limit", default=LIST_LIMIT, low=1, high=LIST_MAX)
        raw_cursor = q.text("cursor", max_len=400)
        before = _parse_cursor(raw_cursor) if raw_cursor is not None else None
        rows = await self.index.list_scopes(
            kind=kind,
            status=None if status == "open" else status,
            open_only=status == "open",
            severity=severity,
            text=text,
            limit=limit + 1,
            before=before,
        )
        more = len(rows) > limit
        rows = rows[:limit]
        cursor = _make_cursor(rows[-1]) if more else None
        next_url = None
        if cursor is not None:
            kept = {k: v for k, v in q.values.items() if k != "cursor"}
            next_url = PREFIX + "?" + "&".join(f"{k}={quote(v)}" for k, v in {**kept, "cursor": cursor}.items())
        return web.json_response(
            {
                "scopes": [r.to_json() for r in rows],
                "count": len(rows),
                "more": more,
                "next": cursor,
                "next_url": next_url,
            }
        )

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
            await self._authorize(request)  # every /api request is authorized, even one for no route
        except ApiError as exc:
            return error(exc.status, exc.message, exc.headers)
        return error(404, f"no such API route: {request.path}")

    async def list_tokens(self, request: web.Request, _who: Identity) -> web.StreamResponse:
        Query(request, ())
        rows = await self.tokens.list() if self.tokens is not None else []
        return web.json_response(
            {
                "tokens": [
                    {
                        "name": r.name,
                        "scope": r.scope,
                        "user": r.user,
                        "created_at": _iso(r.created_at),
                        "revoked_at": _iso(r.revoked_at) if r.revoked_at is not None else None,
                    }
                    for r in rows
                ]
            }
        )


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


def _plain(handler: Handler) -> IdentifiedHandler:
    async def plain(request: web.Request, _who: Identity) -> web.StreamResponse:
        return await handler(request)

    return plain


def _same(given: str, expected: str) -> bool:
    import hmac

    return hmac.compare_digest(given.encode("utf-8"), expected.encode("utf-8"))


def _make_cursor(row: ScopeRow) -> str:
    """The listing's cursor after ``row``: its (created_at, id), which never change."""
    return base64.urlsafe_b64encode(f"{row.created_at}|{row.id}".encode()).decode().rstrip("=")


def _parse_cursor(raw: str) -> tuple[str, str]:
    try:
        created, sep, scope = base64.urlsafe_b64decode(raw + "=" * (-len(raw) % 4)).decode("utf-8").partition("|")
    except (ValueError, UnicodeDecodeError):
        created, sep, scope = "", "", ""
    if not sep or not scope:
        raise InvalidInput("not a cursor this API gave (use the previous page's next)", field="cursor")
    return created, scope


def _iso(at: float) -> str:
    from datetime import UTC, datetime

    return datetime.fromtimestamp(at, UTC).isoformat().replace("+00:00", "Z")


KIND = PathParam("kind", {"type": "string", "enum": list(SCOPE_KINDS)}, "incident or change")
NAME = PathParam("name", {"type": "string", "pattern": "^[a-z0-9][a-z0-9-]{0,99}$"}, "the scope's name")
SCOPE_PARAMS = (KIND, NAME)
PROPOSAL = PathParam("proposal", {"type": "string", "minLength": 1, "maxLength": 100}, "the proposal id (p-…)")
REPORT_MEDIA = {"md": "text/markdown", "json": "application/json", "html": "text/html"}


def routes(
    api: ScopesApi,
    insights: InsightsApi,
    *,
    writes: ScopeWrites | None = None,
    description: ApiDescription | None = None,
) -> list[tuple[str, str, Handler]]:
    """(method, path, handler) of every route under ``/api``, each described in ``description`` (its operations
    are added here), guarded by ``api`` (method, token, scope), and a JSON 404 for any other path there. ``*``:
    any method (a guarded door answers 405 itself). ``writes``: None serves the read routes only."""
    d = description if description is not None else ApiDescription()
    S = PREFIX + "/{kind}/{name}"

    def op(method: str, path: str, summary: str, scope: str, answers: dict[int, Any], **kw: Any) -> None:
        d.add(Operation(method, path, summary, scope, answers, **kw))  # type: ignore[arg-type]

    op("GET", PREFIX, "List scopes, newest first, a page at a time", "read", {200: m.ScopeListOut}, query=m.ListQuery)
    op("GET", S, "One scope's state", "read", {200: m.ScopeOut}, params=SCOPE_PARAMS)
    op(
        "GET",
        S + "/timeline",
        "A scope's entries after a seq (a cursor that holds while entries are appended)",
        "read",
        {200: m.TimelineOut},
        params=SCOPE_PARAMS,
        query=m.TimelineQuery,
    )
    report_answers: dict[int, Any] = {
        200: Answer(
            "the report (by the path's format)",
            media_schemas={
                "text/markdown": {"type": "string"},
                "application/json": {"type": "object"},
                "text/html": {"type": "string"},
            },
            headers={"ETag": "the report's sha256"},
        ),
        304: Answer("not modified (If-None-Match)"),
    }
    fmt = PathParam("fmt", {"type": "string", "enum": list(FORMATS)}, "md, json or html")
    op("GET", S + "/report.{fmt}", "The post-incident report", "read", report_answers, params=(*SCOPE_PARAMS, fmt))
    op(
        "GET",
        "/api/insights",
        "Counts, MTTA, MTTM and MTTR",
        "read",
        {200: m.InsightsOut},
        query=m.InsightsQuery,
        tag="insights",
    )
    op(
        "GET",
        "/api/search",
        "Full-text search over incidents",
        "read",
        {200: m.SearchOut},
        query=m.SearchQuery,
        tag="insights",
    )
    op(
        "GET",
        "/api/openapi.json",
        "This description (OpenAPI 3.1)",
        "public",
        {200: Answer("the description", schema={"type": "object"})},
        tag="meta",
    )
    op(
        "GET",
        "/api/tokens",
        "The API tokens (names and scopes; never a secret)",
        "admin",
        {200: m.TokensOut},
        tag="meta",
    )

    async def openapi(_request: web.Request, _who: Identity) -> web.StreamResponse:
        return web.json_response(d.document())

    scopes_door: dict[str, tuple[IdentifiedHandler, str]] = {"GET": (_plain(api.list_scopes), "read")}
    out: list[tuple[str, str, Handler]] = [
        ("*", "/api/openapi.json", api.door({"GET": (openapi, "public")})),
        ("*", "/api/tokens", api.door({"GET": (api.list_tokens, "admin")})),
        ("*", "/api/insights", api.guard(insights.insights)),
        ("*", "/api/search", api.guard(insights.search)),
    ]
    if writes is not None:
        w = writes.idempotent
        written = {201: m.WriteOut, 200: m.WriteOut}
        scopes_door["POST"] = (w(writes.declare), "write")
        op("POST", PREFIX, "Declare an incident", "write", {201: m.WriteOut}, body=m.DeclareIn, idempotent=True)
        posts: list[tuple[str, str, type[Any], Any, dict[int, Any]]] = [
            (
                "entries",
                "Append a typed entry (message, goal, constraint, decision, hypothesis, evidence, obligation, follow-up)",
                m.EntryRequest,
                writes.entry,
                {201: m.WriteOut},
            ),
            ("severity", "Change the severity", m.SeverityIn, writes.severity, written),
            ("status", "Change the status", m.StatusIn, writes.status, written),
            ("roles", "Assign a role", m.RoleIn, writes.role, written),
            ("resolve", "Resolve the incident", m.ResolveIn, writes.resolve, written),
            (
                "proposals",
                "Propose a catalog action (R1 runs, R2/R3 park for approval, R4 is denied)",
                m.ProposeIn,
                writes.propose,
                {201: m.ProposalOut, 200: m.ProposalOut},
            ),
        ]
        for tail, summary, body, handler, answers in posts:
            op("POST", f"{S}/{tail}", summary, "write", answers, body=body, params=SCOPE_PARAMS, idempotent=True)
            out.append(("*", f"{S}/{tail}", api.door({"POST": (w(handler), "write")})))
        for verb, handler in (("approve", writes.approve), ("deny", writes.deny)):
            path = f"{S}/proposals/{{proposal}}/{verb}"
            op(
                "POST",
                path,
                f"{verb.capitalize()} a parked proposal as the token's person",
                "write",
                {200: m.DecisionOut},
                body=m.DecideIn,
                params=(*SCOPE_PARAMS, PROPOSAL),
                idempotent=True,
            )
            out.append(("*", path, api.door({"POST": (w(handler), "write")})))
    out += [
        ("*", PREFIX, api.door(scopes_door)),
        ("*", S, api.guard(api.get_scope)),
        ("*", S + "/timeline", api.guard(api.timeline)),
        ("*", S + "/report.{fmt}", api.guard(api.report)),
        ("*", PREFIX + "/{tail:.*}", api.no_route),
        ("*", "/api", api.no_route),
        ("*", "/api/{tail:.*}", api.no_route),
    ]
    return out
