"""Fake executor targets on loopback: a deploy service and a Statuspage-compatible API.

Used by the tests, by ``decklog demo`` and by the local sandbox, so that actions have something real-looking
to act on with no network:

* :class:`FakeDeployService` speaks decklog's ``http`` executor wire protocol (DESIGN.md §7): ``POST <path>``
  with JSON ``{action, params, scope, run_id, fence, idempotency_key}`` and an ``Idempotency-Key`` header;
  2xx = applied (JSON body describing the effect), 4xx = refused (nothing applied), 5xx / timeout / lost
  connection = uncertain; ``GET /reconcile/<idempotency_key>`` answers 200 ``{"status": "applied", ...}`` /
  200 ``{"status": "not_applied"}`` / 404 unknown. It also keeps a deploy history (``record_deploy``,
  ``POST /deploys``, ``GET /deploys?service=``) so a "recent deploy" exists to roll back.
* :class:`FakeStatuspage` is a subset of the Atlassian Statuspage REST API v1 (incidents: create, update,
  get, list) authenticated with ``Authorization: OAuth <api key>``, as the real API is.

Both apply an effect at most once per ``Idempotency-Key``: a repeat with the same key and body gets the
byte-identical stored response and applies nothing; the same key with another body is refused (422).
Faults are queued through one hook, ``inject(Fault(...))`` (the test fakes' ``service_faults(svc)`` offers
``fail_next``, ``refuse_next``, ``delay_next``, ``apply_then_drop_next``, ``drop_next``: tests/fakes/service_faults.py);
each fault is consumed by the next effect request (or the next read with ``on="read"``).
Everything received is recorded in ``.calls`` and every applied effect in ``.effects``.

The deploy service's state (history, effects, idempotency keys, fences) round-trips through plain data
(``to_dict`` / ``from_dict`` / ``load_dict``), so the local sandbox can keep it across restarts; ``on_change``
tells the keeper when to save. No file I/O here.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import json
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from types import MappingProxyType
from typing import Any, Literal, Self, TypeAlias

from aiohttp import web

__all__ = [
    "Call",
    "Effect",
    "FakeDeployService",
    "FakeStatuspage",
    "Fault",
]

FaultOn: TypeAlias = Literal["effect", "read"]
ApplyWhen: TypeAlias = Literal["before", "after", "never"]
Outcome: TypeAlias = tuple[int, dict[str, Any]]

_INCIDENT_STATUSES = frozenset(
    {
        "investigating",
        "identified",
        "monitoring",
        "resolved",
        "scheduled",
        "in_progress",
        "verifying",
        "completed",
    }
)
_IMPACTS = frozenset({"none", "minor", "major", "critical", "maintenance"})
_COMPONENT_STATUSES = frozenset(
    {"operational", "degraded_performance", "partial_outage", "major_outage", "under_maintenance"}
)
_IMPACT_OF_COMPONENT_STATUS: Mapping[str, str] = MappingProxyType(
    {"degraded_performance": "minor", "partial_outage": "major", "major_outage": "critical"}
)
_IMPACT_ORDER = ("none", "maintenance", "minor", "major", "critical")
DEPLOY_STATE_FORMAT = "decklog-fake-deploy-service"
DEPLOY_STATE_VERSION = 1


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _canon(value: Any) -> bytes:
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
    at: str = field(default_factory=_now)


@dataclass(frozen=True)
class Effect:
    """One applied effect: what was asked, under which idempotency key, and the response it produced."""

    idempotency_key: str | None
    kind: str
    request: Any
    response: dict[str, Any]
    at: str = field(default_factory=_now)


@dataclass
class _KeyState:
    fingerprint: str
    status: int | None = None
    body: bytes | None = None
    in_flight: bool = False
    effect: Effect | None = None


class _LoopbackService:
    """Shared machinery: lifecycle, recording, faults, at-most-once effects per idempotency key."""

    _label = "fake-service"

    def __init__(self, *, host: str = "127.0.0.1", port: int = 0) -> None:
        self._host = host
        self._port = port
        self._runner: web.AppRunner | None = None
        self._base_url: str | None = None
        self._stopping = asyncio.Event()
        self._faults: dict[FaultOn, deque[Fault]] = {"effect": deque(), "read": deque()}
        self._keys: dict[str, _KeyState] = {}
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
        fingerprint = hashlib.sha256(_canon([request.method, request.path, fingerprint_of])).hexdigest()
        state = self._keys.get(key) if key is not None else None
        if state is not None:
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
        if key is not None and state is None:
            state = _KeyState(fingerprint)
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
        # delay
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


# ------------------------------------------------------------------------------------------ deploy service


class FakeDeployService(_LoopbackService):
    """A deploy API implementing decklog's ``http`` executor protocol, with a deploy history.

    ``rollback_path`` (default ``/rollback``) rolls ``params.service`` back to ``params.to_version`` or, by
    default, to the previous distinct version in its history (422 when there is none or the service is
    unknown). Each of ``extra_paths`` applies a generic effect that echoes the request. With ``token`` set,
    every request needs ``Authorization: Bearer <token>``. With ``check_fence``, an effect whose fence is
    lower than one already applied for the same (scope, action) is refused with 409.
    """

    _label = "fake-deploy"

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        rollback_path: str = "/rollback",
        extra_paths: Sequence[str] = (),
        reconcile_path: str = "/reconcile",
        token: str | None = None,
        check_fence: bool = False,
    ) -> None:
        super().__init__(host=host, port=port)
        self._rollback_path = rollback_path
        self._extra_paths = tuple(extra_paths)
        self._reconcile_path = reconcile_path.rstrip("/")
        self._token = token
        self._check_fence = check_fence
        self._deploys: dict[str, list[dict[str, Any]]] = {}
        self._deploy_seq = 0
        self._fences: dict[tuple[str, str], int] = {}
        self.protocol_errors: list[str] = []
        """Requests that broke the executor wire protocol (they were answered 400)."""
        self.on_change: Callable[[], None] | None = None
        """Called (synchronously) after the deploy history or the applied effects may have changed."""

    def _add_routes(self, app: web.Application) -> None:
        app.router.add_post(self._rollback_path, self._on_rollback)
        for path in self._extra_paths:
            app.router.add_post(path, self._on_generic)
        app.router.add_get(self._reconcile_path + "/{key}", self._on_reconcile)
        app.router.add_post("/deploys", self._on_record_deploy)
        app.router.add_get("/deploys", self._on_list_deploys)

    @property
    def rollback_url(self) -> str:
        return self.base_url + self._rollback_path

    @property
    def reconcile_url(self) -> str:
        return self.base_url + self._reconcile_path

    # ---- deploy history (Python side)

    def record_deploy(
        self,
        service: str,
        version: str,
        *,
        deployment_id: str | None = None,
        author: str = "ci",
        commit: str | None = None,
        at: str | None = None,
        kind: str = "deploy",
    ) -> dict[str, Any]:
        """Add a deploy to ``service``'s history (it becomes the current version) and return its record."""
        self._deploy_seq += 1
        record = {
            "deployment_id": deployment_id or f"dep-{self._deploy_seq:04d}",
            "service": service,
            "version": version,
            "kind": kind,
            "author": author,
            "commit": commit,
            "at": at or _now(),
        }
        self._deploys.setdefault(service, []).append(record)
        self._changed()
        return dict(record)

    def deploys(self, service: str | None = None) -> list[dict[str, Any]]:
        """Deploys, newest first (of one service, or all)."""
        if service is not None:
            found = list(self._deploys.get(service, []))
        else:
            found = [d for history in self._deploys.values() for d in history]
            found.sort(key=lambda d: str(d["deployment_id"]))
        return [dict(d) for d in reversed(found)]

    def current_version(self, service: str) -> str | None:
        history = self._deploys.get(service)
        return str(history[-1]["version"]) if history else None

    # ---- round trip (no I/O: keeping the data somewhere is the caller's business)

    def to_dict(self) -> dict[str, Any]:
        """The deploy history, applied effects, idempotency keys (with their stored responses, so replays and
        ``/reconcile`` answer as before) and fences, as JSON-ready data. Not included: the request log
        (``calls``, which holds headers), ``protocol_errors``, queued faults, and whether a request is in flight
        (a restored key that was in flight reconciles as ``not_applied``, as it would after a crash)."""
        effects = list(self.effects)
        position = {id(e): i for i, e in enumerate(effects)}
        keys = {}
        for key, state in self._keys.items():
            keys[key] = {
                "fingerprint": state.fingerprint,
                "status": state.status,
                "body": state.body.decode("utf-8") if state.body is not None else None,
                "effect": position.get(id(state.effect)) if state.effect is not None else None,
            }
        return {
            "format": DEPLOY_STATE_FORMAT,
            "version": DEPLOY_STATE_VERSION,
            "deploy_seq": self._deploy_seq,
            "deploys": {service: [dict(d) for d in history] for service, history in self._deploys.items()},
            "effects": [dataclasses.asdict(e) for e in effects],
            "keys": keys,
            "fences": [[scope, action, fence] for (scope, action), fence in self._fences.items()],
        }

    @classmethod
    def from_dict(cls, data: Any, **options: Any) -> FakeDeployService:
        """A (not started) service with :meth:`to_dict`'s state; ``options`` as the constructor's."""
        service = cls(**options)
        service.load_dict(data)
        return service

    def load_dict(self, data: Any) -> None:
        """Replace the state with :meth:`to_dict`'s data (all or nothing; call before ``start``); ``ValueError``
        when ``data`` is not such data."""
        if not isinstance(data, dict) or data.get("format") != DEPLOY_STATE_FORMAT:
            raise ValueError("not a fake deploy service state")
        if data.get("version") != DEPLOY_STATE_VERSION:
            raise ValueError(f"deploy service state version {data.get('version')!r} is not {DEPLOY_STATE_VERSION}")
        try:
            seq = data["deploy_seq"]
            if not isinstance(seq, int) or isinstance(seq, bool) or seq < 0:
                raise ValueError("deploy_seq must be a non-negative integer")
            deploys: dict[str, list[dict[str, Any]]] = {}
            for service, history in dict(data["deploys"]).items():
                if not isinstance(history, list) or not all(
                    isinstance(d, dict) and d.get("service") == service and isinstance(d.get("version"), str)
                    for d in history
                ):
                    raise ValueError(f"the deploy history of {service!r} is damaged")
                deploys[str(service)] = [dict(d) for d in history]
            effects = [
                Effect(
                    idempotency_key=e["idempotency_key"],
                    kind=str(e["kind"]),
                    request=e["request"],
                    response=dict(e["response"]),
                    at=str(e["at"]),
                )
                for e in data["effects"]
            ]
            keys: dict[str, _KeyState] = {}
            for key, raw in dict(data["keys"]).items():
                index, body = raw["effect"], raw["body"]
                keys[str(key)] = _KeyState(
                    fingerprint=str(raw["fingerprint"]),
                    status=None if raw["status"] is None else int(raw["status"]),
                    body=None if body is None else str(body).encode("utf-8"),
                    effect=None if index is None else effects[int(index)],
                )
            fences = {(str(scope), str(action)): int(fence) for scope, action, fence in data["fences"]}
        except (KeyError, IndexError, TypeError, AttributeError) as exc:
            raise ValueError(f"the deploy service state is damaged ({exc.__class__.__name__}: {exc})") from None
        self._deploy_seq, self._deploys, self.effects, self._keys, self._fences = seq, deploys, effects, keys, fences
        self._changed()

    def _changed(self) -> None:
        if self.on_change is not None:
            self.on_change()

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
        try:
            return await super()._effect(
                request, call, kind=kind, fingerprint_of=fingerprint_of, apply=apply, success_status=success_status
            )
        finally:
            self._changed()

    # ---- handlers

    def _authorized(self, request: web.Request) -> bool:
        return self._token is None or request.headers.get("Authorization") == f"Bearer {self._token}"

    def _protocol_error(self, call: Call) -> str | None:
        body = call.body
        if not isinstance(body, dict):
            return "body must be a JSON object"
        for name, kinds in (
            ("action", (str,)),
            ("params", (dict,)),
            ("scope", (str,)),
            ("run_id", (str, int)),
            ("fence", (int,)),
            ("idempotency_key", (str,)),
        ):
            if name not in body:
                return f"missing field {name!r}"
            if not isinstance(body[name], kinds) or isinstance(body[name], bool):
                return f"field {name!r} has the wrong type"
        if not body["idempotency_key"]:
            return "empty idempotency_key"
        if call.idempotency_key is None:
            return "missing Idempotency-Key header"
        if call.idempotency_key != body["idempotency_key"]:
            return "Idempotency-Key header does not match the body's idempotency_key"
        return None

    async def _on_effect(self, request: web.Request, apply: Callable[[dict[str, Any]], Outcome]) -> web.Response:
        call = await self._record(request)
        if not self._authorized(request):
            return self._json(call, 401, {"status": "refused", "reason": "unauthorized"})
        problem = self._protocol_error(call)
        if problem is not None:
            self.protocol_errors.append(f"{request.method} {request.path}: {problem}")
            return self._json(call, 400, {"status": "refused", "reason": problem})
        body: dict[str, Any] = call.body

        def guarded() -> Outcome:
            if self._check_fence:
                slot = (str(body["scope"]), str(body["action"]))
                highest = self._fences.get(slot)
                if highest is not None and body["fence"] < highest:
                    return 409, {"status": "refused", "reason": f"stale fence {body['fence']} < {highest}"}
            status, payload = apply(body)
            if 200 <= status <= 299 and self._check_fence:
                slot = (str(body["scope"]), str(body["action"]))
                self._fences[slot] = max(self._fences.get(slot, body["fence"]), body["fence"])
            return status, payload

        return await self._effect(request, call, kind=str(body["action"]), fingerprint_of=body, apply=guarded)

    async def _on_rollback(self, request: web.Request) -> web.Response:
        return await self._on_effect(request, self._rollback)

    async def _on_generic(self, request: web.Request) -> web.Response:
        return await self._on_effect(request, self._generic)

    def _common(self, body: dict[str, Any]) -> dict[str, Any]:
        return {
            "action": body["action"],
            "scope": body["scope"],
            "run_id": body["run_id"],
            "fence": body["fence"],
            "idempotency_key": body["idempotency_key"],
        }

    def _rollback(self, body: dict[str, Any]) -> Outcome:
        params = body["params"]
        service = params.get("service")
        if not isinstance(service, str) or not service:
            return 422, {"status": "refused", "reason": "params.service is required"}
        history = self._deploys.get(service)
        if not history:
            return 422, {"status": "refused", "reason": f"no deploys recorded for service {service!r}"}
        current = str(history[-1]["version"])
        target = params.get("to_version") or params.get("version")
        if target is not None:
            target = str(target)
            if target == current:
                return 422, {"status": "refused", "reason": f"{service} is already at {target}"}
            if target not in {str(d["version"]) for d in history}:
                return 422, {"status": "refused", "reason": f"{service} was never deployed at {target}"}
        else:
            earlier = [str(d["version"]) for d in history[:-1] if str(d["version"]) != current]
            if not earlier:
                return 422, {
                    "status": "refused",
                    "reason": f"no earlier version of {service} to roll back to",
                }
            target = earlier[-1]
        deploy = self.record_deploy(service, target, kind="rollback", author=f"decklog run {body['run_id']}")
        return 200, {
            "status": "applied",
            **self._common(body),
            "service": service,
            "rolled_back_from": current,
            "rolled_back_to": target,
            "deployment_id": deploy["deployment_id"],
            "applied_at": deploy["at"],
        }

    def _generic(self, body: dict[str, Any]) -> Outcome:
        return 200, {
            "status": "applied",
            **self._common(body),
            "params": body["params"],
            "effect_id": f"eff-{len(self.effects) + 1:04d}",
            "applied_at": _now(),
        }

    async def _on_reconcile(self, request: web.Request) -> web.Response:
        call = await self._record(request)
        if not self._authorized(request):
            return self._json(call, 401, {"status": "refused", "reason": "unauthorized"})
        faulted = await self._read_fault(request, call)
        if faulted is not None:
            return faulted
        return self._reconcile(call, request.match_info["key"])

    async def _on_record_deploy(self, request: web.Request) -> web.Response:
        call = await self._record(request)
        if not self._authorized(request):
            return self._json(call, 401, {"status": "refused", "reason": "unauthorized"})
        body = call.body
        if not isinstance(body, dict) or not body.get("service") or not body.get("version"):
            return self._json(call, 400, {"error": "service and version are required"})
        record = self.record_deploy(
            str(body["service"]),
            str(body["version"]),
            deployment_id=body.get("deployment_id"),
            author=str(body.get("author") or "ci"),
            commit=body.get("commit"),
            at=body.get("at"),
        )
        return self._json(call, 201, record)

    async def _on_list_deploys(self, request: web.Request) -> web.Response:
        call = await self._record(request)
        if not self._authorized(request):
            return self._json(call, 401, {"status": "refused", "reason": "unauthorized"})
        faulted = await self._read_fault(request, call)
        if faulted is not None:
            return faulted
        found = self.deploys(request.query.get("service"))
        try:
            limit = int(request.query.get("limit", "100"))
        except ValueError:
            return self._json(call, 400, {"error": "limit must be an integer"})
        return self._json(call, 200, {"deploys": found[: max(0, limit)]})


