"""Runs a parsed ``/incident`` command against core and says what happened, in one short reply.

Shared by the slash command (channel context) and @mentions (thread context). Scope resolution: an explicit
scope id, else the thread or dedicated channel the request came from, else a picker of open incidents.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from adapters.slack import render
from adapters.slack.grammar import NEEDS_SCOPE, Command
from adapters.slack.hooks import SlackHooks, Where
from core.entries import Actor
from core.errors import InvalidInput, NotFound
from core.index import Index
from core.service import ScopeService
from core.store import LogStore


@dataclass(frozen=True)
class Reply:
    text: str
    blocks: list[dict[str, Any]] = field(default_factory=list)
    open_modal: bool = False
    title: str = ""


class CommandRunner:
    def __init__(self, service: ScopeService, store: LogStore, index: Index, hooks: SlackHooks) -> None:
        self.service = service
        self.store = store
        self.index = index
        self.hooks = hooks

    async def resolve_scope(self, cmd: Command, where: Where) -> str | None:
        if cmd.scope:
            return cmd.scope
        return await self.index.route(where.channel, where.thread_ts)

    async def run(self, cmd: Command, actor: Actor, where: Where, key: str) -> Reply:
        if cmd.name == "help":
            return Reply("decklog commands", render.usage())
        if cmd.name == "list":
            rows = await self.index.list_scopes(kind="incident", open_only=True)
            if not rows:
                return Reply("No open incidents.")
            lines = [
                f"• {render.severity_label(r.severity)} `{r.id}` {render.esc(r.title)} — {r.status}" for r in rows[:30]
            ]
            return Reply("Open incidents:\n" + "\n".join(lines))
        if cmd.name == "declare":
            return await self._declare(cmd, actor, where, key)
        if cmd.name in ("approve", "deny"):
            if self.hooks.decide is None:
                return Reply("Approvals are not available here.")
            scope = cmd.scope or await self.index.route(where.channel, where.thread_ts)
            text = await self.hooks.decide(
                scope, cmd.args["proposal_id"], cmd.name == "approve", actor, cmd.args.get("reason", ""), key
            )
            return Reply(text)
        scope = await self.resolve_scope(cmd, where)
        if scope is None and cmd.name in NEEDS_SCOPE:
            rows = await self.index.list_scopes(kind="incident", open_only=True)
            return Reply("Which incident?", render.picker(rows, cmd.raw))
        assert scope is not None
        if not await self.store.exists(scope):
            raise NotFound(f"no such scope: {scope}")
        return await self._scoped(cmd, scope, actor, where, key)

    async def _declare(self, cmd: Command, actor: Actor, where: Where, key: str) -> Reply:
        title = cmd.args.get("title", "")
        if not title:
            return Reply("", open_modal=True)
        severity = int(cmd.args["severity"]) if cmd.args.get("severity") else None
        result = await self.service.declare(
            title=title,
            severity=severity,
            actor=actor,
            via="slack",
            channel=where.channel,
            dedicated_channel=bool(cmd.args.get("channel")),
            idempotency_key=key,
        )
        scope = result.state.scope
        return Reply(f":rotating_light: Declared `{scope}` — the header and its thread are on their way.", title=scope)

    async def _scoped(self, cmd: Command, scope: str, actor: Actor, where: Where, key: str) -> Reply:
        svc = self.service
        if cmd.name == "status" and not cmd.args.get("status"):
            return self._status(await svc.state(scope))
        if cmd.name == "status":
            r = await svc.set_status(scope, cmd.args["status"], actor, idempotency_key=key)
            return Reply(f"`{scope}` is {r.state.status}." if r.entries else f"`{scope}` was already {r.state.status}.")
        if cmd.name == "sev":
            r = await svc.set_severity(scope, int(cmd.args["severity"]), actor, idempotency_key=key)
            return Reply(f"`{scope}` is SEV{r.state.severity}." + ("" if r.entries else " (unchanged)"))
        if cmd.name == "role":
            r = await svc.assign_role(
                scope,
                cmd.args["role"],
                cmd.args["user_id"],
                actor,
                user_name=cmd.args.get("user_name", ""),
                idempotency_key=key,
            )
            return Reply(f"<@{cmd.args['user_id']}> is {cmd.args['role']} of `{scope}`.")
        if cmd.name == "resolve":
            await svc.resolve(scope, actor, summary=cmd.args.get("summary", ""), idempotency_key=key)
            return Reply(f":white_check_mark: `{scope}` is resolved. `/incident export` writes the report.")
        if cmd.name == "timeline":
            limit = int(cmd.args.get("limit", "15"))
            entries = await self.store.read_last(scope, limit=max(1, min(limit, 50)))
            lines = [f"`#{e.seq}` {e.at.strftime('%H:%M:%S')} {render.esc(e.text)}" for e in entries]
            return Reply(f"*Timeline of `{scope}`* (last {len(lines)}):\n" + "\n".join(lines))
        if cmd.name == "link":
            await svc.link(scope, cmd.args["other"], actor, reason=f"linked by {actor.label()}")
            return Reply(f":link: Linked `{scope}` and `{cmd.args['other']}`.")
        if cmd.name == "ask":
            if self.hooks.ask is None:
                return Reply("The agent is not available here.")
            return Reply(await self.hooks.ask(scope, cmd.args["question"], actor, where, key))
        if cmd.name == "export":
            if self.hooks.export is None:
                return Reply("Reports are not available here.")
            return Reply(await self.hooks.export(scope, cmd.args["format"], actor, key))
        if cmd.name == "compensate":
            if self.hooks.compensate is None:
                return Reply("Compensation is not available here.")
            return Reply(await self.hooks.compensate(scope, cmd.args["run_id"], actor, key))
        raise InvalidInput(f"`{cmd.name}` is not supported here")

    @staticmethod
    def _status(state: Any) -> Reply:
        roles = ", ".join(f"{r}: <@{h.user_id}>" for r, h in sorted(state.roles.items())) or "none"
        lines = [
            f"*{render.esc(state.title)}* (`{state.scope}`)",
            f"Status *{state.status}* · {render.severity_label(state.severity)} · roles: {roles}",
            f"Alerts: {len(state.firing_alerts)} firing of {len(state.alerts)} · open obligations: {len(state.obligations)}"
            f" · awaiting approval: {sum(1 for p in state.proposals.values() if p.status == 'waiting_for_approval')}",
        ]
        return Reply("\n".join(lines))
