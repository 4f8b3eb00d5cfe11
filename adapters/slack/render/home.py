"""App Home: open incidents (severity, status, age, link to the thread), pending approvals, and the last 30
days' numbers (core/insights.py)."""

from __future__ import annotations

from typing import Any

from decklog.adapters.slack.ids import Action
from decklog.adapters.slack.render.blocks import Block, button, context, date, esc, section, severity_label
from decklog.core.insights import times_line
from decklog.core.store.ports import ScopeRow

Pending = list[tuple[ScopeRow, list[tuple[str, str, str]]]]  # (row, [(proposal id, action, risk)])


OnCall = list[tuple[str, str | None, str]]  # (schedule, the user on call or None, until: "YYYY-MM-DD HH:MM" or "")


def home_view(
    rows: list[ScopeRow], pending: Pending, insights: dict[str, Any] | None = None, oncall: OnCall | None = None
) -> dict[str, Any]:
    blocks: list[Block] = []
    if oncall:
        blocks += oncall_blocks(oncall)
    blocks.append({"type": "header", "text": {"type": "plain_text", "text": "Open incidents"}})
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
                    **section(f"*{esc(action)}* `{pid}` · {risk} · `{row.id}`"),
                    "accessory": button("Approve", Action.PROPOSAL_APPROVE, f"{row.id}|{pid}", style="primary"),
                }
            )
    if insights is not None:
        blocks.extend(insights_blocks(insights))
    blocks.append(context("decklog — every entry is in the scope's log; `/incident help` for commands."))
    return {"type": "home", "blocks": blocks[:100]}


def oncall_blocks(oncall: OnCall) -> list[Block]:
    """Who is on call now in each schedule, and until when (``/incident oncall`` in short)."""
    lines = [
        f"• `{esc(name)}`: {'<@' + who + '>' if who else '_nobody_'}" + (f" until {until} UTC" if until else "")
        for name, who, until in oncall[:20]
    ]
    return [
        {"type": "header", "text": {"type": "plain_text", "text": "On call now"}},
        section("\n".join(lines)),
        {"type": "divider"},
    ]


def insights_blocks(body: dict[str, Any]) -> list[Block]:
    """The window's counts and times, and the worst severities' times (``decklog insights`` in short)."""
    days = body.get("since_days") or 30
    blocks: list[Block] = [
        {"type": "divider"},
        {"type": "header", "text": {"type": "plain_text", "text": f"Last {days} days"}},
        section(
            f"*{body['incidents']}* incidents · {body['open']} open · {body['resolved']} resolved\n{times_line(body)}"
        ),
    ]
    lines = [
        f"• {esc(name)} ({group['incidents']}): {times_line(group)}" for name, group in body["by_severity"].items()
    ]
    if lines:
        blocks.append(context("\n".join(lines[:6])))
    return blocks
