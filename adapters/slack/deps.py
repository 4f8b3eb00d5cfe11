"""What the Slack listeners need, passed in by the composition root (no globals)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from decklog.adapters.slack.ports import SlackPorts
from decklog.adapters.slack.runner import CommandRunner
from decklog.core.entries import Actor
from decklog.core.service import ScopeService
from decklog.core.store.ports import IndexPort, LogStore


@dataclass
class SlackDeps:
    service: ScopeService
    store: LogStore
    index: IndexPort
    ports: SlackPorts
    runner: CommandRunner
    counters: dict[str, int]
    client: AsyncWebClient | None = None
    names: dict[str, str] = field(default_factory=dict)
    # Work behind an ack waits for a slot (adapters/slack/intake.py), so that a burst of requests cannot fill the event
    # loop's run queue and delay the acks of the requests that follow (measured: bench/slack_ack.py). Work that may
    # take long (an agent answering `ask`) runs in a background task and does not hold a slot.
    work_slots: asyncio.Semaphore = field(default_factory=lambda: asyncio.Semaphore(4))
    work_tasks: set[asyncio.Task[None]] = field(default_factory=set)

    @property
    def work_in_flight(self) -> int:
        """Acknowledged requests whose work has not finished (waiting for a slot or running)."""
        return len(self.work_tasks)

    async def finish_work(self, timeout: float) -> int:
        """At shutdown: let work in progress finish for ``timeout`` s, then cancel what is left (it stays in the
        inbox and is replayed at the next start). Returns how many were cancelled."""
        pending = set(self.work_tasks)
        if pending:
            _done, pending = await asyncio.wait(pending, timeout=timeout)
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        return len(pending)

    def count(self, name: str) -> None:
        self.counters[name] = self.counters.get(name, 0) + 1

    async def human(self, user_id: str, fallback: str = "") -> Actor:
        """The person as an actor, with their display name (``users.info``, cached; the id if Slack won't say)."""
        if user_id not in self.names and self.client is not None and user_id:
            try:
                resp = await self.client.users_info(user=user_id)
                user = resp.get("user") or {}
                profile = user.get("profile") or {}
                self.names[user_id] = profile.get("display_name") or user.get("name") or profile.get("real_name") or ""
            except SlackApiError:
                self.names[user_id] = ""
        return Actor.human(user_id, self.names.get(user_id) or fallback or user_id)
