"""The experiment's people in Slack: decklog's own Slack part (``bot/slack.py``: the Web API client and the Slack
outbox sender, Bolt behind the durable intake, ``POST /slack/events``) against the local fake Slack workspace
(``adapters/local/slack``, the one ``make run``'s sandbox and the e2e tests use) on loopback.

- A human message of the timeline is posted by that person in the incident's thread; the fake workspace delivers it
  as a signed Events API request, and the Slack receiver records it (key ``slack:msg:<channel>:<ts>``). Under
  ``dup_delivery`` Slack retries the same event (same ``event_id``, ``X-Slack-Retry-Num: 1``).
- The scripted approver clicks the Approve button of the proposal's message, exactly as the Slack sender posted it
  (``block_actions``, action ``proposal_approve``, value ``<scope>|<proposal id>``); under ``dup_delivery`` it
  double-clicks (two clicks on the same rendering, two ``block_actions`` with their own trigger ids).
- A harmful proposal is denied with its reason by ``/incident deny <proposal id> <reason>`` (the Deny button
  carries no reason, and the policy reads a denial by its reason).
- The scripted on-call clicks Accept on an agent's suggestion (``suggestion_accept``) and records a decision with
  ``/incident decision <scope> <text>``.

Every input is acknowledged only after the intake stored it; ``settle`` then waits for the intake's work and for the
dispatcher, so that what a turn reads next never depends on delivery timing.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import aiohttp
from aiohttp import web

from decklog.adapters.local.sandbox import LocalSlack, open_local_slack
from decklog.adapters.local.slack import DriverResponse, Message
from decklog.adapters.local.slack.server import Handler
from decklog.adapters.slack.app import build_http_session
from decklog.adapters.slack.ids import Action
from decklog.adapters.slack.outcomes import SlackDesk
from decklog.adapters.slack.ports import SlackPorts
from decklog.adapters.slack.proposals import ProposalMessages
from decklog.bot.parts import Route
from decklog.bot.runtime import Runtime
from decklog.bot.slack import SlackEndpoint, SlackIn, build_slack_in, build_slack_out
from decklog.core.actions import ActionDesk
from decklog.core.entries import Actor

STOP_GRACE_S = 3.0


class PostCounter:
    """A middleware of the fake Slack's server: counts the ``chat.postMessage`` calls it serves (the fake keeps no
    record of the calls it served)."""

    def __init__(self) -> None:
        self.posts = 0

    async def __call__(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.path == "/api/chat.postMessage":
            self.posts += 1
        return await handler(request)


class SlackDoor:
    def __init__(
        self, rt: Runtime, local: LocalSlack, part: SlackIn, http: aiohttp.ClientSession, posts: PostCounter
    ) -> None:
        self.rt = rt
        self.local = local
        self.part = part
        self.http = http
        self.posts = posts
        self.done: dict[str, int] = {}  # what the people did, by what (message, retry, approve, deny, accept, …)

    @classmethod
    async def open(cls, rt: Runtime) -> SlackDoor:
        """The fake workspace, then decklog's Slack part aimed at it (as ``bot/wiring.py`` builds it in sandbox
        mode): the Slack sender first on the dispatcher, the proposal messages kept in step, the inbound half."""
        local = await open_local_slack()
        posts = PostCounter()
        local.slack.server.middlewares.append(posts)
        http = build_http_session()
        endpoint = SlackEndpoint(local.token, local.base_url, local.signing_secret)
        out = build_slack_out(
            rt.store,
            rt.index,
            rt.alarm,
            endpoint,
            "sandbox",
            slack=rt.config.slack,
            alerts_channel=rt.settings.alerts_channel,
            pace_slots=rt.storage.pace_slots(),
            fence=rt.dispatcher,
            http=http,
        )
        # The sender looks up (before posting) every entry committed before it started, which a previous process
        # may have posted; it compares entry times with the wall clock. A run's entries are on the virtual clock,
        # and all of them are this process's: it started at the virtual clock's start.
        out.sender.started_at = rt.clock.now().timestamp()
        out.sender.updaters.append(ProposalMessages(rt.store))
        rt.dispatcher.register(out.sender, first=True)
        inbox = await rt.storage.inbox()
        part = build_slack_in(rt.service, rt.store, rt.index, inbox, out, SlackPorts(), endpoint, "sandbox")
        return cls(rt, local, part, http, posts)

    @property
    def routes(self) -> Sequence[Route]:
        return self.part.provides.routes  # POST /slack/events

    def attach(self, desk: ActionDesk, approvers: Sequence[Actor]) -> None:
        """The desk's decide port (Approve / Deny, ``approve`` / ``deny``), and the approvers as Slack people."""
        self.part.hooks.decide = SlackDesk(desk).decide
        for person in approvers:
            self._person(person.id, person.name or person.id)

    def listen(self, events_url: str) -> None:
        """The fake Slack delivers to decklog's ``/slack/events``, signed with the app's signing secret."""
        self.local.slack.use_http(events_url, self.local.signing_secret)

    async def stop(self) -> None:
        await self.part.deps.finish_work(STOP_GRACE_S)
        await self.part.inbox.close()
        await self.local.slack.stop()
        await self.http.close()

    # -- people doing things -------------------------------------------------------------------------------------

    async def message(self, scope: str, user: str, text: str, *, times: int = 1) -> None:
        """``user`` posts ``text`` in the incident's thread; Slack retries the event ``times - 1`` times."""
        channel, thread_ts = await self._thread(scope)
        self._person(user, user.lower())
        fake = self.local.slack
        before = len(fake.deliveries)
        posted = await fake.post_message(user, channel, text, thread_ts=thread_ts)
        self._check("message", posted.responses)
        for n in range(1, times):
            self._check("retry", [await fake.redeliver(fake.deliveries[before], retry_num=n)])
        await self.settle()

    async def approve(self, scope: str, proposal_id: str, actor: Actor, *, clicks: int = 1) -> None:
        """``actor`` clicks Approve on the proposal's message (``clicks`` times, on the same rendering)."""
        channel, message = await self._posted(scope, f"proposal:{proposal_id}")
        fake = self.local.slack
        value = f"{scope}|{proposal_id}"
        # Started together: every click finds the button before any answer can change the message (a double-click).
        outcomes = await asyncio.gather(
            *(
                fake.click_button(actor.id, channel, message.ts, Action.PROPOSAL_APPROVE.value, value)
                for _ in range(clicks)
            )
        )
        self._check("approve", [r for o in outcomes for r in o.responses])
        await self.settle()

    async def deny(self, scope: str, proposal_id: str, actor: Actor, reason: str) -> None:
        """``actor`` denies the proposal with ``reason``: ``/incident deny <id> <reason>`` in the incident's channel."""
        channel, _ = await self._posted(scope, f"proposal:{proposal_id}")
        outcome = await self.local.slack.run_command(actor.id, channel, f"deny {proposal_id} {reason}")
        self._check("deny", outcome.responses)
        await self.settle()

    async def accept(self, scope: str, suggestion_id: str, actor: Actor) -> None:
        """``actor`` clicks Accept on the suggestion's message."""
        channel, message = await self._posted(scope, f"suggestion:{suggestion_id}")
        value = f"{scope}|{suggestion_id}"
        outcome = await self.local.slack.click_button(
            actor.id, channel, message.ts, Action.SUGGESTION_ACCEPT.value, value
        )
        self._check("accept", outcome.responses)
        await self.settle()

    async def record(self, scope: str, kind: str, text: str, actor: Actor) -> None:
        """``actor`` records ``text`` as a ``kind`` (goal, constraint, decision, hypothesis):
        ``/incident <kind> <scope> <text>`` in the incident's channel."""
        channel, _ = await self._thread(scope)
        outcome = await self.local.slack.run_command(actor.id, channel, f"{kind} {scope} {text}")
        self._check(kind, outcome.responses)
        await self.settle()

    async def settle(self) -> None:
        """The intake's work behind every acknowledged request, then every delivery that work set off."""
        deps = self.part.deps
        while deps.work_tasks:
            await asyncio.gather(*list(deps.work_tasks), return_exceptions=True)
        await self.rt.dispatcher.idle()
        if deps.counters.get("errors"):
            raise RuntimeError(f"a Slack request failed in decklog's listeners: {deps.counters}")

    def stats(self) -> dict[str, Any]:
        """What Slack sent (``requests``, by kind), what decklog's Slack part counted (duplicates, errors), what the
        Slack sender posted (``posts``; its header updates are left out: how many depends on how the dispatcher
        batched the entries, which is timing) and what the people did (``did``)."""
        kinds: dict[str, int] = {}
        for d in self.local.slack.deliveries:
            kinds[d.kind] = kinds.get(d.kind, 0) + 1
        left = sum(
            1
            for m in self.local.slack.workspace.bot_messages()
            if any(str(b.get("block_id", "")).startswith("proposal:") for b in m.blocks or [])
        )  # proposal messages still offering Approve / Deny (each decided one is updated with its outcome)
        return {
            "requests": len(self.local.slack.deliveries),
            **kinds,
            **self.part.deps.counters,
            "posts": self.posts.posts,
            "buttons_left": left,
            "did": dict(self.done),
        }

    # -- what the people see -------------------------------------------------------------------------------------

    async def _thread(self, scope: str) -> tuple[str, str | None]:
        thread = (await self.rt.store.get_state(scope)).thread
        if thread is None:
            raise RuntimeError(f"{scope} has no Slack thread: the Slack sender did not post its header")
        return thread.channel, None if thread.dedicated_channel else thread.ts

    async def _posted(self, scope: str, block_id: str) -> tuple[str, Message]:
        """The message the Slack sender posted for a waiting proposal or an open suggestion: the one whose blocks
        carry its buttons (``proposal:<id>``, ``suggestion:<id>``)."""
        await self.settle()  # the entry reaches Slack through the outbox
        for message in reversed(self.local.slack.workspace.bot_messages()):
            if any(b.get("block_id") == block_id for b in message.blocks or []):
                return message.channel, message
        raise RuntimeError(f"no Slack message of {scope} shows the buttons of {block_id}")

    def _person(self, user_id: str, name: str) -> None:
        directory = self.local.slack.workspace.directory
        if not any(u.id == user_id for u in directory.users()):
            directory.add_user(name, user_id=user_id)

    def _check(self, what: str, responses: list[DriverResponse]) -> None:
        self.done[what] = self.done.get(what, 0) + len(responses)
        bad = [r for r in responses if r.status != 200]
        if not responses or bad:
            raise RuntimeError(f"Slack {what}: /slack/events answered {[(r.status, r.body[:200]) for r in bad]}")
