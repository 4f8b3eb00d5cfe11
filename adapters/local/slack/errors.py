"""The one exception of the fake: a Slack Web API error code (``{"ok": false, "error": code}``)."""

from __future__ import annotations

from typing import Any

__all__ = ["SlackError"]


class SlackError(Exception):
    """Raised by the workspace and the method handlers; the server turns it into Slack's error shape.

    ``extra`` is merged into the response body (e.g. ``response_metadata`` with ``[ERROR] ...`` messages).
    """

    def __init__(self, code: str, detail: str | None = None, **extra: Any) -> None:
        super().__init__(code if detail is None else f"{code}: {detail}")
        self.code = code
        self.extra: dict[str, Any] = dict(extra)
        if detail is not None and "response_metadata" not in self.extra:
            self.extra["response_metadata"] = {"messages": [f"[ERROR] {detail}"]}

    def body(self) -> dict[str, Any]:
        return {"ok": False, "error": self.code, **self.extra}
