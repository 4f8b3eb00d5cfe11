"""Alert routing in core over a real SQLite log and index, with a manual clock: fingerprints, the grouping window,
retries vs repeats, the all-clear suggestion, storms, severity mapping, summaries and racing first alerts."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from decklog.core.alarm import AsyncioAlarm
from decklog.core.alerts import (
    SUMMARY_SOURCE,
    AlertPolicy,
    AlertRouter,
    AlertSummarizer,
    RateLimiter,
    map_severity,
    notification_key,
)
from decklog.core.alerts.locks import KeyedLocks
from decklog.core.alerts.summary import AlertItem
from decklog.core.clock import ManualClock
from decklog.core.entries import Actor, Entry, Observation
from decklog.core.index.sender import IndexSender
from decklog.core.outbox.dispatcher import Dispatcher
from decklog.core.service import ScopeService
from decklog.core.signals import AlertSignal
from decklog.core.store.ports import IndexPort
from decklog.core.store.sqlite.index import SqliteIndex
from decklog.core.store.sqlite.log_store import SqliteLogStore
from tests.conftest import eventually

SEVERITY = {"alertmanager": {"critical": 1, "Warning": 3}, "PagerDuty": {"P1": 1, "high": 2}}


@dataclass
class World:
    clock: ManualClock
    store: SqliteLogStore
    index: IndexPort
    service: ScopeService
    dispatcher: Dispatcher
    router: AlertRouter

    def new_router(self, **policy: Any) -> AlertRouter:
        """A second process's router: same log and index, empty caches."""
        return AlertRouter(self.store, self.index, self.service, self.clock, AlertPolicy.build(**policy))

    async def send(self, *signals: AlertSignal, router: AlertRouter | None = None) -> list[Any]:
        return await (router or self.router).receive("alertmanager", list(signals), raw={"json": {"n": 1}})

    async def incidents(self) -> list[str]:
        return sorted(str(s) for s in await self.store.scope_ids() if s.kind == "incident")

    async def entries(self, scope: str, kind: str | None = None) -> list[Entry]:
        return [e for e in await self.store.read(scope) if kind is None or e.kind == kind]


def alert(
    fingerprint: str = "fp-5xx",
    status: str = "firing",
    *,
    service: str = "payments",
    title: str = "payments: elevated 5xx",
    severity: str = "critical",
    started: datetime | None = datetime(2026, 9, 19, 14, 6, 30, tzinfo=UTC),
    event_id: str = "",
    ended: datetime | None = None,
) -> AlertSignal:
    return AlertSignal(
        source="alertmanager",
        fingerprint=fingerprint,
        status=status,  # type: ignore[arg-type]
        title=title,
        service=service,
        source_severity=severity,
        started_at=started,
        ended_at=ended,
        event_id=event_id,
    )


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[World]:
    clock = ManualClock()
    store = SqliteLogStore(tmp_path, topics=("index",), clock=clock)
    index = SqliteIndex(tmp_path / "index.db", store.executor)
    await index.open()
    dispatcher = Dispatcher(store, [IndexSender(index, store)], alarm=AsyncioAlarm())
    dispatcher.start()
    service = ScopeService(store, index)
    router = AlertRouter(store, index, service, clock, AlertPolicy.build(severity=SEVERITY))
    yield World(clock, store, index, service, dispatcher, router)
    await dispatcher.stop()
    await index.close()
    await store.close()


# -- opening, repeating, retrying --------------------------------------------------------------------------------


async def test_a_first_alert_declares_an_incident_with_the_alert_in_the_same_transaction(world: World) -> None:
    (outcome,) = await world.send(alert())
    assert outcome.outcome == "new" and outcome.severity == 1
    entries = await world.entries(outcome.scope)
    assert [e.kind for e in entries] == ["declared", "observation"]
    declared, observed = entries[0].payload, entries[1].payload
    assert declared.via == "alert" and declared.services == ("payments",) and declared.severity == 1
    assert declared.title == "payments: elevated 5xx"
    assert isinstance(observed, Observation)
    assert observed.fingerprint == "fp-5xx" and observed.alert_status == "firing"
    assert observed.data["opened_incident"] is True and observed.raw == {"json": {"n": 1}}
    assert await world.index.open_scope_for_fingerprint("fp-5xx") == outcome.scope


