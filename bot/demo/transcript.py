"""The fake workspace's #alerts printed as a person reads it: mentions, channels, dates and links as plain text,
Block Kit sections and buttons as lines, files and reactions under their message."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

__all__ = ["render"]


def _plain(ws: Any, text: str) -> str:
    def user(m: re.Match[str]) -> str:
        try:
            return "@" + str(ws.user(m.group(1)).name)
        except Exception:
            return "@" + m.group(1)

    text = re.sub(r"<@([UW][A-Z0-9]+)(?:\|[^>]*)?>", user, text)
    text = re.sub(r"<#([CG][A-Z0-9]+)(?:\|([^>]*))?>", lambda m: "#" + (m.group(2) or m.group(1)), text)
    text = re.sub(r"<!date\^\d+\^[^|]*\|([^>]*)>", r"\1", text)
    text = re.sub(r"<(https?://[^|>]+)\|([^>]+)>", r"\2", text)
    text = re.sub(r"<(https?://[^>]+)>", r"\1", text)
    return text.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")


def _block_text(ws: Any, blocks: list[dict[str, Any]]) -> list[str]:
    out: list[str] = []
    for block in blocks or []:
        kind = block.get("type")
        if kind in ("header", "section") and block.get("text"):
            out.append(_plain(ws, block["text"].get("text", "")))
        if kind == "section" and block.get("fields"):
            out.append(" · ".join(_plain(ws, f.get("text", "")).replace("\n", " ") for f in block["fields"]))
        if kind == "context":
            out.append(" ".join(_plain(ws, e.get("text", "")) for e in block.get("elements", []) if e.get("text")))
        if kind == "actions":
            labels = [e.get("text", {}).get("text", "") for e in block.get("elements", []) if e.get("type") == "button"]
            if labels:
                out.append("[" + "] [".join(labels) + "]")
    return [line for line in out if line.strip()]


def render(ws: Any, msg: Any, *, indent: str) -> list[str]:
    when = datetime.fromtimestamp(float(msg.ts), UTC).strftime("%H:%M:%S")
    who = "decklog" if getattr(msg, "bot_id", None) else _who(ws, msg)
    body = (_block_text(ws, msg.blocks) if msg.blocks else []) or [_plain(ws, msg.text)]
    body = [part for line in body for part in line.split("\n")]
    if getattr(msg, "files", None):
        body.append("📎 " + ", ".join(getattr(f, "name", "file") for f in msg.files))
    reactions = getattr(msg, "reactions", None) or {}
    if reactions:
        body.append(" ".join(f":{name}: {len(users)}" for name, users in reactions.items()))
    lines = [f"{indent}{when} {who}: {body[0] if body else ''}"]
    lines.extend(f"{indent}{' ' * 9}{' ' * len(who)}  {line}" for line in body[1:])
    return lines


def _who(ws: Any, msg: Any) -> str:
    try:
        return str(ws.user(msg.user).name)
    except Exception:
        return str(msg.user or "someone")
