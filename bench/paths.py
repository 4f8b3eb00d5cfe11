"""Which product files a request crosses: a signed slash command and an Alertmanager POST, traced end to end.

    .venv/bin/python bench/paths.py [--files]

Starts ``decklog serve`` in process (sandbox mode, the shipped example config, agents' turns pushed out of the
window), warms every path once, then traces one request of each kind with ``sys.setprofile`` on every thread: from
the moment it is sent until its entry is committed and every outbox sender is idle. A file counts when one of its
functions is called in that window. Background timers that fire in the window are counted too (the window is short
and the agents are pushed out of it, so they rarely do). Not a benchmark: no time is measured.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

PRODUCT = ("core", "adapters", "bot", "prompts")


def product_file(filename: str) -> str | None:
    path = Path(filename)
    try:
        rel = path.resolve().relative_to(ROOT)
    except ValueError:
        return None
    return str(rel) if rel.parts and rel.parts[0] in PRODUCT else None


class Tracer:
    def __init__(self) -> None:
        self.files: set[str] = set()
        self.calls = 0

    def profile(self, frame: Any, event: str, arg: Any) -> None:
        if event == "call":
            name = product_file(frame.f_code.co_filename)
            if name is not None:
                self.files.add(name)
                self.calls += 1

    def __enter__(self) -> Tracer:
        threading.setprofile(self.profile)
        sys.setprofile(self.profile)
        return self

    def __exit__(self, *exc: object) -> None:
        sys.setprofile(None)
        threading.setprofile(None)  # type: ignore[arg-type]


def alertmanager(name: str, status: str = "firing") -> dict[str, Any]:
    labels = {"alertname": name, "service": "payments", "severity": "critical"}
    return {
        "version": "4",
        "groupKey": f'{{}}:{{alertname="{name}"}}',
        "truncatedAlerts": 0,
        "status": status,
        "receiver": "decklog",
        "groupLabels": {"alertname": name},
        "commonLabels": labels,
        "commonAnnotations": {"summary": f"{name} on payments"},
        "externalURL": "http://alertmanager:9093",
        "alerts": [
            {
                "status": status,
                "labels": labels,
                "annotations": {"summary": f"{name} on payments"},
                "startsAt": "2026-12-01T03:12:00Z",
                "endsAt": "0001-01-01T00:00:00Z",
                "generatorURL": "http://prometheus:9090/graph",
                "fingerprint": f"fp-{name}",
            }
        ],
    }


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--files", action="store_true", help="list the files, not only their count")
    args = parser.parse_args()
    import aiohttp

    from decklog.bot.config import DecklogConfig, load_config
    from decklog.bot.server import DecklogServer
    from decklog.bot.settings import Settings, example_config_path

    data = load_config(example_config_path()).model_dump()
    data["slack"]["pace_per_channel_s"] = 0.0
    data["slack"]["header_update_interval_s"] = 0.0
    config = DecklogConfig.model_validate(data)
    with tempfile.TemporaryDirectory() as tmp:
        settings = Settings(
            data_dir=Path(tmp),
            host="127.0.0.1",
            port=0,
            first_turn_delay=3600,
            turn_debounce=3600,
            alert_token="paths-token",
        )
        server = DecklogServer(settings, config=config)
        await server.start()
        try:
            fake = server.sandbox
            assert fake is not None
            headers = {"Authorization": "Bearer paths-token"}

            async def idle() -> None:
                for _ in range(3):  # the Slack work behind the ack, then what its commit sends, until both are still
                    while server.parts.slack.deps.work_tasks:
                        await asyncio.sleep(0.005)
                    await server.runtime.dispatcher.idle()

            async def post(body: dict[str, Any]) -> None:
                async with (
                    aiohttp.ClientSession() as http,
                    http.post(f"{server.url}/alerts/alertmanager", json=body, headers=headers) as r,
                ):
                    assert r.status < 300, await r.text()

            # warm-up: every path once
            await fake.run_command("U0ALICE", "C0ALERTS", "declare Warm-up incident sev2")
            await post(alertmanager("WarmUp"))
            await idle()
            scopes = await server.runtime.index.list_scopes()
            scope = next(s.id for s in scopes if "warm-up" in s.id)
            await fake.run_command("U0ALICE", "C0ALERTS", f"sev 3 {scope}")
            await idle()

            results = {}
            with Tracer() as t:
                await fake.run_command("U0ALICE", "C0ALERTS", f"sev 1 {scope}")
                await asyncio.sleep(0)
                await idle()
            results["slash command `/incident sev 1 <scope>`"] = t
            with Tracer() as t:
                await post(alertmanager("PaymentsErrors"))
                await idle()
            results["Alertmanager POST (a new alert opening an incident)"] = t
            for name, t in results.items():
                ours = {f for f in t.files if "/local/" not in f}  # the sandbox's fake Slack is the other side
                top = sorted({f.split("/")[0] for f in ours})
                print(
                    f"{name}: {len(ours)} product files ({', '.join(top)}; {len(t.files) - len(ours)} more in the fake Slack)"
                )
                if args.files:
                    for f in sorted(t.files):
                        print(f"    {f}")
        finally:
            await server.stop()


if __name__ == "__main__":
    asyncio.run(main())
