"""Reactions to a commit survive a restart: change <-> incident links are an outbox topic, and the alert router's
state (fingerprints, grouping, storms) is derived from the index and the scope states, not from one process's
memory. Each test writes with one "process" (store, index, services over a data directory), stops it at the worst
moment, and checks what a fresh one over the same directory does."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from decklog.bot.runtime import OUTBOX_TOPICS, TOPIC_KINDS
from decklog.core.alarm import AsyncioAlarm
from decklog.core.alerts import AlertPolicy, AlertRouter
from decklog.core.changes import ChangeLinkSender, ChangeService
from decklog.core.clock import ManualClock
from decklog.core.entries import Actor, Entry
from decklog.core.index.sender import IndexSender
from decklog.core.outbox.dispatcher import Dispatcher
from decklog.core.service import ScopeService
from decklog.core.signals import AlertSignal, ChangeSignal
from decklog.core.store.ports import IndexPort
from decklog.core.store.sqlite.index import SqliteIndex
from decklog.core.store.sqlite.log_store import SqliteLogStore
from tests.conftest import eventually

START = datetime(2026, 9, 19, 14, 0, tzinfo=UTC)


@dataclass
class Process:
    """One decklog process over ``data``: which senders it runs is the test's choice."""

    data: Path
    clock: ManualClock
    store: SqliteLogStore
    index: IndexPort
    service: ScopeService
    dispatcher: Dispatcher
    changes: ChangeService
    links: ChangeLinkSender
    routers: list[AlertRouter] = field(default_factory=list)

    @classmethod
    async def open(cls, data: Path, clock: ManualClock, *, senders: tuple[str, ...] = ("index", "changes")) -> Process:
        store = SqliteLogStore(data, topics=OUTBOX_TOPICS, topic_kinds=TOPIC_KINDS, clock=clock)
        index = SqliteIndex(data / "index.db", store.executor)
        await index.open()
        service = ScopeService(store, index)
        changes = ChangeService(store, index, service, clock, link_window=timedelta(hours=6))
        links = ChangeLinkSender(changes, store)
        dispatcher = Dispatcher(store, [], alarm=AsyncioAlarm())
        if "index" in senders:
            dispatcher.register(IndexSender(index, store))
        if "changes" in senders:
            dispatcher.register(links)
        dispatcher.start()
        await dispatcher.sweep()
        return cls(data, clock, store, index, service, dispatcher, changes, links)

    async def router(self, **policy: Any) -> AlertRouter:
        router = AlertRouter(self.store, self.index, self.service, self.clock, AlertPolicy.build(**policy))
        await router.warm()
        self.routers.append(router)
        return router

    async def close(self) -> None:
        await self.dispatcher.stop()
        await self.index.close()
        await self.store.close()

    async def entries(self, scope: str, kind: str, where: Callable[[Entry], bool] = lambda _e: True) -> list[Entry]:
        return [e for e in await self.store.read(scope) if e.kind == kind and where(e)]

    async def incidents(self) -> list[str]:
        return sorted(str(s) for s in await self.store.scope_ids() if s.kind == "incident")


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(START)


@pytest.fixture
async def processes(tmp_path: Path, clock: ManualClock) -> AsyncIterator[Callable[..., Any]]:
    opened: list[Process] = []

    async def open_process(**options: Any) -> Process:
        process = await Process.open(tmp_path / "data", clock, **options)
        opened.append(process)
        return process

    yield open_process
    for process in reversed(opened):
        if process.dispatcher.alive:
            await process.close()


def deploy(change_id: str = "r-42", service: str = "payments", at: datetime | None = None) -> ChangeSignal:
    return ChangeSignal(
        source="generic", change_id=change_id, service=service, status="succeeded", author="maria", at=at or START
    )


def alert(
    fingerprint: str, *, service: str = "payments", title: str = "", event_id: str = "", source: str = "alertmanager"
) -> AlertSignal:
    return AlertSignal(
        source=source,
        fingerprint=fingerprint,
        status="firing",
        title=title or f"{service}: {fingerprint}",
        service=service,
        source_severity="critical",
        event_id=event_id or f"ev-{fingerprint}",
    )


