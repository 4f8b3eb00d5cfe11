"""On-call in core: rotations, layers and overrides; the configuration's checks; escalation levels as due times
from the log (a page appended once per key, an acknowledgement stopping the rest, a page that lost the race with an
acknowledgement dropped at delivery)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from decklog.bot.config import load_config
from decklog.bot.settings import SettingsError
from decklog.core.alarm import AsyncioAlarm
from decklog.core.clock import ManualClock
from decklog.core.entries import Actor
from decklog.core.entries.oncall import Page
from decklog.core.index.sender import IndexSender
from decklog.core.oncall import desk
from decklog.core.oncall.escalation import OncallJob
from decklog.core.oncall.rotation import Override, next_handoff, on_call, shifts
from decklog.core.oncall.sender import Notice, OncallSender
from decklog.core.oncall.setup import OncallConfig, Schedule, parse_duration
from decklog.core.outbox.dispatcher import Dispatcher
from decklog.core.service import ScopeService
from decklog.core.store.sqlite.index import SqliteIndex
from decklog.core.store.sqlite.log_store import SqliteLogStore
from tests.conftest import eventually

T0 = datetime(2026, 12, 7, 9, 0, tzinfo=UTC)


def schedule(**kw: object) -> Schedule:
    data = {
        "name": "primary",
        "timezone": "Europe/Berlin",
        "layers": [{"users": ["UA", "UB", "UC"], "rotation": "12h", "start": "2026-12-07T10:00:00"}],
    }
    data.update(kw)
    return Schedule.model_validate(data)


def test_durations_read_like_people_write_them() -> None:
    assert parse_duration("12h") == 43_200 and parse_duration("1w") == 604_800
    assert parse_duration("1h30m") == 5400 and parse_duration(3) == 3.0 and parse_duration("45") == 45
    for bad in ("soon", "12x", "", "h"):
        with pytest.raises(ValueError):
            parse_duration(bad)


def test_a_layer_rotates_round_its_users_from_its_start_in_the_schedules_timezone() -> None:
    s = schedule()  # 10:00 Berlin = 09:00 UTC
    assert on_call(s, T0 - timedelta(seconds=1)) is None
    assert on_call(s, T0) == "UA"
    assert on_call(s, T0 + timedelta(hours=12)) == "UB"
    assert on_call(s, T0 + timedelta(hours=36)) == "UA"
    assert next_handoff(s, T0 + timedelta(hours=1)) == T0 + timedelta(hours=12)


def test_a_later_layer_wins_and_an_override_wins_over_every_layer() -> None:
    s = schedule(
        layers=[
            {"users": ["UA", "UB"], "rotation": "1d", "start": "2026-12-07T09:00:00Z"},
            {"users": ["UN"], "rotation": "1d", "start": "2026-12-08T09:00:00Z"},
        ]
    )
    assert on_call(s, T0 + timedelta(hours=1)) == "UA"
    assert on_call(s, T0 + timedelta(days=1, hours=1)) == "UN"
    over = [Override("UZ", T0 + timedelta(hours=2), T0 + timedelta(hours=4), seq=3)]
    assert on_call(s, T0 + timedelta(hours=3), over) == "UZ"
    assert on_call(s, T0 + timedelta(hours=4), over) == "UA"
    got = [(x.user, x.start - T0, x.end - T0, x.source) for x in shifts(s, T0, T0 + timedelta(days=2), over)]
    assert got == [
        ("UA", timedelta(0), timedelta(hours=2), "layer 1"),
        ("UZ", timedelta(hours=2), timedelta(hours=4), "override"),
        ("UA", timedelta(hours=4), timedelta(days=1), "layer 1"),
        ("UN", timedelta(days=1), timedelta(days=2), "layer 2"),
    ]


@pytest.mark.parametrize(
    ("toml", "where"),
    [
        (
            '[[oncall.schedules]]\nname="p"\ntimezone="Mars/Olympus"\n[[oncall.schedules.layers]]\nusers=["U1"]\nrotation="1d"\nstart="2026-12-07T09:00:00"\n',
            "oncall.schedules.0.timezone",
        ),
        (
            '[[oncall.schedules]]\nname="p"\n[[oncall.schedules.layers]]\nusers=["U1"]\nrotation="0s"\nstart="2026-12-07T09:00:00"\n',
            "oncall.schedules.0.layers.0.rotation",
        ),
        (
            '[[oncall.schedules]]\nname="p"\n[[oncall.schedules.layers]]\nusers=[]\nrotation="1d"\nstart="2026-12-07T09:00:00"\n',
            "oncall.schedules.0.layers.0.users",
        ),
        (
            '[[oncall.policies]]\nname="x"\n[[oncall.policies.levels]]\ntargets=["schedule:nope"]\nafter="5m"\n',
            "policies.0.levels.0.targets",
        ),
        ('[[oncall.routes]]\npolicy="nope"\ndefault=true\n', "routes.0.policy"),
        ('[oncall.people.U1]\nrules=[{method="sms"}]\n', "oncall.people.U1"),
    ],
)
def test_a_bad_oncall_configuration_stops_start_up_naming_the_key(tmp_path: Path, toml: str, where: str) -> None:
    path = tmp_path / "decklog.toml"
    path.write_text(toml, encoding="utf-8")
    with pytest.raises(SettingsError, match=where.replace(".", r"\.")):
        load_config(path)


SETUP = {
    "schedules": [
        {"name": "primary", "layers": [{"users": ["UA"], "rotation": "1w", "start": "2026-12-01T00:00:00Z"}]},
        {"name": "secondary", "layers": [{"users": ["UB"], "rotation": "1w", "start": "2026-12-01T00:00:00Z"}]},
    ],
    "policies": [
        {
            "name": "default",
            "levels": [
                {"targets": ["schedule:primary"], "after": "5m"},
                {"targets": ["schedule:secondary"], "after": "5m"},
            ],
        }
    ],
    "routes": [{"policy": "default", "severity": [1, 2]}],
    "people": {"UA": {"phone": "+14155550100", "rules": [{"method": "slack"}, {"method": "sms", "after": "2m"}]}},
}


class Recorder:
    def __init__(self) -> None:
        self.notices: list[Notice] = []

    async def notify(self, notice: Notice) -> None:
        self.notices.append(notice)


@dataclass
class World:
    clock: ManualClock
    store: SqliteLogStore
    service: ScopeService
    job: OncallJob
    sender: OncallSender
    slack: Recorder
    sms: Recorder
    setup: OncallConfig

    async def pages(self, scope: str) -> list[Page]:
        return [e.payload for e in await self.store.read(scope, kinds=("page",)) if isinstance(e.payload, Page)]


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[World]:
    clock = ManualClock(T0)
    store = SqliteLogStore(
        tmp_path, topics=("index", "oncall"), topic_kinds={"oncall": ("page", "oncall_handoff")}, clock=clock
    )
    index = SqliteIndex(tmp_path / "index.db", store.executor)
    await index.open()
    setup = OncallConfig.model_validate(SETUP)
    slack, sms = Recorder(), Recorder()
    sender = OncallSender(store, setup, {"slack": slack, "sms": sms})
    dispatcher = Dispatcher(store, [IndexSender(index, store), sender], alarm=AsyncioAlarm())
    dispatcher.start()
    yield World(
        clock, store, ScopeService(store, index), OncallJob(store, index, clock, setup), sender, slack, sms, setup
    )
    await dispatcher.stop()
    await index.close()
    await store.close()


async def declare(world: World, severity: int = 1) -> str:
    result = await world.service.declare(title="payments 5xx", severity=severity, actor=Actor.system("alerts"))
    scope = str(result.state.scope)

    async def listed() -> bool:
        row = await world.job.index.get(scope)
        return row is not None and row.is_open

    await eventually(listed, what="the index row")
    return scope


async def test_levels_page_at_their_times_once_each_and_rules_add_sms_later(world: World) -> None:
    scope = await declare(world)
    await world.job.tick()
    await world.job.tick()  # a repeated tick appends nothing twice
    assert [(p.level, p.target, p.method) for p in await world.pages(scope)] == [(0, "UA", "slack")]
    world.clock.advance(minutes=2)
    await world.job.tick()
    assert [(p.target, p.method) for p in await world.pages(scope)] == [("UA", "slack"), ("UA", "sms")]
    world.clock.advance(minutes=3)
    await world.job.tick()
    await world.job.tick()
    pages = await world.pages(scope)
    assert [(p.level, p.target, p.method) for p in pages][-1] == (1, "UB", "slack") and len(pages) == 3
    assert pages[2].key == f"page:{scope}:{pages[2].escalation}:1:UB:0:slack"
    await eventually(lambda: len(world.slack.notices) == 2 and len(world.sms.notices) == 1, what="deliveries")
    assert world.sms.notices[0].address == "+14155550100"


async def test_an_acknowledgement_stops_the_next_level(world: World) -> None:
    scope = await declare(world)
    await world.job.tick()
    await desk.acknowledge(world.store, scope, "UA", via="button")
    world.clock.advance(minutes=30)
    await world.job.tick()
    assert [(p.target, p.method) for p in await world.pages(scope)] == [("UA", "slack")]
    state = await world.store.get_state(scope)
    assert state.paged_at == "2026-12-07T09:00:00.000000Z" and state.page_acknowledged_at == state.paged_at
    # MTTA of a paged incident: from the first page to the first acknowledgement after it


async def test_mtta_of_a_paged_incident_runs_from_the_first_page_to_the_first_ack(world: World) -> None:
    scope = await declare(world)  # declared at 09:00 by the alert source: nobody has responded yet
    world.clock.advance(minutes=3)
    await desk.page(world.store, scope, world.setup, by="UX", user="UC")  # paged by hand at 09:03
    await world.job.tick()
    world.clock.advance(seconds=95)
    await desk.acknowledge(world.store, scope, "UC")  # acknowledged at 09:04:35
    world.clock.advance(minutes=10)
    await desk.acknowledge(world.store, scope, "UA")  # a later acknowledgement changes nothing

    async def measured() -> float | None:
        rows = [m for m in await world.job.index.milestones(None) if m.scope == scope]
        return rows[0].tta if rows else None

    assert await eventually(lambda: _is(measured, 95.0), what="MTTA 95 s") is True


async def _is(read: object, expected: float) -> bool:
    got = await read()  # type: ignore[operator]
    return got == expected


async def test_a_page_that_lost_the_race_with_an_acknowledgement_is_recorded_but_never_sent(world: World) -> None:
    scope = await declare(world)
    await world.job.tick()
    (page,) = await world.store.read(scope, kinds=("page",))
    await desk.acknowledge(world.store, scope, "UA")  # lands after the page was appended, before its delivery
    late = Recorder()
    await OncallSender(world.store, world.setup, {"slack": late}).deliver(scope, [page])
    assert late.notices == []  # the sender read the log again: acknowledged, so nothing goes out
    (ack,) = await world.store.read(scope, kinds=("acknowledged",))
    assert ack.seq > page.seq and ack.payload.escalations == (page.payload.escalation,)


async def test_a_page_by_hand_pages_one_person_without_any_approval(world: World) -> None:
    scope = await declare(world, severity=3)  # no route for SEV3
    await world.job.tick()
    assert await world.pages(scope) == []
    await desk.page(world.store, scope, world.setup, by="UX", user="UC")
    await world.job.tick()
    assert [(p.target, p.method) for p in await world.pages(scope)] == [("UC", "slack")]


async def test_escalate_brings_the_next_level_forward(world: World) -> None:
    scope = await declare(world)
    await world.job.tick()
    esc = (await world.store.read(scope, kinds=("escalation",)))[0].seq
    world.clock.advance(seconds=30)
    await desk.escalate(world.store, scope, esc, "UA")
    await world.job.tick()
    assert [(p.level, p.target) for p in await world.pages(scope) if p.method == "slack"] == [(0, "UA"), (1, "UB")]


async def test_an_override_pages_the_person_covering(world: World) -> None:
    await desk.override(world.store, world.setup, world.clock, schedule="primary", user="UO", seconds=3600, by="UA")
    scope = await declare(world)
    await world.job.tick()
    assert [p.target for p in await world.pages(scope)] == ["UO"]


async def test_a_proposal_parked_longer_than_approval_after_pages_the_approver_with_approve_and_deny(
    world: World,
) -> None:
    from decklog.core.entries import NewEntry

    world.job.setup = world.sender.setup = world.setup = OncallConfig.model_validate(
        {**SETUP, "approval_after": "10m", "routes": [{"policy": "default", "severity": [2]}]}
    )
    scope = await declare(world, severity=3)  # no route: only the parked approval pages
    proposal = {"proposal_id": "p-1", "action": "rollback_deploy", "risk": "R2", "preview": "roll back payments"}
    await world.store.append(scope, [NewEntry.make("proposal", Actor.agent("rules"), proposal)])
    world.clock.advance(minutes=9)
    await world.job.tick()
    assert await world.pages(scope) == []
    world.clock.advance(minutes=2)
    await world.job.tick()
    [page] = await world.pages(scope)
    assert (page.target, page.proposal) == ("UA", "p-1")
    notice = await eventually(lambda: [n for n in world.slack.notices if n.scope == scope], what="the DM")
    assert notice[0].proposal == "p-1" and notice[0].proposal_preview == "roll back payments"
    approval = {"proposal_id": "p-1", "decision": "approved", "approver": "UA"}
    await world.store.append(scope, [NewEntry.make("approval", Actor.human("UA"), approval)])
    world.clock.advance(minutes=30)
    await world.job.tick()
    assert len(await world.pages(scope)) == 1  # answered: the approval's escalation stops


async def test_a_handoff_is_said_once_when_the_person_on_call_changes(world: World) -> None:
    from decklog.core.entries.oncall import OncallHandoff

    class Posts:
        def __init__(self) -> None:
            self.said: list[tuple[OncallHandoff, str]] = []

        async def post_handoff(self, handoff: OncallHandoff, key: str) -> None:
            self.said.append((handoff, key))

    hourly = {"name": "hourly", "layers": [{"users": ["UA", "UB"], "rotation": "1h", "start": "2026-12-07T08:00:00Z"}]}
    world.job.setup = world.sender.setup = OncallConfig.model_validate({"schedules": [hourly]})
    posts = Posts()
    world.sender.handoffs = posts
    await world.job.tick()  # 09:00: UB took over from UA
    await world.job.tick()
    world.clock.advance(minutes=30)
    await world.job.tick()
    said = await eventually(lambda: posts.said, what="the handoff post")
    assert [(h.user, h.previous, h.at, h.until) for h, _ in said] == [
        ("UB", "UA", "2026-12-07T09:00:00.000000Z", "2026-12-07T10:00:00.000000Z")
    ]
    assert said[0][1] == "handoff:hourly:2026-12-07T09:00:00.000000Z"
    world.clock.advance(minutes=31)  # 10:01: UA again
    await world.job.tick()
    await eventually(lambda: len(posts.said) == 2, what="the next handoff")
    assert posts.said[1][0].user == "UA"
    assert len(await world.store.read("oncall/hourly", kinds=("oncall_handoff",))) == 2
