"""A scripted, strict fake of the Anthropic Messages API on loopback, for tests.

Point the real SDK at it and script what "Claude" answers::

    fake = FakeAnthropic([
        Reply(tool_calls=[ToolCall("recent_changes", {"service": "payments"})]),
        Reply(text="Probably the 14:02 deploy.", expect=tools_withheld),
    ])
    client = anthropic.AsyncAnthropic(api_key="sk-test", base_url=await fake.start(), max_retries=0)
    ...
    fake.assert_done()
    await fake.stop()

Wire format, as read from the installed ``anthropic`` 2.14 SDK: requests are ``POST {base}/v1/messages``
and ``POST {base}/v1/messages/count_tokens`` with ``Authorization: Bearer <api_key>`` (2.x no longer sends
``x-api-key``; the fake accepts either) and ``anthropic-version`` (required). Responses are the real JSON
shapes (``type: "message"``, ``content`` blocks, ``stop_reason``, ``usage`` with the cache fields); errors
are ``{"type": "error", "error": {"type", "message"}, "request_id"}`` with a ``request-id`` header, and 429s
carry ``retry-after``.

Strictness:

* every ``POST /v1/messages`` that passes validation consumes the next scripted step, in order;
* a step's ``expect`` predicate runs on the request body; a failure answers 400 and is recorded;
* when the script runs out the fake answers 500 (``x-should-retry: false``) and records the failure;
* requests the real API would reject (tool_use without its tool_result in the next user message, tool_result
  blocks not first, first message not ``user``, missing ``max_tokens``/``model``, more than 4
  ``cache_control`` breakpoints, …) get the real-style 400 ``invalid_request_error``, consume no step, and are
  recorded;
* stricter than the real API on purpose: roles must alternate (the 2.x API combines consecutive same-role
  turns instead; pass ``strict_alternation=False`` to behave like it), and streaming and mid-conversation
  ``system`` messages are refused as unscripted;
* ``assert_done()`` raises if steps remain or any failure was recorded (``take_failures()`` acknowledges
  failures a test provoked on purpose).

Token counts are deterministic: about one token per four characters of the canonical JSON of tools, system and
messages (``cache_control`` markers excluded), so ``count_tokens`` equals ``input_tokens +
cache_read_input_tokens + cache_creation_input_tokens`` of a reply to the same request.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import math
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Literal, TypeAlias

from aiohttp import web

__all__ = [
    "Delay",
    "Expect",
    "Fail",
    "FakeAnthropic",
    "RecordedCall",
    "Reply",
    "Step",
    "ToolCall",
    "all_of",
    "estimate_input_tokens",
    "has_cache_breakpoint",
    "has_tools",
    "no_tools",
    "tools_withheld",
]

Body: TypeAlias = dict[str, Any]
Expect: TypeAlias = Callable[[Body], object]
"""A predicate on the request body: raising (AssertionError or anything) or returning ``False`` fails it."""

StopReason: TypeAlias = Literal[
    "end_turn",
    "max_tokens",
    "stop_sequence",
    "tool_use",
    "pause_turn",
    "refusal",
    "model_context_window_exceeded",
]
_STOP_REASONS = frozenset(
    {
        "end_turn",
        "max_tokens",
        "stop_sequence",
        "tool_use",
        "pause_turn",
        "refusal",
        "model_context_window_exceeded",
    }
)

# The error `type` the real API puts in the body for each status.
_ERROR_TYPES: Mapping[int, str] = MappingProxyType(
    {
        400: "invalid_request_error",
        401: "authentication_error",
        402: "billing_error",
        403: "permission_error",
        404: "not_found_error",
        409: "conflict_error",
        413: "request_too_large",
        429: "rate_limit_error",
        500: "api_error",
        504: "timeout_error",
        529: "overloaded_error",
    }
)
_DEFAULT_ERROR_MESSAGES: Mapping[int, str] = MappingProxyType(
    {429: "Rate limited", 500: "Internal server error", 529: "Overloaded"}
)
_TOOL_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,128}$")
_MAX_CACHE_BREAKPOINTS = 4


# --------------------------------------------------------------------------------------------- script steps


@dataclass(frozen=True)
class ToolCall:
    """One ``tool_use`` block in a scripted reply; ``id`` is generated (``toolu_fake_…``) when omitted."""

    name: str
    input: Mapping[str, Any] = field(default_factory=dict)
    id: str | None = None


@dataclass(frozen=True)
class Reply:
    """A 200 ``message``: optional text, then tool_use blocks.

    ``stop_reason`` defaults to ``tool_use`` when there are tool calls, ``stop_sequence`` when
    ``stop_sequence`` is set, else ``end_turn``. Token counts default to the deterministic estimate
    (``max_tokens`` stops report ``output_tokens == max_tokens``). Cache fields: explicit values win; with
    ``cache=True`` (or the fake's ``simulate_cache``) they are computed from the request's ``cache_control``
    breakpoints and the prefixes this fake has already seen; otherwise both are 0.
    """

    text: str | None = None
    tool_calls: Sequence[ToolCall] = ()
    stop_reason: StopReason | None = None
    stop_sequence: str | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    cache_read_input_tokens: int | None = None
    cache_creation_input_tokens: int | None = None
    cache: bool | None = None
    refusal_explanation: str | None = None
    expect: Expect | None = None

    def __post_init__(self) -> None:
        if self.stop_reason is not None and self.stop_reason not in _STOP_REASONS:
            raise ValueError(f"Reply: unknown stop_reason {self.stop_reason!r}")
        if self.stop_reason == "tool_use" and not self.tool_calls:
            raise ValueError("Reply: stop_reason='tool_use' needs at least one ToolCall")
        if self.tool_calls and self.stop_reason not in (None, "tool_use", "max_tokens"):
            raise ValueError(f"Reply: tool calls cannot end with stop_reason={self.stop_reason!r}")

    @property
    def resolved_stop_reason(self) -> str:
        if self.stop_reason is not None:
            return self.stop_reason
        if self.tool_calls:
            return "tool_use"
        if self.stop_sequence is not None:
            return "stop_sequence"
        return "end_turn"


@dataclass(frozen=True)
class Fail:
    """An error answer: ``{"type": "error", "error": {"type", "message"}}`` with ``status``.

    ``error_type`` defaults from the status (429 ``rate_limit_error``, 529 ``overloaded_error``, 500
    ``api_error``, 400 ``invalid_request_error``, …). A 429 always carries ``retry-after`` (default 1 s, as
    the real API does); other statuses only when ``retry_after`` is given. Floats are allowed to keep tests
    fast (the SDK parses them). ``headers`` adds or overrides response headers (e.g. ``x-should-retry``).
    """

    status: int
    error_type: str | None = None
    message: str | None = None
    retry_after: float | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    expect: Expect | None = None

    def __post_init__(self) -> None:
        if not 400 <= self.status <= 599:
            raise ValueError(f"Fail: status must be 4xx/5xx, got {self.status}")


@dataclass(frozen=True)
class Delay:
    """Hold the response ``seconds`` (to drive client timeouts), then answer with ``then``.

    The step is consumed when the request arrives, whether or not the client is still there to read the
    answer. ``stop()`` cuts the delay short.
    """

    seconds: float
    then: Reply | Fail = field(default_factory=lambda: Reply(text="(late reply)"))

    @property
    def expect(self) -> Expect | None:
        return self.then.expect


Step: TypeAlias = Reply | Fail | Delay


@dataclass
class RecordedCall:
    """One HTTP request the fake received (any path), with the status it answered."""

    method: str
    path: str
    headers: dict[str, str]
    body: Any
    status: int | None = None
    step: int | None = None
    at: float = field(default_factory=time.monotonic)
    """``time.monotonic()`` when the request arrived."""


# ------------------------------------------------------------------------------------- expect predicates


def tools_withheld(body: Body) -> None:
    """Passes when the model cannot call a tool: no ``tools``, or ``tool_choice`` ``{"type": "none"}``."""
    tools = body.get("tools") or []
    choice = body.get("tool_choice") or {}
    assert not tools or choice.get("type") == "none", (
        f"expected tools to be withheld, got {len(tools)} tool(s) and tool_choice={choice!r}"
    )


def no_tools(body: Body) -> None:
    """Passes when the request carries no ``tools`` at all."""
    assert not body.get("tools"), f"expected no tools, got {[t.get('name') for t in body['tools']]}"


def has_tools(*names: str) -> Expect:
    """A predicate: the request offers (at least) these tools."""

    def check(body: Body) -> None:
        offered = {t.get("name") for t in body.get("tools") or [] if isinstance(t, dict)}
        missing = [n for n in names if n not in offered]
        assert not missing, f"expected tools {missing} to be offered, got {sorted(map(str, offered))}"

    check.__name__ = f"has_tools{names!r}"
    return check


def has_cache_breakpoint(body: Body) -> None:
    """Passes when the request carries at least one ``cache_control`` breakpoint."""
    assert _count_cache_breakpoints(body) > 0, "expected at least one cache_control breakpoint"


def all_of(*checks: Expect) -> Expect:
    """A predicate that passes when every one of ``checks`` passes (stops at the first failure)."""

    def check(body: Body) -> None:
        for c in checks:
            problem = _run_expect(c, body)
            assert problem is None, problem

    check.__name__ = "all_of(" + ", ".join(getattr(c, "__name__", repr(c)) for c in checks) + ")"
    return check


# ---------------------------------------------------------------------------------------- pure helpers


def _canon(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _strip_cache_control(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _strip_cache_control(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        return [_strip_cache_control(v) for v in value]
    return value


def _blocks(content: Any) -> list[Any]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if isinstance(content, list):
        return content
    return []


def _segments(body: Body) -> tuple[list[str], list[int]]:
    """The request's prompt as canonical segments in cache-prefix order (tools, system, messages) and the
    indexes of the segments that end at a ``cache_control`` breakpoint."""
    segments: list[str] = []
    breakpoints: list[int] = []

    def add(kind: str, item: Any) -> None:
        segments.append(kind + ":" + _canon(_strip_cache_control(item)))
        if isinstance(item, dict) and item.get("cache_control") is not None:
            breakpoints.append(len(segments) - 1)

    for tool in body.get("tools") or []:
        add("tool", tool)
    system = body.get("system")
    if isinstance(system, str) and system:
        add("system", {"type": "text", "text": system})
    elif isinstance(system, list):
        for block in system:
            add("system", block)
    for message in body.get("messages") or []:
        if isinstance(message, dict):
            for block in _blocks(message.get("content")):
                add(str(message.get("role")), block)
    if body.get("cache_control") is not None and segments:
        breakpoints.append(len(segments) - 1)
    return segments, sorted(set(breakpoints))


def _tokens(segments: Sequence[str]) -> int:
    return math.ceil(sum(len(s) for s in segments) / 4)


def estimate_input_tokens(body: Body) -> int:
    """The fake's deterministic token count for a request (what ``count_tokens`` answers)."""
    segments, _ = _segments(body)
    return max(1, _tokens(segments))


def _count_cache_breakpoints(body: Body) -> int:
    count = 1 if body.get("cache_control") is not None else 0

    def walk(value: Any) -> None:
        nonlocal count
        if isinstance(value, dict):
            if value.get("cache_control") is not None:
                count += 1
            for k, v in value.items():
                if k != "cache_control":
                    walk(v)
        elif isinstance(value, list):
            for v in value:
                walk(v)

    walk(body.get("tools"))
    walk(body.get("system"))
    walk(body.get("messages"))
    return count


def _run_expect(expect: Expect, body: Body) -> str | None:
    name = getattr(expect, "__name__", repr(expect))
    try:
        result = expect(body)
    except AssertionError as exc:
        return f"{name}: {exc or 'assertion failed'}"
    except Exception as exc:
        return f"{name}: {type(exc).__name__}: {exc}"
    if result is False:
        return f"{name}: returned False"
    return None


def _validate_tools(body: Body) -> str | None:
    tools = body.get("tools")
    if tools is None:
        tools = []
    if not isinstance(tools, list):
        return "tools: Input should be a valid list"
    names: set[str] = set()
    for j, tool in enumerate(tools):
        if not isinstance(tool, dict):
            return f"tools.{j}: Input should be a valid dictionary"
        if tool.get("type") not in (None, "custom"):
            continue  # a server tool (web search, …): not validated here
        name = tool.get("name")
        if not isinstance(name, str) or not _TOOL_NAME.match(name):
            return f"tools.{j}.custom.name: String should match pattern '^[a-zA-Z0-9_-]{{1,128}}$'"
        if not isinstance(tool.get("input_schema"), dict):
            return f"tools.{j}.custom.input_schema: Field required"
        if name in names:
            return "tools: Tool names must be unique."
        names.add(name)
    choice = body.get("tool_choice")
    if choice is not None:
        if not isinstance(choice, dict) or choice.get("type") not in ("auto", "any", "tool", "none"):
            return "tool_choice: Input tag does not match any of the expected tags: 'auto', 'any', 'tool', 'none'"
        if choice["type"] in ("any", "tool") and not tools:
            return "tool_choice: tool_choice may only be specified while providing tools."
        if choice["type"] == "tool" and choice.get("name") not in names:
            return f"tool_choice.tool.name: Tool '{choice.get('name')}' not found in provided tools"
    return None


def _validate_messages(messages: Any, *, strict_alternation: bool = True) -> str | None:
    if not isinstance(messages, list):
        return "messages: Input should be a valid list"
    if not messages:
        return "messages: at least one message is required"
    roles: list[str] = []
    per_message: list[list[dict[str, Any]]] = []
    last = len(messages) - 1
    for i, message in enumerate(messages):
        if not isinstance(message, dict):
            return f"messages.{i}: Input should be a valid dictionary"
        role = message.get("role")
        if role == "system":
            return (
                f"messages.{i}.role: fake-anthropic does not script mid-conversation `system` messages; "
                "use the top-level `system` parameter"
            )
        if role not in ("user", "assistant"):
            return f"messages.{i}.role: Input should be 'user' or 'assistant'"
        if "content" not in message:
            return f"messages.{i}.content: Field required"
        content = message["content"]
        if not isinstance(content, str | list):
            return f"messages.{i}.content: Input should be a valid string or list"
        blocks = _blocks(content)
        if (content == "" or not blocks) and not (i == last and role == "assistant"):
            return (
                f"messages.{i}: all messages must have non-empty content except for the optional final "
                "assistant message"
            )
        for k, block in enumerate(blocks):
            if not isinstance(block, dict) or "type" not in block:
                return f"messages.{i}.content.{k}.type: Field required"
            kind = block["type"]
            if kind == "text":
                if not isinstance(block.get("text"), str):
                    return f"messages.{i}.content.{k}.text.text: Field required"
                if block["text"] == "" and isinstance(content, list):
                    return "messages: text content blocks must be non-empty"
            elif kind == "tool_use":
                if role != "assistant":
                    return f"messages.{i}.content.{k}: `tool_use` blocks can only appear in assistant messages"
                for key in ("id", "name", "input"):
                    if key not in block:
                        return f"messages.{i}.content.{k}.tool_use.{key}: Field required"
                if not isinstance(block["input"], dict):
                    return f"messages.{i}.content.{k}.tool_use.input: Input should be a valid dictionary"
            elif kind == "tool_result":
                if role != "user":
                    return f"messages.{i}.content.{k}: `tool_result` blocks can only appear in user messages"
                if not isinstance(block.get("tool_use_id"), str):
                    return f"messages.{i}.content.{k}.tool_result.tool_use_id: Field required"
        roles.append(role)
        per_message.append([b for b in blocks if isinstance(b, dict)])

    if roles[0] != "user":
        return 'messages: first message must use the "user" role'
    for i in range(1, len(roles)):
        if strict_alternation and roles[i] == roles[i - 1]:
            return (
                'messages: roles must alternate between "user" and "assistant", '
                f'but found multiple "{roles[i]}" roles in a row'
            )

    # The real API combines consecutive same-role turns; with strict_alternation off, pair on merged turns.
    merged_roles: list[str] = []
    merged: list[list[dict[str, Any]]] = []
    origin: list[int] = []
    for i, (role, blocks) in enumerate(zip(roles, per_message, strict=True)):
        if merged_roles and merged_roles[-1] == role:
            merged[-1] = merged[-1] + blocks
        else:
            merged_roles.append(role)
            merged.append(list(blocks))
            origin.append(i)
    roles, per_message = merged_roles, merged

    for n, blocks in enumerate(per_message):
        i = origin[n]
        if roles[n] == "user":
            previous = per_message[n - 1] if n > 0 else []
            offered = {b.get("id") for b in previous if b.get("type") == "tool_use"}
            for k, block in enumerate(blocks):
                if block.get("type") == "tool_result" and block.get("tool_use_id") not in offered:
                    return (
                        f"messages.{i}.content.{k}: unexpected `tool_use_id` found in `tool_result` blocks: "
                        f"{block.get('tool_use_id')}. Each `tool_result` block must have a corresponding "
                        "`tool_use` block in the previous message."
                    )
            continue
        ids = [str(b.get("id")) for b in blocks if b.get("type") == "tool_use"]
        if not ids:
            continue
        following = per_message[n + 1] if n + 1 < len(per_message) else []
        answered = [b.get("tool_use_id") for b in following if b.get("type") == "tool_result"]
        missing = [x for x in ids if x not in answered]
        if missing:
            return (
                f"messages.{i}: `tool_use` ids were found without `tool_result` blocks immediately after: "
                f"{', '.join(missing)}. Each `tool_use` block must have a corresponding `tool_result` block "
                "in the next message."
            )
        leading = 0
        for block in following:
            if block.get("type") != "tool_result":
                break
            leading += 1
        if leading < len(answered):
            return (
                f"messages.{origin[n + 1]}: Did not find {len(ids)} `tool_result` block(s) at the beginning "
                "of this message. Messages following `tool_use` blocks must begin with a matching number of "
                "`tool_result` blocks."
            )
    return None


def _validate_cache_control(body: Body) -> str | None:
    problems: list[str] = []

    def walk(value: Any, where: str) -> None:
        if isinstance(value, dict):
            cc = value.get("cache_control")
            if cc is not None and (
                not isinstance(cc, dict) or cc.get("type") != "ephemeral" or cc.get("ttl") not in (None, "5m", "1h")
            ):
                problems.append(f"{where}.cache_control: Input should be {{'type': 'ephemeral'}} (ttl '5m'|'1h')")
            for k, v in value.items():
                if k != "cache_control":
                    walk(v, f"{where}.{k}")
        elif isinstance(value, list):
            for n, v in enumerate(value):
                walk(v, f"{where}.{n}")

    for key in ("tools", "system", "messages"):
        walk(body.get(key), key)
    if body.get("cache_control") is not None:
        walk({"cache_control": body["cache_control"]}, "body")
    if problems:
        return problems[0]
    count = _count_cache_breakpoints(body)
    if count > _MAX_CACHE_BREAKPOINTS:
        return f"A maximum of {_MAX_CACHE_BREAKPOINTS} blocks with cache_control may be provided. Found {count}."
    return None


def validate_request(body: Any, *, count_tokens: bool = False, strict_alternation: bool = True) -> str | None:
    """What the real API would reject with a 400 ``invalid_request_error`` (the message), or ``None``."""
    if not isinstance(body, dict):
        return "body: Input should be a valid dictionary"
    required = ("model", "messages") if count_tokens else ("model", "max_tokens", "messages")
    for key in required:
        if key not in body:
            return f"{key}: Field required"
    if not isinstance(body["model"], str) or not body["model"]:
        return "model: Input should be a valid string"
    if not count_tokens:
        max_tokens = body["max_tokens"]
        if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1:
            return "max_tokens: Input should be greater than or equal to 1"
        if body.get("stream"):
            return "fake-anthropic: streaming is not scripted by this fake; call messages.create without stream"
    system = body.get("system")
    if system is not None and not isinstance(system, str | list):
        return "system: Input should be a valid string or list of text blocks"
    return (
        _validate_tools(body)
        or _validate_messages(body["messages"], strict_alternation=strict_alternation)
        or _validate_cache_control(body)
    )


# ------------------------------------------------------------------------------------------- the server


class FakeAnthropic:
    """The scripted fake. See the module docstring for the contract."""

    def __init__(
        self,
        script: Sequence[Step],
        *,
        api_key: str | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        simulate_cache: bool = False,
        min_cache_tokens: int = 1024,
        strict_alternation: bool = True,
    ) -> None:
        for n, step in enumerate(script):
            if not isinstance(step, Reply | Fail | Delay):
                raise TypeError(f"script step {n} is {type(step).__name__}, expected Reply, Fail or Delay")
        self._script: list[Step] = list(script)
        self._api_key = api_key
        self._host = host
        self._port = port
        self._simulate_cache = simulate_cache
        self._min_cache_tokens = min_cache_tokens
        self._strict_alternation = strict_alternation
        self._next_step = 0
        self._replies = 0
        self._request_ids = 0
        self._cached_prefixes: set[str] = set()
        self._stopping = asyncio.Event()
        self._runner: web.AppRunner | None = None
        self._base_url: str | None = None
        self.requests: list[Body] = []
        """Every JSON body POSTed to /v1/messages, in order (rejected ones included)."""
        self.count_tokens_requests: list[Body] = []
        self.calls: list[RecordedCall] = []
        """Every HTTP request, any path, with the status answered."""
        self.failures: list[str] = []

    # ---- lifecycle

    async def start(self) -> str:
        """Start listening; returns the base URL to pass to ``AsyncAnthropic(base_url=...)``."""
        if self._runner is not None:
            raise RuntimeError("FakeAnthropic already started")
        app = web.Application(client_max_size=32 * 1024 * 1024)
        app.router.add_post("/v1/messages", self._messages)
        app.router.add_post("/v1/messages/count_tokens", self._count_tokens)
        app.router.add_route("*", "/{tail:.*}", self._unknown)
        runner = web.AppRunner(app, shutdown_timeout=1.0, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, self._host, self._port)
        await site.start()
        self._runner = runner
        port = runner.addresses[0][1]
        self._base_url = f"http://{self._host}:{port}"
        return self._base_url

    async def stop(self) -> None:
        self._stopping.set()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> FakeAnthropic:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    @property
    def base_url(self) -> str:
        if self._base_url is None:
            raise RuntimeError("FakeAnthropic not started")
        return self._base_url

    # ---- script and assertions

    @property
    def remaining(self) -> int:
        """Scripted steps not yet consumed."""
        return len(self._script) - self._next_step

    def extend(self, *steps: Step) -> None:
        """Append steps to the script (e.g. between phases of a test)."""
        self._script.extend(steps)

    def take_failures(self) -> list[str]:
        """Return and clear the recorded failures, for tests that provoke them on purpose."""
        taken, self.failures = self.failures, []
        return taken

    def assert_done(self) -> None:
        """Raise AssertionError if scripted steps remain or any failure was recorded."""
        problems: list[str] = []
        if self.remaining:
            problems.append(
                f"{self.remaining} scripted step(s) never requested (consumed {self._next_step} of "
                f"{len(self._script)}): {self._script[self._next_step :]!r}"
            )
        problems.extend(self.failures)
        if problems:
            raise AssertionError("fake-anthropic:\n  " + "\n  ".join(problems))

    async def wait_for_requests(self, count: int, timeout: float = 5.0) -> None:
        """Poll until at least ``count`` /v1/messages requests arrived, or raise TimeoutError."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while len(self.requests) < count:
            if loop.time() >= deadline:
                raise TimeoutError(f"fake-anthropic: {len(self.requests)} request(s) after {timeout}s, wanted {count}")
            await asyncio.sleep(0.01)

    # ---- handlers

    async def _messages(self, request: web.Request) -> web.StreamResponse:
        call = await self._record(request)
        refusal = self._check_headers(request)
        if refusal is not None:
            return self._answer(call, *refusal, record_failure=True)
        if not isinstance(call.body, dict):
            return self._answer(call, 400, "invalid_request_error", _unparsable(call.body), record_failure=True)
        body: Body = call.body
        self.requests.append(body)
        problem = validate_request(body, strict_alternation=self._strict_alternation)
        if problem is not None:
            return self._answer(call, 400, "invalid_request_error", problem, record_failure=True)

        if self._next_step >= len(self._script):
            message = (
                f"fake-anthropic: script exhausted: request #{len(self.requests)} to /v1/messages has no "
                f"scripted step (the script had {len(self._script)})"
            )
            return self._answer(
                call, 500, "api_error", message, record_failure=True, headers={"x-should-retry": "false"}
            )
        index = self._next_step
        step = self._script[index]
        self._next_step += 1
        call.step = index

        if step.expect is not None:
            problem = _run_expect(step.expect, body)
            if problem is not None:
                message = f"fake-anthropic: step {index} expectation failed: {problem}"
                return self._answer(call, 400, "invalid_request_error", message, record_failure=True)

        if isinstance(step, Delay):
            await self._sleep(step.seconds)
            step = step.then
        if isinstance(step, Fail):
            headers = dict(step.headers)
            retry_after = step.retry_after if step.retry_after is not None or step.status != 429 else 1
            if retry_after is not None:
                headers.setdefault("retry-after", _format_seconds(retry_after))
            default = _DEFAULT_ERROR_MESSAGES.get(step.status, "Scripted error")
            message = step.message or f"{default} (fake-anthropic: scripted {step.status} at step {index})"
            error_type = step.error_type or _ERROR_TYPES.get(step.status, "api_error")
            return self._answer(call, step.status, error_type, message, headers=headers)
        return self._reply(call, body, step)

    async def _count_tokens(self, request: web.Request) -> web.StreamResponse:
        call = await self._record(request)
        refusal = self._check_headers(request)
        if refusal is not None:
            return self._answer(call, *refusal, record_failure=True)
        if not isinstance(call.body, dict):
            return self._answer(call, 400, "invalid_request_error", _unparsable(call.body), record_failure=True)
        self.count_tokens_requests.append(call.body)
        problem = validate_request(call.body, count_tokens=True, strict_alternation=self._strict_alternation)
        if problem is not None:
            return self._answer(call, 400, "invalid_request_error", problem, record_failure=True)
        call.status = 200
        return web.json_response({"input_tokens": estimate_input_tokens(call.body)}, headers=self._ids())

    async def _unknown(self, request: web.Request) -> web.StreamResponse:
        call = await self._record(request)
        message = (
            f"fake-anthropic: no such endpoint {request.method} {request.path} "
            "(only POST /v1/messages and /v1/messages/count_tokens)"
        )
        return self._answer(call, 404, "not_found_error", message, record_failure=True)

    # ---- internals

    async def _record(self, request: web.Request) -> RecordedCall:
        raw = await request.read()
        body: Any
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = raw
        call = RecordedCall(request.method, request.path, dict(request.headers), body)
        self.calls.append(call)
        return call

    def _check_headers(self, request: web.Request) -> tuple[int, str, str] | None:
        api_key = request.headers.get("x-api-key")
        authorization = request.headers.get("Authorization", "")
        if api_key is None and authorization.startswith("Bearer "):
            api_key = authorization.removeprefix("Bearer ").strip()
        if not api_key:
            return 401, "authentication_error", "x-api-key header is required"
        if self._api_key is not None and api_key != self._api_key:
            return 401, "authentication_error", "invalid x-api-key"
        if not request.headers.get("anthropic-version"):
            return 400, "invalid_request_error", "anthropic-version: header is required"
        return None

    def _ids(self) -> dict[str, str]:
        self._request_ids += 1
        return {"request-id": f"req_fake_{self._request_ids:06d}"}

    def _answer(
        self,
        call: RecordedCall,
        status: int,
        error_type: str,
        message: str,
        *,
        record_failure: bool = False,
        headers: Mapping[str, str] | None = None,
    ) -> web.StreamResponse:
        if record_failure:
            self.failures.append(f"{call.method} {call.path} -> {status} {error_type}: {message}")
        ids = self._ids()
        out = {**ids, **(headers or {})}
        call.status = status
        body = {
            "type": "error",
            "error": {"type": error_type, "message": message},
            "request_id": ids["request-id"],
        }
        return web.json_response(body, status=status, headers=out)

    def _reply(self, call: RecordedCall, body: Body, reply: Reply) -> web.StreamResponse:
        self._replies += 1
        n = self._replies
        content: list[dict[str, Any]] = []
        if reply.text:  # the real API sends no empty text blocks (and refuses them when sent back)
            content.append({"type": "text", "text": reply.text})
        for i, tool in enumerate(reply.tool_calls):
            content.append(
                {
                    "type": "tool_use",
                    "id": tool.id or f"toolu_fake_{n:04d}_{i}",
                    "name": tool.name,
                    "input": dict(tool.input),
                }
            )
        stop_reason = reply.resolved_stop_reason
        max_tokens = int(body["max_tokens"])
        if reply.output_tokens is not None:
            output_tokens = reply.output_tokens
        elif stop_reason == "max_tokens":
            output_tokens = max_tokens
        else:
            output_tokens = min(max_tokens, max(1, math.ceil(len(_canon(content)) / 4)))
        message: dict[str, Any] = {
            "id": f"msg_fake_{n:06d}",
            "type": "message",
            "role": "assistant",
            "model": body["model"],
            "content": content,
            "stop_reason": stop_reason,
            "stop_sequence": reply.stop_sequence,
            "usage": self._usage(body, reply, output_tokens),
        }
        if stop_reason == "refusal":
            message["stop_details"] = {
                "type": "refusal",
                "category": None,
                "explanation": reply.refusal_explanation,
            }
        call.status = 200
        return web.json_response(message, headers=self._ids())

    def _usage(self, body: Body, reply: Reply, output_tokens: int) -> dict[str, Any]:
        segments, breakpoints = _segments(body)
        total = max(1, _tokens(segments))
        read = creation = 0
        if reply.cache if reply.cache is not None else self._simulate_cache:
            eligible: list[tuple[str, int]] = []
            for bp in breakpoints:
                prefix = segments[: bp + 1]
                size = _tokens(prefix)
                if size >= self._min_cache_tokens:
                    key = hashlib.sha256((str(body["model"]) + "\x00" + "\x00".join(prefix)).encode()).hexdigest()
                    eligible.append((key, size))
            if eligible:
                read = max((size for key, size in eligible if key in self._cached_prefixes), default=0)
                creation = eligible[-1][1] - read
                self._cached_prefixes.update(key for key, _ in eligible)
        if reply.cache_read_input_tokens is not None:
            read = reply.cache_read_input_tokens
        if reply.cache_creation_input_tokens is not None:
            creation = reply.cache_creation_input_tokens
        input_tokens = reply.input_tokens if reply.input_tokens is not None else max(1, total - read - creation)
        return {
            "input_tokens": input_tokens,
            "output_tokens": output_tokens,
            "cache_creation_input_tokens": creation,
            "cache_read_input_tokens": read,
            "cache_creation": {"ephemeral_5m_input_tokens": creation, "ephemeral_1h_input_tokens": 0},
            "service_tier": "standard",
        }

    async def _sleep(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stopping.wait(), timeout=seconds)


def _format_seconds(seconds: float) -> str:
    return str(int(seconds)) if float(seconds).is_integer() else repr(float(seconds))


def _unparsable(body: Any) -> str:
    if body is None:
        return "fake-anthropic: empty request body"
    return "There was an error parsing the body of your request: it is not a JSON object"
