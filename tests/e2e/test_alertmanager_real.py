"""A real Prometheus Alertmanager (Debian's ``prometheus-alertmanager``) sending to ``decklog serve``:
alerts are posted to Alertmanager's ``/api/v2/alerts``, and Alertmanager's webhook notifications reach
``/alerts/alertmanager`` as they would in production. Under ``CI=true`` a missing Alertmanager fails these tests.

- a 10,000-alert group (about 10 MB) is recorded whole; one over the limit is refused with a 413 and recorded once,
  however often Alertmanager retries, and ``max_alerts`` (what the refusal says to set) makes it go through;
- a group truncated by ``max_alerts`` resolves whole when its resolved notification comes;
- a notification split by service fans out from one parent (N − 1 links, not N·(N − 1)), posts one line, and the
  per-source storm limit applies to it.

Everything is polled with a deadline; nothing sleeps for an effect.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from decklog.bot.server import DecklogServer
from decklog.core.alerts.splits import SPLIT_FROM, SPLIT_INTO
from decklog.core.entries import Entry, Observation, ScopeLinked
from decklog.core.state import ScopeState
from tests.conftest import ServerFactory, eventually, test_config
from tests.fakes.slack_calls import slack_calls
from tests.helpers.monitoring import ALERTMANAGER, Alertmanager, firing, kube_alert, require_binary, resolved, webhook

TOKEN = "real-alertmanager-token"
ALERTS_CHANNEL = "C0ALERTS"

StartAlertmanager = Callable[..., Awaitable[Alertmanager]]


@pytest.fixture
async def alertmanagers(tmp_path: Path) -> AsyncIterator[StartAlertmanager]:
    """``await start(server, **route)``: a real Alertmanager whose one receiver is ``server``'s webhook."""
    binary = require_binary(ALERTMANAGER)
    started: list[Alertmanager] = []

    async def start(server: DecklogServer, **route: Any) -> Alertmanager:
        am = await Alertmanager.start(
            tmp_path / f"alertmanager-{len(started)}", webhook(server.url, TOKEN, **route), binary=binary
        )
        started.append(am)
        return am

    yield start
    for am in started:
        await am.stop()


async def decklog(make_server: ServerFactory, **alerts: Any) -> DecklogServer:
    """``decklog serve`` in sandbox mode with the alert token; no agent turn during the test (Slack shows only what
    the alerts make)."""
    config = test_config(alerts=alerts) if alerts else test_config()
    return await make_server(alert_token=TOKEN, config=config, first_turn_delay=3600, turn_debounce=3600)


async def incidents(server: DecklogServer) -> list[str]:
    """The incidents declared so far (not those only reserved for a declaration under way)."""
    store = server.runtime.store
    return sorted([str(s) for s in await store.scope_ids() if s.kind == "incident" and await store.exists(s)])


async def state_of(server: DecklogServer, scope: str) -> ScopeState:
    return await server.runtime.store.get_state(scope)


async def entries(server: DecklogServer, scope: str, kind: str) -> list[Entry]:
    return await server.runtime.store.read(scope, kinds=(kind,))


async def answers(server: DecklogServer, status: int) -> int:
    """How many alert notifications decklog answered with ``status`` (from its ``/metrics``)."""
    async with aiohttp.ClientSession() as http, http.get(server.url + "/metrics") as response:
        text = await response.text()
    total = 0.0
    for line in text.splitlines():
        ours = line.startswith("decklog_http_requests_total{") and 'route="/alerts/{source}"' in line
        if ours and f'status="{status}"' in line:
            total += float(line.rsplit(" ", 1)[1])
    return int(total)


async def slack_settled(server: DecklogServer) -> bool:
    """Every Slack outbox row delivered."""
    store = server.runtime.store
    for scope in await store.scope_ids():
        if (await store.outbox_summary(scope)).pending.get("slack", 0):
            return False
    return True


def top_level_posts(server: DecklogServer) -> list[Any]:
    return [c for c in slack_calls(server.sandbox).calls_to("chat.postMessage") if not c.args.get("thread_ts")]


def thread_posts(server: DecklogServer) -> list[Any]:
    return [c for c in slack_calls(server.sandbox).calls_to("chat.postMessage") if c.args.get("thread_ts")]


# -- big groups --------------------------------------------------------------------------------------------------


