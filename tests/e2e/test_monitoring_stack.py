"""The whole real chain the later issues build on: a real Prometheus evaluates a rule every second, sends the alert to
a real Alertmanager, which notifies ``decklog serve`` (tests/helpers/monitoring.py). Under ``CI=true`` a missing
binary fails this test."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import ServerFactory, eventually
from tests.helpers.monitoring import ALERTMANAGER, PROMETHEUS, Alertmanager, Prometheus, require_binary, webhook

TOKEN = "stack-token"
RULES = {
    "groups": [
        {
            "name": "decklog-test",
            "interval": "1s",
            "rules": [
                {
                    "alert": "CheckoutDown",
                    "expr": "vector(1)",
                    "labels": {"severity": "critical", "service": "checkout"},
                    "annotations": {"summary": "checkout is down"},
                }
            ],
        }
    ]
}


async def test_a_prometheus_rule_reaches_decklog_through_alertmanager(
    make_server: ServerFactory, tmp_path: Path
) -> None:
    require_binary(PROMETHEUS)
    require_binary(ALERTMANAGER)
    server = await make_server(alert_token=TOKEN, first_turn_delay=3600, turn_debounce=3600)
    am = await Alertmanager.start(tmp_path / "alertmanager", webhook(server.url, TOKEN))
    try:
        prometheus = await Prometheus.start(tmp_path / "prometheus", rules=RULES, alertmanager=am)
        try:
            assert await prometheus.query("vector(1)")

            async def opened() -> str | None:
                store = server.runtime.store
                for scope in await store.scope_ids():
                    if scope.kind == "incident" and await store.exists(scope):
                        return str(scope)
                return None

            scope = await eventually(opened, timeout=60, what="the rule's incident")
            state = await server.runtime.store.get_state(scope)
            assert state.title == "checkout is down" and state.severity == 1 and state.services == ("checkout",)
            assert [a["labels"]["alertname"] for a in await prometheus.firing_alerts()] == ["CheckoutDown"]
        finally:
            await prometheus.stop()
    finally:
        await am.stop()
