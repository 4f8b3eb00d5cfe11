"""The Block Kit pieces every renderer uses: the outgoing message, escaping, sections, buttons, dates, severity."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from decklog.core.clock import parse_iso

Block = dict[str, Any]
SEV_EMOJI = {1: ":red_circle:", 2: ":large_orange_circle:", 3: ":large_yellow_circle:", 4: ":large_blue_circle:"}
STATUS_EMOJI = {
    "investigating": ":mag:",
    "identified": ":dart:",
    "mitigated": ":adhesive_bandage:",
    "monitoring": ":eyes:",
    "resolved": ":white_check_mark:",
}


@dataclass(frozen=True)
class Outgoing:
    """A message to post: fallback text (notifications, screen readers), blocks, and how it is tracked.

    ``text`` is mrkdwn like the blocks' text: Slack turns ``<!channel>``, ``<@U…>`` and ``<url|label>`` in it into
    pings and links, so whatever people or alerts wrote goes in through ``esc``, in the text as in the blocks."""

    text: str
    blocks: list[Block] = field(default_factory=list)


def esc(text: str) -> str:
    """Escape the three characters Slack's mrkdwn treats as control characters (``<!channel>``, ``<@U…>`` and
    ``<url|label>`` then show as typed, pinging and linking no one)."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def section(text: str) -> Block:
    return {"type": "section", "text": {"type": "mrkdwn", "text": text[:3000]}}


def context(text: str) -> Block:
    return {"type": "context", "elements": [{"type": "mrkdwn", "text": text[:3000]}]}


def button(text: str, action_id: str, value: str, *, style: str | None = None) -> Block:
    b: Block = {"type": "button", "text": {"type": "plain_text", "text": text}, "action_id": action_id, "value": value}
    if style:
        b["style"] = style
    return b


def date(at: str, fmt: str = "{date_short_pretty} {time}") -> str:
    if not at:
        return "—"
    ts = int(parse_iso(at).timestamp())
    return f"<!date^{ts}^{fmt}|{at[:16].replace('T', ' ')} UTC>"


def severity_label(sev: int | None) -> str:
    return f"{SEV_EMOJI.get(sev or 0, ':white_circle:')} SEV{sev}" if sev else ":white_circle: SEV?"


def severity_options() -> list[Block]:
    labels = {1: "SEV1 — critical", 2: "SEV2 — major", 3: "SEV3 — minor", 4: "SEV4 — low"}
    return [{"text": {"type": "plain_text", "text": labels[n]}, "value": str(n)} for n in (1, 2, 3, 4)]