async def test_a_ten_thousand_alert_group_from_a_real_alertmanager_is_recorded_whole(
    make_server: ServerFactory, alertmanagers: StartAlertmanager
) -> None:
    server = await decklog(make_server)
    # group_interval is also Alertmanager's notification timeout: a minute for ~10 MB on a busy test machine
    am = await alertmanagers(server, group_wait="2s", group_interval="1m")
    await am.post_alerts([kube_alert(n) for n in range(10_000)])

    async def recorded() -> str | None:
        for scope in await incidents(server):
            state = await state_of(server, scope)
            if len(state.firing_alerts) == 10_000:
                return scope
        return None

    scope = await eventually(recorded, timeout=240, interval=0.5, what="10,000 firing alerts in one incident")
    assert await incidents(server) == [scope]
    opening = next(e for e in await entries(server, scope, "observation") if e.payload.raw)
    assert opening.payload.raw["bytes"] > 8_000_000  # one notification of ~10 MB (1.3 MB used to get a 413)
    assert await answers(server, 413) == 0


async def test_a_group_over_the_limit_is_refused_and_recorded_once_however_often_alertmanager_retries(
    make_server: ServerFactory, alertmanagers: StartAlertmanager
) -> None:
    limit = 100_000
    server = await decklog(make_server, max_payload_bytes=limit)
    alerts = [kube_alert(n) for n in range(300)]  # ~316 KB in one notification
    am = await alertmanagers(server, group_wait="3s")
    await am.post_alerts(alerts)
    await eventually(lambda: answers(server, 413), timeout=60, what="a 413")

    async def retried() -> bool:
        return await answers(server, 413) >= 4  # Alertmanager sends it again every group_interval (1 s here)

    await eventually(retried, timeout=60, what="Alertmanager's retries")
    [scope] = await incidents(server)  # one incident, not one per retry
    state = await state_of(server, scope)
    assert state.title == "Alertmanager notifications refused: over decklog's size limit"
    refusals = [e.payload for e in await entries(server, scope, "observation") if "refused" in e.payload.data]
    assert len(refusals) == 1  # coalesced: one entry per source per window
    [refusal] = refusals
    assert isinstance(refusal, Observation)
    size = refusal.data["refused"]["bytes"]
    assert size > limit and refusal.data["refused"]["limit"] == limit
    assert f"{size / 1_000_000:.1f} MB" in refusal.text and "max_alerts" in refusal.text
    assert "Alertmanager" in refusal.text

    async def in_slack() -> bool:  # the header in the alerts channel, and the refusal in its thread
        headers = [c for c in top_level_posts(server) if c.args["channel"] == ALERTS_CHANNEL]
        replies = [c for c in thread_posts(server) if "max_alerts" in str(c.args.get("blocks"))]
        return any("refused" in str(c.args.get("text")) for c in headers) and len(replies) == 1

    await eventually(in_slack, timeout=20, what="the refusal in the alerts channel")

    # Doing what it says: max_alerts on the webhook → the group goes through, and what was left out is counted
    await am.stop()
    fixed = await alertmanagers(server, max_alerts=50, group_wait="3s")
    await fixed.post_alerts(alerts)

    async def accepted() -> str | None:
        for other in await incidents(server):
            if other != scope and (await state_of(server, other)).alerts_left_out.get("alertmanager") == 250:
                return other
        return None

    group = await eventually(accepted, timeout=60, what="the group, truncated to 50 alerts")
    assert len((await state_of(server, group)).alerts) >= 50
    assert await incidents(server) == sorted([scope, group])


# -- a truncated group resolves whole ---------------------------------------------------------------------------


async def test_a_group_truncated_by_max_alerts_resolves_every_alert_when_it_resolves(
    make_server: ServerFactory, alertmanagers: StartAlertmanager
) -> None:
    server = await decklog(make_server)
    am = await alertmanagers(server, max_alerts=500)
    alerts = [firing("InstanceDown", instance=f"host-{n:04d}", job="node") for n in range(641)]

    async def seen(count: int) -> str | None:
        for scope in await incidents(server):
            if len((await state_of(server, scope)).alerts) >= count:
                return scope
        return None

    # Newest first: Alertmanager sorts a group before it truncates it, so each notification's first 500 differ
    # and decklog sees all 641 fire, though never more than 500 in one notification.
    for start in range(640, -1, -100):
        await am.post_alerts(alerts[max(0, start - 99) : start + 1])
        await eventually(lambda start=start: seen(641 - max(0, start - 99)), timeout=60, what="the next batch")
    [scope] = await incidents(server)
    assert len((await state_of(server, scope)).firing_alerts) == 641

    await am.post_alerts([resolved(a) for a in alerts])  # Alertmanager sends the first 500 resolved, then forgets

    async def all_resolved() -> bool:
        state = await state_of(server, scope)
        return not state.firing_alerts and "resolve" in state.suggestion_actions.values()

    await eventually(all_resolved, timeout=60, what="every alert of the group resolved")
    observations = [e.payload for e in await entries(server, scope, "observation")]
    implied = [p for p in observations if p.data.get("resolved_with_group")]
    assert len(implied) == 141  # the alerts the resolved notification left out (truncatedAlerts)
    assert [p.data["left_out"] for p in observations if p.data.get("left_out")][-1] == 141
    suggestions = await entries(server, scope, "suggestion")
    assert len(suggestions) == 1 and "All 641 alerts" in suggestions[0].payload.text
    assert (await server.runtime.store.verify(scope)).ok


