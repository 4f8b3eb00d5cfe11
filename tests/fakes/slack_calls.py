"""The record of every Web API call and upload the fake Slack served, and waiting on it from a test.

The fake keeps no record of its own: ``record_calls(fake)`` puts a ``CallRecorder`` first among its server's
``middlewares`` (so it sees what the client saw, faults included) and returns its ``CallLog``; ``slack_calls(fake)``
is that log once recorded. Record before the calls you want to see: a test does it when it builds the fake, and
``record_sandbox_calls`` (``DecklogServer(on_built=...)``; ``tests/conftest.py``'s ``make_server`` uses it) for the
sandbox a server builds, before anything starts.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from aiohttp import web

from decklog.adapters.local.slack import FakeSlack, FakeSlackServer
from decklog.adapters.local.slack.errors import SlackError
from decklog.adapters.local.slack.server import Handler
from decklog.adapters.local.slack.wire import read_args

if TYPE_CHECKING:
    from decklog.bot.wiring import Parts

__all__ = [
    "DROPPED",
    "UPLOAD",
    "CallLog",
    "CallRecorder",
    "RecordedCall",
    "call_of",
    "record_calls",
    "record_sandbox_calls",
    "slack_calls",
]

T = TypeVar("T")
UPLOAD = "upload_url"  # how uploads of file bytes appear in the log
DROPPED = web.RequestKey("tests.slack.dropped", web.StreamResponse)
"""Request key: the answer a fault computed and never sent (the connection was closed instead)."""
_CALL = web.RequestKey("tests.slack.call", tuple)
_UPLOADED = re.compile(r"OK - (\d+)")


@dataclass(frozen=True)
class RecordedCall:
    """One call: ``args`` as decoded (query + body; the token is not included), ``ok`` as answered.

    ``status`` is the HTTP status; ``error`` Slack's error code; ``dropped`` when the connection was closed
    without an answer (the effect happened, the client never learned).
    """

    method: str
    args: dict[str, Any]
    at: float
    ok: bool
    error: str | None = None
    status: int = 200
    dropped: bool = False
    response: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    def describe(self) -> str:
        outcome = "ok" if self.ok else f"error={self.error}"
        if self.dropped:
            outcome += " (response dropped)"
        args = json.dumps(self.args, default=str, sort_keys=True)
        return f"{self.method} [{self.status} {outcome}] {args[:300]}"


class CallLog:
    def __init__(self) -> None:
        self.calls: list[RecordedCall] = []

    def record(self, call: RecordedCall) -> None:
        self.calls.append(call)

    def calls_to(self, method: str, *, ok: bool | None = None) -> list[RecordedCall]:
        return [c for c in self.calls if c.method == method and (ok is None or c.ok == ok)]

    def describe_recent(self, n: int = 20) -> str:
        recent = self.calls[-n:]
        if not recent:
            return "no Web API calls were made"
        lines = "\n".join(f"  {c.describe()}" for c in recent)
        return f"last {len(recent)} of {len(self.calls)} Web API calls:\n{lines}"

    def find_call(
        self, method: str, where: Callable[[dict[str, Any]], bool] | None = None, *, ok: bool | None = True
    ) -> RecordedCall | None:
        """The first recorded call to ``method`` (answered ``ok``, whose ``args`` satisfy ``where``), if any."""
        return next((c for c in self.calls_to(method, ok=ok) if where is None or where(c.args)), None)


async def call_of(request: web.Request) -> tuple[str, dict[str, Any]] | None:
    """(method, args) of a Web API call or an upload (``UPLOAD``, ``{"file_id"}``); None for other requests.
    Read once per request and kept on it; file fields are rewound, so the fake reads them whole after us."""
    cached: tuple[str, dict[str, Any]] | None = request.get(_CALL)
    if cached is not None:
        return cached
    if request.path.startswith("/upload/"):
        cached = (UPLOAD, {"file_id": request.match_info["file_id"]})
    elif request.path.startswith("/api/"):
        try:
            args = await read_args(request)
        except SlackError:
            args = {}
        if request.content_type == "multipart/form-data":
            for value in (await request.post()).values():
                if isinstance(value, web.FileField):
                    value.file.seek(0)
        args.pop("token", None)
        cached = (request.match_info["method"], args)
    else:
        return None
    request[_CALL] = cached
    return cached


class CallRecorder:
    """A middleware of the fake's server that records each call as the client saw it."""

    def __init__(self) -> None:
        self.log = CallLog()

    async def __call__(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        call = await call_of(request)
        response = await handler(request)
        if call is None:
            return response
        method, args = call
        dropped = request.get(DROPPED)
        seen = dropped if isinstance(dropped, web.Response) else response
        status = 0 if dropped is not None else response.status
        if method == UPLOAD:
            text = seen.text if isinstance(seen, web.Response) and seen.text is not None else ""
            uploaded = _UPLOADED.fullmatch(text) if seen.status == 200 else None
            if uploaded:
                args = {**args, "bytes": int(uploaded.group(1))}
            error = None if uploaded else text
            self.log.record(RecordedCall(method, args, time.time(), bool(uploaded), error, status, dropped is not None))
            return response
        body = _json(seen)
        ok = bool(body.get("ok"))
        error = None if ok else body.get("error")
        self.log.record(RecordedCall(method, args, time.time(), ok, error, status, dropped is not None, body))
        return response


def _json(response: web.StreamResponse) -> dict[str, Any]:
    raw = response.body if isinstance(response, web.Response) else None
    if not isinstance(raw, bytes):
        return {}
    try:
        body = json.loads(raw)
    except ValueError:
        return {}
    return body if isinstance(body, dict) else {}


def _server(target: FakeSlack | FakeSlackServer) -> FakeSlackServer:
    return target.server if isinstance(target, FakeSlack) else target


def record_calls(target: FakeSlack | FakeSlackServer) -> CallLog:
    """Record the calls ``target`` serves from now on (once: a second call returns the same log)."""
    server = _server(target)
    for middleware in server.middlewares:
        if isinstance(middleware, CallRecorder):
            return middleware.log
    recorder = CallRecorder()
    server.middlewares.insert(0, recorder)
    return recorder.log


def slack_calls(target: FakeSlack | FakeSlackServer) -> CallLog:
    """The calls ``target`` served since ``record_calls``; an ``AssertionError`` if they were never recorded."""
    for middleware in _server(target).middlewares:
        if isinstance(middleware, CallRecorder):
            return middleware.log
    raise AssertionError("the fake Slack's calls are not recorded: call record_calls(fake) when it is built")


def record_sandbox_calls(parts: Parts) -> None:
    """``DecklogServer(on_built=record_sandbox_calls)``: record the calls to the fake Slack a sandbox-mode server
    built, from before anything started."""
    if parts.local_slack is not None:
        record_calls(parts.local_slack.slack)
