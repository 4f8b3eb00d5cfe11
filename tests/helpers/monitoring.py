"""Real monitoring for the tests (DESIGN §10): Debian's ``prometheus-alertmanager`` and ``prometheus``, started on
free loopback ports with short intervals, pointed at a decklog server the test started.

>>> binary = require_binary(ALERTMANAGER)   # a missing one: skip with the reason, or FAIL under CI=true
>>> am = await Alertmanager.start(tmp_path, webhook(server.url, TOKEN, max_alerts=500))   # doctest: +SKIP
>>> await am.post_alerts([firing("HighErrorRate", instance="a")])                        # doctest: +SKIP
>>> await am.stop()                                                                       # doctest: +SKIP

Alertmanager gets one route (``group_by``, ``group_wait``/``group_interval`` of a second) to one webhook receiver,
``<decklog>/alerts/alertmanager`` with ``Authorization: Bearer <token>`` and ``send_resolved``; clustering is off.
Alerts are posted to its ``/api/v2/alerts`` as Prometheus would post them; an alert with ``endsAt`` in the past is
a resolve. A notification is sent at most ``max(group_interval, 10 s)`` after its flush began (Alertmanager's own
minimum notification timeout): a decklog that answers later sees the same notification again.

Prometheus (for the issues that look at real metrics) gets a scrape and an evaluation interval of one second (and
resends firing alerts every second: its first send can come before it has discovered the Alertmanager), its rule
files and, optionally, that Alertmanager. The configuration files are JSON (a subset of YAML, which both
read). Each process's output goes to a log file beside its data; ``log_tail()`` is for failure messages.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import quote

import aiohttp
import pytest

ALERTMANAGER = "prometheus-alertmanager"
PROMETHEUS = "prometheus"
#: Where Debian installs them, when they are not on PATH.
DEBIAN_PATHS = {ALERTMANAGER: "/usr/bin/prometheus-alertmanager", PROMETHEUS: "/usr/bin/prometheus"}
START_TIMEOUT = 30.0  # s: until /-/ready answers 200


def find_binary(name: str) -> str | None:
    """The binary's path, or None when it is not installed."""
    found = shutil.which(name)
    if found:
        return found
    path = DEBIAN_PATHS.get(name, "")
    return path if path and os.access(path, os.X_OK) else None


def require_binary(name: str) -> str:
    """The binary's path. Missing: the test skips with how to install it, except under ``CI=true``, where it
    fails (``make test`` installs it through the ``monitoring`` target)."""
    found = find_binary(name)
    if found:
        return found
    package = "prometheus-alertmanager" if name == ALERTMANAGER else "prometheus"
    reason = f"{name} is not installed: `make monitoring` (or apt-get install {package}) installs Debian's"
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"{reason}; it is required under CI=true", pytrace=False)
    pytest.skip(reason)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def iso(at: datetime) -> str:
    return at.astimezone(UTC).isoformat().replace("+00:00", "Z")


# -- alerts as Prometheus posts them ----------------------------------------------------------------------------


def firing(
    alertname: str,
    *,
    annotations: Mapping[str, str] | None = None,
    starts_at: datetime | None = None,
    generator_url: str = "",
    **labels: str,
) -> dict[str, Any]:
    """One alert for ``/api/v2/alerts`` (``postableAlert``), firing: no ``endsAt``. Label names that are not Python
    identifiers go through ``labels={...}`` merged by the caller."""
    alert: dict[str, Any] = {"labels": {"alertname": alertname, **labels}, "annotations": dict(annotations or {})}
    alert["startsAt"] = iso(starts_at or datetime.now(UTC))
    if generator_url:
        alert["generatorURL"] = generator_url
    return alert