async def test_a_retry_of_the_same_notification_appends_nothing_but_a_new_notification_counts(world: World) -> None:
    (first,) = await world.send(alert(event_id="ev-1"))
    (retry,) = await world.send(alert(event_id="ev-1"))
    (repeat,) = await world.send(alert(event_id="ev-2"))
    assert retry.outcome == "duplicate" and retry.scope == first.scope
    assert repeat.outcome == "repeat" and repeat.scope == first.scope
    state = await world.store.get_state(first.scope)
    assert state.alerts["fp-5xx"].count == 2 and state.alert_repeats == 1
    # the raw payload is kept once per request: on the observation the request appended
    observations = await world.entries(first.scope, "observation")
    assert [bool(e.payload.raw) for e in observations] == [True, True]


async def test_a_resend_that_changes_nothing_writes_nothing_durable(world: World) -> None:
    """README: "a resend that changes nothing writes nothing" — no row, no outbox row, not one WAL frame."""
    first, _ = await world.send(alert(event_id="ev-1"), alert("fp-other", event_id="ev-9"))
    await world.dispatcher.idle()
    await world.dispatcher.marks.flush()
    file = world.store.file_of(first.scope)
    assert file is not None
    wal = Path(str(file.path) + "-wal")

    def written() -> tuple[int, int]:
        assert file._conn is not None
        return file._conn.connection.dbapi_connection.total_changes, wal.stat().st_size

    before, version = written(), (await world.store.get_state(first.scope)).version
    outcomes = await world.send(alert(event_id="ev-1"), alert("fp-other", event_id="ev-9"))
    assert {o.outcome for o in outcomes} == {"duplicate"} and {o.scope for o in outcomes} == {first.scope}
    assert not any(o.appended for o in outcomes)
    assert written() == before
    assert (await world.store.get_state(first.scope)).version == version


async def test_a_retry_through_another_router_after_a_restart_is_still_a_duplicate(world: World) -> None:
    (first,) = await world.send(alert(event_id="ev-1"))
    await world.dispatcher.idle()
    (retry,) = await world.send(alert(event_id="ev-1"), router=world.new_router())
    assert retry.outcome == "duplicate" and retry.scope == first.scope
    assert len(await world.entries(first.scope, "observation")) == 1


def test_notification_identity_uses_the_event_id_else_the_time_the_status_refers_to() -> None:
    started = datetime(2026, 9, 19, 14, 6, 30, tzinfo=UTC)
    assert notification_key(alert(event_id="a")) != notification_key(alert(event_id="b"))
    assert notification_key(alert()) == notification_key(alert())  # same startsAt: a retry
    assert notification_key(alert()) != notification_key(alert(started=started + timedelta(minutes=5)))
    resolved = alert(status="resolved", ended=started + timedelta(minutes=30))
    assert notification_key(resolved) != notification_key(alert(status="resolved", ended=started))
    # no usable start time (Go's zero startsAt): the content tells a resend from a new notification
    assert notification_key(alert(started=None)) == notification_key(alert(started=None))
    assert notification_key(alert(started=None)) != notification_key(alert(started=None, title="other"))


# -- grouping ----------------------------------------------------------------------------------------------------


async def test_a_new_fingerprint_on_the_same_service_joins_within_the_window_and_not_after(world: World) -> None:
    (first,) = await world.send(alert("fp-5xx"))
    world.clock.advance(minutes=9)
    (latency,) = await world.send(alert("fp-latency", title="payments: p99 latency"))
    assert latency.outcome == "joined" and latency.scope == first.scope
    (other,) = await world.send(alert("fp-db", service="ledger", title="ledger: db down"))
    assert other.outcome == "new" and other.scope != first.scope
    world.clock.advance(minutes=10, seconds=1)  # 10 min 1 s after the incident's last alert
    (late,) = await world.send(alert("fp-queue", title="payments: queue backlog"))
    assert late.outcome == "new" and late.scope not in (first.scope, other.scope)
    # a repeat of a grouped fingerprint still goes to its own incident, however late
    world.clock.advance(hours=3)
    (again,) = await world.send(alert("fp-latency", title="payments: p99 latency", event_id="x"))
    assert again.outcome == "repeat" and again.scope == first.scope


