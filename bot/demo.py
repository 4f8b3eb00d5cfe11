"""``decklog demo``: the 03:12 story end to end, in one process, against the local fake Slack.

A deploy of payments touches its config; at 03:12 an alert on elevated payments 5xx opens ``incident/payments-5xx``;
the deploy ``change/r2026-09-19-4`` is linked; an investigation turn records the suspicion and the obligation
"roll back only if the recorded safety conditions hold", then ends; a fresh action turn proposes the rollback,
which parks; alice approves; the rollback runs under a fenced authority against the fake deploy service and
records "verification needed"; the alert resolves and a fresh verification turn checks the expected outcome;
alice accepts the suggestion to resolve; the report is exported. Everything goes through the product's own
doors — the HTTP receivers and signed Slack requests — and every step is checked in the log.

Time is compressed (agent turns wait a fraction of a second instead of a minute). The data directory is kept
and printed, so the scopes can be inspected and exported afterwards. Exit 0 only if every step happened.
"""

from __future__ import annotations

import asyncio
import re
import secrets
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

import aiohttp

from bot.config import DecklogConfig, load_config
from bot.server import DecklogServer
from bot.settings import Settings
from core.errors import NotFound
from core.state import ScopeState

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
        self.rt = server.runtime
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
        return await self.rt.store.read(scope, kinds=[kind])

    async def state(self, scope: str = SCOPE) -> ScopeState:
        return await self.rt.store.get_state(scope)

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

        # 03:04 — the deploy that will be suspected
        world = self.server.parts.world
        if world is not None:
            world.env.deploy.record_deploy("payments", "r2026-09-19-4", author="dev.kim")
        await self.post("/changes/generic", _change(t0 - timedelta(minutes=8)))
        await self.until("the change scope", lambda: self.rt.store.exists(CHANGE))
        self.say("03:04", f"deploy {CHANGE} of payments (touched config/payments/timeouts.yaml)")
        self.done("change recorded")

        # 03:12 — the alert
        answer = await self.post("/alerts/alertmanager", _alert("firing", t0))
        if SCOPE not in answer.get("scopes", []):
            raise StepFailed(f"the alert did not open {SCOPE}: {answer}")
        header = await self.until("the incident's thread in #alerts", lambda: _threaded(self, SCOPE))
        thread_ts = header.thread.ts if header.thread else ""
        self.say("03:12", f"alert: elevated payments 5xx → {SCOPE} opened, thread in #alerts")
        self.done("incident opened by the alert")

        await self.until("the change linked to the incident", lambda: _linked(self))
        self.say("03:12", f"{CHANGE} linked to {SCOPE} (a change on the alerting service, minutes before)")
        self.done("change linked")

        # the investigation turn
        hypothesis = await self.until("the investigation turn's hypothesis", lambda: self.kinds(SCOPE, "hypothesis"))
        obligation = await self.until(
            "the rollback obligation",
            lambda: _rollback_obligation(self),
        )
        self.say("03:13", f"investigation turn: {hypothesis[0].payload.text}")
        self.say("03:13", f"obligation {obligation.obligation_id}: {obligation.text}")
        self.done("investigation turn")

        # the action turn: a fresh turn proposes the rollback, which parks for approval
        proposal = await self.until("the parked rollback proposal", lambda: _parked(self))
        self.say(
            "03:14", f"action turn: proposed {proposal.payload.action} [{proposal.payload.risk}] → waiting for approval"
        )
        message = await self.until(
            "the proposal's Approve button in the thread",
            lambda: _approve_message(self, thread_ts, proposal.payload.proposal_id),
        )
        self.done("proposal parked")

        # 03:16 — alice approves; the rollback runs under a fenced authority
        await self.fake.click_button("alice", ALERTS, message.ts, "proposal_approve")
        result = await self.until("the rollback's result", lambda: self.kinds(SCOPE, "action_result"))
        started = (await self.kinds(SCOPE, "action_started"))[0].payload
        if result[-1].payload.outcome != "applied":
            raise StepFailed(f"the rollback did not apply: {result[-1].payload.outcome} {result[-1].payload.error}")
        self.say("03:16", f"alice approved; run {started.run_id} applied {started.action} under fence {started.fence}")
        verification = await self.until("the verification obligation", lambda: _verification_obligation(self))
        self.say("03:16", f"obligation {verification.id}: {verification.text}")
        self.done("approved rollback ran")

        # 03:19 — the alert resolves; a fresh verification turn checks the expected outcome
        await self.post("/alerts/alertmanager", _alert("resolved", t0))
        verified = await self.until("the verification turn", lambda: self.kinds(SCOPE, "verification"))
        if verified[-1].payload.outcome != "verified":
            raise StepFailed(f"verification said {verified[-1].payload.outcome}: {verified[-1].payload.observed}")
        self.say("03:19", f"verification turn: {verified[-1].payload.outcome} — {verified[-1].payload.observed}")
        self.done("verified")

        # 03:21 — resolved (alice accepts the agent's suggestion to resolve)
        suggestion = await self.until("the suggestion to resolve", lambda: _resolve_suggestion(self, thread_ts))
        await self.fake.click_button("alice", ALERTS, suggestion.ts, "suggestion_accept")
        await self.until("the incident resolved", lambda: _resolved(self))
        self.say("03:21", "alice accepted the suggestion to resolve → resolved")
        self.done("resolved")

        # the report, into the thread and into a file
        await self.fake.post_message("alice", ALERTS, "@decklog export", thread_ts=thread_ts)
        await self.until("the report uploaded into the thread", lambda: _uploaded(self))
        self.done("report exported")

    async def report_file(self, directory: Path) -> tuple[Path, str]:
        from bot.reports import record_export, render_report

        body, digest, fmt = await render_report(self.rt.store, SCOPE, "md", templates=self.rt.reports)
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / "incident-payments-5xx.md"
        path.write_bytes(body)
        await record_export(self.rt.store, SCOPE, fmt, body, destination=str(path))
        return path, digest

    def conversation(self) -> list[str]:
        """#alerts as a person reads it: top-level messages, each incident thread under its header."""
        ws = self.fake.workspace
        lines: list[str] = []
        for msg in ws.history(ALERTS):
            lines.extend(_render(ws, msg, indent=""))
            if getattr(msg, "reply_count", 0):
                for reply in ws.thread(ALERTS, msg.ts)[1:]:
                    lines.extend(_render(ws, reply, indent="    │ "))
        return lines


