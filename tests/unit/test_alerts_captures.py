"""Alert intake on payloads captured from real installs (tests/fixtures/alerts/*/SOURCES.md): a Grafana
Cloud no-data notification and a test-button notification (no service label, Go's zero endsAt), an Alertmanager
group cut short by max_alerts, a PagerDuty incident's lifecycle (priority up and down, resolve, reopen), and
Grafana's documented body with Go's zero startsAt (a vendor example, not a capture)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import tests.unit.test_alerts_routing as routing
from decklog.adapters.alerts import ALERT_SOURCES
from decklog.adapters.slack.render.header import header, left_out_lines
from decklog.core.alerts import AlertRouter
from decklog.core.entries import Actor, ScopeLinked, SeverityChanged
from decklog.core.state import ScopeState
from tests.unit.test_alerts_routing import World

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "alerts"
world_fixture = routing.world  # a real SQLite log and index, a manual clock


def load(source: str, name: str) -> Any:
    return json.loads((FIXTURES / source / name).read_bytes())


async def send(router: AlertRouter, source: str, name: str) -> list[Any]:
    payload = load(source, name)
    return await router.receive(source, ALERT_SOURCES[source].parse(payload), raw={"json": payload})


def alerts_field(world_state: ScopeState) -> str:
    fields = next(b for b in header(world_state).blocks if b.get("fields"))["fields"]
    return next(f["text"] for f in fields if f["text"].startswith("*Alerts*"))


def test_captures_are_kept_compact_as_sent() -> None:
    for source, name in [
        ("grafana", "cloud_datasource_nodata.json"),
        ("grafana", "cloud_test_notification.json"),
        ("alertmanager", "alertmonitor_icmp_truncated.json"),
        ("pagerduty", "ocean_elb_triggered.json"),
        ("pagerduty", "nginx_400s_resolved.json"),
    ]:
        raw = (FIXTURES / source / name).read_text(encoding="utf-8")
        assert raw.count("\n") == 1 and raw.endswith("}\n"), name  # one line, as the sender wrote it
        if source != "pagerduty":
            assert "\\u0026" in raw and "&" not in raw, name  # Go's encoder escapes & in URLs


# -- Grafana Cloud -------------------------------------------------------------------------------------------------


async def test_grafana_cloud_no_data_notification_is_one_incident_and_its_resend_writes_nothing(
    world_fixture: World,
) -> None:
    (opened,) = await send(world_fixture.router, "grafana", "cloud_datasource_nodata.json")
    assert opened.outcome == "new"
    state = await world_fixture.store.get_state(opened.scope)
    assert state.services == () and state.title == "TEST MODE: this is summary: Viable/strict is broken"
    (observation,) = await world_fixture.entries(opened.scope, "observation")
    assert "https://pytorchci.grafana.net/alerting/silence/new?alertmanager=grafana&matcher=" in " ".join(
        observation.payload.links
    )
    again = await send(world_fixture.new_router(), "grafana", "cloud_datasource_nodata.json")
    assert [o.outcome for o in again] == ["duplicate"]
    assert (await world_fixture.store.get_state(opened.scope)).version == state.version


async def test_grafana_cloud_test_button_notification_opens_one_incident_once(world_fixture: World) -> None:
    (opened,) = await send(world_fixture.router, "grafana", "cloud_test_notification.json")
    assert opened.outcome == "new" and await world_fixture.incidents() == [opened.scope]
    (again,) = await send(world_fixture.router, "grafana", "cloud_test_notification.json")
    assert again.outcome == "duplicate" and again.scope == opened.scope


# -- Alertmanager: truncation --------------------------------------------------------------------------------------


async def test_truncated_capture_is_an_observation_and_a_header_line_until_the_group_is_whole(
    world_fixture: World,
) -> None:
    outcomes = await send(world_fixture.router, "alertmanager", "alertmonitor_icmp_truncated.json")
    assert [o.outcome for o in outcomes] == ["new", "joined"]
    scope = outcomes[0].scope
    state = await world_fixture.store.get_state(scope)
    assert state.alerts_left_out == {"alertmanager": 1}
    (note,) = [e for e in await world_fixture.entries(scope, "observation") if "left_out" in e.payload.data]
    assert "1 more alert not sent by Alertmanager" in note.payload.text and note.actor.type == "system"
    assert left_out_lines(state) == ["1 more alert not sent by Alertmanager"]
    assert "1 more alert not sent by Alertmanager" in alerts_field(state)
    again = await send(world_fixture.new_router(), "alertmanager", "alertmonitor_icmp_truncated.json")
    assert [o.outcome for o in again] == ["duplicate", "duplicate"]  # the same count again: nothing written
    assert (await world_fixture.store.get_state(scope)).version == state.version
    # the whole group (the published capture): its third alert joins, and nothing is left out any more
    whole = await send(world_fixture.router, "alertmanager", "alertmonitor_icmp_firing.json")
    assert {o.scope for o in whole} == {scope} and whole[2].outcome == "joined"
    state = await world_fixture.store.get_state(scope)
    assert state.alerts_left_out == {} and len(state.alerts) == 3
    assert "not sent by" not in alerts_field(state)
    notes = [e for e in await world_fixture.entries(scope, "observation") if "left_out" in e.payload.data]
    assert [n.payload.data["left_out"] for n in notes] == [1, 0]


def test_the_header_names_every_source_that_left_alerts_out() -> None:
    state = ScopeState(scope="incident/x", kind="incident", alerts_left_out={"alertmanager": 7, "grafana": 1})
    assert left_out_lines(state) == ["7 more alerts not sent by Alertmanager", "1 more alert not sent by Grafana"]


# -- PagerDuty: one captured incident's lifecycle --------------------------------------------------------------------


async def test_pagerduty_capture_lifecycle_priority_up_and_down_resolve_and_reopen(world_fixture: World) -> None:
    router = world_fixture.router
    (opened,) = await send(router, "pagerduty", "ocean_elb_triggered.json")  # priority null, urgency high
    scope = opened.scope
    assert opened.outcome == "new" and (await world_fixture.store.get_state(scope)).severity == 2
    (raised,) = await send(router, "pagerduty", "ocean_elb_priority_p1.json")
    (lowered,) = await send(router, "pagerduty", "ocean_elb_priority_p3.json")
    assert raised.scope == lowered.scope == scope
    changes = await world_fixture.entries(scope, "severity_changed")
    assert [c.payload.severity for c in changes if isinstance(c.payload, SeverityChanged)] == [1, 3]
    assert all(c.actor.type == "system" and "PagerDuty" in c.payload.reason for c in changes)
    (resolved,) = await send(router, "pagerduty", "ocean_elb_resolved.json")
    assert resolved.outcome == "resolved" and resolved.suggested_resolve
    await world_fixture.service.set_status(scope, "resolved", Actor.human("U1"))
    (reopened,) = await send(world_fixture.new_router(), "pagerduty", "ocean_elb_reopened.json")
    assert reopened.outcome == "new" and reopened.scope != scope
    links = [e.payload for e in await world_fixture.entries(reopened.scope, "scope_linked")]
    assert [(p.scope, p.relation) for p in links if isinstance(p, ScopeLinked)] == [(scope, "reopens")]
    assert (await world_fixture.store.get_state(reopened.scope)).severity == 3  # PD's priority, not the default


async def test_pagerduty_reopen_of_an_open_incident_stays_in_it(world_fixture: World) -> None:
    (opened,) = await send(world_fixture.router, "pagerduty", "ocean_elb_triggered.json")
    await send(world_fixture.router, "pagerduty", "ocean_elb_resolved.json")  # PD resolved; decklog still open
    (reopened,) = await send(world_fixture.router, "pagerduty", "ocean_elb_reopened.json")
    assert reopened.scope == opened.scope and await world_fixture.incidents() == [opened.scope]


async def test_pagerduty_captures_of_other_incidents_never_merge(world_fixture: World) -> None:
    (ocean,) = await send(world_fixture.router, "pagerduty", "ocean_elb_triggered.json")
    (docs,) = await send(world_fixture.router, "pagerduty", "incident_triggered.json")
    assert docs.outcome == "new" and docs.scope != ocean.scope
    (unknown,) = await send(world_fixture.router, "pagerduty", "nginx_400s_resolved.json")
    assert unknown.outcome == "ignored" and not unknown.scope  # a resolve of an incident decklog never saw


# -- Grafana's documented example with Go's zero startsAt --------------------------------------------------------


async def test_grafana_documented_zero_starts_at_resend_writes_nothing(world_fixture: World) -> None:
    """Grafana 8.2's documented webhook body: two alerts of one fingerprint, the first with Go's zero ``startsAt``
    (no usable start time), the second with a real one. One notification is one incident; sending the same body
    again (a resend) records nothing new, whichever router instance receives it."""
    outcomes = await send(world_fixture.router, "grafana", "docs_v82_zero_startsat.json")
    assert outcomes[0].outcome == "new" and {o.scope for o in outcomes} == {outcomes[0].scope}
    scope = outcomes[0].scope
    state = await world_fixture.store.get_state(scope)
    assert list(state.alerts) == ["929467973978d053"] and state.services == ()
    assert state.title == "WebhookAlert"  # the summary is Grafana's default message, so the alert name
    for router in (world_fixture.router, world_fixture.new_router()):
        again = await send(router, "grafana", "docs_v82_zero_startsat.json")
        assert {o.outcome for o in again} == {"duplicate"} and {o.scope for o in again} == {scope}
        assert (await world_fixture.store.get_state(scope)).version == state.version
