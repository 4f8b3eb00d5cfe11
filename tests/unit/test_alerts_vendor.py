"""Alerts as vendors really send them, on the real fixtures: one notification is one incident, vendor
incident identity, severity following the sources until a person decides, truncation, content dedupe, Datadog's
default payload, and old logs still verifying after the new state fields."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import tests.unit.test_alerts_routing as routing
from decklog.adapters.alerts import ALERT_SOURCES
from decklog.core.alerts import AlertRouter
from decklog.core.entries import Actor, Observation, ScopeLinked, SeverityChanged
from decklog.core.state import OMITTED_WHEN_EMPTY, ScopeState, fold_all
from tests.unit.test_alerts_routing import World

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "alerts"
world_fixture = routing.world  # the routing tests' world (a real SQLite log and index, a manual clock)


def load(source: str, name: str) -> Any:
    return json.loads((FIXTURES / source / name).read_text(encoding="utf-8"))


async def send(router: AlertRouter, source: str, payload: Any) -> list[Any]:
    return await router.receive(source, ALERT_SOURCES[source].parse(payload), raw={"json": payload})


def pd(payload: Any, event_type: str, event_id: str, *, priority: str | None = None, status: str = "") -> Any:
    """A PagerDuty delivery derived from a real one: another event type / id / priority."""
    out = copy.deepcopy(payload)
    out["event"]["event_type"] = event_type
    out["event"]["id"] = event_id
    if status:
        out["event"]["data"]["status"] = status
    if priority is not None:
        out["event"]["data"]["priority"] = {**(out["event"]["data"]["priority"] or {}), "summary": priority}
    return out


async def test_grafana_docs_notification_without_service_labels_is_one_incident(world_fixture: World) -> None:
    payload = load("grafana", "docs_example_firing.json")  # two alerts, no service label, groupKey {}:{}
    outcomes = await send(world_fixture.router, "grafana", payload)
    assert [o.outcome for o in outcomes] == ["new", "joined"]
    assert len({o.scope for o in outcomes}) == 1 and await world_fixture.incidents() == [outcomes[0].scope]
    again = await send(world_fixture.new_router(), "grafana", payload)  # a resend (another process): nothing changes
    assert [o.outcome for o in again] == ["duplicate", "duplicate"]
    assert [e.kind for e in await world_fixture.entries(outcomes[0].scope)] == [
        "declared",
        "observation",
        "observation",
    ]


async def test_a_later_notification_of_the_group_joins_its_incident(world_fixture: World) -> None:
    payload = load("alertmanager", "probe_failure_firing.json")
    (first,) = await send(world_fixture.router, "alertmanager", payload)
    later = copy.deepcopy(payload)
    later["alerts"][0]["labels"]["instance"] = "https://other.example.org"
    later["alerts"][0]["fingerprint"] = "1111222233334444"
    (joined,) = await send(world_fixture.new_router(), "alertmanager", later)
    assert joined.outcome == "joined" and joined.scope == first.scope


async def test_differing_service_labels_split_a_notification_into_linked_incidents(world_fixture: World) -> None:
    payload = load("grafana", "docs_example_firing.json")
    payload["alerts"][0]["labels"]["service.name"] = "checkout"  # OpenTelemetry's label counts as a service
    payload["alerts"][1]["labels"]["service"] = "payments"
    outcomes = await send(world_fixture.router, "grafana", payload)
    assert [o.outcome for o in outcomes] == ["new", "new"]
    a, b = outcomes[0].scope, outcomes[1].scope
    assert a != b
    assert (await world_fixture.store.get_state(a)).services == ("checkout",)
    linked_b = [e.payload for e in await world_fixture.entries(b, "scope_linked")]
    assert [p.scope for p in linked_b if isinstance(p, ScopeLinked)] == [a]
    assert b in (await world_fixture.store.get_state(a)).linked


async def test_distinct_pagerduty_incidents_on_one_pagerduty_service_never_merge(world_fixture: World) -> None:
    real = load("pagerduty", "incident_priority_updated.json")  # P1, "API Service"
    (opened,) = await send(world_fixture.router, "pagerduty", pd(real, "incident.triggered", "ev-1"))
    other = pd(real, "incident.triggered", "ev-3")
    other["event"]["data"]["id"] = "Q0THER"  # derived: another PD incident of the same PD service
    (second,) = await send(world_fixture.router, "pagerduty", other)
    assert second.outcome == "new" and second.scope != opened.scope


async def test_once_a_person_sets_the_severity_sources_never_lower_it_and_a_raise_asks(world_fixture: World) -> None:
    real = load("pagerduty", "incident_priority_updated.json")
    (opened,) = await send(world_fixture.router, "pagerduty", pd(real, "incident.triggered", "ev-1", priority="P2"))
    scope = opened.scope
    await world_fixture.service.set_severity(scope, 3, Actor.human("U1", "Ana"))
    await send(world_fixture.router, "pagerduty", pd(real, "incident.priority_updated", "ev-2", priority="P4"))
    assert (await world_fixture.store.get_state(scope)).severity == 3  # not lowered
    await send(world_fixture.router, "pagerduty", pd(real, "incident.priority_updated", "ev-3", priority="P1"))
    state = await world_fixture.store.get_state(scope)
    assert state.severity == 3 and state.severity_set_by_person
    notes = [e for e in await world_fixture.entries(scope, "observation") if e.payload.data.get("note")]
    assert len(notes) == 1 and "SEV1" in notes[0].payload.text and "confirm" in notes[0].payload.text
    await send(world_fixture.router, "pagerduty", pd(real, "incident.priority_updated", "ev-4", priority="P1"))
    again = [e for e in await world_fixture.entries(scope, "observation") if e.payload.data.get("note")]
    assert len(again) == 1  # asked once


async def test_a_more_severe_alert_raises_the_severity_by_the_system(world_fixture: World) -> None:
    payload = load("grafana", "docs_example_firing.json")
    payload["alerts"] = payload["alerts"][:1]
    payload["alerts"][0]["labels"]["severity"] = "P3"
    (opened,) = await send(world_fixture.router, "grafana", payload)
    assert (await world_fixture.store.get_state(opened.scope)).severity == 3
    worse = copy.deepcopy(payload)
    worse["alerts"][0]["labels"]["severity"] = "P1"  # new labels: a new alert of the group (new fingerprint)
    worse["alerts"][0]["fingerprint"] = "c6eadffa33fcdf38"
    await send(world_fixture.router, "grafana", worse)
    (change,) = await world_fixture.entries(opened.scope, "severity_changed")
    assert isinstance(change.payload, SeverityChanged) and change.payload.severity == 1
    assert change.actor.type == "system" and change.actor.id == "grafana" and "grafana" in change.text


async def test_zero_start_time_resends_dedupe_on_content(world_fixture: World) -> None:
    payload = load("grafana", "docs_example_firing.json")
    for alert in payload["alerts"]:
        alert["startsAt"] = "0001-01-01T00:00:00Z"  # as Grafana's test and no-data notifications send it
    first = await send(world_fixture.router, "grafana", payload)
    again = await send(world_fixture.router, "grafana", payload)
    assert [o.outcome for o in again] == ["duplicate", "duplicate"]
    assert len(await world_fixture.entries(first[0].scope, "observation")) == 2


async def test_datadog_default_payload_is_accepted_with_a_one_time_note(world_fixture: World) -> None:
    payload = load("datadog", "default_payload_relay.json")
    (opened,) = await send(world_fixture.router, "datadog", payload)
    assert opened.outcome == "new"
    again = copy.deepcopy(payload)
    again["id"] = "another-event"
    (repeat,) = await send(world_fixture.router, "datadog", again)
    assert repeat.scope == opened.scope
    notes = [e for e in await world_fixture.entries(opened.scope, "observation") if e.payload.data.get("note")]
    assert len(notes) == 1 and "template" in notes[0].payload.text


async def test_big_notification_is_one_transaction_and_repeats_write_nothing(world_fixture: World) -> None:
    payload = load("alertmanager", "probe_failure_firing.json")
    template = payload["alerts"][0]
    payload["alerts"] = []
    for n in range(300):
        alert = copy.deepcopy(template)
        alert["labels"]["instance"] = f"https://host-{n}.example.org"
        alert["fingerprint"] = f"{n:016x}"
        payload["alerts"].append(alert)
    outcomes = await send(world_fixture.router, "alertmanager", payload)
    scope = outcomes[0].scope
    assert {o.scope for o in outcomes} == {scope} and len(await world_fixture.entries(scope, "observation")) == 300
    version = (await world_fixture.store.get_state(scope)).version
    again = await send(world_fixture.router, "alertmanager", payload)
    assert {o.outcome for o in again} == {"duplicate"}
    assert (await world_fixture.store.get_state(scope)).version == version


def test_logs_from_before_the_new_state_fields_fold_to_the_same_stored_json() -> None:
    state = ScopeState(scope="incident/old")
    dumped = json.loads(state.model_dump_json())
    assert not set(OMITTED_WHEN_EMPTY) & set(dumped) and state.to_json() == dumped
    assert fold_all("incident/old", []).to_json() == ScopeState(scope="incident/old").to_json()
    assert Observation(text="x").data == {}


# -- a real Alertmanager capture (matjaz99/alertmonitor): three alerts, no service label, no fingerprint,
# nanosecond times, Go's zero endsAt, and the host-less externalURL of an Alertmanager without --web.external-url


async def test_real_capture_of_three_alerts_without_service_label_is_one_incident(world_fixture: World) -> None:
    payload = load("alertmanager", "alertmonitor_icmp_firing.json")
    outcomes = await send(world_fixture.router, "alertmanager", payload)
    assert [o.outcome for o in outcomes] == ["new", "joined", "joined"]
    scope = outcomes[0].scope
    assert {o.scope for o in outcomes} == {scope} and await world_fixture.incidents() == [scope]
    state = await world_fixture.store.get_state(scope)
    assert len(state.alerts) == 3 and state.services == ("blackbox-icmp",)  # job is the service, not a split
    observations = await world_fixture.entries(scope, "observation")
    links = {url for e in observations for url in e.payload.links}
    assert links == {
        "http://9ed35ff90bf8:9090/graph?g0.expr=probe_success%7Bjob%3D%22blackbox-icmp%22%7D+%3D%3D+0&g0.tab=1"
    }
    assert not any(":9093" in url for url in links)  # http://:9093 has no host: dropped
    again = await send(world_fixture.new_router(), "alertmanager", payload)  # a resend, in another process
    assert [o.outcome for o in again] == ["duplicate"] * 3
    assert (await world_fixture.store.get_state(scope)).version == state.version


async def test_real_capture_resolved_resolves_every_alert_with_one_suggestion(world_fixture: World) -> None:
    firing = await send(world_fixture.router, "alertmanager", load("alertmanager", "alertmonitor_icmp_firing.json"))
    resolved = load("alertmanager", "alertmonitor_icmp_resolved.json")  # endsAt stays Go's zero time, as published
    outcomes = await send(world_fixture.router, "alertmanager", resolved)
    assert [o.outcome for o in outcomes] == ["resolved"] * 3 and {o.scope for o in outcomes} == {firing[0].scope}
    state = await world_fixture.store.get_state(firing[0].scope)
    assert {a.status for a in state.alerts.values()} == {"resolved"}
    assert list(state.suggestion_actions.values()) == ["resolve"]
    again = await send(world_fixture.router, "alertmanager", resolved)
    assert [o.outcome for o in again] == ["duplicate"] * 3


async def test_real_capture_truncated_and_with_zero_start_times(world_fixture: World) -> None:
    payload = load("alertmanager", "alertmonitor_icmp_firing.json")
    payload["truncatedAlerts"] = 12  # derived: the same group past the receiver's max_alerts
    for alert in payload["alerts"]:
        alert["startsAt"] = "0001-01-01T00:00:00Z"  # derived: no usable start time → dedupe on content
    outcomes = await send(world_fixture.router, "alertmanager", payload)
    scope = outcomes[0].scope
    notes = [e for e in await world_fixture.entries(scope, "observation") if "left_out" in e.payload.data]
    assert len(notes) == 1 and "12 more alerts not sent by Alertmanager" in notes[0].payload.text
    version = (await world_fixture.store.get_state(scope)).version
    again = await send(world_fixture.router, "alertmanager", payload)
    assert [o.outcome for o in again] == ["duplicate"] * 3
    assert (await world_fixture.store.get_state(scope)).version == version
    changed = copy.deepcopy(payload)
    changed["alerts"][0]["annotations"]["description"] = "172.29.254.30 replies again, slowly"
    (first, *_rest) = await send(world_fixture.router, "alertmanager", changed)
    assert first.outcome == "repeat" and (await world_fixture.store.get_state(scope)).version == version + 1
