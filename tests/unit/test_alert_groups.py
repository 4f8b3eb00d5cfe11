"""Alert groups as real senders make them, in core over a real SQLite log and index with a manual clock:
a resolved group resolves the alerts it left out (from stored state, in every incident of the group), the storm
limit counts groups, a notification split by service fans out from one parent (and the parent's links survive a
crash), and a refused notification is recorded once per window. Payloads go through the real Alertmanager parser."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import tests.unit.test_alerts_routing as routing
from decklog.adapters.alerts import ALERT_SOURCES
from decklog.adapters.slack.render.header import header
from decklog.adapters.slack.render.replies import entry_reply
from decklog.core.alerts import AlertRouter
from decklog.core.alerts.locks import KeyedLocks
from decklog.core.alerts.refusals import Refusals, refused_title
from decklog.core.alerts.splits import SPLIT_FROM, SPLIT_INTO
from decklog.core.changes import ChangeLinkSender, ChangeService
from decklog.core.entries import Actor, NewEntry, Observation, ScopeLinked, StatusChanged
from decklog.core.state import ScopeState
from tests.unit.test_alerts_routing import World

world = routing.world  # a real SQLite log and index, a manual clock
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "alerts"
GROUP_KEY = '{}:{alertname="InstanceDown"}'


def am_alert(
    n: int, status: str = "firing", *, service: str = "", starts: str = "2026-12-07T07:00:00Z"
) -> dict[str, Any]:
    labels = {"alertname": "InstanceDown", "instance": f"host-{n:04d}", "job": "node"}
    if service:
        labels["service"] = service
    return {
        "status": status,
        "labels": labels,
        "annotations": {"summary": f"host-{n:04d} is down"},
        "startsAt": starts,
        "endsAt": "2026-12-07T08:00:00Z" if status == "resolved" else "0001-01-01T00:00:00Z",
        "fingerprint": f"{n:016x}",
    }


def notification(
    alerts: list[dict[str, Any]], *, status: str = "", key: str = GROUP_KEY, left_out: int = 0
) -> dict[str, Any]:
    """An Alertmanager webhook notification (version 4) of one group."""
    statuses = {a["status"] for a in alerts}
    return {
        "version": "4",
        "groupKey": key,
        "truncatedAlerts": left_out,
        "status": status or ("firing" if "firing" in statuses else "resolved"),
        "receiver": "decklog",
        "groupLabels": {"alertname": "InstanceDown"},
        "commonLabels": {"alertname": "InstanceDown", "job": "node"},
        "commonAnnotations": {},
        "externalURL": "http://alertmanager:9093",
        "alerts": alerts,
    }


async def send(router: AlertRouter, payload: dict[str, Any]) -> list[Any]:
    return await router.receive("alertmanager", ALERT_SOURCES["alertmanager"].parse(payload), raw={"json": {}})


async def firing_count(w: World, scope: str) -> int:
    return len((await w.store.get_state(scope)).firing_alerts)


# -- the parser --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("source", "name", "expected"),
    [
        ("alertmanager", "payments_5xx_firing.json", False),
        ("alertmanager", "payments_5xx_resolved.json", True),
        ("alertmanager", "alertmonitor_icmp_resolved.json", True),
        ("grafana", "docs_example_firing.json", False),
        ("grafana", "docs_example_resolved.json", True),
    ],
)
def test_a_group_level_resolved_status_is_parsed(source: str, name: str, expected: bool) -> None:
    payload = json.loads((FIXTURES / source / name).read_text(encoding="utf-8"))
    signals = ALERT_SOURCES[source].parse(payload)
    assert signals and {s.group_resolved for s in signals} == {expected}


def test_without_a_group_a_resolved_status_resolves_only_what_it_names() -> None:
    payload = notification([am_alert(1, "resolved")], status="resolved", key="")
    for name in ("groupLabels", "commonLabels"):
        payload[name] = {}
    [signal] = ALERT_SOURCES["alertmanager"].parse(payload)
    assert signal.group == "" and not signal.group_resolved


# -- a resolved group resolves every alert of it --------------------------------------------------------------------


async def test_a_resolved_group_resolves_the_alerts_it_left_out_from_stored_state(world: World) -> None:
    """641 alerts fire; the resolved notification names 500 (max_alerts) and is read by another process."""
    for start in range(0, 641, 100):
        await send(world.router, notification([am_alert(n) for n in range(start, min(641, start + 100))]))
    [scope] = await world.incidents()
    assert await firing_count(world, scope) == 641
    later = world.new_router()  # no memory of the group: what it resolves comes from the log and the index
    resolved = notification([am_alert(n, "resolved") for n in range(500)], left_out=141)
    outcomes = await send(later, resolved)
    assert {o.outcome for o in outcomes} == {"resolved"} and len(outcomes) == 500
    state = await world.store.get_state(scope)
    assert not state.firing_alerts and len(state.alerts) == 641
    implied = [e for e in await world.entries(scope, "observation") if e.payload.data.get("resolved_with_group")]
    assert len(implied) == 141 and {e.payload.alert_status for e in implied} == {"resolved"}
    [suggestion] = await world.entries(scope, "suggestion")
    assert "All 641 alerts" in suggestion.payload.text
    version = state.version
    await send(world.new_router(), resolved)  # Alertmanager's retry: nothing twice
    assert (await world.store.get_state(scope)).version == version
    assert (await world.store.verify(scope)).ok


async def test_only_the_groups_alerts_resolve_in_an_incident_that_holds_others(world: World) -> None:
    """A lone alert of the same source joined the group's incident (same service, grouping window): the group's
    resolve leaves it firing — the log says which alerts came with the group."""
    await send(world.router, notification([am_alert(n, service="payments") for n in range(3)]))
    [scope] = await world.incidents()
    lone = routing.alert("lone-fp", service="payments", title="payments: queue backlog")
    assert (await world.send(lone))[0].scope == scope
    await send(world.new_router(), notification([am_alert(0, "resolved", service="payments")], left_out=2))
    state = await world.store.get_state(scope)
    assert [a.fingerprint for a in state.firing_alerts] == ["lone-fp"]
    assert not await world.entries(scope, "suggestion")


async def test_an_alert_resolved_with_its_group_that_fires_again_is_recorded(world: World) -> None:
    """A left-out alert may still have been firing (Alertmanager sorts before it truncates): when it is sent again
    with its old start time, it fires again in decklog — the implied resolve left its own notification identity."""
    await send(world.router, notification([am_alert(n) for n in range(3)]))
    [scope] = await world.incidents()
    await send(world.router, notification([am_alert(0, "resolved")], left_out=2))
    assert await firing_count(world, scope) == 0
    [again] = await send(world.router, notification([am_alert(2)]))  # the same startsAt as before
    assert again.outcome != "duplicate" and again.scope == scope
    assert await firing_count(world, scope) == 1


async def test_a_resolved_split_group_resolves_a_service_it_left_out_entirely(world: World) -> None:
    """A group split by service into three incidents; its resolved notification names only two services (the
    third was truncated away): the third's incident resolves too, found through the links to the parent."""
    alerts = [am_alert(n, service=f"svc-{n % 3}") for n in range(9)]
    await send(world.router, notification(alerts))
    scopes = await world.incidents()
    assert len(scopes) == 3
    resolved = [am_alert(n, "resolved", service=f"svc-{n % 3}") for n in range(9) if n % 3 != 2]
    await send(world.new_router(), notification(resolved, left_out=3))
    for scope in scopes:
        assert await firing_count(world, scope) == 0, scope


