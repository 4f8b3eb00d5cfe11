"""The lab's monitoring stack: Debian's ``prometheus`` and ``prometheus-alertmanager`` as subprocesses on free
loopback ports, with the shop's scrape targets, the alert rules and one webhook receiver (decklog's
``/alerts/alertmanager``).

Time is compressed: one-second scrapes and evaluations, rates over ten seconds, ``for:`` of two seconds, and
Alertmanager's ``group_wait`` / ``group_interval`` of one second. Each alert carries the ``service`` label of
the target it fired on; nothing here knows which fault is injected.

The binaries are found on PATH or where Debian installs them; a missing one is :class:`MissingBinary`, which
``make monitoring`` (or ``apt-get install prometheus prometheus-alertmanager``) fixes.
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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp

ALERTMANAGER = "prometheus-alertmanager"
PROMETHEUS = "prometheus"
RATE = "10s"
FOR = "2s"

#: (alert name, PromQL by service, severity, summary)
RULES: tuple[tuple[str, str, str, str], ...] = (
    (
        "HighErrorRate",
        f'sum by (service) (rate(http_requests_total{{code=~"5.."}}[{RATE}])) '
        f"/ sum by (service) (rate(http_requests_total[{RATE}])) > 0.1",
        "critical",
        "More than 10% of {{ $labels.service }}'s requests fail",
    ),
    (
        "HighLatency",
        f"histogram_quantile(0.9, sum by (service, le) (rate(http_request_duration_seconds_bucket[{RATE}]))) > 0.6",
        "warning",
        "{{ $labels.service }}'s p90 latency is above 600 ms",
    ),
    ("ServiceDown", 'up{job="shop"} == 0', "critical", "{{ $labels.service }} does not answer its scrape"),
    (
        "HighCPU",
        f'rate(process_cpu_seconds_total{{job="shop"}}[{RATE}]) > 0.8',
        "warning",
        "{{ $labels.service }} uses more than 80% of a CPU",
    ),
    (
        "HighMemory",
        'process_resident_memory_bytes{job="shop"} > 400e6',
        "warning",
        "{{ $labels.service }} uses more than 400 MB of memory",
    ),
)


class MissingBinary(RuntimeError):
    pass


def find_binary(name: str) -> str:
    found = shutil.which(name) or (f"/usr/bin/{name}" if os.access(f"/usr/bin/{name}", os.X_OK) else None)
    if not found:
        package = "prometheus-alertmanager" if name == ALERTMANAGER else "prometheus"
        raise MissingBinary(f"{name} is not installed: `make monitoring` (or apt-get install {package}) installs it")
    return found


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def rules() -> dict[str, Any]:
    return {
        "groups": [
            {
                "name": "shop",
                "rules": [
                    {
                        "alert": name,
                        "expr": expr,
                        "for": FOR,
                        "labels": {"severity": severity},
                        "annotations": {"summary": summary},
                    }
                    for name, expr, severity, summary in RULES
                ],
            }
        ]
    }


def alertmanager_config(decklog_url: str, token: str) -> dict[str, Any]:
    return {
        "route": {
            "receiver": "decklog",
            "group_by": ["alertname", "service"],
            "group_wait": "1s",
            "group_interval": "1s",
            "repeat_interval": "1h",
        },
        "receivers": [
            {
                "name": "decklog",
                "webhook_configs": [
                    {
                        "url": decklog_url.rstrip("/") + "/alerts/alertmanager",
                        "send_resolved": True,
                        "http_config": {"authorization": {"type": "Bearer", "credentials": token}},
                    }
                ],
            }
        ],
    }


@dataclass
class Process:
    name: str
    proc: subprocess.Popen[bytes]
    port: int
    log: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def wait_ready(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        async with aiohttp.ClientSession() as http:
            while True:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"{self.name} exited: {self.log.read_text(errors='replace')[-2000:]}")
                with contextlib.suppress(aiohttp.ClientError, OSError):
                    async with http.get(self.url + "/-/ready") as response:
                        if response.status == 200:
                            return
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{self.name} was not ready after {timeout}s")
                await asyncio.sleep(0.1)

    def stop(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def _spawn(name: str, argv: list[str], directory: Path, port: int) -> Process:
    log = directory / f"{name}.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=directory)
    return Process(name, proc, port, log)


async def start_alertmanager(directory: Path, decklog_url: str, token: str) -> Process:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "alertmanager.yml").write_text(json.dumps(alertmanager_config(decklog_url, token), indent=1))
    port = free_port()
    argv = [
        find_binary(ALERTMANAGER),
        f"--config.file={directory / 'alertmanager.yml'}",
        f"--storage.path={directory / 'am-data'}",
        f"--web.listen-address=127.0.0.1:{port}",
        f"--web.external-url=http://127.0.0.1:{port}",
        "--cluster.listen-address=",
    ]
    am = _spawn("alertmanager", argv, directory, port)
    await am.wait_ready()
    return am


async def start_prometheus(directory: Path, services: dict[str, int], alertmanager: Process) -> Process:
    directory.mkdir(parents=True, exist_ok=True)
    port = free_port()
    (directory / "rules.yml").write_text(json.dumps(rules(), indent=1))
    config = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s", "scrape_timeout": "900ms"},
        "rule_files": [str(directory / "rules.yml")],
        "alerting": {"alertmanagers": [{"static_configs": [{"targets": [f"127.0.0.1:{alertmanager.port}"]}]}]},
        "scrape_configs": [
            {
                "job_name": "shop",
                "honor_labels": True,
                "static_configs": [
                    {"targets": [f"127.0.0.1:{p}"], "labels": {"service": name}} for name, p in services.items()
                ],
            }
        ],
    }
    (directory / "prometheus.yml").write_text(json.dumps(config, indent=1))
    argv = [
        find_binary(PROMETHEUS),
        f"--config.file={directory / 'prometheus.yml'}",
        f"--storage.tsdb.path={directory / 'tsdb'}",
        f"--web.listen-address=127.0.0.1:{port}",
        f"--web.external-url=http://127.0.0.1:{port}",
        "--rules.alert.resend-delay=1s",
    ]
    prom = _spawn("prometheus", argv, directory, port)
    await prom.wait_ready()
    return prom


async def firing(alertmanager: Process) -> list[dict[str, Any]]:
    """Alertmanager's active alerts (``/api/v2/alerts``)."""
    async with (
        aiohttp.ClientSession() as http,
        http.get(alertmanager.url + "/api/v2/alerts", params={"active": "true", "silenced": "false"}) as response,
    ):
        response.raise_for_status()
        found: list[dict[str, Any]] = await response.json()
        return found
