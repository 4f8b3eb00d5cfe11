"""One async handler per ``/incident`` subcommand: a :class:`Call` in, the one short :class:`Reply` out.

A handler reaches core through the call's service, store and index, and other features through the typed
ports (``adapters.slack.ports``); a port that is not wired answers "… is not available here".
"""

from __future__ import annotations

import logging
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from decklog.adapters.slack import render
from decklog.adapters.slack.grammar import Command
from decklog.adapters.slack.ports import SlackPorts, Where
from decklog.adapters.slack.render import obligations as render_obligations
from decklog.core.agents.answers import answer_finding
from decklog.core.entries import Actor, NewEntry
from decklog.core.errors import NotFound
from decklog.core.obligations import open_obligation
from decklog.core.service import ScopeService
from decklog.core.state import ScopeState
from decklog.core.store.ports import IndexPort, LogStore

log = logging.getLogger("decklog.slack")


@dataclass(frozen=True)
class Reply:
    text: str
    blocks: list[dict[str, Any]] = field(default_factory=list)
    open_modal: bool = False
    title: str = ""
    notify: tuple[str, str] | None = None  # (user id, text): also shown to that person, only them (handover)


@dataclass(frozen=True)
class Call:
    """One subcommand being run: what was asked, by whom, where, and what it may use. ``scope`` is the resolved,
    existing scope for a subcommand that needs one (else empty)."""

    cmd: Command
    actor: Actor
    where: Where
    key: str
    service: ScopeService
    store: LogStore
    index: IndexPort
    ports: SlackPorts
    scope: str = ""

    @property
    def args(self) -> dict[str, str]:
        return self.cmd.args


Handler = Callable[[Call], Awaitable[Reply]]


async def open_incidents(call: Call) -> Reply:
    rows = await call.index.list_scopes(kind="incident", open_only=True)
    if not rows:
        return Reply("No open incidents.")
    lines = [f"• {render.severity_label(r.severity)} `{r.id}` {render.esc(r.title)} — {r.status}" for r in rows[:30]]
    return Reply("Open incidents:\n" + "\n".join(lines))


async def declare(call: Call) -> Reply:
    title = call.args.get("title", "")
    if not title:
        return Reply("", open_modal=True)
    severity = int(call.args["severity"]) if call.args.get("severity") else None
    result = await call.service.declare(
        title=title,
        severity=severity,
        actor=call.actor,
        via="slack",
        channel=call.where.channel,
        dedicated_channel=bool(call.args.get("channel")),
        idempotency_key=call.key,
    )
    scope = result.state.scope
    return Reply(f":rotating_light: Declared `{scope}` — the header and its thread are on their way.", title=scope)


async def decide(call: Call) -> Reply:
    """``approve`` / ``deny``: the scope may be omitted anywhere (the desk finds the proposal through the index)."""
    if call.ports.decide is None:
        return Reply("Approvals are not available here.")
    scope = call.cmd.scope or await call.index.route(call.where.channel, call.where.thread_ts)
    text = await call.ports.decide(
        scope=scope,
        proposal_id=call.args["proposal_id"],
        approve=call.cmd.name == "approve",
        actor=call.actor,
        reason=call.args.get("reason", ""),
        key=call.key,
    )
    return Reply(text)


async def status(call: Call) -> Reply:
    scope = call.scope
    if not call.args.get("status"):
        return status_reply(await call.service.state(scope))
    r = await call.service.set_status(scope, call.args["status"], call.actor, idempotency_key=call.key)
    return Reply(f"`{scope}` is {r.state.status}." if r.entries else f"`{scope}` was already {r.state.status}.")


