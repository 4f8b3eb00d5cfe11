"""The machinery the loopback fakes share: lifecycle, the request log, queued faults, and effects applied at most
once per ``Idempotency-Key`` (a repeat replays the stored response; the same key with another body is 422).

``Fault``, ``Call`` and ``Effect`` are the data a test reads and writes; ``LoopbackService`` is the base class of
:class:`~adapters.local.services.deploy.FakeDeployService` and
:class:`~adapters.local.services.statuspage.FakeStatuspage`.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal, Self, TypeAlias

from aiohttp import web

__all__ = [
    "ApplyWhen",
    "Call",
    "Effect",
    "Fault",
    "FaultOn",
    "KeyState",
    "LoopbackService",
    "Outcome",
    "canon",
    "now_iso",
]

FaultOn: TypeAlias = Literal["effect", "read"]
ApplyWhen: TypeAlias = Literal["before", "after", "never"]
Outcome: TypeAlias = tuple[int, dict[str, Any]]
_Ran: TypeAlias = tuple[int, bytes, bool]  # (status, body, applied)


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def canon(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


@dataclass(frozen=True)
class Fault:
    """One injected fault, consumed by the next matching request: with ``on="effect"`` the next request that
    would apply an effect (replays of an applied key, key misuse and protocol errors do not consume it);
    with ``on="read"`` the next read (reconcile, listings, GETs).

    ``fail``: answer ``status`` (applying the effect first when ``apply == "before"``). ``refuse``: answer a
    4xx refusal, nothing applied. ``delay``: hold the response ``seconds``; the effect is applied ``before``
    the delay, ``after`` it (the default; even if the caller gave up) or ``never`` (then 503). ``drop``: close
    the connection without a response, after applying the effect when ``apply == "before"``.
    """

    kind: Literal["fail", "refuse", "delay", "drop"]
    status: int = 500
    reason: str = ""
    seconds: float = 0.0
    apply: ApplyWhen = "never"
    on: FaultOn = "effect"


@dataclass
class Call:
    """One request the fake received, and what it did about it."""

    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    body: Any
    idempotency_key: str | None
    status: int | None = None
    """The status answered; ``None`` when the connection was dropped (or the caller never got an answer)."""
    fault: str | None = None
    replayed: bool = False
    """True when the stored response for an already-applied idempotency key was returned."""
    at: str = field(default_factory=now_iso)


@dataclass(frozen=True)
class Effect:
    """One applied effect: what was asked, under which idempotency key, and the response it produced."""

    idempotency_key: str | None
    kind: str
    request: Any
    response: dict[str, Any]
    at: str = field(default_factory=now_iso)


@dataclass
class KeyState:
    fingerprint: str
    status: int | None = None
    body: bytes | None = None
    in_flight: bool = False
    effect: Effect | None = None


class LoopbackService:
    """Shared machinery: lifecycle, recording, faults, at-most-once effects per idempotency key."""

    _label = "fake-service"

    def __init__(self, *, host: str = "127.0.0.1", port: int = 0) -> None:
        self._host = host
        self._port = port
        self._runner: web.AppRunner | None = None
        self._base_url: str | None = None
        self._stopping = asyncio.Event()
        self._faults: dict[FaultOn, deque[Fault]] = {"effect": deque(), "read": deque()}
        self._keys: dict[str, KeyState] = {}
        self.calls: list[Call] = []
        self.effects: list[Effect] = []

    # ---- lifecycle

    def _add_routes(self, app: web.Application) -> None:
        raise NotImplementedError

    async def start(self) -> str:
        """Start listening on loopback; returns the base URL (``http://127.0.0.1:<port>``)."""
        if self._runner is not None:
            raise RuntimeError(f"{self._label} already started")
        self._stopping.clear()
        app = web.Application()
        self._add_routes(app)
        runner = web.AppRunner(app, shutdown_timeout=1.0, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, self._host, self._port)
        await site.start()
        self._runner = runner
        self._base_url = f"http://{self._host}:{runner.addresses[0][1]}"
        return self._base_url

    async def stop(self) -> None:
        """Stop listening; pending delays end at once (a delayed effect still pending is not applied)."""
        self._stopping.set()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    @property
    def base_url(self) -> str:
        if self._base_url is None:
            raise RuntimeError(f"{self._label} not started")
        return self._base_url

    # ---- fault injection

    def inject(self, fault: Fault) -> None:
        """Queue a fault; faults of one kind of request (``on``) are consumed in order."""
        self._faults[fault.on].append(fault)

    @property
    def pending_faults(self) -> int:
        return sum(len(q) for q in self._faults.values())

    def clear_faults(self) -> None:
        for queue in self._faults.values():
            queue.clear()

    # ---- inspection

    def effects_for(self, idempotency_key: str) -> list[Effect]:
        return [e for e in self.effects if e.idempotency_key == idempotency_key]

    def assert_at_most_once_per_key(self) -> None:
        """Raise AssertionError if any idempotency key produced more than one effect."""
        seen: dict[str, int] = {}
        for effect in self.effects:
            if effect.idempotency_key is not None:
                seen[effect.idempotency_key] = seen.get(effect.idempotency_key, 0) + 1
        repeated = {k: n for k, n in seen.items() if n > 1}
        assert not repeated, f"{self._label}: idempotency keys applied more than once: {repeated}"

    # ---- request plumbing

    async def _record(self, request: web.Request) -> Call:
        raw = await request.read()
        body: Any
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = raw.decode("utf-8", "replace")
        call = Call(
            method=request.method,
            path=request.path,
            query=dict(request.query),
            headers=dict(request.headers),
            body=body,
            idempotency_key=request.headers.get("Idempotency-Key"),
        )
        self.calls.append(call)
        return call

    def _json(self, call: Call, status: int, payload: Any, headers: Mapping[str, str] | None = None) -> web.Response:
        call.status = status
        return web.Response(
            body=json.dumps(payload).encode(), status=status, content_type="application/json", headers=headers
        )

    def _raw(self, call: Call, status: int, body: bytes) -> web.Response:
        call.status = status
        return web.Response(body=body, status=status, content_type="application/json")

    async def _drop(self, request: web.Request, call: Call) -> web.Response:
        call.status = None
        if request.transport is not None:
            request.transport.abort()
        return web.Response(status=500)  # never reaches the caller: the connection is gone

    async def _sleep(self, seconds: float) -> bool:
        """Sleep, cut short by stop(); returns True if the service is stopping."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stopping.wait(), timeout=seconds)
        return self._stopping.is_set()

    async def _read_fault(self, request: web.Request, call: Call) -> web.Response | None:
        """Apply the next ``on="read"`` fault to a read request; None means answer normally."""
        if not self._faults["read"]:
            return None
        fault = self._faults["read"].popleft()
        call.fault = fault.kind
        if fault.kind == "delay":
            await self._sleep(fault.seconds)
            return None
        if fault.kind == "drop":
            return await self._drop(request, call)
        if fault.kind == "refuse":
            return self._json(call, fault.status, {"status": "refused", "reason": fault.reason})
        return self._json(call, fault.status, {"error": fault.reason or f"injected {fault.status}"})

    async def _effect(
        self,
        request: web.Request,
        call: Call,
        *,
        kind: str,
        fingerprint_of: Any,
        apply: Callable[[], Outcome],
        success_status: int = 200,
    ) -> web.Response:
        """Run ``apply`` at most once per idempotency key, under the next effect fault.

        ``apply`` returns ``(status, payload)``: a 2xx applies (the payload is stored and replayed for the
        same key), anything else is a refusal and applies nothing.
        """
        key = call.idempotency_key
        fingerprint = hashlib.sha256(canon([request.method, request.path, fingerprint_of])).hexdigest()
        state = self._keys.get(key) if key is not None else None
        if state is not None:
            answered = self._known_key(call, state, fingerprint)
            if answered is not None:
                return answered
        if key is not None and state is None:
            state = KeyState(fingerprint)
            self._keys[key] = state

        def run() -> tuple[int, bytes, bool]:
            status, payload = apply()
            body = json.dumps(payload).encode()
            if not 200 <= status <= 299:
                return status, body, False
            effect = Effect(key, kind, call.body, payload)
            self.effects.append(effect)
            if state is not None:
                state.status, state.body, state.effect = success_status, body, effect
            return success_status, body, True

        fault = self._faults["effect"].popleft() if self._faults["effect"] else None
        if fault is None:
            status, body, _ = run()
            return self._raw(call, status, body)
        call.fault = fault.kind
        return await self._under_fault(request, call, fault, state, run)

    def _known_key(self, call: Call, state: KeyState, fingerprint: str) -> web.Response | None:
        """The answer for a key seen before: 422 for other parameters, the stored response once applied, 503 while
        the first request is in flight; None when the earlier attempt applied nothing (try again)."""
        if state.fingerprint != fingerprint:
            return self._json(
                call,
                422,
                {"status": "refused", "reason": "idempotency key reused with different parameters"},
            )
        if state.body is not None and state.status is not None:
            call.replayed = True
            return self._raw(call, state.status, state.body)
        if state.in_flight:
            # Under decklog's protocol 5xx = uncertain, which is the truth: the first request may apply.
            return self._json(
                call,
                503,
                {"status": "in_progress", "reason": "a request with this idempotency key is in progress"},
                headers={"Retry-After": "1"},
            )
        return None

    async def _under_fault(
        self, request: web.Request, call: Call, fault: Fault, state: KeyState | None, run: Callable[[], _Ran]
    ) -> web.Response:
        """Answer an effect request as ``fault`` says (see :class:`Fault`), applying it through ``run`` or not."""
        if fault.kind == "refuse":
            return self._json(call, fault.status, {"status": "refused", "reason": fault.reason})
        if fault.kind == "fail":
            if fault.apply == "before":
                status, body, applied = run()
                if not applied:
                    return self._raw(call, status, body)
            return self._json(call, fault.status, {"status": "error", "reason": fault.reason or "injected failure"})
        if fault.kind == "drop":
            if fault.apply == "before":
                run()
            return await self._drop(request, call)
        return await self._delayed(call, fault, state, run)

    async def _delayed(self, call: Call, fault: Fault, state: KeyState | None, run: Callable[[], _Ran]) -> web.Response:
        if fault.apply == "before":
            status, body, _ = run()
            await self._sleep(fault.seconds)
            return self._raw(call, status, body)
        if state is not None:
            state.in_flight = True
        try:
            stopping = await self._sleep(fault.seconds)
        finally:
            if state is not None:
                state.in_flight = False
        if fault.apply == "after" and not stopping:
            status, body, _ = run()
            return self._raw(call, status, body)
        return self._json(call, 503, {"status": "not_applied", "reason": "timed out upstream (injected)"})

    def _reconcile(self, call: Call, key: str) -> web.Response:
        state = self._keys.get(key)
        if state is None:
            return self._json(call, 404, {"status": "unknown", "idempotency_key": key})
        if state.effect is not None:
            return self._json(
                call,
                200,
                {
                    "status": "applied",
                    "idempotency_key": key,
                    "applied_at": state.effect.at,
                    "effect": state.effect.response,
                },
            )
        payload: dict[str, Any] = {"status": "not_applied", "idempotency_key": key}
        if state.in_flight:
            payload["in_flight"] = True
        return self._json(call, 200, payload)