async def test_grouping_finds_the_incident_through_the_index_after_a_restart(world: World) -> None:
    (first,) = await world.send(alert("fp-5xx"))
    await world.dispatcher.idle()
    world.clock.advance(minutes=4)
    (joined,) = await world.send(alert("fp-latency"), router=world.new_router())
    assert joined.outcome == "joined" and joined.scope == first.scope


async def test_alerts_without_a_service_never_group(world: World) -> None:
    (a,) = await world.send(alert("fp-a", service=""))
    (b,) = await world.send(alert("fp-b", service=""))
    assert a.outcome == b.outcome == "new" and a.scope != b.scope


async def test_a_fingerprint_of_a_resolved_incident_opens_a_new_one(world: World) -> None:
    (first,) = await world.send(alert())
    await world.service.resolve(first.scope, Actor.human("U0ALICE"))
    world.clock.advance(minutes=1)
    (again,) = await world.send(alert(event_id="later"))
    assert again.outcome == "new" and again.scope != first.scope
    assert again.scope.startswith(first.scope)  # same title, never the same id


async def test_a_resolve_or_ack_for_an_alert_no_open_incident_has_opens_nothing(world: World) -> None:
    (outcome,) = await world.send(alert(status="resolved"))
    assert outcome.outcome == "ignored" and outcome.scope == ""
    assert await world.incidents() == []


# -- the all-clear -----------------------------------------------------------------------------------------------


async def test_resolving_every_alert_suggests_resolving_once_and_never_resolves(world: World) -> None:
    (first,) = await world.send(alert("fp-1"))
    await world.send(alert("fp-2"))
    (one,) = await world.send(alert("fp-1", "resolved", ended=datetime(2026, 9, 19, 15, tzinfo=UTC)))
    assert one.outcome == "resolved" and not one.suggested_resolve
    (two,) = await world.send(alert("fp-2", "resolved", ended=datetime(2026, 9, 19, 15, tzinfo=UTC)))
    assert two.suggested_resolve
    (again,) = await world.send(alert("fp-2", "resolved", ended=datetime(2026, 9, 19, 15, 5, tzinfo=UTC)))
    assert again.outcome == "resolved" and not again.suggested_resolve  # already resolved: no second suggestion
    suggestions = await world.entries(first.scope, "suggestion")
    assert [s.payload.action for s in suggestions] == ["resolve"]
    assert suggestions[0].refs == (two.seq,)
    state = await world.store.get_state(first.scope)
    assert state.status == "investigating" and not state.firing_alerts
    # it fires and clears again while the first suggestion is still open: no second one
    await world.send(alert("fp-1", event_id="refire"))
    await world.send(alert("fp-1", "resolved", event_id="reclear"))
    assert len(await world.entries(first.scope, "suggestion")) == 1


# -- storms ------------------------------------------------------------------------------------------------------


async def test_beyond_the_rate_limit_new_alerts_go_to_one_storm_incident(world: World) -> None:
    router = world.new_router(rate_limit_per_minute=3)
    outcomes = []
    for n in range(10):
        outcomes += await world.send(alert(f"fp-{n}", service=f"svc-{n}", title=f"svc-{n} down"), router=router)
    assert [o.outcome for o in outcomes] == ["new"] * 4 + ["joined"] * 6
    storm = outcomes[3].scope
    assert outcomes[3].storm and {o.scope for o in outcomes[4:]} == {storm}
    state = await world.store.get_state(storm)
    assert state.title == "Alert storm: more than 3 alertmanager alerts a minute"
    assert len(state.alerts) == 7 and set(state.services) == {f"svc-{n}" for n in range(3, 10)}
    # every alert is recorded: one observation each
    total = [len(await world.entries(s, "observation")) for s in await world.incidents()]
    assert sum(total) == 10


