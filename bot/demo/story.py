"""The demo's story, step by step: each step acts through the product's own doors and waits, with a deadline, for
its effect in the log or in Slack (``StepFailed`` when it does not come)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

import aiohttp

from decklog.bot.demo.payloads import alert, change
from decklog.bot.demo.transcript import render
from decklog.bot.server import DecklogServer
from decklog.core.errors import NotFound
from decklog.core.state import ScopeState

__all__ = ["ALERTS", "CHANGE", "SCOPE", "Demo", "StepFailed"]


T = TypeVar("T")

SCOPE = "incident/payments-5xx"
CHANGE = "change/r2026-09-19-4"
ALERTS = "C0ALERTS"
STEP_TIMEOUT = 30.0


class StepFailed(Exception):
    pass


class Demo:
    """The story, step by step; each step waits (with a deadline) for its effect in the log or in Slack."""

    def __init__(self, server: DecklogServer, out: Callable[[str], None]) -> None:
        self.server = server
        self.store = server.runtime.store
        self.templates = server.runtime.reports
        assert server.sandbox is not None, "the demo runs against the sandbox workspace"
        self.fake = server.sandbox
        self.out = out
        self.started = time.monotonic()
        self.steps: list[str] = []

    # -- helpers ------------------------------------------------------------------------------------------------

    def say(self, clock: str, text: str) -> None:
        self.out(f"  {clock}  {text}")

    async def until(self, what: str, check: Callable[[], Awaitable[T | None]], timeout: float = STEP_TIMEOUT) -> T:
        deadline = time.monotonic() + timeout
        while True:
            try:
                value = await check()
            except NotFound:
                value = None
            if value:
                return value
            if time.monotonic() > deadline:
                raise StepFailed(f"timed out after {timeout:.0f}s waiting for {what}")
            await asyncio.sleep(0.05)

    async def kinds(self, scope: str, kind: str) -> list[Any]:
        return await self.store.read(scope, kinds=[kind])

    async def state(self, scope: str = SCOPE) -> ScopeState:
        return await self.store.get_state(scope)

    async def post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        token = self.server.settings.alert_token
        headers = {"Authorization": f"Bearer {token.get_secret_value() if token else ''}"}
        async with aiohttp.ClientSession() as http, http.post(self.server.url + path, json=body, headers=headers) as r:
            answer: dict[str, Any] = await r.json()
            if r.status >= 400:
                raise StepFailed(f"POST {path} answered {r.status}: {answer}")
            return answer

    def done(self, step: str) -> None:
        self.steps.append(step)

    # -- the story ---------------------------------------------------------------------------------------------

    async def run(self) -> None:
        t0 = datetime.now(UTC)
        self.out("The 03:12 story (time compressed: agent turns wait 0.3 s instead of 60 s)\n")
        await self._deploy(t0)
        thread_ts = await self._alert_fires(t0)
        await self._investigation()
        message = await self._proposal_parks(thread_ts)
        await self._approval_runs_the_rollback(message)
        await self._verification(t0)
        await self._resolution(thread_ts)
        await self._export(thread_ts)

    async def _deploy(self, t0: datetime) -> None:
        """03:04 — the deploy that will be suspected."""
        world = self.server.parts.world
        if world is not None:
            world.env.deploy.record_deploy("payments", "r2026-09-19-4", author="dev.kim")
        await self.post("/changes/generic", change(t0 - timedelta(minutes=8)))
        await self.until("the change scope", lambda: self.store.exists(CHANGE))
        self.say("03:04", f"deploy {CHANGE} of payments (touched config/payments/timeouts.yaml)")
        self.done("change recorded")

    async def _alert_fires(self, t0: datetime) -> str:
        """03:12 — the alert opens the incident and its thread; the change is linked. Returns the thread's ts."""
        answer = await self.post("/alerts/alertmanager?wait=30", alert("firing", t0))  # the answer names the incident
        if SCOPE not in answer.get("scopes", []):
            raise StepFailed(f"the alert did not open {SCOPE}: {answer}")
        header = await self.until("the incident's thread in #alerts", lambda: _threaded(self, SCOPE))
        thread_ts = header.thread.ts if header.thread else ""
        self.say("03:12", f"alert: elevated payments 5xx → {SCOPE} opened, thread in #alerts")
        self.done("incident opened by the alert")

        await self.until("the change linked to the incident", lambda: _linked(self))
        self.say("03:12", f"{CHANGE} linked to {SCOPE} (a change on the alerting service, minutes before)")
        self.done("change linked")
        return thread_ts

    async def _investigation(self) -> None:
        """The investigation turn: a hypothesis and the rollback obligation."""
        hypothesis = await self.until("the investigation turn's hypothesis", lambda: self.kinds(SCOPE, "hypothesis"))
        obligation = await self.until(
            "the rollback obligation",
            lambda: _rollback_obligation(self),
        )
        self.say("03:13", f"investigation turn: {hypothesis[0].payload.text}")
        self.say("03:13", f"obligation {obligation.obligation_id}: {obligation.text}")
        self.done("investigation turn")

    async def _proposal_parks(self, thread_ts: str) -> Any:
        """The action turn: a fresh turn proposes the rollback, which parks for approval. Returns its message."""
        proposal = await self.until("the parked rollback proposal", lambda: _parked(self))
        self.say(
            "03:14", f"action turn: proposed {proposal.payload.action} [{proposal.payload.risk}] → waiting for approval"
        )
        message = await self.until(
            "the proposal's Approve button in the thread",
            lambda: _approve_message(self, thread_ts, proposal.payload.proposal_id),
        )
        self.done("proposal parked")
        return message

    async def _approval_runs_the_rollback(self, message: Any) -> None:
        """03:16 — alice approves; the rollback runs under a fenced authority."""
        await self.fake.click_button("alice", ALERTS, message.ts, "proposal_approve")
        result = await self.until("the rollback's result", lambda: self.kinds(SCOPE, "action_result"))
        started = (await self.kinds(SCOPE, "action_started"))[0].payload
        if result[-1].payload.outcome != "applied":
            raise StepFailed(f"the rollback did not apply: {result[-1].payload.outcome} {result[-1].payload.error}")
        self.say("03:16", f"alice approved; run {started.run_id} applied {started.action} under fence {started.fence}")
        verification = await self.until("the verification obligation", lambda: _verification_obligation(self))
        self.say("03:16", f"obligation {verification.id}: {verification.text}")
        self.done("approved rollback ran")

    async def _verification(self, t0: datetime) -> None:
        """03:19 — the alert resolves; a fresh verification turn checks the expected outcome."""
        await self.post("/alerts/alertmanager?wait=30", alert("resolved", t0))
        verified = await self.until("the verification turn", lambda: self.kinds(SCOPE, "verification"))
        if verified[-1].payload.outcome != "verified":
            raise StepFailed(f"verification said {verified[-1].payload.outcome}: {verified[-1].payload.observed}")
        self.say("03:19", f"verification turn: {verified[-1].payload.outcome} — {verified[-1].payload.observed}")
        self.done("verified")

    async def _resolution(self, thread_ts: str) -> None:
        """03:21 — resolved (alice accepts the agent's suggestion to resolve)."""
        suggestion = await self.until("the suggestion to resolve", lambda: _resolve_suggestion(self, thread_ts))
        await self.fake.click_button("alice", ALERTS, suggestion.ts, "suggestion_accept")
        await self.until("the incident resolved", lambda: _resolved(self))
        self.say("03:21", "alice accepted the suggestion to resolve → resolved")
        self.done("resolved")

    async def _export(self, thread_ts: str) -> None:
        """The report, into the thread (the file copy is ``report_file``)."""
        await self.fake.post_message("alice", ALERTS, "@decklog export", thread_ts=thread_ts)
        await self.until("the report uploaded into the thread", lambda: _uploaded(self))
        self.done("report exported")

    async def report_file(self, directory: Path) -> tuple[Path, str]:
        from decklog.core.reports.export import record_export, render_report

        body, digest, fmt = await render_report(self.store, SCOPE, "md", templates=self.templates)
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / "incident-payments-5xx.md"
        path.write_bytes(body)
        await record_export(self.store, SCOPE, fmt, body, destination=str(path))
        return path, digest

    def conversation(self) -> list[str]:
        """#alerts as a person reads it: top-level messages, each incident thread under its header."""
        ws = self.fake.workspace
        lines: list[str] = []
        for msg in ws.history(ALERTS):
            lines.extend(render(ws, msg, indent=""))
            if getattr(msg, "reply_count", 0):
                for reply in ws.thread(ALERTS, msg.ts)[1:]:
                    lines.extend(render(ws, reply, indent="    │ "))
        return lines


