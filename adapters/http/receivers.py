"""The alert and change receivers: ``POST /alerts/{source}`` and ``POST /changes/{source}``.

Each request is checked in this order, and any refusal appends nothing of the request:

1. ``{source}`` is one of ``adapters.alerts.ALERT_SOURCES`` / ``adapters.changes.CHANGE_SOURCES`` — else 404;
2. a token is configured (``DECKLOG_ALERT_TOKEN``; the sandbox generates one) — else 401 saying to set it;
3. a declared ``Content-Length`` above ``[alerts] max_payload_bytes`` — 413;
4. ``Authorization: Bearer <token>``, or the source's own signature where it has one (PagerDuty's
   ``X-PagerDuty-Signature``, GitHub's ``X-Hub-Signature-256``, with the token as the secret) — else 401;
5. the body, read in chunks into one buffer and never past the limit — else 413; then JSON (UTF-8, no
   NaN/Infinity) — else 400;
6. the source's parser — a ``PayloadError`` is a 400 whose ``error`` names the field path;
7. ``?wait=`` on an alert: a number of seconds from 0 to ``WAIT_MAX`` — else 400.

The limit (32 MB by default) takes any notification a real Alertmanager, Grafana or PagerDuty sends: a group of
10,000 alerts with real label sets is about 10 MB. A big body is parsed off the event loop, and neither it nor its
JSON is held once its alerts are parsed (the evidence kept is a capped prefix, not a second serialisation). A 413 of
an authenticated alert sender names the limit and what to change in the sender (Alertmanager's ``max_alerts``), and
is recorded — the source's "notifications refused" incident in the alerts channel, at most once per window
however often the sender retries (``core.alerts.refusals``).

An alert notification is then stored raw in the alert inbox and answered ``202 {"accepted": N, "receipt": ID}``
(``core.alerts.intake``): routing runs behind the answer, in bulk, and ``GET /api/alerts/receipts/{ID}``
(adapters/http/receipts.py) gives each alert's outcome once routed. ``?wait=SECONDS`` (at most ``WAIT_MAX``) makes
the answer wait for the outcomes: then it also says what happened to each alert (202 when something was recorded,
200 when nothing was), as it always did. A notification without any alert state change is answered 200 and not
stored. A change is recorded by core (``core.changes.ChangeService``) before its answer, which says what happened
to each change (202 when something was recorded, 200 when nothing was). The Slack side is
the outbox's: an alert-opened incident posts its header; later alerts are collapsed into at most one summary a
minute per incident (``core.alerts.AlertSummarizer``, armed from a log listener as a hint, and derived from the
log at start-up and every minute, so a crash between an alert's commit and the arming loses no summary). Change <->
incident links are the ``changes`` outbox topic's (``core.changes.links``). Every answer is sent only after what it
reports is committed: the alert inbox's put, the router's and the change service's appends.

A GitHub ``issues`` event on ``/changes/github`` (a follow-up's issue closed or reopened) passes the
same checks, then goes to ``core.follow_ups.FollowUpCloser`` instead of the change service: 202 when a
``follow_up_closed`` entry was recorded, 200 with a ``note`` saying why not (an issue decklog did not file, a
redelivery, a change older than the one recorded).
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Protocol

from aiohttp import web
from pydantic import SecretStr

from decklog.adapters.alerts import ALERT_SOURCES
from decklog.adapters.changes import CHANGE_SOURCES, github
from decklog.adapters.payload import header_value
from decklog.core.alerts import AlertRouter, AlertSummarizer
from decklog.core.alerts.intake import AlertIntake
from decklog.core.changes import ChangeService
from decklog.core.entries import Entry
from decklog.core.errors import InvalidInput
from decklog.core.follow_ups import FollowUpCloser
from decklog.core.signals import PayloadError, truncate_raw
from decklog.core.store.ports import IndexPort

log = logging.getLogger(__name__)

ALERT_ROUTE = "/alerts/{source}"
CHANGE_ROUTE = "/changes/{source}"
READ_CHUNK = 64 * 1024
RAW_DEPTH_MAX = 32  # deeper payloads are kept as (capped) text evidence, not as JSON
BIG_BODY = 256 * 1024  # bodies at least this big are parsed in a thread, off the event loop
WAIT_MAX = 60.0  # ``?wait=``'s ceiling: Alertmanager's default webhook timeout is 10 s, Datadog's 15 s
RECEIPTS_PATH = "/api/alerts/receipts/"
NOT_RECORDED = ("duplicate", "ignored")
Body = bytes | bytearray  # a request body, read into one buffer
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
TOKEN_HELP = (
    "DECKLOG_ALERT_TOKEN is not set: set it to a shared secret and send it as 'Authorization: Bearer <token>' "
    "(PagerDuty and GitHub may sign with it instead)"
)


class Source(Protocol):
    """What the checks need of ``AlertSource`` and ``ChangeSource``."""

    @property
    def signature_header(self) -> str | None: ...

    def verify(self, secret: str, raw_body: bytes, headers: Mapping[str, str]) -> bool: ...


class Refused(Exception):
    """A request refused with ``status`` and an ``{"error": message}`` body; nothing was recorded."""

    def __init__(self, status: int, message: str, *, field: str = "", headers: Mapping[str, str] | None = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.field = field
        self.headers = dict(headers or {})

    def response(self) -> web.Response:
        body: dict[str, Any] = {"error": self.message}
        if self.field:
            body["field"] = self.field
        return web.json_response(body, status=self.status, headers=self.headers)


class TooBig(Refused):
    """A 413: the body is over ``limit`` (``size`` its declared length, None when it was not declared).
    ``authenticated``: the sender showed the token, so the refusal is worth recording."""

    def __init__(self, size: int | None, limit: int, *, authenticated: bool, advice: str = "") -> None:
        how_big = f"is {size} bytes" if size is not None else "is larger than that"
        message = f"the payload {how_big}; decklog takes at most {limit} bytes ([alerts] max_payload_bytes)"
        super().__init__(413, f"{message}: {advice}" if advice else message)
        self.size = size
        self.limit = limit
        self.authenticated = authenticated


#: What to change in a sender whose notifications are too big (the 413's advice; the recorded refusal says more).
SHRINK = {
    "alertmanager": "set max_alerts in Alertmanager's webhook_configs entry for decklog (e.g. max_alerts: 1000)",
    "grafana": "set Max alerts in the Grafana webhook contact point for decklog (e.g. 1000)",
}


class Receivers:
    """The two routes' handlers (``routes``), the store listener and the re-arm job of the alert summaries. The
    composition root (bot/wiring.py) plugs them in; tests reach it as ``parts.receivers.receivers`` and may tune
    ``summarizer.interval``."""

    def __init__(
        self,
        token: SecretStr | None,
        index: IndexPort,
        alerts: AlertRouter,
        changes: ChangeService,
        summarizer: AlertSummarizer,
        intake: AlertIntake,
        *,
        max_bytes: int,
        raw_bytes: int,
        follow_ups: FollowUpCloser | None = None,
    ) -> None:
        self.secret = token
        """The shared secret (``DECKLOG_ALERT_TOKEN``, or the one the sandbox made)."""
        self.index = index
        self.alerts = alerts
        self.intake = intake
        """Stores each notification before its 202 and routes it behind the answer (``core.alerts.intake``)."""
        self.changes = changes
        self.summarizer = summarizer
        self.max_bytes = max_bytes
        self.raw_bytes = raw_bytes
        self.follow_ups = follow_ups
        """GitHub ``issues`` webhooks on ``/changes/github``: follow-ups closed or reopened."""

    # -- routes -----------------------------------------------------------------------------------------------

    def routes(self) -> list[tuple[str, str, Handler]]:
        """(method, path, handler) of ``POST /alerts/{source}`` and ``POST /changes/{source}``."""
        return [("POST", ALERT_ROUTE, self.alert), ("POST", CHANGE_ROUTE, self.change)]

    async def alert(self, request: web.Request) -> web.Response:
        name = request.match_info["source"]
        try:
            source = ALERT_SOURCES.get(name)
            if source is None:
                raise Refused(404, f"unknown alert source {name!r} (known: {', '.join(sorted(ALERT_SOURCES))})")
            body = await self._accept(request, source, advice=SHRINK.get(name, ""))
            wait = _wait_seconds(request)
            counted = await _count_group(name, body) if len(body) >= BIG_BODY else 0
            if counted:  # a big group: its shape checked cheaply, its alerts parsed behind the answer
                receipt = await self.intake.accept(name, body, None, {}, accepted=counted)
                return await self._answer(name, counted, receipt, wait)
            signals, evidence = await self._parse_alerts(body, source)
            if not signals:
                answer: dict[str, Any] = {
                    "source": name,
                    "accepted": 0,
                    "received": 0,
                    "recorded": 0,
                    "alerts": [],
                    "scopes": [],
                }
                answer["note"] = "nothing to record: the payload holds no alert state change"
                return web.json_response(answer, status=200)
            receipt = await self.intake.accept(name, body, signals, evidence)
            del body  # stored: neither the body nor its JSON is held while the alerts wait for routing
        except TooBig as big:
            if big.authenticated:
                await self.alerts.refused(name, big.size, big.limit)
            return big.response()
        except Refused as refused:
            return refused.response()
        return await self._answer(name, len(signals), receipt, wait)

    async def _answer(self, name: str, accepted: int, receipt: str, wait: float) -> web.Response:
        """The 202 with the receipt; with ``?wait=``, the alerts' outcomes once routed within ``wait`` seconds."""
        answer: dict[str, Any] = {"source": name, "accepted": accepted, "receipt": receipt}
        if wait > 0:
            outcomes = await self.intake.wait(receipt, wait)
            if outcomes is not None:
                recorded = [o for o in outcomes if o.get("outcome") not in NOT_RECORDED]
                answer.update(
                    received=len(outcomes),
                    recorded=len(recorded),
                    alerts=outcomes,
                    scopes=sorted({o["scope"] for o in outcomes if o.get("scope")}),
                )
                return web.json_response(answer, status=202 if recorded else 200)
            answer["note"] = f"not routed within {wait:g} s: {RECEIPTS_PATH}{receipt} gives the outcomes once it is"
        return web.json_response(answer, status=202)

    async def change(self, request: web.Request) -> web.Response:
        name = request.match_info["source"]
        try:
            source = CHANGE_SOURCES.get(name)
            if source is None:
                raise Refused(404, f"unknown change source {name!r} (known: {', '.join(sorted(CHANGE_SOURCES))})")
            body = await self._accept(request, source)
            payload = _json(body)
            if name == github.SOURCE and _event(request) == github.ISSUES_EVENT:
                return await self._issue(payload)
            signals = _parsed(lambda: source.parse_request(payload, request.headers))
            outcomes = await self.changes.record(signals, raw=self._evidence(payload, body))
        except Refused as refused:
            return refused.response()
        recorded = [o for o in outcomes if o.outcome != "duplicate"]
        answer: dict[str, Any] = {
            "source": name,
            "received": len(signals),
            "recorded": len(recorded),
            "changes": [o.to_json() for o in outcomes],
            "scopes": sorted({o.scope for o in outcomes}),
        }
        if not signals:
            answer["note"] = "nothing to record: the event is not a deploy or a push (or deletes a ref)"
        return web.json_response(answer, status=202 if recorded else 200)

    async def _issue(self, payload: object) -> web.Response:
        """A GitHub ``issues`` event: a follow-up's issue closed or reopened → ``follow_up_closed`` (202), or 200
        saying why nothing was recorded. Malformed → ``Refused`` (400)."""
        [event] = _parsed(lambda: [github.parse_issue(payload)])
        answer: dict[str, Any] = {"source": github.SOURCE, "event": github.ISSUES_EVENT, "received": 0, "changes": []}
        if event is None or self.follow_ups is None:
            answer.update(recorded=0, follow_ups=[], scopes=[])
            answer["note"] = (
                "nothing to record: only a closed or reopened issue changes a follow-up"
                if event is None
                else "nothing to record: follow-ups are not wired in this process"
            )
            return web.json_response(answer, status=200)
        closing = await self.follow_ups.receive(event)
        recorded = closing.outcome == "recorded"
        answer.update(received=1, recorded=int(recorded), follow_ups=[closing.to_json()])
        answer["scopes"] = [closing.scope] if closing.scope else []
        if not recorded:
            answer["note"] = closing.reason
        return web.json_response(answer, status=202 if recorded else 200)

    # -- the checks every request passes ----------------------------------------------------------------------

    def token(self) -> str | None:
        """The shared secret: ``DECKLOG_ALERT_TOKEN`` (or the one the sandbox made), None when unset or blank."""
        secret = self.secret.get_secret_value().strip() if self.secret is not None else ""
        return secret or None

    async def _accept(self, request: web.Request, source: Source, *, advice: str = "") -> Body:
        """Authenticate and read the body (bounded) → the raw bytes; raises ``Refused`` (``TooBig`` for a 413)."""
        token = self.token()
        if token is None:
            raise Refused(401, TOKEN_HELP, headers={"WWW-Authenticate": "Bearer"})
        bearer = _bearer_matches(request.headers.get("Authorization"), token)
        if request.content_length is not None and request.content_length > self.max_bytes:
            raise TooBig(request.content_length, self.max_bytes, authenticated=bearer, advice=advice)
        signed = source.signature_header is not None and header_value(request.headers, source.signature_header)
        if not bearer and not signed:
            how = (
                f"'Authorization: Bearer <token>' or a valid {source.signature_header}"
                if source.signature_header
                else "'Authorization: Bearer <token>'"
            )
            raise Refused(401, f"missing or wrong credentials: send {how}", headers={"WWW-Authenticate": "Bearer"})
        body = await self._read(request, authenticated=bearer, advice=advice)
        if not bearer and not source.verify(token, bytes(body), request.headers):  # signed bodies are small
            raise Refused(401, f"the {source.signature_header} signature does not match the body")
        _refuse_form(request, body)
        return body

    async def _read(self, request: web.Request, *, authenticated: bool, advice: str) -> Body:
        """The body in one buffer (never past the limit, never a second copy of it)."""
        body = bytearray()
        async for chunk in request.content.iter_chunked(READ_CHUNK):
            if len(body) + len(chunk) > self.max_bytes:
                raise TooBig(request.content_length, self.max_bytes, authenticated=authenticated, advice=advice)
            body += chunk
        return body  # a bytearray: ``bytes(body)`` would be a second copy; everything downstream reads it as is

    async def _parse_alerts(self, body: Body, source: Any) -> tuple[list[Any], dict[str, Any]]:
        """JSON → the source's signals, plus the evidence to keep; in a thread when the body is big, so that a
        10 MB notification does not hold the event loop. The JSON is dropped once the signals are made."""

        def parse() -> tuple[list[Any], dict[str, Any]]:
            payload = _json(body)
            signals = _parsed(lambda: source.parse(payload))
            return signals, self._evidence(payload, body)

        if len(body) < BIG_BODY:
            return parse()
        return await asyncio.to_thread(parse)

    async def parse_stored(self, name: str, body: bytes) -> tuple[list[Any], dict[str, Any]]:
        """A stored notification's body → its signals and evidence again (``core.alerts.intake``'s replay). Raises
        when it no longer parses (it did before its 202)."""
        source = ALERT_SOURCES.get(name)
        if source is None:
            raise ValueError(f"unknown alert source {name!r}")
        try:
            return await self._parse_alerts(body, source)
        except Refused as refused:
            raise ValueError(refused.message) from None

    def _evidence(self, payload: object, body: Body) -> dict[str, Any]:
        """The vendor payload as evidence, capped at ``raw_evidence_bytes`` (text when it cannot be JSON)."""
        if len(body) > 4 * self.raw_bytes:  # far over the cap: its prefix, without serialising it all again
            return {"truncated": bytes(body[: self.raw_bytes]).decode("utf-8", "replace"), "bytes": len(body)}
        if _shallow(body) and not _may_hold_surrogates(body):
            return truncate_raw(payload, self.raw_bytes)  # the common case: nothing to check or replace
        if _depth(payload) <= RAW_DEPTH_MAX:
            try:
                text = json.dumps(payload, ensure_ascii=False, allow_nan=False)
                # lone surrogates (\udXXX escapes) cannot be stored as UTF-8: replaced, like the parsers do
                return truncate_raw(json.loads(text.encode("utf-8", "replace")), self.raw_bytes)
            except (ValueError, RecursionError):
                pass
        text = body[: self.raw_bytes].decode("utf-8", "replace")
        return {"truncated": text, "bytes": len(body)}

    # -- what the log says ------------------------------------------------------------------------------------

    def on_commit(self, scope: str, entries: Sequence[Entry]) -> None:
        """A store listener: hold the alert observations for the next summary and schedule it (hints only:
        ``rearm`` derives the schedule from the log at start-up and every minute, and a summary reads the log when
        the held observations are not all there, so a crash before this ran loses nothing). Change links are the
        ``changes`` outbox topic's (``core.changes.links``)."""
        if scope.startswith("incident/"):
            self.summarizer.observe(scope, entries)

    async def rearm(self) -> None:
        """Schedule summaries that are due, derived from the log (at start-up and every minute: catches a crash
        before ``on_commit`` armed one, and other processes' appends). Incidents only reserved in the index (their
        declaration not yet delivered to it) are looked at too."""
        scopes = await self.index.unresolved_incidents(limit=2000)
        armed = await self.summarizer.rearm(scopes)
        if armed:
            log.info("alerts: %d incident(s) have alerts to summarise", armed)


