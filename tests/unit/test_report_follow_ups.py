"""The report's follow-ups: each ``follow_up`` with its tracker link and state — open (not filed yet),
synced (filed, open in the tracker), closed (and reopened → synced again) — golden Markdown and HTML,
byte-identical on re-export. ``UPDATE_GOLDEN=1`` rewrites the golden files (tests/unit/test_reports.py)."""

from __future__ import annotations

import json

import pytest

from decklog.core.entries import Actor
from decklog.core.reports.export import render_report
from decklog.core.store.sqlite.log_store import SqliteLogStore
from tests.unit.test_reports import ALICE, BOB, Story, check_golden, fixed_ids, store

SCOPE = "incident/checkout-502"
TRACKER = Actor.system("tracker:github")
URL = "https://github.com/acme/shop/issues/{}"

__all__ = ["fixed_ids", "store"]  # the fixtures, shared with the 03:12 story's tests


async def write_follow_ups(s: Story) -> dict[str, int]:
    await s.add("declared", ALICE, {"title": "Checkout 502s", "severity": 2, "services": ["checkout"]}, scope=SCOPE)
    seqs: dict[str, int] = {}
    texts = {
        "open": ("write the checkout runbook", {"owner": "U0BOB", "due": "2026-10-01"}),
        "synced": ("add a canary for checkout", {}),
        "closed": ("rotate the PSP credentials *now*", {"obligation_id": "ob-7"}),
        "reopened": ("tune the 5xx alert", {}),
    }
    for name, (text, extra) in texts.items():
        seqs[name] = await s.add("follow_up", BOB if name == "open" else ALICE, {"text": text, **extra}, scope=SCOPE)
    for n, name in enumerate(("synced", "closed", "reopened"), start=1):
        url = URL.format(n)
        payload = {"follow_up": seqs[name], "tracker": "github", "url": url, "number": str(n), "text": f"filed: {url}"}
        await s.add("follow_up_synced", TRACKER, payload, scope=SCOPE, refs=(seqs[name],))
    for name, state, reason in (
        ("closed", "closed", "completed"),
        ("reopened", "closed", ""),
        ("reopened", "open", ""),
    ):
        payload = {"follow_up": seqs[name], "url": URL.format(2 if name == "closed" else 3), "state": state}
        payload |= {"by": "octocat", "reason": reason} if state == "closed" else {}
        await s.add("follow_up_closed", TRACKER, payload, scope=SCOPE, refs=(seqs[name],))
    return seqs


@pytest.mark.parametrize("fmt", ["md", "html"])
async def test_follow_ups_are_listed_with_their_links_and_state(store: SqliteLogStore, fmt: str) -> None:
    await write_follow_ups(Story(store))
    body, _, _ = await render_report(store, SCOPE, fmt)
    check_golden(f"follow-ups.{fmt}", body)
    again, _, _ = await render_report(store, SCOPE, fmt)
    assert again == body


async def test_the_json_has_each_state(store: SqliteLogStore) -> None:
    seqs = await write_follow_ups(Story(store))
    body, _, _ = await render_report(store, SCOPE, "json")
    lines = {f["seq"]: f for f in json.loads(body)["tracker_follow_ups"]}
    assert [lines[seqs[n]]["state"] for n in ("open", "synced", "closed", "reopened")] == [
        "open",
        "synced",
        "closed",
        "synced",
    ]
    closed = lines[seqs["closed"]]
    assert (closed["url"], closed["number"], closed["closed_by"], closed["reason"]) == (
        URL.format(2),
        "2",
        "octocat",
        "completed",
    )
    assert closed["obligation_id"] == "ob-7" and lines[seqs["open"]]["url"] == ""
    assert lines[seqs["reopened"]]["closed_by"] == ""
