"""Claude gets the same outside read tools as the rules, in the same bounded loop: the real ``anthropic`` SDK
against the scripted fake Messages API, and a real Prometheus (Debian's) to query. A PromQL mistake comes back as a
tool error the model corrects; every read is recorded as an observation the hypothesis cites."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from decklog.adapters.monitoring.prometheus import PrometheusSource
from decklog.adapters.monitoring.reader import JsonReader
from decklog.core.entries import AgentTurn, Hypothesis, Observation
from decklog.core.evidence.catalog import Component, ServiceCatalog
from decklog.core.evidence.observer import EvidenceSources
from tests.conftest import eventually
from tests.e2e.test_claude import Make, claude, last_user_blocks
from tests.fakes.anthropic_api import Reply, ToolCall, has_tools
from tests.helpers.monitoring import PROMETHEUS, Prometheus, require_binary
from tests.unit.test_agents import SCOPE, World, alerting_incident, world

__all__ = ["claude", "world"]


async def test_claude_queries_prometheus_recovers_from_a_tool_error_and_cites_the_observations(
    world: World, claude: Make, tmp_path: Path
) -> None:
    require_binary(PROMETHEUS)
    prometheus = await Prometheus.start(tmp_path / "prometheus")
    reader = JsonReader(prometheus.url, egress=None)
    try:
        catalog = ServiceCatalog([Component("payments", owner="team-pay", depends_on=("ledger",))])
        sources = EvidenceSources(metrics=PrometheusSource(reader), catalog=catalog)
        await alerting_incident(world)
        await eventually(lambda: prometheus.query('up{job="prometheus"}'), timeout=30, what="a first self-scrape")

        def bad_query_is_an_error(body: dict[str, Any]) -> None:
            blocks = last_user_blocks(body)
            assert [b["is_error"] for b in blocks] == [False, True], blocks
            assert "bad_data" in blocks[1]["content"] and "observation 1" in blocks[1]["content"]
            assert '"depends_on"' in blocks[0]["content"] or "team-pay" in blocks[0]["content"]

        def corrected(body: dict[str, Any]) -> None:
            blocks = last_user_blocks(body)
            assert [b["is_error"] for b in blocks] == [False, False], blocks
            assert '"observation":2' in blocks[0]["content"]

        fake, runtime = await claude(
            [
                Reply(
                    tool_calls=[
                        ToolCall("get_service", {"name": "payments"}, id="tu-svc"),
                        ToolCall("query_metrics", {"query": "sum(rate(up[1m]"}, id="tu-bad"),
                    ],
                    expect=has_tools("query_metrics", "get_service", "check_service", "record_hypothesis"),
                ),
                Reply(
                    tool_calls=[
                        ToolCall("query_metrics", {"query": 'up{job="prometheus"}'}, id="tu-good"),
                        ToolCall(
                            "record_hypothesis",
                            {
                                "text": "suspect ledger: payments depends on it",
                                "confidence": 0.4,
                                "subject": "ledger",
                                "rank": 1,
                                "observations": [0, 2],
                            },
                            id="tu-hyp",
                        ),
                    ],
                    expect=bad_query_is_an_error,
                ),
                Reply(text="One hypothesis recorded.", expect=corrected),
            ],
            runtime_options={"evidence": sources},
        )
        result = await runtime.run_turn(SCOPE)
        fake.assert_done()
        assert result.status == "recorded"
        reads = [e for e in await world.entries("observation") if e.actor.type == "agent"]
        assert [e.payload.data["query"] for e in reads] == [  # type: ignore[union-attr]
            "component payments",
            "sum(rate(up[1m]",
            'up{job="prometheus"}',
        ]
        bad, good = reads[1].payload, reads[2].payload
        assert isinstance(bad, Observation) and "bad_data" in bad.data["error"]
        assert isinstance(good, Observation) and good.data["values"][0]["metric"]["job"] == "prometheus"
        hyp = (await world.entries("hypothesis"))[0]
        assert isinstance(hyp.payload, Hypothesis) and (hyp.payload.subject, hyp.payload.rank) == ("ledger", 1)
        assert {reads[0].seq, reads[2].seq} <= set(hyp.refs)
        turn = (await world.entries("agent_turn"))[-1].payload
        assert isinstance(turn, AgentTurn)
        summary = next(c for c in turn.tool_calls if c.get("tool") == "evidence")
        assert (summary["reads"], summary["failed"]) == (3, 1)
    finally:
        await reader.close()
        await prometheus.stop()