#: Sources that send a group of alerts as ``{"alerts": [...]}`` (Alertmanager's webhook, Grafana's contact point).
GROUP_SOURCES = frozenset({"alertmanager", "grafana"})


async def _count_group(name: str, body: Body) -> int:
    """A big notification from a group source, checked cheaply: its JSON, and an ``alerts`` list of objects with
    ``labels`` objects → how many alerts it holds (0: not that shape, or another source; the full parser decides).
    The source's parser then runs behind the answer: 10,000 alerts take it seconds, the JSON alone a fraction."""
    if name not in GROUP_SOURCES:
        return 0
    payload = await asyncio.to_thread(_json, body)
    alerts = payload.get("alerts") if isinstance(payload, dict) else None
    if not isinstance(alerts, list) or not alerts:
        return 0
    if not all(isinstance(a, dict) and isinstance(a.get("labels"), dict) for a in alerts):
        return 0
    return len(alerts)


def _wait_seconds(request: web.Request) -> float:
    """``?wait=SECONDS`` (0 to ``WAIT_MAX``): how long the answer may wait for the alerts' outcomes (0: answer once
    the notification is stored). Anything else is a 400 naming the parameter."""
    raw = request.query.get("wait")
    if raw is None:
        return 0.0
    try:
        seconds = float(raw)
    except ValueError:
        seconds = -1.0
    if not 0 <= seconds <= WAIT_MAX or seconds != seconds:
        raise Refused(400, f"wait must be a number of seconds from 0 to {WAIT_MAX:g}", field="wait")
    return seconds