# -- what the story sends -----------------------------------------------------------------------------------------


def _iso(at: datetime) -> str:
    return at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _change(at: datetime) -> dict[str, Any]:
    return {
        "id": "r2026-09-19-4",
        "service": "payments",
        "version": "r2026-09-19-4",
        "environment": "production",
        "author": "dev.kim",
        "status": "succeeded",
        "description": "Lower PSP connect timeout to 800ms",
        "link": "https://ci.example.com/pipelines/payments/8841",
        "at": _iso(at),
        "commits": [
            {
                "id": "9f1c2ab",
                "message": "Lower PSP connect timeout to 800ms",
                "author": "dev.kim",
                "paths": ["config/payments/timeouts.yaml"],
            }
        ],
    }


def _alert(status: str, started: datetime) -> dict[str, Any]:
    labels = {"alertname": "Payments5xx", "service": "payments", "severity": "critical", "env": "prod"}
    annotations = {
        "summary": "Payments 5xx",
        "description": "12.4% of POST /v1/charges returned 5xx over 5 minutes (SLO 0.5%)",
    }
    return {
        "version": "4",
        "receiver": "decklog",
        "status": status,
        "groupKey": '{}:{alertname="Payments5xx"}',
        "groupLabels": {"alertname": "Payments5xx"},
        "commonLabels": labels,
        "commonAnnotations": annotations,
        "externalURL": "https://alertmanager.example.com",
        "alerts": [
            {
                "status": status,
                "labels": labels,
                "annotations": annotations,
                "startsAt": _iso(started),
                "endsAt": _iso(datetime.now(UTC)) if status == "resolved" else "0001-01-01T00:00:00Z",
                "generatorURL": "https://prometheus.example.com/graph?g0.expr=payments_5xx_ratio",
                "fingerprint": "demo-payments-5xx",
            }
        ],
    }


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
    return bool(demo.fake.server.calls_to("files.completeUploadExternal", ok=True))


# -- printing Slack as a person reads it ------------------------------------------------------------------------


def _plain(ws: Any, text: str) -> str:
    def user(m: re.Match[str]) -> str:
        try:
            return "@" + str(ws.user(m.group(1)).name)
        except Exception:
            return "@" + m.group(1)

    text = re.sub(r"<@([UW][A-Z0-9]+)(?:\|[^>]*)?>", user, text)
    text = re.sub(r"<#([CG][A-Z0-9]+)(?:\|([^>]*))?>", lambda m: "#" + (m.group(2) or m.group(1)), text)
    text = re.sub(r"<!date\^\d+\^[^|]*\|([^>]*)>", r"\1", text)
    text = re.sub(r"<(https?://[^|>]+)\|([^>]+)>", r"\2", text)
    text = re.sub(r"<(https?://[^>]+)>", r"\1", text)
    return text.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")