# -- change <-> incident links ---------------------------------------------------------------------------------


async def test_a_declaration_committed_before_a_crash_is_linked_to_the_recent_change_once(processes: Any) -> None:
    first = await processes(senders=("index",))  # commits, then "dies" before the changes topic is delivered
    (recorded,) = await first.changes.record([deploy()])
    assert recorded.outcome == "new" and recorded.linked == ()
    first.clock.advance(minutes=3)
    declared = await first.service.declare(
        title="Payments 5xx", services=["payments"], actor=Actor.human("U0ALICE"), via="slack"
    )
    incident = declared.state.scope
    await first.dispatcher.idle()
    assert (await first.store.get_state(incident)).linked == ()
    assert [i.entry.kind for i in await first.store.outbox_pending(incident, "changes")] == ["declared"]
    await first.close()

    second = await processes()  # its boot sweep delivers the pending row
    await eventually(lambda: _linked(second, incident, "change/r-42"), what="the incident linked after the restart")
    await second.dispatcher.idle()
    assert await second.store.outbox_pending(incident, "changes") == []
    assert len(await second.entries(incident, "scope_linked")) == 1
    evidence = await second.entries(incident, "observation", lambda e: e.payload.source == "change")
    assert len(evidence) == 1 and evidence[0].payload.text.startswith("Recent change on payments: r-42 by maria")
    assert [e.payload.scope for e in await second.entries("change/r-42", "scope_linked")] == [incident]
    # a redelivery (a crash after the links, before the row was marked done) appends nothing
    before = (await second.store.get_state(incident)).version
    await second.links.deliver(incident, await second.store.read(incident, limit=1))
    await second.links.deliver("change/r-42", await second.store.read("change/r-42", limit=1))
    assert (await second.store.get_state(incident)).version == before
    assert len(await second.entries("change/r-42", "scope_linked")) == 1


async def test_a_change_committed_before_a_crash_is_linked_to_the_open_incident_once(processes: Any) -> None:
    first = await processes()
    declared = await first.service.declare(
        title="Payments 5xx", services=["payments"], actor=Actor.human("U0ALICE"), via="slack"
    )
    incident = declared.state.scope
    await first.dispatcher.idle()
    await first.dispatcher.stop()  # the process dies between the change's commit and its links
    first.clock.advance(minutes=2)
    await first.store.append("change/r-43", _change_entries(first, "r-43"), create=True)
    assert (await first.store.get_state(incident)).linked == ()
    await first.index.close()
    await first.store.close()

    second = await processes()
    await eventually(lambda: _linked(second, incident, "change/r-43"), what="the change linked after the restart")
    await second.dispatcher.idle()
    assert len(await second.entries(incident, "scope_linked")) == 1
    assert len(await second.entries(incident, "observation", lambda e: e.payload.source == "change")) == 1


async def test_only_declarations_get_a_row_in_the_changes_topic(processes: Any) -> None:
    p = await processes(senders=())
    declared = await p.service.declare(title="Quiet", services=["ledger"], actor=Actor.human("U0ALICE"))
    scope = declared.state.scope
    await p.service.set_status(scope, "identified", Actor.human("U0ALICE"))
    summary = await p.store.outbox_summary(scope)
    assert summary.pending["changes"] == 1 and summary.pending["index"] == 2


def _change_entries(p: Process, change_id: str) -> list[Any]:
    from decklog.core.changes import change_key, change_observation, change_title
    from decklog.core.entries import Declared, NewEntry

    signal = deploy(change_id, at=p.clock.now())
    actor = Actor.system("generic")
    return [
        NewEntry.make("declared", actor, Declared(title=change_title(signal), services=("payments",), via="change")),
        NewEntry.make("observation", actor, change_observation(signal), idempotency_key=change_key(signal)),
    ]


async def _linked(p: Process, scope: str, other: str) -> bool:
    return other in (await p.store.get_state(scope)).linked


# -- the alert router's state ----------------------------------------------------------------------------------

