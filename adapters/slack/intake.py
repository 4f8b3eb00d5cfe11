"""Persist, then ack: every Slack request (HTTP or Socket Mode) is stored in the inbox before Slack hears 200.

In front of Bolt: the raw HTTP body's signature is verified before anything else is done with it
(``SignatureVerifier``; bad or stale → 401, a timestamp that is not a number → 400); only a signed body is parsed
(a JSON event, a form command, a form ``payload=`` interaction; malformed or nested deeper than ``MAX_DEPTH`` → 400
with the reason), and ``ssl_check`` (unsigned, and only a small form body is looked at for it) /
``url_verification`` are answered as Bolt answers them. A request whose ``response_url`` is not Slack's
(``response_hosts``) is refused (400) and logged: decklog posts to no other host on a request's say-so. The declare modal's validation answers in
the ack, before anything is stored. Then the request goes into the inbox under its idempotency key and only then
is it acknowledged. A key already there (a Slack retry, or a duplicate delivered while the first one still runs)
is acknowledged and not processed again.

Idempotency keys (see docs/decisions/0043-durable-inbox-persist-then-ack.md):

- events: ``ev:<event_id>`` — Slack's retries of one event carry the same ``event_id``;
- slash commands: ``cmd:<trigger_id>`` (``cmd:<response_url>`` if a client sends none) — one per invocation;
- block actions and other interactions: ``int:<trigger_id>`` — Slack issues a new trigger_id for every click;
  without one, the view id, or the action ids with their ``action_ts``;
- view submissions: ``view:<view id>`` — a modal is submitted (successfully) once.

After the ack the stored request is dispatched through Bolt (a Bolt app with verification off: the intake verified
it), in a task that holds one of ``SlackDeps.work_slots``; requests about one thread run one after another, in the
order they were stored (``order_lane``), so a thread's messages are recorded in Slack's order. It is marked done
when its work finished, also when it failed with an error the person was shown (a usage error, a refusal). An
unexpected error is retried a few times; after the last attempt the person is shown it and the request is parked
with the error (``Inbox.park``): no longer pending, so never replayed, and listed by ``decklog doctor`` (``doctor
--retry`` queues it again). So is a request replayed after its attempts all ended with the process stopping (one
that kills the process). A poison request never replays for ever. At boot ``replay`` re-runs every pending request,
oldest first, and a running server replays what ``doctor --retry`` queued again (bot/ops.py); the listeners'
idempotency keys make a re-run after a crash harmless.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, urlsplit

from slack_bolt.async_app import AsyncApp
from slack_bolt.request.async_request import AsyncBoltRequest
from slack_sdk.signature import SignatureVerifier
from slack_sdk.socket_mode.async_client import AsyncBaseSocketModeClient
from slack_sdk.socket_mode.request import SocketModeRequest
from slack_sdk.socket_mode.response import SocketModeResponse

from decklog.adapters.slack.deps import SlackDeps
from decklog.adapters.slack.listeners.errors import OUTCOME, Outcome
from decklog.adapters.slack.listeners.views import validation_errors
from decklog.core.store.ports import Inbox, InboxItem

log = logging.getLogger("decklog.slack.intake")

JSON = dict[str, Any]
MAX_ATTEMPTS = 3
#: How long a request waits for the one before it in its thread (``order_lane``) before it goes ahead anyway: a
#: request whose work hangs must not stop its thread's later messages from being recorded.
LANE_WAIT_S = 30.0
RETRY_DELAYS_S = (0.5, 2.0)
#: Slack's payloads nest a dozen levels at most (rich text in a modal's blocks); deeper is not Slack.
MAX_DEPTH = 64
#: An unsigned body is looked at only to answer Slack's ``ssl_check``, a short form.
SSL_CHECK_MAX = 1024


class Rejected(Exception):
    """A request that is not stored: ``status`` and the reason the sender is told."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


@dataclass(frozen=True)
class Answer:
    """What Slack is told: ``body`` is a JSON object, or "" for an empty 200."""

    status: int
    body: JSON | str = ""


