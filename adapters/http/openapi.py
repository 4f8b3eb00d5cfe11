"""The OpenAPI 3.1 description of the REST API, built from a registry of operations whose request and answer
shapes are the pydantic models that validate them (adapters/http/models.py), so it cannot drift from the code.

A door registers each route it serves once, where it builds its routes::

    description.add(Operation("GET", "/api/oncall", "The on-call schedules", "read", answers={200: OncallOut}))

and ``GET /api/openapi.json`` answers ``description.document()``: every operation registered by the time the
server starts (routes added by any adapter appear with no change here). Path parameters are written as aiohttp
writes them (``{kind}``); a ``Path`` names their schema. Every operation gets the error answers it can give
(``{"error": "..."}``): 400, 401, 403 (scope), 404, 405, 429 (failed authentication), and 409 for writes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel
from pydantic.json_schema import models_json_schema

from decklog.adapters.http.models import ErrorOut

Scope = Literal["public", "read", "write", "admin"]
REF = "#/components/schemas/{model}"
ERRORS = {
    400: "bad input: the message names the field (plain text when the HTTP layer refused the request itself)",
    401: "no valid bearer token (or, without DECKLOG_API_TOKEN, not a loopback client)",
    403: "the token's scope does not allow this route",
    404: "no such scope, entry, proposal or route",
    405: "method not allowed",
    429: "too many failed authentications from this address; see Retry-After",
}
WRITE_ERRORS = {
    409: "the request contradicts the scope's state, or the Idempotency-Key was used for another request",
}


@dataclass(frozen=True)
class PathParam:
    name: str
    schema: dict[str, Any]
    description: str = ""


@dataclass(frozen=True)
class Answer:
    """One documented answer: a model (JSON), or a media type and a plain schema (a report, text)."""

    description: str
    model: type[BaseModel] | None = None
    media: str = "application/json"
    schema: dict[str, Any] | None = None
    headers: dict[str, str] = field(default_factory=dict)
    media_schemas: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Several media types, each with its schema (a report: Markdown, JSON or HTML by its path)."""


@dataclass(frozen=True)
class Operation:
    method: str
    path: str
    summary: str
    scope: Scope
    answers: dict[int, Answer | type[BaseModel]]
    query: type[BaseModel] | None = None
    body: type[BaseModel] | None = None
    params: tuple[PathParam, ...] = ()
    tag: str = "scopes"
    idempotent: bool = False
    """A write that takes an ``Idempotency-Key`` header."""


class ApiDescription:
    """The registry of operations, and the OpenAPI document built from it."""

    def __init__(self, *, title: str = "decklog", version: str = "1") -> None:
        self.title = title
        self.version = version
        self.operations: list[Operation] = []

    def add(self, op: Operation) -> Operation:
        if any(o.method == op.method and o.path == op.path for o in self.operations):
            raise ValueError(f"{op.method} {op.path} is registered twice")
        self.operations.append(op)
        return op

    def scope_of(self, method: str, path: str) -> Scope | None:
        for op in self.operations:
            if op.path == path and (op.method == method or (method == "HEAD" and op.method == "GET")):
                return op.scope
        return None

    def document(self) -> dict[str, Any]:
        models: list[type[BaseModel]] = [ErrorOut]
        for op in self.operations:
            for m in (op.body, *(a if isinstance(a, type) else a.model for a in op.answers.values())):
                if m is not None and m not in models:
                    models.append(m)
        keyed = [(m, "validation" if any(op.body is m for op in self.operations) else "serialization") for m in models]
        refs, defs = models_json_schema(keyed, ref_template=REF)  # type: ignore[arg-type]
        components = defs.get("$defs", {})
        paths: dict[str, dict[str, Any]] = {}
        for op in self.operations:
            paths.setdefault(op.path, {})[op.method.lower()] = self._operation(op, refs)
        return {
            "openapi": "3.1.0",
            "info": {
                "title": self.title,
                "version": self.version,
                "description": "decklog's REST API: read and write incidents. Send `Authorization: Bearer <token>`.",
            },
            "servers": [{"url": "/"}],
            "paths": paths,
            "components": {
                "schemas": components,
                "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
            },
            "security": [{"bearer": []}],
        }

    def _operation(self, op: Operation, refs: dict[Any, Any]) -> dict[str, Any]:
        def ref(model: type[BaseModel], mode: str = "serialization") -> dict[str, Any]:
            found = refs.get((model, mode)) or refs.get((model, "validation")) or refs[(model, "serialization")]
            return dict(found)

        out: dict[str, Any] = {
            "summary": op.summary,
            "operationId": _operation_id(op),
            "tags": [op.tag],
            "x-decklog-scope": op.scope,
        }
        if op.scope == "public":
            out["security"] = []
        params: list[dict[str, Any]] = [
            {"name": p.name, "in": "path", "required": True, "schema": p.schema, **_desc(p.description)}
            for p in op.params
        ]
        if op.query is not None:
            schema = op.query.model_json_schema(ref_template=REF)
            required = set(schema.get("required", ()))
            for name, prop in schema.get("properties", {}).items():
                desc = prop.pop("description", "")
                prop.pop("title", None)
                params.append(
                    {"name": name, "in": "query", "required": name in required, "schema": prop, **_desc(desc)}
                )
        if op.idempotent:
            params.append(
                {
                    "name": "Idempotency-Key",
                    "in": "header",
                    "required": False,
                    "schema": {"type": "string", "minLength": 1, "maxLength": 200, "pattern": "^[\\x21-\\x7e]+$"},
                    "description": "a retried request with the same key answers what the first one did",
                }
            )
        if params:
            out["parameters"] = params
        if op.body is not None:
            out["requestBody"] = {
                "required": True,
                "content": {"application/json": {"schema": ref(op.body, "validation")}},
            }
        responses: dict[str, Any] = {}
        for status, answer in sorted(op.answers.items()):
            a = answer if isinstance(answer, Answer) else Answer("OK", answer)
            body: dict[str, Any] = {"description": a.description}
            if a.model is not None:
                body["content"] = {a.media: {"schema": ref(a.model)}}
            elif a.schema is not None:
                body["content"] = {a.media: {"schema": a.schema}}
            elif a.media_schemas:
                body["content"] = {media: {"schema": schema} for media, schema in a.media_schemas.items()}
            if a.headers:
                body["headers"] = {h: {"schema": {"type": "string"}, "description": d} for h, d in a.headers.items()}
            responses[str(status)] = body
        errors = dict(ERRORS)
        if op.method != "GET":
            errors.update(WRITE_ERRORS)
        if op.scope == "public":
            errors = {k: v for k, v in errors.items() if k in (400, 404, 405)}
        for status, why in errors.items():
            content: dict[str, Any] = {"application/json": {"schema": ref(ErrorOut)}}
            if status == 400:  # refused by the HTTP layer before any route (a request line over 8 KiB): plain text
                content["text/plain"] = {"schema": {"type": "string"}}
            responses.setdefault(str(status), {"description": why, "content": content})
        out["responses"] = responses
        return out


def _desc(text: str) -> dict[str, str]:
    return {"description": text} if text else {}


def _operation_id(op: Operation) -> str:
    words = [w.strip("{}").replace(".", "_") for w in op.path.split("/") if w and w != "api"]
    return "_".join([op.method.lower(), *words])