# ---------------------------------------------------------------------------------------------- statuspage


class FakeStatuspage(_LoopbackService):
    """A subset of the Statuspage REST API v1: incidents of one page.

    ``POST /v1/pages/{page_id}/incidents`` with ``{"incident": {...}}`` → 201 incident;
    ``PATCH``/``PUT /v1/pages/{page_id}/incidents/{incident_id}`` → 200 incident (a new incident update when
    ``status`` or ``body`` is given); ``GET`` one → 200 / 404; ``GET`` the list → 200 array, newest first.
    Every request needs ``Authorization: OAuth <api_key>`` (401 otherwise); an unknown page is 404. An
    ``Idempotency-Key`` header, when present, is honoured like the deploy service does.
    """

    _label = "fake-statuspage"

    def __init__(
        self,
        *,
        api_key: str = "sp-test-key",
        page_id: str = "fakepage0001",
        host: str = "127.0.0.1",
        port: int = 0,
    ) -> None:
        super().__init__(host=host, port=port)
        self.api_key = api_key
        self.page_id = page_id
        self._incidents: dict[str, dict[str, Any]] = {}
        self._ids = 0

    def _add_routes(self, app: web.Application) -> None:
        base = "/v1/pages/{page_id}/incidents"
        app.router.add_post(base, self._on_create)
        app.router.add_get(base, self._on_list)
        app.router.add_get(base + "/{incident_id}", self._on_get)
        app.router.add_patch(base + "/{incident_id}", self._on_update)
        app.router.add_put(base + "/{incident_id}", self._on_update)

    @property
    def incidents(self) -> list[dict[str, Any]]:
        """The page's incidents (copies), newest first."""
        return [json.loads(_canon(i)) for i in reversed(self._incidents.values())]

    def incident(self, incident_id: str) -> dict[str, Any] | None:
        found = self._incidents.get(incident_id)
        return json.loads(_canon(found)) if found is not None else None

    # ---- handlers

    async def _guard(self, request: web.Request) -> tuple[Call, web.Response | None]:
        call = await self._record(request)
        if request.headers.get("Authorization") != f"OAuth {self.api_key}":
            return call, self._json(call, 401, {"error": "Could not authenticate"})
        if request.match_info["page_id"] != self.page_id:
            return call, self._json(call, 404, {"error": "Not found"})
        return call, None

    def _new_id(self) -> str:
        self._ids += 1
        digest = hashlib.sha256(f"{self.page_id}:{self._ids}".encode()).hexdigest()
        alphabet = "0123456789abcdefghijklmnopqrstuvwxyz"
        number = int(digest, 16)
        chars = []
        for _ in range(12):
            number, rem = divmod(number, 36)
            chars.append(alphabet[rem])
        return "".join(chars)

    @staticmethod
    def _fields(call: Call) -> tuple[dict[str, Any] | None, str | None]:
        body = call.body
        if not isinstance(body, dict) or not isinstance(body.get("incident"), dict):
            return None, "param is missing or the value is empty: incident"
        fields: dict[str, Any] = body["incident"]
        status = fields.get("status")
        if status is not None and status not in _INCIDENT_STATUSES:
            return None, f"Status is not included in the list: {status}"
        impact = fields.get("impact_override")
        if impact is not None and impact not in _IMPACTS:
            return None, f"Impact override is not included in the list: {impact}"
        components = fields.get("components")
        if components is not None and (
            not isinstance(components, dict) or any(c not in _COMPONENT_STATUSES for c in components.values())
        ):
            return None, "components must map component ids to a component status"
        component_ids = fields.get("component_ids")
        if component_ids is not None and (
            not isinstance(component_ids, list) or not all(isinstance(c, str) for c in component_ids)
        ):
            return None, "component_ids must be a list of component ids"
        return fields, None

    @staticmethod
    def _components(fields: Mapping[str, Any], previous: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
        statuses: dict[str, str] = {c["id"]: c["status"] for c in previous}
        for cid in fields.get("component_ids") or []:
            statuses.setdefault(cid, "operational")
        for cid, status in (fields.get("components") or {}).items():
            statuses[cid] = status
        return [{"id": cid, "name": cid, "status": status} for cid, status in statuses.items()]

    def _update(self, incident: dict[str, Any], fields: Mapping[str, Any], now: str) -> None:
        status = fields.get("status") or incident["status"]
        if status == "resolved":
            for component in incident["components"]:
                component["status"] = "operational"
        if fields.get("status") is not None or fields.get("body") is not None:
            incident["incident_updates"].insert(
                0,
                {
                    "id": self._new_id(),
                    "incident_id": incident["id"],
                    "status": status,
                    "body": fields.get("body") or "",
                    "created_at": now,
                    "display_at": now,
                    "updated_at": now,
                    "deliver_notifications": bool(fields.get("deliver_notifications", True)),
                    "affected_components": [dict(c) for c in incident["components"]] or None,
                },
            )
        incident["status"] = status
        incident["updated_at"] = now
        if status == "monitoring" and incident["monitoring_at"] is None:
            incident["monitoring_at"] = now
        if status == "resolved" and incident["resolved_at"] is None:
            incident["resolved_at"] = now

    @staticmethod
    def _impact(incident: Mapping[str, Any]) -> str:
        if incident.get("impact_override"):
            return str(incident["impact_override"])
        worst = "none"
        for component in incident["components"]:
            impact = _IMPACT_OF_COMPONENT_STATUS.get(component["status"], "none")
            if _IMPACT_ORDER.index(impact) > _IMPACT_ORDER.index(worst):
                worst = impact
        return worst

    async def _on_create(self, request: web.Request) -> web.Response:
        call, refused = await self._guard(request)
        if refused is not None:
            return refused

        def create() -> Outcome:
            fields, problem = self._fields(call)
            if fields is None:
                return (400 if "missing" in (problem or "") else 422), {"error": problem}
            name = fields.get("name")
            if not isinstance(name, str) or not name.strip():
                return 422, {"error": "Name can't be blank"}
            now = _now()
            incident_id = self._new_id()
            incident: dict[str, Any] = {
                "id": incident_id,
                "page_id": self.page_id,
                "name": name,
                "status": "investigating",
                "impact_override": fields.get("impact_override"),
                "impact": "none",
                "created_at": now,
                "updated_at": now,
                "started_at": fields.get("started_at") or now,
                "monitoring_at": None,
                "resolved_at": None,
                "scheduled_for": fields.get("scheduled_for"),
                "scheduled_until": fields.get("scheduled_until"),
                "shortlink": f"http://stspg.io/{incident_id[:7]}",
                "backfilled": False,
                "postmortem_body": None,
                "metadata": fields.get("metadata") or {},
                "components": self._components(fields, []),
                "incident_updates": [],
            }
            self._update(incident, {**fields, "status": fields.get("status") or "investigating"}, now)
            incident["impact"] = self._impact(incident)
            self._incidents[incident_id] = incident
            return 201, json.loads(_canon(incident))

        return await self._effect(
            request, call, kind="incident.create", fingerprint_of=call.body, apply=create, success_status=201
        )

    async def _on_update(self, request: web.Request) -> web.Response:
        call, refused = await self._guard(request)
        if refused is not None:
            return refused
        incident_id = request.match_info["incident_id"]

        def update() -> Outcome:
            incident = self._incidents.get(incident_id)
            if incident is None:
                return 404, {"error": "Not found"}
            fields, problem = self._fields(call)
            if fields is None:
                return (400 if "missing" in (problem or "") else 422), {"error": problem}
            if "name" in fields:
                if not isinstance(fields["name"], str) or not fields["name"].strip():
                    return 422, {"error": "Name can't be blank"}
                incident["name"] = fields["name"]
            if "impact_override" in fields:
                incident["impact_override"] = fields["impact_override"]
            if "metadata" in fields and isinstance(fields["metadata"], dict):
                incident["metadata"] = fields["metadata"]
            incident["components"] = self._components(fields, incident["components"])
            self._update(incident, fields, _now())
            incident["impact"] = self._impact(incident)
            return 200, json.loads(_canon(incident))

        return await self._effect(request, call, kind="incident.update", fingerprint_of=call.body, apply=update)

    async def _on_get(self, request: web.Request) -> web.Response:
        call, refused = await self._guard(request)
        if refused is not None:
            return refused
        faulted = await self._read_fault(request, call)
        if faulted is not None:
            return faulted
        incident = self._incidents.get(request.match_info["incident_id"])
        if incident is None:
            return self._json(call, 404, {"error": "Not found"})
        return self._json(call, 200, incident)

    async def _on_list(self, request: web.Request) -> web.Response:
        call, refused = await self._guard(request)
        if refused is not None:
            return refused
        faulted = await self._read_fault(request, call)
        if faulted is not None:
            return faulted
        found = self.incidents
        query = request.query.get("q")
        if query:
            needle = query.lower()
            found = [
                i
                for i in found
                if needle in i["name"].lower() or any(needle in u["body"].lower() for u in i["incident_updates"])
            ]
        try:
            limit = int(request.query.get("limit", "100"))
            page = int(request.query.get("page", "1"))
        except ValueError:
            return self._json(call, 400, {"error": "limit and page must be integers"})
        start = max(0, (page - 1) * limit)
        return self._json(call, 200, found[start : start + max(0, limit)])
