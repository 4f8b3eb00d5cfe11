"""One lab world: the shop, Prometheus and Alertmanager, and ``decklog serve`` pointed at them, plus the deployer
and the fault injector that change the shop during a run.

Layout of a world's directory (``<out>/runs/<run>/``):

- ``agent/`` — everything decklog is handed: its data directory, its ``decklog.toml`` (the lab's catalog actions,
  whose ``http`` executors call the shop's control API), the Backstage ``catalog-info.yaml``, and ``env.json``
  (the environment it was started with). Nothing in it comes from a scenario's ``expect`` or a source's ground
  truth; ``tests/research/test_lab.py`` greps it.
- ``monitoring/`` — Prometheus's and Alertmanager's configuration, data and logs.
- ``shop.log``, ``decklog.log`` — the processes' output.

The deployer reports every rollout to decklog's change receiver (``POST /changes/generic``), as a CD system would:
the shop's versions at start (dated a day earlier, outside decklog's change window), the faults that are changes
(a bad deploy, a config push, a flag flip) and the decoys — in the same words, so a change's report never says
whether it was a fault.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import secrets
import subprocess
import sys
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp

from research.lab import monitoring
from research.lab.graph import FLAGS, SERVICES, write_catalog
from research.lab.scenario import Step

ROOT = Path(__file__).resolve().parents[2]
PERSON = "U0ALICE"  # the sandbox workspace's first person: the lab's scripted on-call engineer
ALERTS_CHANNEL = "C0ALERTS"
TURN_DELAYS = {"DECKLOG_FIRST_TURN_DELAY": "2", "DECKLOG_TURN_DEBOUNCE": "1", "DECKLOG_TURN_MAX_WAIT": "4"}

#: The lab's catalog actions: (name, description, risk, safety conditions, params).
LAB_ACTIONS: tuple[tuple[str, str, str, tuple[str, ...], tuple[str, ...]], ...] = (
    (
        "rollback_deploy",
        "Roll a service back to its previous version",
        "R2",
        ("alert_still_firing", "change_is_latest_on_service", "no_other_run_in_flight", "not_run_in_related_incident"),
        ("service", "change"),
    ),
    (
        "revert_config",
        "Revert a service's last config push",
        "R2",
        ("no_other_run_in_flight", "not_run_in_related_incident"),
        ("service", "change"),
    ),
    ("restart", "Restart a service's processes", "R2", ("no_other_run_in_flight",), ("service",)),
    ("scale_up", "Add two replicas to a service", "R2", ("no_other_run_in_flight",), ("service",)),
    (
        "flag_off",
        "Turn a feature flag off",
        "R2",
        ("no_other_run_in_flight", "not_run_in_related_incident"),
        ("service", "flag"),
    ),
)


def decklog_config(control_url: str) -> str:
    """The shipped example's settings without its actions and with no Slack pacing, plus the lab's actions."""
    text = (ROOT / "bot" / "decklog.example.toml").read_text()
    text = text.split("# --- actions", 1)[0]
    text = re.sub(r"(?m)^pace_per_channel_s = .*$", "pace_per_channel_s = 0.0", text)
    text = re.sub(r"(?m)^header_update_interval_s = .*$", "header_update_interval_s = 0.0", text)
    text = re.sub(r"(?m)^status_action = .*$", 'status_action = ""', text)
    parts = [text, "# --- the lab's actions: the shop's control API -------------------------------------------\n"]
    for name, description, risk, conditions, params in LAB_ACTIONS:
        parts.append(
            f'[[actions]]\nname = "{name}"\ndescription = "{description}"\nrisk = "{risk}"\n'
            f"safety_conditions = {json.dumps(list(conditions))}\n"
            f'expected_outcome = "the alerts on {{service}} resolve"\nverify = "alerts_resolved"\n'
            "verify_within_minutes = 2\n"
        )
        for param in params:
            required = "true" if param == "service" else "false"
            pattern = {"service": "[a-z0-9][a-z0-9._-]*", "change": "change/[A-Za-z0-9][A-Za-z0-9._-]*"}.get(param)
            parts.append(
                f'[actions.params.{param}]\ntype = "string"\nrequired = {required}\n'
                + (f'pattern = "{pattern}"\n' if pattern else "")
            )
        parts.append(
            f'[actions.executor]\ntype = "http"\nurl = "{control_url}/actions/{name}"\n'
            f'reconcile_url = "{control_url}/reconcile"\ntimeout_s = 5\n\n'
        )
    return "\n".join(parts)


@dataclass
class Change:
    """A change the deployer reported (the judge's record: which step it came from)."""

    id: str
    service: str
    at: float  # wall time
    what: str  # deploy | config | flag
    origin: str  # "fault:<i>", "decoy:<i>" or "baseline"

    @property
    def scope(self) -> str:
        return f"change/{self.id}"


@dataclass
class World:
    directory: Path
    seed: int
    shop: subprocess.Popen[str] | None = None
    ports: dict[str, Any] = field(default_factory=dict)
    alertmanager: monitoring.Process | None = None
    prometheus: monitoring.Process | None = None
    decklog: subprocess.Popen[str] | None = None
    decklog_url: str = ""
    token: str = field(default_factory=lambda: secrets.token_urlsafe(16))
    changes: list[Change] = field(default_factory=list)
    injected: list[dict[str, Any]] = field(default_factory=list)  # {"step", "id", "at", "service"}
    http: aiohttp.ClientSession | None = None
    _prefix: str = field(default_factory=lambda: secrets.token_hex(2))
    _versions: dict[str, int] = field(default_factory=dict)

    @property
    def agent_dir(self) -> Path:
        return self.directory / "agent"

    @property
    def lab_url(self) -> str:
        return f"http://127.0.0.1:{self.ports['lab']}"

    @property
    def control_url(self) -> str:
        return f"http://127.0.0.1:{self.ports['control']}"

    # -- start and stop -------------------------------------------------------------------------------------

    async def start(self) -> None:
        self.agent_dir.mkdir(parents=True, exist_ok=True)
        self.http = aiohttp.ClientSession()
        self.shop = await asyncio.to_thread(
            subprocess.Popen,
            [sys.executable, "-m", "research.lab.shop", "--seed", str(self.seed)],
            stdout=subprocess.PIPE,
            stderr=(self.directory / "shop.log").open("w"),
            text=True,
            cwd=ROOT,
        )
        assert self.shop.stdout is not None
        line = await asyncio.to_thread(self.shop.stdout.readline)
        if not line.strip():
            raise RuntimeError(f"the shop did not start: {(self.directory / 'shop.log').read_text()[-2000:]}")
        self.ports = json.loads(line)
        decklog_port = monitoring.free_port()
        self.decklog_url = f"http://127.0.0.1:{decklog_port}"
        mon = self.directory / "monitoring"
        self.alertmanager = await monitoring.start_alertmanager(mon, self.decklog_url, self.token)
        self.prometheus = await monitoring.start_prometheus(mon, self.ports["services"], self.alertmanager)
        catalog = write_catalog(self.agent_dir / "catalog-info.yaml")
        config = self.agent_dir / "decklog.toml"
        config.write_text(decklog_config(self.control_url))
        env = {
            "DECKLOG_DATA_DIR": str(self.agent_dir / "data"),
            "DECKLOG_CONFIG": str(config),
            "DECKLOG_HOST": "127.0.0.1",
            "DECKLOG_PORT": str(decklog_port),
            "DECKLOG_ALERT_TOKEN": self.token,
            "DECKLOG_APPROVERS": PERSON,
            "DECKLOG_CATALOG": str(catalog),
            "DECKLOG_PROMETHEUS_URL": self.prometheus.url,
            "DECKLOG_ALERTMANAGER_URL": self.alertmanager.url,
            "DECKLOG_LOG_LEVEL": "WARNING",
            **TURN_DELAYS,
        }
        (self.agent_dir / "env.json").write_text(json.dumps(env, indent=1))
        base = {k: v for k, v in os.environ.items() if not k.startswith(("DECKLOG_", "SLACK_", "ANTHROPIC_"))}
        self.decklog = await asyncio.to_thread(
            subprocess.Popen,
            [sys.executable, "-m", "decklog.bot.cli", "serve"],
            env={**base, "PYTHONPATH": str(ROOT), **env},
            stdout=subprocess.PIPE,
            stderr=(self.directory / "decklog.log").open("w"),
            text=True,
            cwd=ROOT,
        )
        assert self.decklog.stdout is not None
        line = await asyncio.wait_for(asyncio.to_thread(self.decklog.stdout.readline), 120)
        if "serving on" not in line:
            raise RuntimeError(f"decklog serve did not start: {(self.directory / 'decklog.log').read_text()[-2000:]}")
        stdout = self.decklog.stdout
        asyncio.get_running_loop().run_in_executor(None, lambda: [None for _ in stdout])  # keep the pipe drained
        yesterday = time.time() - 86400
        for service in SERVICES:  # what runs now, rolled out yesterday
            await self._report(service, "v1.0.0", "deploy", "baseline", at=yesterday)

    async def stop(self) -> None:
        for proc in (self.decklog, self.shop):
            if proc is not None and proc.poll() is None:
                proc.terminate()
                try:
                    await asyncio.to_thread(proc.wait, 20)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    await asyncio.to_thread(proc.wait)
        for mon in (self.prometheus, self.alertmanager):
            if mon is not None:
                await asyncio.to_thread(mon.stop)
        if self.http is not None:
            await self.http.close()

    # -- the deployer ---------------------------------------------------------------------------------------

    def _next_version(self, service: str) -> str:
        n = self._versions[service] = self._versions.get(service, 0) + 1
        return f"v1.{n}.0"

    async def _report(
        self, service: str, version: str, what: str, origin: str, *, at: float | None = None, flag: str = ""
    ) -> Change:
        when = at if at is not None else time.time()
        change = Change(f"{self._prefix}-{len(self.changes) + 1:03d}", service, when, what, origin)
        words = {"deploy": f"Deploy {service} {version}", "config": f"Config push to {service} ({version})"}
        body = {
            "id": change.id,
            "service": service,
            "version": version,
            "environment": "production",
            "author": "cd-bot",
            "status": "succeeded",
            "kind": what,  # deploy | config | flag: what a CD system or a flag service knows it changed
            **({"flag": flag} if flag else {}),
            "description": words.get(what, f"Feature flag change on {service} ({version})"),
            "at": datetime.fromtimestamp(when, UTC).isoformat().replace("+00:00", "Z"),
        }
        await self._post(self.decklog_url + "/changes/generic", body, auth=True)
        self.changes.append(change)
        return change

    async def _post(self, url: str, body: dict[str, Any], *, auth: bool = False) -> dict[str, Any]:
        assert self.http is not None
        headers = {"Authorization": f"Bearer {self.token}"} if auth else {}
        async with self.http.post(url, json=body, headers=headers) as response:
            text = await response.text()
            if response.status >= 300:
                raise RuntimeError(f"POST {url} answered {response.status}: {text}")
            return json.loads(text) if text else {}

    async def decoy(self, index: int, step: Step) -> None:
        if step.kind == "deploy":
            version = str(step.params.get("version") or self._next_version(step.target))
            await self._post(self.lab_url + "/deploy", {"service": step.target, "version": version})
            await self._report(step.target, version, "deploy", f"decoy:{index}")
        else:
            key = str(step.params.get("key", "settings"))
            await self._report(step.target, f"config {key}", "config", f"decoy:{index}")

    # -- the fault injector ---------------------------------------------------------------------------------

    async def inject(self, index: int, step: Step) -> None:
        params = dict(step.params)
        until = params.pop("until", None)
        service = FLAGS[str(params["flag"])][0] if step.kind == "flag_on" else step.target
        if step.kind == "bad_deploy":
            params["version"] = str(params.get("version") or self._next_version(service))
        answer = await self._post(self.lab_url + "/faults", {"kind": step.kind, "target": service, "params": params})
        record = {"step": index, "id": answer["id"], "at": time.time(), "service": service, "kind": step.kind}
        self.injected.append(record)
        if step.kind == "bad_deploy":
            record["change"] = (await self._report(service, params["version"], "deploy", f"fault:{index}")).scope
        elif step.kind == "config_change":
            key = str(params.get("key", "settings"))
            record["change"] = (await self._report(service, f"config {key}", "config", f"fault:{index}")).scope
        elif step.kind == "flag_on":
            flag = str(params["flag"])
            change = await self._report(service, f"flag {flag} on", "flag", f"fault:{index}", flag=flag)
            record["change"] = change.scope
        if until is not None:
            asyncio.get_running_loop().call_later(float(until), lambda: asyncio.ensure_future(self._end(answer["id"])))

    async def _end(self, fault_id: str) -> None:
        assert self.http is not None
        with contextlib.suppress(aiohttp.ClientError):
            async with self.http.delete(f"{self.lab_url}/faults/{fault_id}") as response:
                await response.read()

    async def shop_state(self) -> dict[str, Any]:
        assert self.http is not None
        async with self.http.get(self.lab_url + "/state") as response:
            state: dict[str, Any] = await response.json()
            return state

    async def get(self, path: str, **params: str) -> Any:
        assert self.http is not None
        async with self.http.get(self.decklog_url + path, params=params) as response:
            response.raise_for_status()
            return await response.json()