def status_reply(state: ScopeState) -> Reply:
    roles = ", ".join(f"{r}: <@{h.user_id}>" for r, h in sorted(state.roles.items())) or "none"
    waiting = sum(1 for p in state.proposals.values() if p.status == "waiting_for_approval")
    lines = [
        f"*{render.esc(state.title)}* (`{state.scope}`)",
        f"Status *{state.status}* · {render.severity_label(state.severity)} · roles: {roles}",
        f"Alerts: {len(state.firing_alerts)} firing of {len(state.alerts)} · open obligations: {len(state.obligations)}"
        f" · awaiting approval: {waiting}",
    ]
    return Reply("\n".join(lines))


async def severity(call: Call) -> Reply:
    r = await call.service.set_severity(call.scope, int(call.args["severity"]), call.actor, idempotency_key=call.key)
    return Reply(f"`{call.scope}` is SEV{r.state.severity}." + ("" if r.entries else " (unchanged)"))


async def role(call: Call) -> Reply:
    args = call.args
    await call.service.assign_role(
        call.scope,
        args["role"],
        args["user_id"],
        call.actor,
        user_name=args.get("user_name", ""),
        idempotency_key=call.key,
    )
    return Reply(f"<@{args['user_id']}> is {render.esc(args['role'])} of `{call.scope}`.")


async def resolve(call: Call) -> Reply:
    await call.service.resolve(call.scope, call.actor, summary=call.args.get("summary", ""), idempotency_key=call.key)
    return Reply(f":white_check_mark: `{call.scope}` is resolved. `/incident export` writes the report.")


async def timeline(call: Call) -> Reply:
    limit = int(call.args.get("limit", "15"))
    entries = await call.store.read_last(call.scope, limit=max(1, min(limit, 50)))
    lines = [f"`#{e.seq}` {e.at.strftime('%H:%M:%S')} {render.esc(e.text)}" for e in entries]
    return Reply(f"*Timeline of `{call.scope}`* (last {len(lines)}):\n" + "\n".join(lines))


async def link(call: Call) -> Reply:
    other = call.args["other"]
    await call.service.link(call.scope, other, call.actor, reason=f"linked by {call.actor.label()}")
    return Reply(f":link: Linked `{call.scope}` and `{other}`.")


async def ask(call: Call) -> Reply:
    if call.ports.ask is None:
        return Reply("The agent is not available here.")
    question = call.args["question"]
    return Reply(
        await call.ports.ask(scope=call.scope, question=question, actor=call.actor, where=call.where, key=call.key)
    )


async def export(call: Call) -> Reply:
    if call.ports.export is None:
        return Reply("Reports are not available here.")
    return Reply(await call.ports.export(scope=call.scope, fmt=call.args["format"], actor=call.actor, key=call.key))


async def compensate(call: Call) -> Reply:
    if call.ports.compensate is None:
        return Reply("Compensation is not available here.")
    run_id = call.args["run_id"]
    return Reply(await call.ports.compensate(scope=call.scope, run_id=run_id, actor=call.actor, key=call.key))


# -- the typed record, actions on request, catch-up ---------------------------------------------------------------

RECORD_KINDS = ("goal", "constraint", "decision", "hypothesis")
RECORD_ICONS = {"goal": ":dart:", "constraint": ":no_entry:", "decision": ":scales:", "hypothesis": ":bulb:"}


async def record(call: Call) -> Reply:
    """``goal|constraint|decision|hypothesis <text>``: an entry of that kind by the person (``payload.text``)."""
    kind = call.cmd.name
    result = await call.service.record(
        call.scope, kind, {"text": call.args["text"]}, call.actor, idempotency_key=call.key
    )
    if result.duplicate:
        return Reply(f"That {kind} is already recorded in `{call.scope}`.")
    return Reply(f"{RECORD_ICONS[kind]} Recorded the {kind} in `{call.scope}` (#{result.entries[0].seq}).")


async def evidence(call: Call) -> Reply:
    """``evidence <text>``: evidence recorded by the person (as a 📌 pin records a message)."""
    payload = {"text": call.args["text"], "channel": call.where.channel, "author": call.actor.id, "source": "slack"}
    result = await call.service.record(call.scope, "evidence", payload, call.actor, idempotency_key=call.key)
    if result.duplicate:
        return Reply(f"That evidence is already recorded in `{call.scope}`.")
    return Reply(f":pushpin: Recorded the evidence in `{call.scope}` (#{result.entries[0].seq}).")