def parse_http(raw: bytes, content_type: str) -> JSON:
    """The request body as Bolt would see it (form fields → str values; ``payload=`` → the interaction)."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise Rejected(400, "the body is not UTF-8") from None
    if content_type.startswith("application/json"):
        body = _json(text, "the body")
        if not isinstance(body, dict):
            raise Rejected(400, "the JSON body is not an object")
        return body
    form = {k: v[0] for k, v in parse_qs(text, keep_blank_values=True).items()}
    if "payload" in form:
        payload = _json(form["payload"], "the payload field")
        if not isinstance(payload, dict) or not payload.get("type"):
            raise Rejected(400, "the payload field is not an interaction (no type)")
        return payload
    if form.get("ssl_check") or form.get("command"):
        return form
    raise Rejected(400, "not a Slack request: no event, command or interaction payload")


def _json(text: str, what: str) -> Any:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise Rejected(400, f"{what} is not valid JSON: {exc.msg}") from None
    except RecursionError:
        raise Rejected(400, f"{what} is nested too deeply (more than {MAX_DEPTH} levels)") from None
    if _depth_over(value, MAX_DEPTH):
        raise Rejected(400, f"{what} is nested too deeply (more than {MAX_DEPTH} levels)")
    return value


def _depth_over(value: Any, limit: int) -> bool:
    """Whether ``value`` nests lists and objects more than ``limit`` deep (walked without recursion)."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in children if isinstance(child, dict | list))
    return False


def signed_timestamp(headers: Mapping[str, str]) -> str | None:
    """``X-Slack-Request-Timestamp`` if present; ``Rejected(400)`` if it is not a Unix time in seconds."""
    stamp = next((v for k, v in headers.items() if k.lower() == "x-slack-request-timestamp"), None)
    if stamp is None:
        return None
    if not stamp.strip().isascii() or not stamp.strip().isdigit() or len(stamp.strip()) > 12:
        raise Rejected(400, f"X-Slack-Request-Timestamp is not a Unix time in seconds: {stamp[:40]!r}")
    return stamp


def is_ssl_check(raw: bytes, content_type: str) -> bool:
    """Slack's certificate check (``ssl_check=1``, a short form), answered 200 without a signature as Bolt does."""
    if len(raw) > SSL_CHECK_MAX or content_type.startswith("application/json"):
        return False
    try:
        form = parse_qs(raw.decode("utf-8"), keep_blank_values=True)
    except UnicodeDecodeError:
        return False
    return form.get("ssl_check") == ["1"]


def response_urls(body: JSON) -> list[str]:
    """Every ``response_url`` a request carries (a command's or an interaction's, a modal's ``response_urls``)."""
    urls = [body["response_url"]] if isinstance(body.get("response_url"), str) else []
    for item in body.get("response_urls") or []:
        if isinstance(item, dict) and isinstance(item.get("response_url"), str):
            urls.append(item["response_url"])
    return urls


def foreign_url(url: str, hosts: Sequence[str]) -> bool:
    """Whether ``url`` is not on one of ``hosts`` (``scheme://host[:port]``)."""
    try:
        parts = urlsplit(url)
        origin = f"{parts.scheme}://{parts.netloc}".lower()
    except ValueError:
        return True
    return origin not in hosts or "@" in parts.netloc


def request_key(body: JSON) -> str:
    """The idempotency key of a parsed request (see the module docstring); Rejected(400) if it has none."""
    kind = body.get("type")
    if kind == "event_callback":
        if not body.get("event_id") or not isinstance(body.get("event"), dict):
            raise Rejected(400, "an event_callback needs an event_id and an event")
        return f"ev:{body['event_id']}"
    if "command" in body:
        ref = body.get("trigger_id") or body.get("response_url")
        if not ref:
            raise Rejected(400, "a slash command needs a trigger_id")
        return f"cmd:{ref}"
    view: JSON = body["view"] if isinstance(body.get("view"), dict) else {}
    if kind == "view_submission":
        if not view.get("id"):
            raise Rejected(400, "a view_submission needs a view id")
        return f"view:{view['id']}"
    if body.get("trigger_id"):
        return f"int:{body['trigger_id']}"
    if view.get("id"):
        return f"int:{kind}:{view['id']}"
    actions: list[Any] = body["actions"] if isinstance(body.get("actions"), list) else []
    ids = [f"{a.get('action_id', '')}@{a.get('action_ts', '')}" for a in actions if isinstance(a, dict)]
    if ids and kind:
        user = (body.get("user") or {}).get("id", "") if isinstance(body.get("user"), dict) else ""
        return f"int:{kind}:{user}:{','.join(ids)}"
    raise Rejected(400, f"cannot tell one {kind or 'request'} from another (no event_id, trigger_id or view id)")


def order_lane(body: JSON) -> str | None:
    """Requests about one Slack thread are processed one after another, in the order they were stored, so the log
    records a thread's messages, edits and reactions in Slack's order (work for different threads still runs side
    by side). The lane is ``<channel>:<thread root ts>``; ``None`` for requests that need no order (commands,
    clicks, events outside a message)."""
    if body.get("type") != "event_callback" or not isinstance(body.get("event"), dict):
        return None
    event: JSON = body["event"]
    pin_channel = event.get("channel_id")  # pins name their channel on the event, the message in the item
    if isinstance(event.get("item"), dict):  # reactions and pins: the message they are on
        event = event["item"]
    message = next((event[k] for k in ("message", "previous_message") if isinstance(event.get(k), dict)), event)
    channel, root = event.get("channel") or pin_channel, message.get("thread_ts") or message.get("ts")
    if not isinstance(channel, str) or not channel or not isinstance(root, str) or not root:
        return None
    return f"{channel}:{root}"