# "index": the first process delivered its index rows before it died; "": it died before any index delivery (the
# index only holds the reservations and fingerprint claims made before the appends).
FIRST_SENDERS = pytest.mark.parametrize("first_senders", [("index",), ()], ids=["indexed", "index-behind"])


@FIRST_SENDERS
async def test_a_restart_during_a_storm_opens_no_second_storm_incident(
    processes: Any, first_senders: tuple[str, ...]
) -> None:
    first = await processes(senders=first_senders)
    router = await first.router(rate_limit_per_minute=3)
    before = [o for n in range(6) for o in await router.receive("alertmanager", [alert(f"fp-{n}", service=f"s{n}")])]
    assert [o.outcome for o in before] == ["new"] * 4 + ["joined"] * 2
    storm = before[3].scope
    assert before[3].storm and (await first.store.get_state(storm)).title.startswith("Alert storm:")
    await first.dispatcher.idle()
    await first.close()

    first.clock.advance(seconds=20)  # the storm goes on after the restart
    second = await processes()
    again = await second.router(rate_limit_per_minute=3)
    after = [o for n in range(6, 12) for o in await again.receive("alertmanager", [alert(f"fp-{n}", service=f"s{n}")])]
    assert [(o.outcome, o.scope, o.storm) for o in after] == [("joined", storm, True)] * 6
    assert len(await second.incidents()) == 4  # three before the limit, one storm: nothing new after the restart
    assert len((await second.store.get_state(storm)).alerts) == 9


async def test_after_a_storm_has_ended_a_restart_does_not_keep_the_source_over_the_limit(processes: Any) -> None:
    first = await processes()
    router = await first.router(rate_limit_per_minute=2)
    for n in range(4):
        await router.receive("alertmanager", [alert(f"fp-{n}", service=f"s{n}")])
    await first.close()
    first.clock.advance(minutes=2)  # the storm's last alert is two minutes old: it is over
    second = await processes()
    again = await second.router(rate_limit_per_minute=2)
    (fresh,) = await again.receive("alertmanager", [alert("fp-new", service="s-new")])
    assert fresh.outcome == "new" and not fresh.storm


@FIRST_SENDERS
async def test_a_restart_inside_the_grouping_window_does_not_split_the_group(
    processes: Any, first_senders: tuple[str, ...]
) -> None:
    first = await processes(senders=first_senders)
    router = await first.router(grouping_window_minutes=10)
    (opened,) = await router.receive("alertmanager", [alert("fp-5xx")])
    first.clock.advance(minutes=6)
    (joined,) = await router.receive("alertmanager", [alert("fp-latency")])
    assert joined.outcome == "joined" and joined.scope == opened.scope
    await first.dispatcher.idle()
    await first.close()

    first.clock.advance(minutes=8)  # 14 min after the first alert, 8 after the group's last one
    second = await processes()
    again = await second.router(grouping_window_minutes=10)
    (late,) = await again.receive("alertmanager", [alert("fp-queue")])
    assert late.outcome == "joined" and late.scope == opened.scope
    assert await second.incidents() == [opened.scope]
    first.clock.advance(minutes=10, seconds=1)  # past the window counted from the last alert: a new incident
    (other,) = await again.receive("alertmanager", [alert("fp-disk")])
    assert other.outcome == "new" and other.scope != opened.scope


@FIRST_SENDERS
async def test_a_fingerprint_routed_before_a_restart_still_goes_to_its_open_incident(
    processes: Any, first_senders: tuple[str, ...]
) -> None:
    first = await processes(senders=first_senders)
    router = await first.router(grouping_window_minutes=10)
    (opened,) = await router.receive("alertmanager", [alert("fp-5xx")])
    (joined,) = await router.receive("alertmanager", [alert("fp-latency")])
    await first.close()

    first.clock.advance(hours=3)  # far outside the grouping window: only the fingerprint can route it
    second = await processes()
    again = await second.router(grouping_window_minutes=10)
    outcomes = await again.receive("alertmanager", [alert("fp-5xx", event_id="e2"), alert("fp-latency", event_id="e3")])
    assert [(o.outcome, o.scope) for o in outcomes] == [("repeat", opened.scope), ("repeat", joined.scope)]
    assert await second.incidents() == [opened.scope]
