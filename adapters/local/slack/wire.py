"""Reading Web API arguments the way Slack does: from the query string, a form body, or a JSON body.

``AsyncWebClient`` sends ``chat.postMessage``/``chat.update``/``views.*`` as JSON and most other methods as
query-string parameters; other clients send forms. Slack accepts all three (and ``token`` as an argument), so
does the fake. Structured arguments (``blocks``, ``metadata``, ``view``, ``files``) arrive as objects in JSON
and as JSON-encoded strings otherwise; :class:`Args` hides the difference. Unknown arguments are ignored.
"""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web

from .errors import SlackError

__all__ = ["Args", "read_args"]

_TRUE = frozenset({"1", "true", "yes", "on"})


async def read_args(request: web.Request) -> dict[str, Any]:
    args: dict[str, Any] = dict(request.query)
    if not request.body_exists:
        return args
    if request.content_type == "application/json":
        raw = await request.text()
        try:
            body = json.loads(raw) if raw.strip() else {}
        except json.JSONDecodeError as exc:
            raise SlackError("invalid_json", str(exc)) from exc
        if not isinstance(body, dict):
            raise SlackError("invalid_json", "the body must be a JSON object")
        args.update(body)
    elif request.content_type in ("application/x-www-form-urlencoded", "multipart/form-data"):
        form = await request.post()
        for key, value in form.items():
            args[key] = value.file.read() if isinstance(value, web.FileField) else value
    return args


class Args:
    """Typed access to one call's arguments; errors are Slack's (``invalid_arguments`` unless told)."""

    def __init__(self, raw: dict[str, Any]) -> None:
        self.raw = raw

    def __contains__(self, name: str) -> bool:
        return self.raw.get(name) not in (None, "")

    def text(self, name: str, default: str | None = None) -> str | None:
        value = self.raw.get(name)
        if value is None or value == "":
            return default
        return value if isinstance(value, str) else json.dumps(value) if isinstance(value, (dict, list)) else str(value)

    def required(self, name: str, *, error: str = "invalid_arguments") -> str:
        value = self.text(name)
        if value is None:
            raise SlackError(error, f"missing required field: {name}")
        return value

    def flag(self, name: str, default: bool = False) -> bool:
        value = self.raw.get(name)
        if value is None or value == "":
            return default
        if isinstance(value, bool):
            return value
        return str(value).strip().lower() in _TRUE

    def number(self, name: str, default: int) -> int:
        value = self.raw.get(name)
        if value is None or value == "":
            return default
        try:
            return int(value)
        except (TypeError, ValueError) as exc:
            raise SlackError("invalid_arguments", f"{name} must be an integer") from exc

    def structured(self, name: str, *, error: str = "invalid_arguments") -> Any:
        """A JSON-valued argument: the object itself, or the decoded string; ``None`` when absent."""
        value = self.raw.get(name)
        if value is None or value == "":
            return None
        if isinstance(value, (dict, list)):
            return value
        try:
            return json.loads(value)
        except (TypeError, json.JSONDecodeError) as exc:
            raise SlackError(error, f"{name} is not valid JSON") from exc

    def listed(self, name: str) -> list[str]:
        """A comma-separated (or JSON array) list argument: ``"U1,U2"`` → ``["U1", "U2"]``."""
        value = self.raw.get(name)
        if value is None or value == "":
            return []
        if isinstance(value, list):
            return [str(v) for v in value]
        return [part.strip() for part in str(value).split(",") if part.strip()]
