"""The views' ``related_actions``: actions already run in incidents related to this one — linked, sharing
a service, or declared within the hour — within the window, from the index and the other scopes' logs, bounded by
the view's budget. Times come from a ``ManualClock``, so every view here is fixed."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from decklog.core.clock import ManualClock
from decklog.core.entries import Actor, NewEntry
from decklog.core.service import ScopeService
from decklog.core.store.ports import IndexPort
from decklog.core.store.sqlite.index import SqliteIndex
from decklog.core.store.sqlite.log_store import SqliteLogStore
from decklog.core.views import applied_in, build_view, finding_text

HERE = "incident/payments-5xx"
ALERTS = Actor.system("alertmanager")
DESK = Actor.system("actions")
ROLLBACK = {"service": "payments", "change": "change/payments-v2"}


@dataclass
class Desk:
    store: SqliteLogStore
    index: IndexPort
    service: ScopeService
    clock: ManualClock

    async def incident(self, scope: str, services: list[str]) -> None:
        await self.service.declare(title=scope, scope=scope, services=services, actor=ALERTS, via="alert")
        await self.reindex(scope)

    async def run(self, scope: str, run_id: str, outcome: str | None, params: dict[str, Any] = ROLLBACK) -> None:
        """A run of ``rollback_deploy`` in ``scope``: started, then ended with ``outcome`` (None: no result yet)."""
        self.clock.advance(seconds=30)
        started = {"run_id": run_id, "action": "rollback_deploy", "fence": 1, "params": params}
        entries = [NewEntry.make("action_started", DESK, started)]
        if outcome:
            entries.append(NewEntry.make("action_result", DESK, {"run_id": run_id, "outcome": outcome, "fence": 1}))
        await self.store.append(scope, entries)
        await self.reindex(scope)

    async def say(self, scope: str, text: str) -> None:
        self.clock.advance(seconds=30)
        await self.store.append(scope, [NewEntry.make("message", ALERTS, {"text": text})])
        await self.reindex(scope)

    async def reindex(self, scope: str) -> None:
        await self.index.apply(await self.store.get_state(scope), await self.store.read(scope))

    async def related(self, name: str = "investigation", **kw: Any) -> tuple[list[dict[str, Any]], Any]:
        view = await build_view(self.store, HERE, name, index=self.index, **kw)
        return view.sections.get("related_actions", []), view


@pytest.fixture
async def desk(tmp_path: Path) -> AsyncIterator[Desk]:
    clock = ManualClock()
    store = SqliteLogStore(tmp_path, topics=("index",), clock=clock)
    index = SqliteIndex(tmp_path / "index.db", store.executor)
    await index.open()
    yield Desk(store, index, ScopeService(store, index), clock)
    await index.close()
    await store.close()


async def test_runs_of_linked_and_same_service_incidents_are_listed_with_outcome_and_time(desk: Desk) -> None:
    await desk.incident("incident/checkout-errors", ["checkout"])  # another service, linked below
    await desk.run("incident/checkout-errors", "r-1", "applied")
    desk.clock.advance(hours=2)  # past the co-occurrence hour: only the link or a service relates them now
    await desk.incident("incident/payments-latency", ["payments"])
    await desk.run("incident/payments-latency", "r-2", "failed", {"service": "payments", "change": "change/other"})
    await desk.run("incident/payments-latency", "r-3", None)
    await desk.incident(HERE, ["payments"])
    await desk.service.link(HERE, "incident/checkout-errors", Actor.system("changes"), relation="related")
    items, view = await desk.related()
    assert [(i["scope"], i["relation"], i["outcome"]) for i in items] == [
        ("incident/checkout-errors", "linked", "applied"),
        ("incident/payments-latency", "service payments", "failed"),
        ("incident/payments-latency", "service payments", "uncertain"),  # started, no result yet
    ]
    first = items[0]
    assert first["action"] == "rollback_deploy" and first["target"] == "change=change/payments-v2,service=payments"
    assert first["at"] == "2026-09-19T03:12:30Z" and first["ref"] == "incident/checkout-errors#3"
    assert "related_actions" in view.text and view == (await desk.related())[1]  # deterministic
    assert applied_in(items, "rollback_deploy", ROLLBACK) == first
    assert applied_in(items, "rollback_deploy", {"service": "payments", "change": "change/other"}) is None  # failed
    assert finding_text(first).startswith("already applied: rollback_deploy(change=change/payments-v2,service=")


async def test_the_action_view_lists_only_runs_of_its_action_on_its_target(desk: Desk) -> None:
    await desk.incident("incident/payments-latency", ["payments"])
    await desk.run("incident/payments-latency", "r-1", "applied")
    await desk.run("incident/payments-latency", "r-2", "applied", {"service": "payments", "change": "change/other"})
    await desk.incident(HERE, ["payments"])
    opened = {"obligation_id": "ob-1", "text": "roll back", "purpose": "rollback", "action": "rollback_deploy"}
    await desk.store.append(HERE, [NewEntry.make("obligation_opened", ALERTS, {**opened, "params": ROLLBACK})])
    items, _ = await desk.related("action", obligation_id="ob-1")
    assert [i["ref"] for i in items] == ["incident/payments-latency#3"]
    assert len((await desk.related())[0]) == 2  # the investigation view lists both


async def test_unrelated_incidents_and_runs_outside_the_window_are_left_out(desk: Desk) -> None:
    await desk.incident("incident/payments-old", ["payments"])
    await desk.run("incident/payments-old", "r-old", "applied")  # 7 h before the newest entry here
    desk.clock.advance(hours=7)
    await desk.say("incident/payments-old", "still watching")  # recently updated, but its run is old
    await desk.incident("incident/search-slow", ["search"])  # no link, another service, declared 2 h apart
    await desk.run("incident/search-slow", "r-search", "applied")
    desk.clock.advance(hours=2)
    await desk.incident("incident/mail-bounces", ["mail"])  # another service, but declared 10 min apart
    await desk.run("incident/mail-bounces", "r-mail", "applied")
    desk.clock.advance(minutes=10)
    await desk.incident(HERE, ["payments"])
    items, _ = await desk.related()
    assert [(i["scope"], i["relation"]) for i in items] == [("incident/mail-bounces", "declared within 1 h")]
    without_index = await build_view(desk.store, HERE, "investigation")
    assert "related_actions" not in without_index.sections  # no index: the linked incidents only (none here)


async def test_the_section_is_bounded_by_the_budget_and_says_what_it_left_out(desk: Desk) -> None:
    await desk.incident("incident/payments-latency", ["payments"])
    for i in range(12):
        await desk.run("incident/payments-latency", f"r-{i:02}", "applied", {"service": "payments", "n": i})
    await desk.incident(HERE, ["payments"])
    full, whole = await desk.related()
    assert len(full) == 12
    items, view = await desk.related(budget=whole.bytes - 400)
    assert view.bytes <= whole.bytes - 400 and 1 <= len(items) < 12
    assert items == full[-len(items) :]  # the oldest runs go first
    assert f"related_actions: + {12 - len(items)} earlier related actions omitted" in view.omitted


async def test_a_run_undone_by_a_compensation_is_listed_as_compensated_not_applied(desk: Desk) -> None:
    """A rollback applied next door and then compensated is no longer in place: a reasoner must not skip its own
    rollback because of it."""
    await desk.incident("incident/payments-latency", ["payments"])
    await desk.run("incident/payments-latency", "r-1", "applied")
    await desk.run("incident/payments-latency", "r-undo", "applied", {"service": "payments", "to": "v2"})
    desk.clock.advance(seconds=30)
    undone = {"original_run": "r-1", "compensating_run": "r-undo"}
    await desk.store.append("incident/payments-latency", [NewEntry.make("effect_compensated", DESK, undone)])
    await desk.reindex("incident/payments-latency")
    await desk.incident(HERE, ["payments"])
    items, _ = await desk.related()
    first = next(i for i in items if i["target"] == "change=change/payments-v2,service=payments")
    assert (first["outcome"], first["ref"], first["at"]) == (
        "compensated",
        "incident/payments-latency#6",
        "2026-09-19T03:13:30Z",  # when it was undone
    )
    assert applied_in(items, "rollback_deploy", ROLLBACK) is None
