"""Paging through PagerDuty's Events API v2: the ``page_oncall`` action of the shipped decklog.example.toml, the
``pagerduty`` executor (dedup_key = the scope, the egress check) and the ``paging`` sender's resolve."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from decklog.adapters.executors import build_executor
from decklog.adapters.executors.pagerduty import PagerDutyExecutor, PagingSender
from decklog.bot.actions import build_catalog, build_egress
from decklog.bot.config import load_config
from decklog.bot.runtime import OUTBOX_TOPICS, TOPIC_KINDS
from decklog.bot.settings import Settings, example_config_path
from decklog.core.actions.executor import ExecutionRequest
from decklog.core.egress import EgressPolicy
from decklog.core.entries import Actor, NewEntry
from decklog.core.outbox.sender import PermanentFailure
from decklog.core.store.sqlite.log_store import SqliteLogStore
from tests.fakes.pagerduty import FakePagerDuty

KEY = "R0UTINGKEY0123456789012345678901"
SCOPE = "incident/db-down"
ALICE = Actor(type="human", id="U0ALICE", name="alice")


def settings(**env: str) -> Settings:
    return Settings.model_validate(env)


def request(scope: str = SCOPE, run: str = "run-1") -> ExecutionRequest:
    return ExecutionRequest("page_oncall", {"summary": "db is down"}, scope, run, 1, f"{scope}:{run}")


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


def test_page_oncall_ships_in_the_example_and_needs_the_routing_key() -> None:
    config = load_config(example_config_path())
    off = build_catalog(settings(), config).get("page_oncall")
    assert not off.available and "DECKLOG_PAGERDUTY_ROUTING_KEY" in off.unavailable_reason
    on = build_catalog(settings(DECKLOG_PAGERDUTY_ROUTING_KEY=KEY), config).get("page_oncall")
    assert on.available and on.risk == "R2" and on.executor.type == "pagerduty"
    assert (
        on.executor.options["url"] == "https://events.pagerduty.com/v2/enqueue"
        and on.executor.options["routing_key"] == KEY
    )
    moved = build_catalog(
        settings(DECKLOG_PAGERDUTY_ROUTING_KEY=KEY, DECKLOG_PAGERDUTY_EVENTS_URL="http://127.0.0.1:9/v2/enqueue"),
        config,
    ).get("page_oncall")
    assert moved.executor.options["url"] == "http://127.0.0.1:9/v2/enqueue"


async def test_a_trigger_carries_the_scope_as_dedup_key_and_a_retry_never_pages_twice(http: Any) -> None:
    async with FakePagerDuty(routing_key=KEY) as pd:
        ex = PagerDutyExecutor(http, url=f"{pd.base_url}/v2/enqueue", routing_key=KEY)
        first = await ex.execute(request())
        again = await ex.execute(request(run="run-2"))
        back = await ex.reconcile(request())
        assert (first.outcome, first.status, again.outcome, back.status) == ("applied", 202, "applied", "applied")
        assert first.response == {"status": "success", "message": "Event processed", "dedup_key": SCOPE}
        assert pd.pages == 1 and {e["dedup_key"] for e in pd.events} == {SCOPE}
        assert pd.events[0]["event_action"] == "trigger" and pd.events[0]["routing_key"] == KEY
        assert pd.events[0]["payload"]["summary"] == "db is down"


async def test_refusals_rate_limits_and_egress(http: Any) -> None:
    async with FakePagerDuty(routing_key=KEY) as pd:
        url = f"{pd.base_url}/v2/enqueue"
        bad = await PagerDutyExecutor(http, url=url, routing_key="wrong").execute(request())
        assert bad.outcome == "refused" and bad.status == 400 and "invalid" in bad.error.lower()
        pd.rate_limit()
        limited = await PagerDutyExecutor(http, url=url, routing_key=KEY).execute(request())
        assert limited.outcome == "uncertain" and limited.status == 429
        fenced = PagerDutyExecutor(http, url=url, routing_key=KEY, egress=EgressPolicy.from_entries(["other.host"]))
        refused = await fenced.execute(request())
        assert refused.outcome == "failed" and "egress_refused" in refused.response
        assert pd.pages == 0 and pd.events == []


async def test_the_incident_resolving_resolves_the_page(tmp_path: Path, http: Any) -> None:
    store = SqliteLogStore(tmp_path / "data", topics=OUTBOX_TOPICS, topic_kinds=TOPIC_KINDS)
    try:
        await store.append(SCOPE, [NewEntry.make("declared", ALICE, {"title": "DB down", "severity": 1})], create=True)
        async with FakePagerDuty(routing_key=KEY) as pd:
            s = settings(DECKLOG_PAGERDUTY_ROUTING_KEY=KEY, DECKLOG_PAGERDUTY_EVENTS_URL=f"{pd.base_url}/v2/enqueue")
            config = load_config(example_config_path())
            catalog = build_catalog(s, config)
            executor = build_executor(catalog.get("page_oncall").executor, http, build_egress(s, config, catalog))
            assert isinstance(executor, PagerDutyExecutor)
            sender = PagingSender(store, executor, ["page_oncall"])
            resolved = NewEntry.make("status_changed", ALICE, {"status": "resolved", "previous": "investigating"})
            await store.append(SCOPE, [resolved])
            await sender.deliver(SCOPE, await store.read(SCOPE))
            assert pd.events == []  # nothing was paged: nothing to resolve
            assert (await executor.execute(request())).outcome == "applied"
            applied = {"run_id": "run-1", "action": "page_oncall", "outcome": "applied"}
            await store.append(SCOPE, [NewEntry.make("action_result", Actor.system("runner"), applied)])
            status = await store.read(SCOPE, kinds=("status_changed",))
            await sender.deliver(SCOPE, status)
            await sender.deliver(SCOPE, status)  # a repeated delivery: resolve is idempotent at PagerDuty
            assert [e["event_action"] for e in pd.events] == ["trigger", "resolve", "resolve"]
            assert pd.alerts == {SCOPE: "resolved"} and pd.pages == 1
            broken = PagingSender(
                store, PagerDutyExecutor(http, url=pd.base_url + "/v2/enqueue", routing_key="x"), ["page_oncall"]
            )
            with pytest.raises(PermanentFailure):
                await broken.deliver(SCOPE, status)
    finally:
        await store.close()


def test_paging_topic_takes_only_status_changes() -> None:
    assert TOPIC_KINDS["paging"] == ("status_changed",) and "paging" in OUTBOX_TOPICS
