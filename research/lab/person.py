"""The scripted on-call engineer: approves what a sensible person would approve, through the sandbox workspace
(the same signed Slack requests a person's clicks send).

What the person knows is what an on-call engineer sees: the proposals decklog parks in the incident (read through
decklog's API, as they would read the thread) and which services are alerting (Alertmanager). The rule: approve a
proposal whose target service is alerting right now, or feeds one that is (it is upstream in the catalog);
deny one that would touch a quiet service. And, like anyone on call, they resolve an incident once every alert of
it has resolved and nothing of it is waiting for them (``@decklog resolve`` in its thread). The person never reads
the scenario.
"""

from __future__ import annotations

import re
from typing import Any

from research.lab import monitoring
from research.lab.graph import DEPENDS_ON, FLAGS
from research.lab.world import ALERTS_CHANNEL, PERSON, World

TOKEN = re.compile(r'name="decklog-sandbox-token" content="([^"]+)"')


def upstream_of(services: set[str]) -> set[str]:
    """``services`` and everything they depend on, transitively."""
    seen, todo = set(services), list(services)
    while todo:
        for dep in DEPENDS_ON.get(todo.pop(), ()):
            if dep not in seen:
                seen.add(dep)
                todo.append(dep)
    return seen


class Person:
    def __init__(self, world: World) -> None:
        self.world = world
        self.token = ""
        self.decided: dict[str, str] = {}  # proposal id → "approve" | "deny"
        self.replies: list[dict[str, Any]] = []
        self.resolved: set[str] = set()

    async def _page_token(self) -> str:
        if not self.token:
            assert self.world.http is not None
            async with self.world.http.get(self.world.decklog_url + "/") as response:
                found = TOKEN.search(await response.text())
            self.token = found.group(1) if found else ""
        return self.token

    async def say(self, text: str, *, thread: dict[str, str] | None = None) -> dict[str, Any]:
        assert self.world.http is not None
        body = {"user": PERSON, "channel": ALERTS_CHANNEL, "text": text}
        if thread:
            body.update(channel=thread["channel"], thread_ts=thread["ts"])
        headers = {"X-Decklog-Sandbox-Token": await self._page_token()}
        async with self.world.http.post(self.world.decklog_url + "/sandbox/message", json=body, headers=headers) as r:
            answer: dict[str, Any] = await r.json()
            return answer

    async def step(self) -> None:
        """Looks at every open incident's parked proposals once, and decides the new ones."""
        assert self.world.alertmanager is not None
        alerting = {a["labels"].get("service", "") for a in await monitoring.firing(self.world.alertmanager)}
        listed = await self.world.get("/api/scopes", kind="incident")
        for row in listed["scopes"]:
            if row.get("status") == "resolved":
                continue
            timeline = await self.world.get(f"/api/scopes/{row['id']}/timeline", kind="proposal", limit="200")
            for entry in timeline["entries"]:
                p = entry["payload"]
                if p.get("status") != "waiting_for_approval" or p["proposal_id"] in self.decided:
                    continue
                params = p.get("params") or {}
                target = str(params.get("service") or FLAGS.get(str(params.get("flag", "")), ("",))[0])
                sensible = bool(alerting) and target in upstream_of(alerting)
                verb = "approve" if sensible else "deny"
                reason = "" if sensible else f" {target or 'that target'} is not alerting and feeds nothing that is"
                self.decided[p["proposal_id"]] = verb
                self.replies.append(await self.say(f"/incident {verb} {p['proposal_id']}{reason}"))

    async def tidy(self) -> int:
        """Resolves every open incident whose alerts have all resolved and that waits for no approval; returns how
        many open incidents are left."""
        listed = await self.world.get("/api/scopes", kind="incident")
        left = 0
        for row in listed["scopes"]:
            if row.get("status") == "resolved" or row["id"] in self.resolved:
                continue
            scope = await self.world.get(f"/api/scopes/{row['id']}")
            alerts = scope.get("alerts") or {}
            if alerts.get("firing") or not alerts.get("total") or row.get("pending_approvals") or not row.get("thread"):
                left += 1
                continue
            self.resolved.add(row["id"])
            self.replies.append(await self.say("@decklog resolve", thread=row["thread"]))
        return left