def kube_alert(n: int, alertname: str = "KubePodCrashLooping", **labels: str) -> dict[str, Any]:
    """The ``n``-th of a fleet's alerts with a label set and annotations as kube-prometheus' rules make them (about
    1 KB each in a webhook notification: 10,000 of them are a notification of about 10 MB)."""
    pod = f"checkout-api-{n:05d}-7d9c8b6f5-x2kqz"
    namespace = f"team-{n % 17}"
    base = {
        "severity": "critical",
        "namespace": namespace,
        "pod": pod,
        "container": "checkout-api",
        "instance": f"10.{n // 65536 % 256}.{n // 256 % 256}.{n % 256}:8080",
        "job": "kube-state-metrics",
        "endpoint": "http",
        "prometheus": "monitoring/k8s",
        "cluster": "prod-eu-west-1",
        "region": "eu-west-1",
        "team": "payments",
        "service": "checkout-api",
        "uid": f"3f1c{n:08x}-9a2b-4c1d-8e7f-0a1b2c3d4e5f",
    }
    expr = (
        'max_over_time(kube_pod_container_status_waiting_reason{reason="CrashLoopBackOff",'
        'job="kube-state-metrics",namespace=~".*"}[5m]) >= 1'
    )
    annotations = {
        "summary": "Pod is crash looping.",
        "description": f'Pod {namespace}/{pod} (checkout-api) is in waiting state (reason: "CrashLoopBackOff").',
        "runbook_url": "https://runbooks.prometheus-operator.dev/runbooks/kubernetes/kubepodcrashlooping",
    }
    generator = "http://prometheus-k8s-0:9090/graph?g0.expr=" + quote(expr) + "&g0.tab=1"
    return firing(alertname, annotations=annotations, generator_url=generator, **{**base, **labels})


def resolved(alert: Mapping[str, Any], *, ended: datetime | None = None) -> dict[str, Any]:
    """The same alert, resolved: ``endsAt`` in the past (Alertmanager marks it resolved at once)."""
    return {**alert, "endsAt": iso(ended or datetime.now(UTC) - timedelta(seconds=1))}


# -- configuration ----------------------------------------------------------------------------------------------


def webhook(
    decklog_url: str,
    token: str,
    *,
    group_by: Sequence[str] = ("alertname",),
    group_wait: str = "1s",
    group_interval: str = "1s",
    repeat_interval: str = "1h",
    max_alerts: int = 0,
    send_resolved: bool = True,
    path: str = "/alerts/alertmanager",
) -> dict[str, Any]:
    """An Alertmanager configuration: every alert to decklog's webhook receiver (``max_alerts`` 0 = all)."""
    receiver: dict[str, Any] = {
        "url": decklog_url.rstrip("/") + path,
        "send_resolved": send_resolved,
        "http_config": {"authorization": {"type": "Bearer", "credentials": token}},
    }
    if max_alerts:
        receiver["max_alerts"] = max_alerts
    return {
        "route": {
            "receiver": "decklog",
            "group_by": list(group_by),
            "group_wait": group_wait,
            "group_interval": group_interval,
            "repeat_interval": repeat_interval,
        },
        "receivers": [{"name": "decklog", "webhook_configs": [receiver]}],
    }


# -- processes --------------------------------------------------------------------------------------------------


