"""The incident's header message, updated in place (``chat.update``) as its state changes."""

from __future__ import annotations

from collections.abc import Sequence

from decklog.adapters.slack.ids import Action
from decklog.adapters.slack.render.blocks import (
    STATUS_EMOJI,
    Block,
    Outgoing,
    button,
    context,
    date,
    esc,
    section,
    severity_label,
    severity_options,
)
from decklog.core.alerts.batch import source_name
from decklog.core.entries import Entry
from decklog.core.state import ScopeState

RECORD_KINDS = ("goal", "constraint", "decision")  # what the header shows of the typed record
CONSTRAINTS_SHOWN = 5
OBLIGATIONS_SHOWN = 8
LINKS_SHOWN = 10  # a split alert notification's parent can hold 100+ links: a context block takes 3,000 characters


def header(state: ScopeState, record: Sequence[Entry] = ()) -> Outgoing:
    """The header; ``record``: the latest goal / constraint / decision entries (read from the log by the sender,
    not kept in the state), shown as the current goal, the open constraints and the last decision."""
    sev = severity_label(state.severity)
    title = f"{sev} · {state.title}" if state.kind == "incident" else f":package: {state.title}"
    blocks: list[Block] = [  # a header block is plain text: nothing in it is a mention or a link
        {"type": "header", "text": {"type": "plain_text", "text": title[:150], "emoji": True}},
        {"type": "section", "fields": _fields(state, sev)[:10]},
    ]
    if state.paged_at:  # on-call: who acknowledged the page (or that nobody has yet)
        if state.page_acknowledged_at:
            when = state.page_acknowledged_at[11:16]
            blocks.append(context(f":white_check_mark: Acknowledged by <@{state.page_acknowledged_by}> at {when} UTC"))
        else:
            blocks.append(context(":rotating_light: Paged, not acknowledged yet: `/incident ack` (or the DM's button)"))
    typed = _record(record)
    if typed:
        blocks.append(section(typed))
    if state.obligations:
        blocks.extend(_obligations(state))
    if state.linked:
        shown = ", ".join(f"`{s}`" for s in state.linked[:LINKS_SHOWN])
        more = f", +{len(state.linked) - LINKS_SHOWN} more" if len(state.linked) > LINKS_SHOWN else ""
        blocks.append(context(f"Linked: {shown}{more}"))
    if state.kind == "incident":
        blocks.append(_controls(state))
    blocks.append(context(f"`{state.scope}` · reply in this thread; everything here is recorded"))
    return Outgoing(text=f"{esc(title)} — {state.status}", blocks=blocks)


def pointer(state: ScopeState, channel: str) -> Outgoing:
    """The line left in the invoking channel when the incident has a dedicated channel of its own."""
    title = esc(state.title)
    return Outgoing(f"{title}: <#{channel}>", [section(f":rotating_light: *{title}* is being handled in <#{channel}>")])


def _obligations(state: ScopeState) -> list[Block]:
    """The open obligations (the first ``OBLIGATIONS_SHOWN``), each with a "Follow-up" button that files it in the
    team's tracker (``value``: ``<scope>|<obligation_id>``)."""
    shown = list(state.obligations.values())[:OBLIGATIONS_SHOWN]
    blocks: list[Block] = [section("*Open obligations*")]
    for n, o in enumerate(shown):
        line = f"• {esc(o.text)}" + (f" _(held by {esc(o.holder)})_" if o.holder else "")
        follow_up = button("Follow-up", Action.OBLIGATION_FOLLOW_UP, f"{state.scope}|{o.id}")
        blocks.append({**section(line[:2900]), "block_id": f"obligation:{n}", "accessory": follow_up})
    return blocks


def _record(record: Sequence[Entry]) -> str:
    by_kind: dict[str, list[str]] = {k: [] for k in RECORD_KINDS}
    for e in sorted(record, key=lambda e: e.seq):
        text = str(getattr(e.payload, "text", "") or "")
        if e.kind in by_kind and text:
            by_kind[e.kind].append(esc(text))
    lines = []
    if by_kind["goal"]:
        lines.append(f":dart: *Goal:* {by_kind['goal'][-1]}")
    if by_kind["constraint"]:
        shown = by_kind["constraint"][-CONSTRAINTS_SHOWN:]
        lines.append(":no_entry: *Constraints:* " + "; ".join(shown))
    if by_kind["decision"]:
        lines.append(f":scales: *Last decision:* {by_kind['decision'][-1]}")
    return "\n".join(lines)[:2900]


def _fields(state: ScopeState, sev: str) -> list[Block]:
    status = f"{STATUS_EMOJI.get(state.status, '')} {state.status}".strip()
    roles = ", ".join(f"{r}: <@{h.user_id}>" for r, h in sorted(state.roles.items())) or "_none yet_"
    fields = [
        {"type": "mrkdwn", "text": f"*Status*\n{status}"},
        {"type": "mrkdwn", "text": f"*Severity*\n{sev}"},
        {"type": "mrkdwn", "text": f"*Roles*\n{roles}"},
        {"type": "mrkdwn", "text": f"*Declared*\n{date(state.created_at, '{ago}')}"},
    ]
    if state.alerts:
        repeats = f" · {state.alert_repeats} repeats" if state.alert_repeats else ""
        firing = len(state.firing_alerts)
        text = f"*Alerts*\n{firing} firing of {len(state.alerts)}{repeats}" + "".join(
            f"\n:warning: {line}" for line in left_out_lines(state)
        )
        fields.append({"type": "mrkdwn", "text": text})
    waiting = [p for p in state.proposals.values() if p.status == "waiting_for_approval"]
    if waiting:
        fields.append({"type": "mrkdwn", "text": f"*Awaiting approval*\n{', '.join(p.id for p in waiting)}"})
    return fields


def left_out_lines(state: ScopeState) -> list[str]:
    """What the senders said they left out of their last notification (``truncatedAlerts``), one line per source:
    "7 more alerts not sent by Alertmanager"."""
    return [
        f"{count} more alert{'s' if count != 1 else ''} not sent by {esc(source_name(source))}"
        for source, count in sorted(state.alerts_left_out.items())
        if count > 0
    ]


def _controls(state: ScopeState) -> Block:
    """Severity, Resolve and Export on an open incident; Export only once it is resolved."""
    export = button("Export report", Action.EXPORT, state.scope)
    if state.status == "resolved":
        return {"type": "actions", "block_id": f"header:{state.scope}", "elements": [export]}
    severity = {
        "type": "static_select",
        "action_id": Action.SEVERITY,
        "placeholder": {"type": "plain_text", "text": "Set severity"},
        "options": severity_options(),
    }
    resolve = {
        **button("Resolve", Action.RESOLVE, state.scope, style="primary"),
        "confirm": {
            "title": {"type": "plain_text", "text": "Resolve this incident?"},
            "text": {"type": "mrkdwn", "text": f"`{state.scope}` will be marked resolved."},
            "confirm": {"type": "plain_text", "text": "Resolve"},
            "deny": {"type": "plain_text", "text": "Cancel"},
        },
    }
    return {"type": "actions", "block_id": f"header:{state.scope}", "elements": [severity, resolve, export]}