async def obligation(call: Call) -> Reply:
    """``obligation <text>``: open an obligation (a task that must not be forgotten) in the person's name."""
    text = call.args["text"]

    def decide(state: ScopeState) -> list[NewEntry]:
        return open_obligation(state, text=text, actor=call.actor, purpose="task")

    result = await call.store.append(call.scope, decide, idempotency_key=call.key)
    if result.duplicate or not result.entries:
        return Reply(f"That obligation is already open in `{call.scope}`.")
    oid = getattr(result.entries[0].payload, "obligation_id", "")
    return Reply(f":ballot_box_with_check: Opened obligation {oid} in `{call.scope}` (#{result.entries[0].seq}).")


async def run_action(call: Call) -> Reply:
    if call.ports.propose is None:
        return Reply("Actions are not available here.")
    params = {k.removeprefix("param."): v for k, v in call.args.items() if k.startswith("param.")}
    text = await call.ports.propose(
        scope=call.scope, action=call.args["action"], params=params, actor=call.actor, key=call.key
    )
    return Reply(text)


async def list_actions(call: Call) -> Reply:
    if call.ports.actions is None:
        return Reply("Actions are not available here.")
    return Reply(await call.ports.actions())


async def catchup(call: Call) -> Reply:
    """``catch me up`` / ``catchup``: with a model wired, its bounded summary; otherwise the deterministic one."""
    return Reply(await _catch_up(call, call.actor, call.key))


async def _catch_up(call: Call, actor: Actor, key: str) -> str:
    """The catch-up (a model's summary, or the deterministic one), escaped for Slack: it quotes titles, messages
    and alerts, and a model's words, none of which may ping or link anyone (it has no Slack markup of its own)."""
    if call.ports.catchup is not None:
        return render.esc(await call.ports.catchup(scope=call.scope, actor=actor, key=key))
    from datetime import UTC, datetime

    from decklog.core.views import build_view
    from decklog.core.views.catchup import catch_up

    view = await build_view(call.store, call.scope, "joiner")
    return render.esc(catch_up(view, datetime.now(UTC)))


async def follow_up(call: Call) -> Reply:
    """``follow-up <text> [@owner] [due YYYY-MM-DD]``: a ``follow_up`` entry; the ``trackers`` topic files it.
    ``follow-up <obligation id>`` keeps that open obligation as a follow-up, as its button does."""
    if OBLIGATION_ID.fullmatch(call.args.get("text", "")) and not call.args.get("owner") and not call.args.get("due"):
        return Reply(await keep_obligation(call.service, call.scope, call.args["text"], call.actor, key=call.key))
    payload = {k: v for k, v in call.args.items() if k in ("text", "owner", "due") and v}
    result = await call.service.record(call.scope, "follow_up", payload, call.actor, idempotency_key=call.key)
    if result.duplicate:
        return Reply(f"That follow-up is already recorded in `{call.scope}`.")
    return Reply(
        f":memo: Follow-up #{result.entries[0].seq} recorded in `{call.scope}`; it will be filed in the tracker."
    )


# -- the obligations a resolve left open: each is closed or kept, none stays open with nobody told --------------

#: An obligation's id as people type it (``ob-1a2b3c``, the ids core/obligations.py makes).
OBLIGATION_ID = re.compile(r"ob-[A-Za-z0-9_-]+")


