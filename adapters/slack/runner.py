"""Runs a parsed ``/incident`` command against core and says what happened, in one short reply.

Shared by the slash command (channel context) and @mentions (thread context). What each subcommand does is a row
of ``adapters.slack.subcommands.table``; this module only finds the scope for the rows that need one: an explicit
scope id, else the thread or dedicated channel the request came from, else a picker of open incidents.
"""

from __future__ import annotations

from dataclasses import replace

from decklog.adapters.slack import render
from decklog.adapters.slack.grammar import Command
from decklog.adapters.slack.ports import SlackPorts, Where
from decklog.adapters.slack.subcommands import Call, Reply, lookup
from decklog.core.entries import Actor
from decklog.core.errors import InvalidInput, NotFound
from decklog.core.service import ScopeService
from decklog.core.store.ports import IndexPort, LogStore


class CommandRunner:
    def __init__(self, service: ScopeService, store: LogStore, index: IndexPort, ports: SlackPorts) -> None:
        self.service = service
        self.store = store
        self.index = index
        self.ports = ports

    async def resolve_scope(self, cmd: Command, where: Where) -> str | None:
        if cmd.scope:
            return cmd.scope
        return await self.index.route(where.channel, where.thread_ts)

    async def run(self, cmd: Command, actor: Actor, where: Where, key: str) -> Reply:
        row = lookup(cmd.name)
        if row is None:
            raise InvalidInput(f"`{cmd.name}` is not supported here")
        call = Call(cmd, actor, where, key, self.service, self.store, self.index, self.ports)
        if not row.needs_scope:
            return await row.handler(call)
        scope = await self.resolve_scope(cmd, where)
        if scope is None:
            rows = await self.index.list_scopes(kind="incident", open_only=True)
            return Reply("Which incident?", render.picker(rows, cmd.raw))
        if not await self.store.exists(scope):
            raise NotFound(f"no such scope: {scope}")
        return await row.handler(replace(call, scope=scope))