@dataclass
class Process:
    """A monitoring process on ``port``; ``url`` is its base URL."""

    name: str
    proc: subprocess.Popen[bytes]
    port: int
    log: Path
    directory: Path
    _stopped: bool = field(default=False, repr=False)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def log_tail(self, lines: int = 40) -> str:
        with contextlib.suppress(OSError):
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        return ""

    async def wait_ready(self, timeout: float = START_TIMEOUT) -> None:
        """Poll ``/-/ready`` until it answers 200 (fail with the log's tail at the deadline or if it exits)."""
        deadline = time.monotonic() + timeout
        async with aiohttp.ClientSession() as http:
            while True:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"{self.name} exited with {self.proc.returncode}:\n{self.log_tail()}")
                with contextlib.suppress(aiohttp.ClientError, OSError):
                    async with http.get(self.url + "/-/ready") as response:
                        if response.status == 200:
                            return
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{self.name} was not ready after {timeout}s:\n{self.log_tail()}")
                await asyncio.sleep(0.05)

    async def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM, then SIGKILL if it has not exited within ``timeout``."""
        if self._stopped:
            return
        self._stopped = True
        with contextlib.suppress(ProcessLookupError):
            self.proc.terminate()
        try:
            await asyncio.to_thread(self.proc.wait, timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                self.proc.kill()
            await asyncio.to_thread(self.proc.wait)

    async def get_json(self, path: str, **params: str) -> Any:
        async with aiohttp.ClientSession() as http, http.get(self.url + path, params=params) as response:
            response.raise_for_status()
            return await response.json()


def _spawn(name: str, argv: list[str], directory: Path, port: int) -> Process:
    log = directory / f"{name}.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=directory)
    return Process(name, proc, port, log, directory)


class Alertmanager(Process):
    """``await Alertmanager.start(directory, config)``: a real Alertmanager, ready to take alerts."""

    @classmethod
    async def start(cls, directory: Path, config: Mapping[str, Any], *, binary: str | None = None) -> Alertmanager:
        binary = binary or require_binary(ALERTMANAGER)
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "alertmanager.yml").write_text(json.dumps(config, indent=1))
        port = free_port()
        argv = [
            binary,
            f"--config.file={directory / 'alertmanager.yml'}",
            f"--storage.path={directory / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
            f"--web.external-url=http://127.0.0.1:{port}",
            "--cluster.listen-address=",  # one instance: no gossip, no settling
            "--log.level=debug",
        ]
        spawned = _spawn("alertmanager", argv, directory, port)
        am = cls(spawned.name, spawned.proc, spawned.port, spawned.log, spawned.directory)
        try:
            await am.wait_ready()
        except BaseException:
            await am.stop()
            raise
        return am

    async def post_alerts(self, alerts: Sequence[Mapping[str, Any]]) -> None:
        """``POST /api/v2/alerts`` (as Prometheus does); raises unless Alertmanager answers 200."""
        async with (
            aiohttp.ClientSession() as http,
            http.post(self.url + "/api/v2/alerts", json=list(alerts)) as response,
        ):
            if response.status != 200:
                raise AssertionError(f"Alertmanager answered {response.status}: {await response.text()}")

    async def alerts(self, **filters: str) -> list[dict[str, Any]]:
        """``GET /api/v2/alerts``: the alerts it holds (active, silenced, inhibited, unprocessed)."""
        found: list[dict[str, Any]] = await self.get_json("/api/v2/alerts", **filters)
        return found


class Prometheus(Process):
    """``await Prometheus.start(directory, rules=..., alertmanager=am, scrape=[...])``: a real Prometheus that
    scrapes and evaluates every second."""

    @classmethod
    async def start(
        cls,
        directory: Path,
        *,
        rules: Mapping[str, Any] | None = None,
        alertmanager: Process | None = None,
        scrape: Sequence[Mapping[str, Any]] = (),
        interval: str = "1s",
        binary: str | None = None,
    ) -> Prometheus:
        """``rules``: a rule file's content (``{"groups": [...]}``); ``scrape``: ``scrape_configs`` entries."""
        binary = binary or require_binary(PROMETHEUS)
        directory.mkdir(parents=True, exist_ok=True)
        port = free_port()
        config: dict[str, Any] = {
            "global": {"scrape_interval": interval, "evaluation_interval": interval},
            "scrape_configs": [
                {"job_name": "prometheus", "static_configs": [{"targets": [f"127.0.0.1:{port}"]}]},
                *scrape,
            ],
        }
        if rules is not None:
            (directory / "rules.yml").write_text(json.dumps(rules, indent=1))
            config["rule_files"] = [str(directory / "rules.yml")]
        if alertmanager is not None:
            config["alerting"] = {
                "alertmanagers": [{"static_configs": [{"targets": [f"127.0.0.1:{alertmanager.port}"]}]}]
            }
        (directory / "prometheus.yml").write_text(json.dumps(config, indent=1))
        argv = [
            binary,
            f"--config.file={directory / 'prometheus.yml'}",
            f"--storage.tsdb.path={directory / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{port}",
            f"--web.external-url=http://127.0.0.1:{port}",
            "--web.enable-lifecycle",
            # Firing alerts are sent again this often (default 1m): the first send can come before the Alertmanager
            # is discovered, and is then dropped.
            f"--rules.alert.resend-delay={interval}",
        ]
        spawned = _spawn("prometheus", argv, directory, port)
        prom = cls(spawned.name, spawned.proc, spawned.port, spawned.log, spawned.directory)
        try:
            await prom.wait_ready()
        except BaseException:
            await prom.stop()
            raise
        return prom

    async def query(self, expr: str) -> list[dict[str, Any]]:
        """An instant query (``/api/v1/query``): the result vector."""
        answer = await self.get_json("/api/v1/query", query=expr)
        result: list[dict[str, Any]] = answer["data"]["result"]
        return result

    async def firing_alerts(self) -> list[dict[str, Any]]:
        """``/api/v1/alerts``: the alerts its rules hold (pending and firing)."""
        answer = await self.get_json("/api/v1/alerts")
        alerts: list[dict[str, Any]] = answer["data"]["alerts"]
        return alerts