# -- one notification, many services ----------------------------------------------------------------------------


def link_counts(links: list[Entry]) -> dict[str, int]:
    out: dict[str, int] = {}
    for e in links:
        assert isinstance(e.payload, ScopeLinked)
        out[e.payload.relation] = out.get(e.payload.relation, 0) + 1
    return out


async def test_a_notification_split_over_fifty_services_links_each_to_one_parent_and_posts_one_line(
    make_server: ServerFactory, alertmanagers: StartAlertmanager
) -> None:
    server = await decklog(make_server)
    am = await alertmanagers(server)  # group_by alertname: one notification, 50 services
    await am.post_alerts([firing("HighErrorRate", service=f"svc-{n:02d}", severity="warning") for n in range(50)])

    async def opened() -> list[str] | None:
        scopes = await incidents(server)
        return scopes if len(scopes) == 50 else None

    scopes = await eventually(opened, timeout=60, what="50 incidents")
    links: dict[str, list[Entry]] = {}

    async def linked() -> bool:
        for scope in scopes:
            links[scope] = await entries(server, scope, "scope_linked")
        return sum(len(found) for found in links.values()) == 98

    await eventually(linked, timeout=30, what="49 links each way")
    [parent] = [s for s in scopes if len(links[s]) == 49]
    assert link_counts(links[parent]) == {SPLIT_INTO: 49}
    for child in set(scopes) - {parent}:
        [link] = links[child]
        assert isinstance(link.payload, ScopeLinked) and link.payload.scope == parent
        assert link.payload.relation == SPLIT_FROM
    lines = [e for e in await entries(server, parent, "observation") if "split" in e.payload.data]
    assert len(lines) == 1 and "49 more incidents" in lines[0].payload.text

    await eventually(lambda: slack_settled(server), timeout=60, what="Slack caught up")
    assert len(top_level_posts(server)) == 50  # one header per incident
    assert len(thread_posts(server)) == 1  # the parent's one line (2,450 link posts before)
    assert await answers(server, 500) == 0


async def test_the_storm_limit_applies_to_a_notification_of_two_thousand_services(
    make_server: ServerFactory, alertmanagers: StartAlertmanager
) -> None:
    server = await decklog(make_server, rate_limit_per_minute=20)
    am = await alertmanagers(server, group_wait="2s", group_interval="2m")  # a 2-minute notification timeout
    await am.post_alerts([firing("HighErrorRate", service=f"svc-{n:04d}") for n in range(2_000)])

    async def routed() -> list[str] | None:
        scopes = await incidents(server)
        if len(scopes) != 21:
            return None
        alerts = sum([len((await state_of(server, s)).alerts) for s in scopes])
        return scopes if alerts == 2_000 else None

    scopes = await eventually(routed, timeout=120, interval=0.5, what="20 incidents and the storm incident")
    titles = [(await state_of(server, s)).title for s in scopes]
    [storm] = [s for s, t in zip(scopes, titles, strict=True) if t.startswith("Alert storm")]
    assert len((await state_of(server, storm)).alerts) == 1_980
    await eventually(lambda: answers(server, 202), timeout=60, what="decklog's answer to the notification")
    assert await answers(server, 500) == 0
    links = [e for s in scopes for e in await entries(server, s, "scope_linked")]
    assert link_counts(links) == {SPLIT_FROM: 19, SPLIT_INTO: 19}  # not 2,000 × 1,999
    await eventually(lambda: slack_settled(server), timeout=60, what="Slack caught up")
    assert len(top_level_posts(server)) == 21
    assert len(thread_posts(server)) <= 5  # the parent's line and the storm incident's summaries
