"""The REST API's writes: declare, record typed entries, severity, status, roles, resolve, propose, approve, deny.

Each goes through the same core door Slack uses (core/service.py ``ScopeService``, the action desk), so the
guarantees are Slack's: the answer leaves after the append committed (a 2xx is durable), R2/R3 proposals park and
R4 is refused by the same policy, and an approval counts only when the token acts for a configured approver.
Every write is recorded with the token's name as the actor's name (core/tokens.py ``Identity.actor``).

``Idempotency-Key``: the first answer is kept (``ApiKeys.reply_put``) under the token's name and the key, with the
sha256 of the request; a retry gets that answer again (``Idempotent-Replayed: true``), the same key with another
request gets 409. The key also goes to the append itself, so a retry after a crash between the append and the kept
answer still appends nothing twice.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from aiohttp import web
from pydantic import BaseModel, ValidationError

from decklog.adapters.http.models import (
    DecideIn,
    DeclareIn,
    EntryRequest,
    ObligationIn,
    ProposeIn,
    ResolveIn,
    RoleIn,
    SeverityIn,
    StatusIn,
)
from decklog.core.actions.desk import ActionDesk
from decklog.core.entries.registry import invalid_input
from decklog.core.errors import InvalidInput, NotFound
from decklog.core.ids import ScopeId
from decklog.core.obligations import new_obligation_id, open_obligation
from decklog.core.service import ScopeService
from decklog.core.state import ScopeState
from decklog.core.store.ports import ApiKeys, AppendResult, LogStore, StoredReply
from decklog.core.tokens import Identity

M = TypeVar("M", bound=BaseModel)
BODY_MAX = 64 * 1024
KEY = re.compile(r"^[\x21-\x7e]{1,200}$")
Answer = tuple[int, dict[str, Any]]
Write = Callable[[web.Request, Identity, bytes, str | None], Awaitable[Answer]]


def parse(model: type[M], body: bytes) -> M:
    if len(body) > BODY_MAX:
        raise InvalidInput(f"at most {BODY_MAX} bytes", field="body")
    try:
        data = json.loads(body or b"null")
    except (ValueError, UnicodeDecodeError):
        raise InvalidInput("not JSON", field="body") from None
    if not isinstance(data, dict):
        raise InvalidInput("must be a JSON object", field="body")
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise invalid_input(exc) from None


def written(scope: str, result: AppendResult) -> dict[str, Any]:
    return {"scope": scope, "entries": [e.to_json() for e in result.entries], "state": _state(result.state)}


def _state(state: ScopeState) -> dict[str, Any]:
    return {"status": state.status, "severity": state.severity, "version": state.version}


class ScopeWrites:
    """The write handlers; ``desk``: the action desk (None when the actions part is not running here)."""

    def __init__(self, service: ScopeService, store: LogStore, keys: ApiKeys, desk: ActionDesk | None) -> None:
        self.service = service
        self.store = store
        self.keys = keys
        self.desk = desk

    def idempotent(self, write: Write) -> Callable[[web.Request, Identity], Awaitable[web.StreamResponse]]:
        async def handle(request: web.Request, identity: Identity) -> web.StreamResponse:
            key = request.headers.get("Idempotency-Key")
            if key is not None and not KEY.match(key):
                raise InvalidInput("1-200 printable ASCII characters, no spaces", field="Idempotency-Key")
            body = await request.read()
            if key is None:
                status, answer = await write(request, identity, body, None)
                return web.json_response(answer, status=status)
            full = f"api:{identity.name}:{key}"
            digest = hashlib.sha256(f"{request.method} {request.path}\n".encode() + body).hexdigest()
            stored = await self.keys.reply_get(full)
            if stored is None:
                # a refusal raised here (bad input, no such scope) applied nothing and is not kept: a retry is checked
                status, answer = await write(request, identity, body, full)
                stored = await self.keys.reply_put(StoredReply(full, digest, status, json.dumps(answer)))
                if stored.request_hash == digest and stored.body == json.dumps(answer):
                    return web.json_response(answer, status=status)
            if stored.request_hash != digest:
                return web.json_response(
                    {"error": "Idempotency-Key: already used for another request (another body or route)"}, status=409
                )
            return web.Response(
                text=stored.body,
                status=stored.status,
                content_type="application/json",
                headers={"Idempotent-Replayed": "true"},
            )

        return handle

    async def _scope(self, request: web.Request) -> str:
        kind, name = request.match_info["kind"], request.match_info["name"]
        try:
            scope = str(ScopeId.parse(f"{kind}/{name}"))
        except InvalidInput:
            raise NotFound(f"no such scope: {kind}/{name}") from None
        if not await self.store.exists(scope):
            raise NotFound(f"no such scope: {scope}")
        return scope

    # -- the writes -------------------------------------------------------------------------------------------

    async def declare(self, request: web.Request, who: Identity, body: bytes, key: str | None) -> Answer:
        req = parse(DeclareIn, body)
        result = await self.service.declare(
            title=req.title,
            actor=who.actor,
            severity=req.severity,
            services=req.services,
            summary=req.summary,
            via="api",
            idempotency_key=key,
        )
        scope = result.state.scope
        return 201, written(scope, result)

    async def entry(self, request: web.Request, who: Identity, body: bytes, key: str | None) -> Answer:
        req = parse(EntryRequest, body).root
        scope = await self._scope(request)
        if isinstance(req, ObligationIn):
            oid = new_obligation_id()
            result = await self.store.append(
                scope,
                lambda s: open_obligation(s, text=req.text, actor=who.actor, obligation_id=oid, refs=req.refs),
                idempotency_key=key,
            )
            return 201, written(scope, result)
        payload = req.model_dump(exclude={"kind", "refs"})
        if req.kind == "evidence":
            payload["source"] = "api"
        if req.kind == "hypothesis" and payload.get("confidence") is None:
            payload.pop("confidence", None)
        result = await self.service.record(scope, req.kind, payload, who.actor, refs=req.refs, idempotency_key=key)
        return 201, written(scope, result)

    async def severity(self, request: web.Request, who: Identity, body: bytes, key: str | None) -> Answer:
        req = parse(SeverityIn, body)
        scope = await self._scope(request)
        result = await self.service.set_severity(scope, req.severity, who.actor, reason=req.reason, idempotency_key=key)
        return 200, written(scope, result)

    async def status(self, request: web.Request, who: Identity, body: bytes, key: str | None) -> Answer:
        req = parse(StatusIn, body)
        scope = await self._scope(request)
        result = await self.service.set_status(scope, req.status, who.actor, summary=req.summary, idempotency_key=key)
        return 200, written(scope, result)

    async def resolve(self, request: web.Request, who: Identity, body: bytes, key: str | None) -> Answer:
        req = parse(ResolveIn, body)
        scope = await self._scope(request)
        result = await self.service.resolve(scope, who.actor, summary=req.summary, idempotency_key=key)
        return 200, written(scope, result)

    async def role(self, request: web.Request, who: Identity, body: bytes, key: str | None) -> Answer:
        req = parse(RoleIn, body)
        scope = await self._scope(request)
        result = await self.service.assign_role(
            scope, req.role, req.user_id, who.actor, user_name=req.user_name, idempotency_key=key
        )
        return 200, written(scope, result)

    async def propose(self, request: web.Request, who: Identity, body: bytes, key: str | None) -> Answer:
        req = parse(ProposeIn, body)
        scope = await self._scope(request)
        desk = self._desk()
        made = await desk.make_proposal(
            scope,
            action=req.action,
            params=dict(req.params),
            rationale=req.rationale,
            obligation_id=req.obligation_id,
            actor=who.actor,
            idempotency_key=key,
        )
        answer = {
            "scope": scope,
            "proposal_id": made.proposal_id,
            "status": made.status,
            "existing": made.existing,
            "text": made.text,
        }
        return (200 if made.existing else 201), answer

    async def approve(self, request: web.Request, who: Identity, body: bytes, key: str | None) -> Answer:
        return await self._decide(request, who, body, key, approve=True)

    async def deny(self, request: web.Request, who: Identity, body: bytes, key: str | None) -> Answer:
        return await self._decide(request, who, body, key, approve=False)

    async def _decide(
        self, request: web.Request, who: Identity, body: bytes, key: str | None, *, approve: bool
    ) -> Answer:
        req = parse(DecideIn, body)
        scope = await self._scope(request)
        pid = request.match_info["proposal"]
        desk = self._desk()
        state = await self.store.get_state(scope)
        if pid not in state.proposals:
            raise NotFound(f"no proposal {pid!r} in {scope}")
        outcome = await desk.decide(scope, pid, approve, who.actor, req.reason, key or "")
        kind = outcome.kind.value
        text = " ".join(x for x in (kind.replace("_", " "), outcome.status, outcome.reason) if x)
        answer = {"scope": scope, "proposal_id": pid, "outcome": kind, "text": text}
        if kind == "refused":
            return 403, {"error": f"proposal: {outcome.reason}"}
        return 200, answer

    def _desk(self) -> ActionDesk:
        if self.desk is None:
            raise NotFound("actions are not available on this server (no action catalog is loaded)")
        return self.desk
