"""``decklog_findings_total``'s collector lists all of history once (at start, then every few minutes in the
background) and, at each scrape, only the incidents updated since the last one: a scrape costs what moved, not
what the deployment has kept for years."""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import replace
from typing import Any

from decklog.adapters.http import metrics
from decklog.adapters.http.metrics import FindingsCollector
from decklog.core.entries import Entry
from decklog.core.store.ports import ScopeRow
from tests.conftest import eventually

ROW = ScopeRow(
    id="incident/x",
    kind="incident",
    title="x",
    status="resolved",
    severity=3,
    services=(),
    created_at="2026-12-07T00:00:00.000000Z",
    updated_at="2026-12-07T00:00:00.000000Z",
    resolved_at="",
    version=3,
    thread_channel="",
    thread_ts="",
    permalink="",
    pending_approvals=0,
)


class Index:
    """The one index query the collector makes; records each call's ``updated_since``."""

    def __init__(self, n: int) -> None:
        self.rows = [replace(ROW, id=f"incident/i{k}") for k in range(n)]
        self.calls: list[str | None] = []

    async def list_scopes(self, **kw: Any) -> list[ScopeRow]:
        self.calls.append(kw.get("updated_since"))
        since = kw.get("updated_since")
        return [r for r in self.rows if since is None or r.updated_at >= since]


class Store:
    def __init__(self) -> None:
        self.read_scopes: list[str] = []

    async def read(self, scope: str) -> list[Entry]:
        self.read_scopes.append(scope)
        return []


async def test_a_scrape_lists_what_moved_and_history_is_listed_once_in_the_background() -> None:
    index, store = Index(50), Store()
    findings = FindingsCollector()
    task = asyncio.ensure_future(findings.run(store, index))  # type: ignore[arg-type]
    try:
        await eventually(lambda: findings.listings == 1, what="the listing at start")
        await findings.settle()
        assert index.calls == [None] and len(store.read_scopes) == 50
        for _ in range(3):
            await findings.refresh(store, index)  # type: ignore[arg-type]
        assert index.calls[1:] and all(since is not None for since in index.calls[1:])  # only what was updated
        await findings.settle()
        assert len(store.read_scopes) == 50 and findings.listings == 1  # nothing moved: nothing read again
        # an incident updated now, with a new version, is read again at the next scrape
        index.rows[7] = replace(index.rows[7], version=4, updated_at="2999-01-01T00:00:00.000000Z")
        await findings.refresh(store, index)  # type: ignore[arg-type]
        await findings.settle()
        assert store.read_scopes[50:] == ["incident/i7"]
        # every FULL_EVERY_S every incident is listed again (in the background), which forgets the deleted ones
        del index.rows[3]
        findings._listed_at -= metrics.FULL_EVERY_S
        await findings.refresh(store, index)  # type: ignore[arg-type]
        await eventually(lambda: findings.listings == 2, what="the second listing")
        assert "incident/i3" not in findings._cache
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def test_a_scrape_before_the_first_listing_waits_for_it_and_lists_nothing_twice() -> None:
    index, store = Index(5), Store()
    findings = FindingsCollector()
    await asyncio.gather(findings.refresh(store, index), findings.refresh(store, index))  # type: ignore[arg-type]
    assert index.calls == [None] and findings.listings == 1 and findings.uncounted == 5
