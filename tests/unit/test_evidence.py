"""The outside read tools' bounds, over real sockets: an unreachable Prometheus, a host the egress allowlist refuses,
an answer over the size bound, a turn whose reads are spent; and the Backstage catalog reader (the service graph,
and a file that does not parse named with its line while the rest loads)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from decklog.adapters.catalog.backstage import load_catalog
from decklog.adapters.monitoring.prometheus import PrometheusSource
from decklog.adapters.monitoring.reader import JsonReader
from decklog.core.agents import RuleBasedReasoner
from decklog.core.egress import EgressPolicy
from decklog.core.entries import AgentTurn, Observation
from decklog.core.evidence.catalog import Component, ServiceCatalog
from decklog.core.evidence.observer import Evidence, EvidenceSources, Limits
from decklog.core.evidence.queries import ServiceQueries
from tests.helpers.monitoring import free_port
from tests.unit.test_agents import ALICE, CHANGE, SCOPE, World, alerting_incident, world

__all__ = ["world"]


def now() -> datetime:
    return datetime.now(UTC)


@pytest.fixture
async def big_answer() -> AsyncIterator[str]:
    """A loopback 'Prometheus' whose every answer is a valid 200 kB success."""

    async def handler(_request: web.Request) -> web.Response:
        result = [{"metric": {"i": str(i)}, "value": [0, "1"]} for i in range(5000)]
        return web.json_response({"status": "success", "data": {"resultType": "vector", "result": result}})

    app = web.Application()
    app.router.add_get("/api/v1/query", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    yield f"http://127.0.0.1:{port}"
    await runner.cleanup()


async def test_an_unreachable_prometheus_is_recorded_and_the_turn_still_records(world: World) -> None:
    reader = JsonReader(f"http://127.0.0.1:{free_port()}", egress=None, timeout_s=2)
    sources = EvidenceSources(metrics=PrometheusSource(reader), catalog=ServiceCatalog([Component("payments")]))
    await alerting_incident(world)
    result = await world.runtime(RuleBasedReasoner(), evidence=sources).run_turn(SCOPE)
    await reader.close()
    assert result.status == "recorded"
    reads = [e.payload for e in await world.entries("observation") if e.actor.type == "agent"]
    failed = [p for p in reads if isinstance(p, Observation) and "error" in p.data]
    assert failed and all("unreachable" in p.data["error"] for p in failed)
    turn = (await world.entries("agent_turn"))[-1].payload
    assert isinstance(turn, AgentTurn) and turn.outcome == "ok"
    summary = next(c for c in turn.tool_calls if c.get("tool") == "evidence")
    assert summary["failed"] == len(failed) > 0
    # without metrics to read, the change linked to the alerting service is the evidence there is (as without
    # Prometheus at all), and the hypothesis says that Prometheus could not be read
    hyps = await world.entries("hypothesis")
    assert [e.payload.subject for e in hyps] == [CHANGE]  # type: ignore[attr-defined]
    assert "Prometheus could not be read" in hyps[0].payload.text  # type: ignore[attr-defined]


async def test_egress_refusal_sends_nothing_and_says_why() -> None:
    reader = JsonReader("http://prometheus.internal:9090", egress=EgressPolicy.from_entries(["grafana.internal"]))
    evidence = Evidence(EvidenceSources(metrics=PrometheusSource(reader)), now)
    value, idx = await evidence.read("prometheus", "up", lambda: PrometheusSource(reader).query("up"))
    await reader.close()
    assert value is None and "egress refused: prometheus.internal:9090" in evidence.observations[idx].error


async def test_an_answer_over_the_size_bound_is_refused_not_cut(big_answer: str) -> None:
    small = JsonReader(big_answer, egress=None, max_bytes=50_000)
    ev = Evidence(EvidenceSources(metrics=PrometheusSource(small)), now)
    value, idx = await ev.read("prometheus", "up", lambda: PrometheusSource(small).query("up"))
    assert value is None and "more than 50000 bytes" in ev.observations[idx].error
    large = JsonReader(big_answer, egress=None)
    ev = Evidence(EvidenceSources(metrics=PrometheusSource(large), limits=Limits(max_call_bytes=10_000)), now)
    value, idx = await ev.read("prometheus", "up", lambda: PrometheusSource(large).query("up"))
    assert value is None and "more than the 10000 kept" in ev.observations[idx].error
    await small.close()
    await large.close()


async def test_a_turn_stops_reading_once_its_reads_are_spent() -> None:
    ev = Evidence(EvidenceSources(catalog=ServiceCatalog(), limits=Limits(max_calls=2)), now)

    async def answer() -> list[int]:
        return [1]

    got = [await ev.read("prometheus", f"q{i}", answer) for i in range(4)]
    assert [idx for _, idx in got] == [0, 1, -1, -1] and ev.refused == 2
    assert ev.summary() == {
        "tool": "evidence",
        "reads": 2,
        "failed": 0,
        "refused_over_budget": 2,
        "ms": ev.summary()["ms"],
        "bytes": 6,
    }
    assert "2 reads are spent" in ev.exhausted()


def test_the_catalog_reads_components_and_resources_and_names_what_does_not_parse(tmp_path: Path) -> None:
    (tmp_path / "team").mkdir()
    (tmp_path / "team" / "catalog-info.yaml").write_text(
        "apiVersion: backstage.io/v1alpha1\nkind: Component\nmetadata:\n  name: checkout\n"
        '  annotations:\n    decklog.io/prometheus-selector: \'app="checkout",env="prod"\'\n'
        "  links:\n    - url: https://grafana.example.com/d/checkout\n      title: Dashboard\n"
        "spec:\n  type: service\n  owner: group:default/payments\n  system: shop\n"
        "  dependsOn: [component:default/payments, resource:default/orders-db]\n"
        "---\nkind: Component\nmetadata:\n  name: payments\nspec:\n  owner: payments\n"
        "  dependsOn: [resource:orders-db, component:checkout]\n"
        "---\nkind: Resource\nmetadata:\n  name: orders-db\nspec:\n  type: database\n"
        "---\nkind: System\nmetadata:\n  name: shop\n"
        "---\nkind: Component\nspec: {}\n"
    )
    (tmp_path / "broken.yml").write_text("kind: Component\nmetadata:\n  name: [x\n  bad\n")
    catalog = load_catalog(tmp_path)
    assert sorted(catalog.components) == ["checkout", "orders-db", "payments"]
    assert len(catalog.problems) == 2
    assert any("broken.yml:" in p and "not YAML" in p for p in catalog.problems)
    assert any("catalog-info.yaml:" in p and p.endswith("a component needs metadata.name") for p in catalog.problems), (
        catalog.problems
    )
    checkout = catalog.get("Checkout")
    assert checkout is not None and (checkout.owner, checkout.system) == ("payments", "shop")
    assert checkout.links[0]["title"] == "Dashboard"
    assert catalog.dependencies("checkout") == [("payments", 1), ("orders-db", 1)]  # the cycle is walked once
    assert catalog.dependents("orders-db") == ["checkout", "payments"]
    assert catalog.depends_on("payments", "orders-db") and not catalog.depends_on("orders-db", "payments")
    queries = ServiceQueries("checkout", "5m", checkout.annotations)
    assert queries.up() == 'min(up{app="checkout",env="prod"})'
    plain = ServiceQueries("payments", "5m")
    assert plain.up() == 'min(up{service="payments"} or up{job="payments"})'
    assert json.dumps(catalog.get("orders-db").to_json())  # type: ignore[union-attr]


async def test_ask_answers_from_the_tools_where_a_rule_can_and_says_so_where_it_cannot(world: World) -> None:
    catalog = ServiceCatalog(
        [
            Component("payments", owner="team-pay", system="shop", depends_on=("ledger",)),
            Component("ledger", depends_on=("postgres",)),
            Component("checkout", depends_on=("payments",)),
        ]
    )
    runtime = world.runtime(RuleBasedReasoner(), evidence=EvidenceSources(catalog=catalog))
    await alerting_incident(world)

    async def ask(question: str) -> str:
        result = await runtime.ask(SCOPE, question, ALICE, key=question)
        assert result.output is not None and result.output.answer is not None
        return result.output.answer

    assert await ask("who owns payments?") == "payments is owned by team-pay (system shop)."
    assert await ask("what does payments depend on?") == (
        "payments depends on ledger; further down: postgres (level 2). Used by checkout."
    )
    assert (await ask("what is the airspeed of an unladen swallow?")).startswith("I can't answer that without a model")
    assert CHANGE in await ask("what changed?")
    assert "has not checked anything" in await ask("what did you check?")
    noted = [e.payload for e in await world.entries("observation") if e.actor.type == "agent"]
    assert [p.data["query"] for p in noted] == ["component payments", "dependencies of payments"]  # type: ignore[attr-defined]


class Failing:
    """A metrics port whose services in ``failing`` answer a 50 % error ratio now (and 0 in the baseline, which
    is ``offset``); every service is up, everything else 0; range queries are empty. It counts the services asked
    about."""

    name, url = "fake", "http://fake"

    def __init__(self, failing: set[str]) -> None:
        self.failing = failing
        self.asked: set[str] = set()

    def _service(self, expr: str) -> str:
        return expr.split('service="', 1)[1].split('"', 1)[0] if 'service="' in expr else ""

    async def query(self, expr: str, *, at: datetime | None = None) -> list[dict[str, Any]]:
        service = self._service(expr)
        self.asked.add(service)
        if expr.startswith("min(up{"):
            return [{"metric": {}, "value": [0, "1"]}]  # every service is up
        bad = service in self.failing and "offset" not in expr and "5.." in expr
        return [{"metric": {}, "value": [0, "0.5" if bad else "0"]}]

    async def query_range(self, expr: str, *, start: datetime, end: datetime, step_s: float) -> list[dict[str, Any]]:
        return []

    async def alerts(self) -> list[dict[str, Any]]:
        return []

    async def rules(self) -> list[dict[str, Any]]:
        return []


async def test_the_anomaly_is_followed_below_the_breadth_cut_to_the_dependency_that_explains_it(
    world: World,
) -> None:
    """payments has eight direct dependencies, which fill the first eight candidates; the failing one (dep3)
    fails because of ledger, one level further down, which only following the anomaly reaches."""
    deps = tuple(f"dep{i}" for i in range(1, 9))
    catalog = ServiceCatalog(
        [
            Component("payments", depends_on=deps),
            *(Component(d) for d in deps if d != "dep3"),
            Component("dep3", depends_on=("ledger",)),
            Component("ledger"),
            Component("unrelated"),
        ]
    )
    metrics = Failing({"payments", "dep3", "ledger"})
    sources = EvidenceSources(metrics=metrics, catalog=catalog, limits=Limits(max_calls=150))
    await alerting_incident(world, link=False)
    await world.runtime(RuleBasedReasoner(), evidence=sources).run_turn(SCOPE)
    hyps = [e.payload for e in await world.entries("hypothesis")]
    assert [(h.rank, h.subject) for h in hyps][:1] == [(1, "ledger")]  # type: ignore[attr-defined]
    assert "ledger" in metrics.asked and "unrelated" not in metrics.asked
    assert not {"dep1", "dep2"} & {h.subject for h in hyps}  # type: ignore[attr-defined]