def _parsed(parse: Any) -> list[Any]:
    try:
        signals: list[Any] = parse()
    except PayloadError as exc:
        raise Refused(400, str(exc), field=exc.path) from None
    except RecursionError:
        raise Refused(400, "the payload is nested too deeply") from None
    except InvalidInput as exc:
        raise Refused(400, str(exc), field=exc.field) from None
    return signals


def _event(request: web.Request) -> str:
    return (header_value(request.headers, github.EVENT_HEADER) or "").strip().lower()


def _bearer_matches(header: str | None, token: str) -> bool:
    if not header:
        return False
    scheme, _, given = header.strip().partition(" ")
    if scheme.lower() != "bearer":
        return False
    return hmac.compare_digest(given.strip().encode("utf-8", "replace"), token.encode("utf-8", "replace"))


FORM_HELP = {
    "datadog": "in Datadog's Webhooks integration, uncheck 'Encode as form' for this webhook",
    "github": "in the GitHub webhook's settings, set 'Content type' to application/json",
}


def _refuse_form(request: web.Request, body: Body) -> None:
    """A form-encoded body (Datadog's 'Encode as form', GitHub's default content type) → 400 naming the setting."""
    form = request.content_type == "application/x-www-form-urlencoded"
    if not form and body.startswith(b"payload="):  # (no strip: that would copy a 10 MB body)
        form = True
    if not form:
        return
    name = request.match_info.get("source", "")
    how = FORM_HELP.get(name, "send the body as JSON (Content-Type: application/json)")
    raise Refused(400, f"the body is form-encoded (application/x-www-form-urlencoded), decklog reads JSON: {how}")