async def test_alerts_over_the_limit_at_the_same_moment_open_one_storm_incident(world: World) -> None:
    """A storm's new alerts arrive together, each on its own service: they take the source's storm lock, so the
    first declares the storm incident and the others join it (they used to declare one each)."""
    router = world.new_router(rate_limit_per_minute=3)
    for n in range(3):
        await world.send(alert(f"fp-pre-{n}", service=f"pre-{n}", title=f"pre-{n} down"), router=router)
    sent = [alert(f"fp-{n}", service=f"svc-{n}", title=f"svc-{n} down", event_id=f"ev-{n}") for n in range(20)]
    outcomes = [o for out in await asyncio.gather(*(world.send(a, router=router) for a in sent)) for o in out]
    assert all(o.storm for o in outcomes)
    [storm] = {o.scope for o in outcomes}
    assert sorted(o.outcome for o in outcomes) == ["joined"] * 19 + ["new"]
    assert (await world.store.get_state(storm)).title == "Alert storm: more than 3 alertmanager alerts a minute"
    assert len(await world.incidents()) == 4


def test_the_rate_limiter_counts_a_sliding_minute() -> None:
    now = [0.0]
    limiter = RateLimiter(3, monotonic=lambda: now[0])
    assert [limiter.hit("am") for _ in range(4)] == [False, False, False, True]
    assert not limiter.hit("grafana")  # per source
    now[0] = 61.0
    assert not limiter.hit("am")


# -- severity ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("source", "word", "expected"),
    [
        ("alertmanager", "critical", 1),
        ("alertmanager", "CRITICAL", 1),
        ("alertmanager", "warning", 3),  # the table's own key was "Warning"
        ("pagerduty", "p1", 1),  # the table's source was "PagerDuty"
        ("pagerduty", "High", 2),
        ("generic", "sev2", 2),
        ("generic", "2", 2),
        ("generic", "P4", 4),
        ("generic", "meh", 3),
        ("grafana", "", 3),
    ],
)
def test_severity_maps_case_insensitively_with_a_default(source: str, word: str, expected: int) -> None:
    assert map_severity(AlertPolicy.build(severity=SEVERITY, default_severity=3), source, word) == expected


# -- concurrency -------------------------------------------------------------------------------------------------


async def test_concurrent_first_alerts_with_one_fingerprint_open_exactly_one_incident(world: World) -> None:
    outcomes = await asyncio.gather(*(world.send(alert(event_id=f"ev-{n}")) for n in range(30)))
    flat = [o for batch in outcomes for o in batch]
    assert [o.outcome for o in flat].count("new") == 1
    assert len({o.scope for o in flat}) == 1
    assert await world.incidents() == [flat[0].scope]
    assert len(await world.entries(flat[0].scope, "observation")) == 30


async def test_concurrent_first_alerts_on_one_service_open_one_incident(world: World) -> None:
    outcomes = await asyncio.gather(*(world.send(alert(f"fp-{n}")) for n in range(20)))
    assert len(await world.incidents()) == 1
    assert sorted(o.outcome for (o,) in outcomes) == ["joined"] * 19 + ["new"]


async def test_keyed_locks_are_dropped_when_released() -> None:
    locks = KeyedLocks()
    async with locks.hold("b", "a", "a"):
        assert len(locks) == 2
    assert len(locks) == 0


# -- summaries ---------------------------------------------------------------------------------------------------


async def test_a_summary_counts_what_the_header_does_not_show_and_only_once(world: World) -> None:
    alarm = AsyncioAlarm()
    summarizer = AlertSummarizer(world.store, alarm, interval=0.06, clock=world.clock.now)
    (first,) = await world.send(alert("fp-5xx"))
    scope = first.scope
    await world.send(alert("fp-latency", title="payments: p99 latency"))
    for n in range(5):
        await world.send(alert("fp-5xx", event_id=f"r{n}"))
    await world.send(alert("fp-latency", "resolved", title="payments: p99 latency", event_id="ok"))
    summarizer.notice(scope)
    summaries = await eventually(lambda: _summaries(world, scope), what="a summary")
    assert summaries[0].payload.text == (
        "+7 alerts in the last minute: 1 new (payments: p99 latency), 5 repeats, "
        "1 resolved (payments: p99 latency) · 1 of 2 firing"
    )
    counts = summaries[0].payload.data["summary"]
    assert (counts["new"], counts["repeats"], counts["resolved"], counts["alerts"]) == (1, 5, 1, 7)
    await summarizer.run(scope)  # nothing new: nothing appended
    await world.send(alert("fp-5xx", event_id="r9"))
    summarizer.notice(scope)
    later = await eventually(lambda: _summaries(world, scope, 2), what="a second summary")
    assert later[1].payload.text.startswith("+1 alert in the last minute: 1 repeat")
    await alarm.shutdown()