# -- checks -------------------------------------------------------------------------------------------------------


async def _threaded(demo: Demo, scope: str) -> ScopeState | None:
    state = await demo.state(scope)
    return state if state.thread else None


async def _linked(demo: Demo) -> bool:
    return CHANGE in (await demo.state()).linked


async def _rollback_obligation(demo: Demo) -> Any:
    for entry in await demo.kinds(SCOPE, "obligation_opened"):
        if entry.payload.purpose == "rollback":
            return entry.payload
    return None


async def _parked(demo: Demo) -> Any:
    for entry in await demo.kinds(SCOPE, "proposal"):
        if entry.payload.status == "waiting_for_approval":
            return entry
    return None


async def _approve_message(demo: Demo, thread_ts: str, proposal_id: str) -> Any:
    for msg in demo.fake.workspace.thread(ALERTS, thread_ts):
        if proposal_id in str(msg.blocks) and "proposal_approve" in str(msg.blocks):
            return msg
    return None


async def _verification_obligation(demo: Demo) -> Any:
    for ob in (await demo.state()).obligations.values():
        if ob.purpose == "verification":
            return ob
    return None


async def _resolve_suggestion(demo: Demo, thread_ts: str) -> Any:
    state = await demo.state()
    if state.status == "resolved":
        return None
    wanted = {sid for sid, action in state.suggestion_actions.items() if action == "resolve"}
    for msg in demo.fake.workspace.thread(ALERTS, thread_ts):
        if any(sid in str(msg.blocks) for sid in wanted) and "suggestion_accept" in str(msg.blocks):
            return msg
    return None


async def _resolved(demo: Demo) -> bool:
    return (await demo.state()).status == "resolved"


async def _uploaded(demo: Demo) -> bool:
    return bool(demo.fake.workspace.files.all())  # an upload completed (files.completeUploadExternal answered ok)