class SlackIntake:
    """``await intake.http(raw, headers)`` for ``/slack/events``; ``intake.socket_listener`` for Socket Mode."""

    def __init__(
        self,
        *,
        inbox: Inbox,
        bolt: AsyncApp,
        deps: SlackDeps,
        signing_secret: str | None,
        response_hosts: Sequence[str] = ("https://hooks.slack.com",),
        max_attempts: int = MAX_ATTEMPTS,
        retry_delays: tuple[float, ...] = RETRY_DELAYS_S,
    ) -> None:
        self.inbox = inbox
        self.bolt = bolt
        self.deps = deps
        self.verifier = SignatureVerifier(signing_secret) if signing_secret else None
        self.response_hosts = tuple(h.lower().rstrip("/") for h in response_hosts)
        self.max_attempts = max_attempts
        self.retry_delays = retry_delays
        self.running: set[str] = set()
        self._lanes: dict[str, asyncio.Event] = {}  # a thread's lane → set when its newest submitted request is done
        self.lane_wait_s = LANE_WAIT_S
        # A test hook (set by the composition, never by configuration): awaited before a stored request is processed.
        self.before_process: Callable[[InboxItem], Awaitable[None]] | None = None

    # -- receiving ------------------------------------------------------------------------------------------------

    async def http(self, raw: bytes, headers: Mapping[str, str]) -> Answer:
        try:
            content_type = headers.get("Content-Type") or headers.get("content-type") or ""
            # The signature first, on the raw bytes: nothing unsigned is parsed, however it is shaped.
            signed_timestamp(headers)
            if self.verifier is None or not self.verifier.is_valid_request(raw, dict(headers)):
                if is_ssl_check(raw, content_type):
                    return Answer(200)  # as Bolt: Slack checking the certificate, nothing to do
                raise Rejected(401, "invalid or stale request signature")
            body = parse_http(raw, content_type)
            if body.get("ssl_check") == "1":
                return Answer(200)
            if body.get("type") == "url_verification":
                return Answer(200, {"challenge": body.get("challenge", "")})
            retry = {
                k: headers[h]
                for k, h in (("retry_num", "X-Slack-Retry-Num"), ("retry_reason", "X-Slack-Retry-Reason"))
                if h in headers
            }
            return await self.accept(body, source="http", meta=retry)
        except Rejected as exc:
            return Answer(exc.status, {"error": exc.reason})

    async def accept(self, body: JSON, *, source: str, meta: JSON) -> Answer:
        """Validate, store, then answer 200; the work starts once the request is durable."""
        if body.get("type") == "app_rate_limited":
            return Answer(200)
        foreign = [url for url in response_urls(body) if foreign_url(url, self.response_hosts)]
        if foreign:
            log.warning("refused a Slack request whose response_url is not Slack's: %.200s", foreign[0])
            raise Rejected(400, "the response_url is not on a Slack host (hooks.slack.com)")
        key = request_key(body)
        errors = validation_errors(body) if body.get("type") == "view_submission" else None
        if errors:
            return Answer(200, errors)  # the form shows the errors; nothing happened, nothing is stored
        if await self.inbox.put(key=key, source=source, body=body, meta=meta):
            self.submit(InboxItem(key=key, source=source, body=body, meta=meta), fresh=True)
        else:
            self.deps.count("duplicate_requests")
        return Answer(200)

    def socket_listener(self) -> Callable[[AsyncBaseSocketModeClient, SocketModeRequest], Awaitable[None]]:
        """Replaces Bolt's Socket Mode listener: store the envelope's payload, then ack the envelope."""

        async def on_envelope(socket: AsyncBaseSocketModeClient, req: SocketModeRequest) -> None:
            meta = {"retry_num": str(req.retry_attempt or 0), "retry_reason": req.retry_reason or ""}
            payload: dict[str, Any] | None = None
            try:
                if not isinstance(req.payload, dict):
                    raise Rejected(400, "the envelope has no payload object")
                answer = await self.accept(req.payload, source="socket", meta=meta)
                payload = answer.body if isinstance(answer.body, dict) and answer.body else None
            except Rejected as exc:
                # Nothing was stored. Acked all the same: an envelope that cannot be stored now cannot be stored
                # on Slack's redelivery either, so not acking would only make Slack send it again.
                log.warning("Socket Mode %s envelope %s rejected: %s", req.type, req.envelope_id, exc.reason)
            await socket.send_socket_mode_response(SocketModeResponse(envelope_id=req.envelope_id, payload=payload))

        return on_envelope

    # -- processing -----------------------------------------------------------------------------------------------

    def submit(self, item: InboxItem, *, fresh: bool = False) -> bool:
        """``fresh``: stored just now by this process (not replayed), so no attempt is recorded yet. False if the
        request is being processed here already."""
        if item.key in self.running:
            return False
        self.running.add(item.key)
        lane = order_lane(item.body)
        after: asyncio.Event | None = None
        done: asyncio.Event | None = None
        if lane is not None:
            after, done = self._lanes.get(lane), asyncio.Event()
            self._lanes[lane] = done
        work = self._process(item, fresh=fresh, after=after, done=done, lane=lane)
        task = asyncio.get_running_loop().create_task(work, name=f"slack:{item.key[:40]}")
        self.deps.work_tasks.add(task)
        task.add_done_callback(self.deps.work_tasks.discard)
        return True

    async def replay(self) -> int:
        """Every request stored, not done and not parked, that this process is not processing already (a previous
        process was stopped or killed; ``decklog doctor --retry`` queued a parked one again), oldest first."""
        started = sum(self.submit(item) for item in await self.inbox.pending())
        if started:
            log.info("inbox: replaying %d stored Slack requests", started)
        return started

    async def _process(
        self,
        item: InboxItem,
        *,
        fresh: bool = False,
        after: asyncio.Event | None = None,
        done: asyncio.Event | None = None,
        lane: str | None = None,
    ) -> None:
        """``after``: set when the previous request of the same thread is done (``order_lane``); ``done`` is this
        request's own, set when it is done whatever happened, so its thread goes on."""
        try:
            if after is not None:
                try:
                    await asyncio.wait_for(after.wait(), self.lane_wait_s)
                except TimeoutError:
                    log.warning(
                        "Slack request %s did not wait any longer for the one before it in its thread", item.key
                    )
            if self.before_process is not None:
                await self.before_process(item)
            delays = iter(self.retry_delays)
            # A request just stored is on its first attempt: counting it costs a write per request, so only
            # retries and replays are counted.
            attempt = 0
            while True:
                async with self.deps.work_slots:
                    if fresh and attempt == 0:
                        attempt = 1
                    else:
                        attempt = await self.inbox.attempt(key=item.key) + (1 if fresh else 0)
                    if attempt > self.max_attempts:  # replayed after its attempts all stopped with the process
                        await self._park(
                            item, attempt - 1, f"the process stopped {attempt - 1} times while processing it"
                        )
                        return
                    outcome = Outcome(final=attempt >= self.max_attempts)
                    await self._dispatch(item, outcome)
                if outcome.error is None:
                    break
                if outcome.final:
                    await self._park(item, attempt, f"{type(outcome.error).__name__}: {outcome.error}", outcome.error)
                    return
                log.warning("Slack request %s failed (attempt %d), retrying: %r", item.key, attempt, outcome.error)
                await asyncio.sleep(next(delays, self.retry_delays[-1] if self.retry_delays else 0.0))
            await self.inbox.done(key=item.key)
        except Exception:
            log.exception("processing the stored Slack request %s failed; it stays in the inbox", item.key)
        finally:
            self.running.discard(item.key)
            if done is not None:
                done.set()
                if lane is not None and self._lanes.get(lane) is done:
                    del self._lanes[lane]

    async def _dispatch(self, item: InboxItem, outcome: Outcome) -> None:
        """One attempt. Every unexpected failure ends in ``outcome.error``: the listener's and Bolt's own (their
        error handler, adapters/slack/listeners/errors.py ``failed``), and Bolt's reading of the request itself
        (``AsyncBoltRequest`` and ``async_dispatch`` raise on some wrongly typed fields, e.g. ``"team": 5``)."""
        headers: dict[str, str | Sequence[str]] = {"x-slack-retry-num": str(item.meta.get("retry_num", "0"))}
        if item.meta.get("retry_reason"):
            headers["x-slack-retry-reason"] = str(item.meta["retry_reason"])
        try:
            request = AsyncBoltRequest(body=item.body, mode="socket_mode", headers=headers, context={OUTCOME: outcome})
            await self.bolt.async_dispatch(request)
        except Exception as exc:
            outcome.error = exc

    async def _park(self, item: InboxItem, attempts: int, error: str, exc: BaseException | None = None) -> None:
        """Give a poison request up: parked with its error, never replayed at boot; ``decklog doctor`` shows it
        and ``doctor --retry`` queues it again."""
        await self.inbox.park(key=item.key, error=error, attempts=attempts)
        self.deps.count("parked_requests")
        log.error(
            "gave up on the Slack request %s after %d attempts; parked (`decklog doctor` lists it): %s",
            item.key,
            attempts,
            error,
            exc_info=exc,
        )