# -- storms and splits ---------------------------------------------------------------------------------------------


async def test_the_storm_limit_counts_a_split_notifications_groups_and_a_big_group_once(world: World) -> None:
    router = world.new_router(rate_limit_per_minute=3)
    big = notification([am_alert(n) for n in range(500)], key='{}:{alertname="Big"}')
    [scope] = {o.scope for o in await send(router, big)}  # one group: counts once, opens one incident
    assert not (await world.store.get_state(scope)).title.startswith("Alert storm")
    split = notification([am_alert(1000 + n, service=f"svc-{n}") for n in range(6)])
    outcomes = await send(router, split)
    titles = {o.scope: (await world.store.get_state(o.scope)).title for o in outcomes}
    storm = [s for s, t in titles.items() if t.startswith("Alert storm")]
    assert len(titles) == 3 and len(storm) == 1  # two more groups under the limit, the other four in the storm
    assert len((await world.store.get_state(storm[0])).alerts) == 4
    assert [o.storm for o in outcomes] == [False, False, True, True, True, True]


async def test_a_split_notification_links_each_incident_to_one_parent(world: World) -> None:
    outcomes = await send(world.router, notification([am_alert(n, service=f"svc-{n}") for n in range(5)]))
    parent, *children = [o.scope for o in outcomes]
    parent_links = [e.payload for e in await world.entries(parent, "scope_linked")]
    assert sorted(p.scope for p in parent_links if isinstance(p, ScopeLinked)) == sorted(children)
    assert {p.relation for p in parent_links if isinstance(p, ScopeLinked)} == {SPLIT_INTO}
    for child in children:
        [link] = [e.payload for e in await world.entries(child, "scope_linked")]
        assert isinstance(link, ScopeLinked) and (link.scope, link.relation) == (parent, SPLIT_FROM)
    [line] = [e for e in await world.entries(parent, "observation") if "split" in e.payload.data]
    assert "4 more incidents" in line.payload.text and all(c in line.payload.text for c in children)
    # Slack: the links are quiet; the parent's one line is posted
    state = await world.store.get_state(parent)
    for e in await world.entries(parent, "scope_linked"):
        assert entry_reply(e, state) is None
    assert entry_reply(line, state) is not None


