"""The whole chain with real components: services the test controls (tests/helpers/shop.py) are scraped by a real
Prometheus every second; its rule fires through a real Alertmanager into ``decklog serve``, whose investigator reads
that Prometheus, that Alertmanager and a Backstage catalog file, and names the dependency that is down.
Under ``CI=true`` a missing binary fails this test."""

from __future__ import annotations

import asyncio
import logging
import re
from pathlib import Path

import pytest

from decklog.bot.config import AgentsConfig, DecklogConfig, EvidenceConfig
from decklog.core.entries import AgentTurn, Hypothesis, Observation
from tests.conftest import ServerFactory, eventually
from tests.helpers.monitoring import (
    ALERTMANAGER,
    PROMETHEUS,
    Alertmanager,
    Prometheus,
    free_port,
    require_binary,
    webhook,
)
from tests.helpers.shop import Shop

TOKEN = "evidence-token"
RULES = {
    "groups": [
        {
            "name": "shop",
            "interval": "1s",
            "rules": [
                {
                    "alert": "WebErrors",
                    "expr": 'sum(rate(http_requests_total{service="web",code="500"}[3s]))'
                    ' / sum(rate(http_requests_total{service="web"}[3s])) > 0.1',
                    "labels": {"severity": "critical", "service": "web"},
                    "annotations": {"summary": "web answers 5xx"},
                }
            ],
        }
    ]
}
CATALOG = """\
apiVersion: backstage.io/v1alpha1
kind: Component
metadata:
  name: web
  annotations:
    github.com/project-slug: shop/web
spec:
  type: website
  lifecycle: production
  owner: group:default/storefront
  system: shop
  dependsOn:
    - resource:default/db
---
apiVersion: backstage.io/v1alpha1
kind: Resource
metadata:
  name: db
spec:
  type: database
  owner: group:default/platform
  system: shop
"""


async def test_a_real_alert_gets_a_hypothesis_naming_the_dependency_that_is_down(
    make_server: ServerFactory, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="decklog.bot.agents")
    require_binary(PROMETHEUS)
    require_binary(ALERTMANAGER)
    (tmp_path / "catalog").mkdir()
    (tmp_path / "catalog" / "catalog-info.yaml").write_text(CATALOG)
    (tmp_path / "catalog" / "broken.yaml").write_text("kind: Component\nmetadata: [unclosed\n")
    port = free_port()  # the server's, known first: Alertmanager's webhook names it
    async with Shop(["web", "db"]) as shop:
        am = await Alertmanager.start(tmp_path / "alertmanager", webhook(f"http://127.0.0.1:{port}", TOKEN))
        prometheus = None
        try:
            prometheus = await Prometheus.start(
                tmp_path / "prometheus", rules=RULES, alertmanager=am, scrape=shop.scrape_configs()
            )
            config = DecklogConfig(
                agents=AgentsConfig(evidence=EvidenceConfig(window="3s", baseline="9s", lookback_minutes=1))
            )
            server = await make_server(
                port=port,
                alert_token=TOKEN,
                config=config,
                prometheus_url=prometheus.url,
                alertmanager_url=am.url,
                catalog=tmp_path / "catalog",
                first_turn_delay=0.05,
                turn_debounce=3600,
            )
            assert server.url.endswith(f":{port}")
            named = [r.getMessage() for r in caplog.records if re.search(r"broken\.yaml:\d+: not YAML", r.getMessage())]
            assert named, "a catalog file that does not parse is named with its line at start-up"
            await eventually(lambda: prometheus.query('up{job="db"}'), timeout=30, what="a scrape of db")
            await asyncio.sleep(4)  # healthy traffic first
            shop["db"].down = True
            shop["web"].error_ratio = 0.5
            store = server.runtime.store

            async def hypothesis() -> tuple[str, list[Hypothesis], list[int]] | None:
                for scope in await store.scope_ids():
                    if scope.kind != "incident":
                        continue
                    found = [e for e in await store.read(str(scope)) if isinstance(e.payload, Hypothesis)]
                    if found:
                        return str(scope), [e.payload for e in found], list(found[0].refs)  # type: ignore[misc]
                return None

            scope, hyps, refs = await eventually(hypothesis, timeout=60, what="the investigator's hypothesis")
            assert hyps[0].subject == "db" and hyps[0].rank == 1, hyps
            assert "up 0" in hyps[0].text and "deepest anomalous dependency of web" in hyps[0].text
            cited = await store.read_seqs(scope, refs)
            queries = [e.payload.data.get("query", "") for e in cited if isinstance(e.payload, Observation)]
            assert any('up{service="db"}' in q for q in queries), queries  # the exact query, recorded
            every = await store.read(scope)
            turn = next(e.payload for e in every if isinstance(e.payload, AgentTurn))
            summary = next(c for c in turn.tool_calls if c.get("tool") == "evidence")
            assert summary["reads"] > 5 and summary["failed"] == 0
            reads = [e for e in every if isinstance(e.payload, Observation) and "query" in e.payload.data]
            assert all(e.actor.type == "agent" and e.payload.data.get("at") for e in reads)  # type: ignore[union-attr]
            assert any(e.payload.source == "alertmanager" for e in reads)  # type: ignore[union-attr]
        finally:
            if prometheus is not None:
                await prometheus.stop()
            await am.stop()
