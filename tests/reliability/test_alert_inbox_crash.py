"""A SIGKILL between the 202 of an alert notification and its routing loses nothing.

The first ``decklog serve`` (tests/helpers/stalled_routing_child.py) stores and acknowledges every notification
but never routes one; it is SIGKILLed with all of them answered 202 and none in the log. A plain ``decklog serve``
on the same data replays the alert inbox at boot: every acknowledged alert is in the log exactly once, and every
receipt gives its alert's scope and seq.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from decklog.adapters.local.slack import FakeSlack
from tests.conftest import eventually
from tests.helpers.log_view import read_log
from tests.helpers.serve import ALERT_TOKEN, BOT_TOKEN, Served, start_serve

HEADERS = {"Authorization": f"Bearer {ALERT_TOKEN}"}


async def post(served: Served, body: dict[str, Any]) -> tuple[int, Any]:
    async with (
        aiohttp.ClientSession() as http,
        http.post(f"{served.url}/alerts/generic", json=body, headers=HEADERS) as r,
    ):
        return r.status, await r.json()


async def receipt(served: Served, receipt_id: str) -> Any:
    async with (
        aiohttp.ClientSession() as http,
        http.get(f"{served.url}/api/alerts/receipts/{receipt_id}", headers=HEADERS) as r,
    ):
        assert r.status == 200, await r.text()
        return await r.json()


@pytest.mark.slow
async def test_a_kill_after_the_202_and_before_routing_loses_nothing(tmp_path: Path) -> None:
    data, marker = tmp_path / "data", tmp_path / "stalled"
    bodies = [
        {
            "title": f"check {k % 4} failing",
            "fingerprint": f"crash-fp-{k % 4}",
            "service": f"svc-{k % 2}",
            "event_id": f"ev-{k}",
        }
        for k in range(24)
    ]
    async with FakeSlack(bot_token=BOT_TOKEN) as fake:
        child = await asyncio.to_thread(
            start_serve,
            data,
            fake.base_url,
            module="tests.helpers.stalled_routing_child",
            env={"STALL_MARKER": str(marker)},
        )
        try:
            answers = await asyncio.gather(*(post(child, b) for b in bodies))
            assert all(status == 202 for status, _ in answers), answers
            await eventually(marker.exists, timeout=20, what="the routing task to take the notifications")
            pending = [await receipt(child, a["receipt"]) for _, a in answers]
            assert {p["status"] for p in pending} == {"pending"}
        finally:
            await asyncio.to_thread(child.kill)  # SIGKILL: answered, stored, never routed
        assert not [r for f in read_log(data).values() for r in f.rows if r.kind == "observation"]

        served = await asyncio.to_thread(start_serve, data, fake.base_url)
        try:

            async def all_routed() -> list[Any]:
                got = [await receipt(served, a["receipt"]) for _, a in answers]
                return got if all(g["status"] == "routed" for g in got) else []

            routed = await eventually(all_routed, timeout=60, what="every acknowledged notification routed")
        finally:
            await asyncio.to_thread(served.stop)
    outcomes = [r["alerts"][0] for r in routed]
    assert all(o["scope"] and o["seq"] for o in outcomes), outcomes
    alerts = [
        (scope, r.seq, r.payload.get("fingerprint"))
        for scope, f in read_log(data).items()
        for r in f.rows
        if r.kind == "observation" and r.payload.get("fingerprint")  # (not the alert summaries)
    ]
    assert {(o["scope"], o["seq"]) for o in outcomes} == {(scope, seq) for scope, seq, _ in alerts}
    assert Counter(fp for _, _, fp in alerts) == Counter(b["fingerprint"] for b in bodies)  # each alert once