async def test_a_parent_gets_its_links_back_from_the_outbox_when_the_request_died_first(world: World) -> None:
    async def died(_family: Any) -> None:
        return None  # the process died before the end of the request

    router = world.new_router()
    router.splits.link = died  # type: ignore[method-assign]
    outcomes = await send(router, notification([am_alert(n, service=f"svc-{n}") for n in range(3)]))
    parent, *children = [o.scope for o in outcomes]
    assert (await world.store.get_state(parent)).linked == ()
    sender = ChangeLinkSender(ChangeService(world.store, world.index, world.service, world.clock), world.store)
    sender.splits = world.router.splits  # what bot/wiring.py wires: the changes topic's delivery
    for child in children:
        await sender.deliver(child, await world.store.read(child, kinds=("declared",)))
        await sender.deliver(child, await world.store.read(child, kinds=("declared",)))  # a redelivery
    assert sorted((await world.store.get_state(parent)).linked) == sorted(children)


def test_a_header_with_many_links_names_ten_and_counts_the_rest() -> None:
    state = ScopeState(
        scope="incident/parent", kind="incident", title="x", linked=tuple(f"incident/c-{n}" for n in range(130))
    )
    text = json.dumps(header(state).blocks)
    assert "`incident/c-9`" in text and "`incident/c-10`" not in text and "+120 more" in text


# -- a refused notification, recorded once per window ------------------------------------------------------------


def refusals(w: World) -> Refusals:
    return Refusals(w.store, w.index, w.service, w.clock, KeyedLocks(), severity=3)


async def test_a_refused_notification_is_recorded_once_per_window_from_stored_state(world: World) -> None:
    scope = await refusals(world).record("alertmanager", 41_200_000, 32_000_000)
    for _ in range(5):  # Alertmanager's retries, a few seconds apart, seen by another process each time
        world.clock.advance(seconds=5)
        assert await refusals(world).record("alertmanager", 41_200_000, 32_000_000) == scope
    state = await world.store.get_state(scope)
    assert state.title == refused_title("alertmanager") and state.severity == 3
    [refusal] = [e.payload for e in await world.entries(scope, "observation")]
    assert isinstance(refusal, Observation)
    assert "41.2 MB" in refusal.text and "32.0 MB" in refusal.text and "max_alerts" in refusal.text
    world.clock.advance(minutes=11)  # the next window: one more entry
    await refusals(world).record("alertmanager", None, 32_000_000)
    later = [e.payload.text for e in await world.entries(scope, "observation")]
    assert len(later) == 2 and "more than 32.0 MB" in later[1]
    # resolved by a person: the next window's refusal opens a new incident
    resolve = NewEntry.make("status_changed", Actor.human("U0ALICE", "alice"), StatusChanged(status="resolved"))
    await world.store.append(scope, [resolve])
    world.clock.advance(minutes=11)
    assert await refusals(world).record("alertmanager", 41_200_000, 32_000_000) != scope
