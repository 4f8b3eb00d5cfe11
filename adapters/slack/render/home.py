"""App Home: open incidents (severity, status, age, link to the thread) and pending approvals."""

from __future__ import annotations

from typing import Any

from adapters.slack.ids import Action
from adapters.slack.render.blocks import Block, button, context, date, esc, section, severity_label
from core.index import ScopeRow

Pending = list[tuple[ScopeRow, list[tuple[str, str, str]]]]  # (row, [(proposal id, action, risk)])


def home_view(rows: list[ScopeRow], pending: Pending) -> dict[str, Any]:
    blocks: list[Block] = [{"type": "header", "text": {"type": "plain_text", "text": "Open incidents"}}]
    if not rows:
        blocks.append(section("_No open incidents._ :sunny:"))
    for r in rows[:40]:
        link = f"<{r.permalink}|{esc(r.title)}>" if r.permalink else esc(r.title)
        blocks.append(
            section(
                f"{severity_label(r.severity)} · *{link}*\n`{r.id}` · {r.status} · declared {date(r.created_at, '{ago}')}"
            )
        )
    blocks.append({"type": "divider"})
    blocks.append({"type": "header", "text": {"type": "plain_text", "text": "Pending approvals"}})
    if not pending:
        blocks.append(section("_Nothing is waiting for approval._"))
    for row, proposals in pending:
        for pid, action, risk in proposals:
            blocks.append(
                {
                    **section(f"*{action}* `{pid}` · {risk} · `{row.id}`"),
                    "accessory": button("Approve", Action.PROPOSAL_APPROVE, f"{row.id}|{pid}", style="primary"),
                }
            )
    blocks.append(context("decklog — every entry is in the scope's log; `/incident help` for commands."))
    return {"type": "home", "blocks": blocks[:100]}