def _reject_constant(name: str) -> object:
    raise ValueError(f"{name} is not valid JSON")


def _json(body: Body) -> object:
    if not body or body.isspace():  # (not ``strip``: a copy of the whole body)
        raise Refused(400, "the body is empty: expected a JSON object")
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise Refused(400, f"the body is not UTF-8 (byte {exc.start})") from None
    try:
        return json.loads(text, parse_constant=_reject_constant)
    except RecursionError:
        raise Refused(400, "malformed JSON: nested too deeply") from None
    except ValueError as exc:
        raise Refused(400, f"malformed JSON: {exc}") from None


def _shallow(body: Body) -> bool:
    """JSON nested ``n`` deep has at least ``n`` opening brackets: few brackets, no need to walk it (``_depth``)."""
    return body.count(b"{") + body.count(b"[") <= RAW_DEPTH_MAX


def _may_hold_surrogates(body: Body) -> bool:
    """Only a ``\\udXXX`` escape makes a lone surrogate (strict UTF-8 never decodes to one): without one, the
    parsed payload stores as UTF-8 as it is."""
    return b"\\ud" in body or b"\\uD" in body


def _depth(value: object) -> int:
    """How deeply JSON containers nest in ``value`` (iterative: never recurses)."""
    deepest = 0
    stack: list[tuple[object, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: list[object] = list(item.values())
        elif isinstance(item, list):
            children = list(item)
        else:
            continue
        deepest = max(deepest, depth)
        if deepest > RAW_DEPTH_MAX:
            return deepest
        stack.extend((child, depth + 1) for child in children)
    return deepest