async def test_a_summary_is_never_sooner_than_the_interval_even_across_restarts(world: World) -> None:
    alarm = AsyncioAlarm()
    (first,) = await world.send(alert("fp-5xx"))
    await world.send(alert("fp-5xx", event_id="r1"))
    await AlertSummarizer(world.store, alarm, interval=3600).run(first.scope)
    await world.send(alert("fp-5xx", event_id="r2"))
    restarted = AlertSummarizer(world.store, alarm, interval=3600)
    assert await restarted.rearm([first.scope]) == 1
    await restarted.run(first.scope)  # the memo says a summary went out moments ago: it waits
    assert len(await _summaries(world, first.scope, 1)) == 1
    assert alarm.pending(restarted.key(first.scope))
    await alarm.shutdown()


async def _summaries(world: World, scope: str, at_least: int = 1) -> list[Entry]:
    found = [e for e in await world.entries(scope, "observation") if e.payload.source == SUMMARY_SOURCE]
    return found if len(found) >= at_least else []


async def test_while_alerts_keep_coming_the_gap_between_summaries_doubles_and_is_kept_across_restarts(
    world: World,
) -> None:
    alarm = AsyncioAlarm()
    now = [1_000_000.0]
    (first,) = await world.send(alert("fp-5xx"))
    scope = first.scope
    summarizer = AlertSummarizer(world.store, alarm, interval=60, wall=lambda: now[0])
    assert [summarizer.gap(n) for n in (0, 1, 2, 3, 4)] == [60, 120, 240, 480, 480]
    made = []
    for n, at in enumerate([0, 120, 360, 840]):  # each run exactly when the gap after the last one has passed
        now[0] = 1_000_000.0 + at
        await world.send(alert("fp-5xx", event_id=f"r{n}"))
        await summarizer.run(scope)
        made.append(len(await _summaries(world, scope, 0)))
    assert made == [1, 2, 3, 4]
    now[0] += 479  # sooner than the gap after four consecutive summaries (8 intervals): not yet, also after a restart
    await world.send(alert("fp-5xx", event_id="r9"))
    restarted = AlertSummarizer(world.store, alarm, interval=60, wall=lambda: now[0])
    await restarted.run(scope)
    assert len(await _summaries(world, scope, 0)) == 4 and alarm.pending(restarted.key(scope))
    now[0] += 2 * 480 + 1  # a quiet spell longer than twice the gap: the next summary starts a new streak
    await restarted.run(scope)
    memo = await world.store.memo_get(scope, "alerts", "summary")
    assert len(await _summaries(world, scope, 0)) == 5 and memo is not None and memo["streak"] == 1
    await alarm.shutdown()


async def test_a_summary_waits_for_held_alerts_that_are_committed_but_not_yet_heard_of(world: World) -> None:
    """A state read can be ahead of the store listener (a batch commits before its appends return to the loop):
    the summary looks at what it holds again a moment later instead of reading the log back (decision 132)."""
    alarm = AsyncioAlarm()
    summarizer = AlertSummarizer(world.store, alarm, interval=60, wall=lambda: 1_000.0)
    loop = asyncio.get_running_loop()
    unheard: list[tuple[str, Sequence[Entry]]] = []
    deaf = [False]

    def listener(scope: str, entries: Sequence[Entry]) -> None:
        if deaf[0]:
            unheard.append((scope, entries))
        else:
            summarizer.observe(scope, entries)

    world.store.subscribe(listener)
    (first,) = await world.send(alert("fp-5xx"))
    await world.send(alert("fp-5xx", event_id="r1"))
    deaf[0] = True
    await world.send(alert("fp-5xx", event_id="r2"))  # committed; the listener has not heard of it yet
    assert unheard
    looks: list[bool] = []
    covering = summarizer.held.covering

    def first_look_misses_it(scope: str, **kw: Any) -> list[AlertItem] | None:
        found = covering(scope, **kw)
        if not looks:  # the listener catches up one loop turn after the first look
            loop.call_soon(lambda: [summarizer.observe(*u) for u in unheard])
        looks.append(found is not None)
        return found

    summarizer.held.covering = first_look_misses_it  # type: ignore[method-assign]
    await summarizer.run(first.scope)
    assert looks[0] is False and looks[-1] is True and summarizer.reads == 0
    (summary,) = await _summaries(world, first.scope, 1)
    assert summary.payload.text.startswith("+2 alerts in the last minute")
    await alarm.shutdown()