async def keep_obligation(service: ScopeService, scope: str, oid: str, actor: Actor, *, key: str) -> str:
    """Keep an open obligation as a follow-up; the line the person is told (also ``follow-up <obligation id>``)."""
    try:
        result = await service.keep_as_follow_up(scope, oid, actor, idempotency_key=key)
    except NotFound:
        return f"Obligation `{oid}` is no longer open in `{scope}`."
    seq = result.entries[0].seq if result.entries else 0
    if result.duplicate:
        return f"Obligation `{oid}` already has a follow-up (#{seq}) in `{scope}`."
    return f":memo: Follow-up #{seq} recorded from `{oid}` (now closed); it is filed in the team's tracker when one is set."


async def obligations(call: Call) -> Reply:
    """``obligations``: the scope's open obligations, each with Done / Follow-up (only the person sees it)."""
    out = render_obligations.open_obligations(await call.store.get_state(call.scope))
    return Reply(out.text, out.blocks)


async def obligation_done(call: Call) -> Reply:
    """``done <obligation id> [note]``: a person closes an open obligation — the finding answer *Done* gives
    (core/agents/answers.py): the obligation fulfilled, with who said so."""
    oid = call.args["obligation"]
    ob = (await call.store.get_state(call.scope)).obligations.get(oid)
    if ob is None or not ob.opened_seq:
        return Reply(f"Obligation `{oid}` is no longer open in `{call.scope}` (`obligations` lists the open ones).")
    line = await answer_finding(
        call.store, call.scope, ob.opened_seq, "done", call.actor, now=datetime.now(UTC), key=call.key
    )
    return Reply(f":white_check_mark: {line}" if line.startswith("Recorded") else line)


# -- search, handover ------------------------------------------------------------------------------------------


async def search(call: Call) -> Reply:
    """``search <words>``: the best matches over all incidents (title, messages, evidence, hypotheses, decisions)."""
    from decklog.core.search import search_incidents

    results = await search_incidents(call.index, call.args["words"], limit=8)
    if not results:
        return Reply(f"No incident mentions “{render.esc(call.args['words'])}”.")
    lines = [
        f"• `{r['scope']}` *{render.esc(r['title'])}* — {r['kind']} #{r['seq']}: {render.esc(r['snippet'])[:200]}"
        for r in results
    ]
    return Reply(f"Matches for “{render.esc(call.args['words'])}”:\n" + "\n".join(lines))


async def handover(call: Call) -> Reply:
    """``handover <role> @user``: the role moves to the person, who is shown the catch-up (only they see it)."""
    args = call.args
    before = (await call.service.state(call.scope)).roles.get(args["role"])
    result = await call.service.assign_role(
        call.scope,
        args["role"],
        args["user_id"],
        call.actor,
        user_name=args.get("user_name", ""),
        idempotency_key=call.key,
    )
    role, user = render.esc(args["role"]), args["user_id"]
    if not result.entries and not result.duplicate:
        return Reply(f"<@{user}> already holds {role} of `{call.scope}`.")
    holder = Actor.human(user, args.get("user_name", ""))
    summary = await _catch_up(call, holder, f"{call.key}:handover")
    was = f" (from <@{before.user_id}>)" if before is not None and before.user_id != user else ""
    intro = f":handshake: You are now {role} of `{call.scope}`{was}, handed over by {render.esc(call.actor.label())}."
    return Reply(f"<@{user}> is now {role} of `{call.scope}`{was}.", notify=(user, f"{intro}\n{summary}"))


async def send_notify(client: Any, where: Where, notify: tuple[str, str]) -> None:
    """Show a reply's ``notify`` text to its person only, ephemerally where the request came from. Ephemeral
    replies are the one Slack effect a handler may make itself; anything posted for good goes through the outbox,
    so there is no DM fallback here. If Slack refuses (the person is not in that channel), it is logged; the
    asker's own reply already says who holds the role, and ``catch me up`` gives them the summary."""
    from slack_sdk.errors import SlackApiError

    user, text = notify
    try:
        await client.chat_postEphemeral(channel=where.channel, user=user, thread_ts=where.thread_ts or None, text=text)
    except SlackApiError as exc:
        log.warning("could not show %s their handover note in %s: %s", user, where.channel, exc)