def _block_text(ws: Any, blocks: list[dict[str, Any]]) -> list[str]:
    out: list[str] = []
    for block in blocks or []:
        kind = block.get("type")
        if kind in ("header", "section") and block.get("text"):
            out.append(_plain(ws, block["text"].get("text", "")))
        if kind == "section" and block.get("fields"):
            out.append(" · ".join(_plain(ws, f.get("text", "")).replace("\n", " ") for f in block["fields"]))
        if kind == "context":
            out.append(" ".join(_plain(ws, e.get("text", "")) for e in block.get("elements", []) if e.get("text")))
        if kind == "actions":
            labels = [e.get("text", {}).get("text", "") for e in block.get("elements", []) if e.get("type") == "button"]
            if labels:
                out.append("[" + "] [".join(labels) + "]")
    return [line for line in out if line.strip()]


def _render(ws: Any, msg: Any, *, indent: str) -> list[str]:
    when = datetime.fromtimestamp(float(msg.ts), UTC).strftime("%H:%M:%S")
    who = "decklog" if getattr(msg, "bot_id", None) else _who(ws, msg)
    body = (_block_text(ws, msg.blocks) if msg.blocks else []) or [_plain(ws, msg.text)]
    body = [part for line in body for part in line.split("\n")]
    if getattr(msg, "files", None):
        body.append("📎 " + ", ".join(getattr(f, "name", "file") for f in msg.files))
    reactions = getattr(msg, "reactions", None) or {}
    if reactions:
        body.append(" ".join(f":{name}: {len(users)}" for name, users in reactions.items()))
    lines = [f"{indent}{when} {who}: {body[0] if body else ''}"]
    lines.extend(f"{indent}{' ' * 9}{' ' * len(who)}  {line}" for line in body[1:])
    return lines


def _who(ws: Any, msg: Any) -> str:
    try:
        return str(ws.user(msg.user).name)
    except Exception:
        return str(msg.user or "someone")


# -- entry point --------------------------------------------------------------------------------------------------


def demo_settings(settings: Settings, data_dir: Path) -> Settings:
    """The operator's settings, in the local sandbox, with the story's timing and a fresh alert token."""
    values = settings.model_dump()
    values.update(
        data_dir=data_dir,
        host="127.0.0.1",
        port=0,
        slack_bot_token=None,
        slack_signing_secret=None,
        slack_app_token=None,
        slack_api_url=None,
        anthropic_api_key=None,
        deploy_api_url=None,
        statuspage_api_url=None,
        alert_token=secrets.token_hex(16),
        first_turn_delay=0.3,
        turn_debounce=0.3,
    )
    return Settings.model_validate(values)


def demo_config(settings: Settings) -> DecklogConfig:
    data = load_config(settings.resolved_config_path).model_dump()
    data["slack"].update(pace_per_channel_s=0.05, header_update_interval_s=0.2)
    return DecklogConfig.model_validate(data)


async def run_demo(settings: Settings, *, data_dir: Path | None = None) -> int:
    directory = Path(data_dir) if data_dir else Path(tempfile.mkdtemp(prefix="decklog-demo-"))
    directory.mkdir(parents=True, exist_ok=True)
    if any((directory / "scopes").glob("incident~payments-5xx*.db")):
        print(f"decklog: error: {directory} already holds a demo; give a new --data-dir", file=sys.stderr)
        return 1
    demo_env = demo_settings(settings, directory)
    server = DecklogServer(demo_env, config=demo_config(demo_env))
    await server.start()
    demo = Demo(server, print)
    ok = True
    try:
        await demo.run()
        path, digest = await demo.report_file(directory / "reports")
    except StepFailed as exc:
        ok = False
        print(
            f"\ndecklog demo: FAILED after {len(demo.steps)} steps ({', '.join(demo.steps) or 'none'}): {exc}",
            file=sys.stderr,
        )
    finally:
        conversation = demo.conversation()
        await server.stop()
    print("\n#alerts, as a person reads it:\n")
    print("\n".join(conversation))
    if not ok:
        print(f"\ndata directory (kept): {directory}")
        return 1
    print(f"\nevery step happened: {', '.join(demo.steps)}")
    print(f"report: {path} (sha256 {digest})")
    print(f"data directory (kept): {directory}")
    print(f"try: DECKLOG_DATA_DIR={directory} decklog timeline {SCOPE}")
    return 0
