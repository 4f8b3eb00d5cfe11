"""The fake deploy service: decklog's ``http`` executor wire protocol (DESIGN.md §7) with a deploy history.

``POST <path>`` with JSON ``{action, params, scope, run_id, fence, idempotency_key}`` and an ``Idempotency-Key``
header: 2xx = applied, 4xx = refused, 5xx / timeout / lost connection = uncertain; ``GET /reconcile/<key>`` says
whether a key was applied. ``record_deploy``, ``POST /deploys`` and ``GET /deploys?service=`` keep the history a
rollback needs. Its state round-trips through plain data (``deploy_state.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from aiohttp import web

from decklog.adapters.local.services.deploy_state import DeployState, dump_state, parse_state
from decklog.adapters.local.services.loopback import Call, LoopbackService, Outcome, now_iso

__all__ = ["FakeDeployService"]


class FakeDeployService(LoopbackService):
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
            "at": at or now_iso(),
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
        state = DeployState(self._deploy_seq, self._deploys, self.effects, self._keys, self._fences)
        return dump_state(state)

    @classmethod
    def from_dict(cls, data: Any, **options: Any) -> FakeDeployService:
        """A (not started) service with :meth:`to_dict`'s state; ``options`` as the constructor's."""
        service = cls(**options)
        service.load_dict(data)
        return service

    def load_dict(self, data: Any) -> None:
        """Replace the state with :meth:`to_dict`'s data (all or nothing; call before ``start``); ``ValueError``
        when ``data`` is not such data."""
        state = parse_state(data)
        self._deploy_seq, self._deploys, self.effects, self._keys, self._fences = state
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
            "applied_at": now_iso(),
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