async def test_a_first_summary_reads_the_log_when_this_process_did_not_see_the_incident_open(world: World) -> None:
    """No mark yet counts as nothing counted; a summarizer that started listening after the incident opened (a
    restart) holds fewer alerts than the folded state counts, so its first summary reads them from the log."""
    (first,) = await world.send(alert("fp-5xx"))
    await world.send(alert("fp-5xx", event_id="r1"))
    alarm = AsyncioAlarm()
    summarizer = AlertSummarizer(world.store, alarm, interval=60, wall=lambda: 1_000.0)
    world.store.subscribe(summarizer.observe)
    await world.send(alert("fp-5xx", event_id="r2"))
    await summarizer.run(first.scope)
    assert summarizer.reads == 1
    (summary,) = await _summaries(world, first.scope, 1)
    assert summary.payload.text.startswith("+2 alerts in the last minute")
    await alarm.shutdown()


async def test_a_summary_takes_the_alerts_this_process_held_and_reads_the_log_when_one_is_missing(
    world: World,
) -> None:
    """A storm's minute is thousands of observations: a summary takes the ones this process committed (held by
    its store listener) instead of reading them back, and gives the same summary as the log would; when one is
    missing (another process appended it, or a restart), the count in the folded state says so and it reads."""
    from decklog.core.alerts.summary import summarise

    now = [1_000.0]
    alarm = AsyncioAlarm()
    summarizer = AlertSummarizer(world.store, alarm, interval=60, wall=lambda: now[0])
    listening = [True]
    world.store.subscribe(lambda scope, entries: summarizer.observe(scope, entries) if listening[0] else None)
    (first,) = await world.send(alert("fp-5xx"))
    scope = first.scope
    await world.send(alert("fp-latency", title="payments: p99 latency"))
    await world.send(alert("fp-5xx", event_id="r1"))
    await summarizer.run(scope)
    assert summarizer.reads == 0  # the first summary: no mark yet, and this process held every alert since the open
    (first_summary,) = await _summaries(world, scope, 1)
    logged = [AlertItem.of(e) for e in await world.entries(scope, "observation") if e.seq < first_summary.seq]
    logged = [i for i in logged if i.fingerprint and not i.opened]
    expected = summarise(logged, await world.store.get_state(scope), now=logged[-1].at)
    assert expected is not None and first_summary.payload.text == expected.text
    assert first_summary.payload.data == expected.data
    now[0] += 121
    for signal in (
        alert("fp-5xx", event_id="r2"),
        alert("fp-5xx", event_id="r3"),
        alert("fp-latency", "resolved", title="payments: p99 latency", event_id="ok"),
        alert("fp-disk", title="payments: disk 95% full"),
    ):
        await world.send(signal)
    await summarizer.run(scope)
    assert summarizer.reads == 0  # every alert since the first summary was held
    summaries = await _summaries(world, scope, 2)
    held, earlier = summaries[1].payload, summaries[0].payload
    since = earlier.data["summary"]["through_seq"]
    logged = [AlertItem.of(e) for e in await world.entries(scope, "observation") if since < e.seq < summaries[1].seq]
    logged = [i for i in logged if i.fingerprint]
    state = await world.store.get_state(scope)
    expected = summarise(logged, state, now=logged[-1].at)
    assert expected is not None and (held.text, held.data) == (expected.text, expected.data)
    assert held.text.startswith("+4 alerts in the last minute: 1 new (payments: disk 95% full), 2 repeats, 1 resolved")

    now[0] += 3 * 121
    listening[0] = False  # as if another process appended this one
    await world.send(alert("fp-5xx", event_id="r4"))
    listening[0] = True
    await world.send(alert("fp-5xx", event_id="r5"))
    await summarizer.run(scope)
    assert summarizer.reads == 1
    assert (await _summaries(world, scope, 3))[2].payload.text.startswith("+2 alerts in the last")
    await alarm.shutdown()
