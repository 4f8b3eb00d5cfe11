"""On-call end to end, through the real server's doors against the fake Slack: an incident a route selects pages
the person on call by DM as it opens; the DM's Acknowledge stops the escalation (an entry; the next level never
pages); ``/incident page @user`` pages directly; ``/incident oncall`` and ``GET /api/oncall`` say who is on call; the
schedule's ``.ics`` feed opens in a real iCalendar parser; a Slack 429 storm delays a page and never doubles it."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import aiohttp
import icalendar
import pytest

from decklog.bot.server import DecklogServer
from decklog.bot.settings import Settings
from decklog.core.clock import ManualClock
from decklog.core.entries.oncall import Page
from decklog.core.errors import NotFound
from tests.conftest import eventually, test_config
from tests.e2e.test_slack_e2e import ALICE, BOB, CAROL, GENERAL
from tests.fakes.slack_calls import record_sandbox_calls, slack_calls
from tests.fakes.slack_faults import slack_faults

ONCALL = {
    "tick": 3600,  # the tests tick the job themselves, on a ManualClock
    "schedules": [
        {"name": "primary", "layers": [{"users": [ALICE], "rotation": "1w", "start": "2026-01-05T09:00:00Z"}]},
        {"name": "secondary", "layers": [{"users": [BOB], "rotation": "1w", "start": "2026-01-05T09:00:00Z"}]},
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
}

Make = Callable[..., Awaitable[DecklogServer]]


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(datetime.now(UTC).replace(microsecond=0))


@pytest.fixture
async def make(tmp_path: Path, clock: ManualClock) -> AsyncIterator[Make]:
    running: list[DecklogServer] = []

    async def start(oncall: dict[str, Any] | None = None, **settings: Any) -> DecklogServer:
        values: dict[str, Any] = {"data_dir": tmp_path / "data", "host": "127.0.0.1", "port": 0}
        values.update(settings)
        server = DecklogServer(
            Settings(**values),
            config=test_config(oncall=oncall or ONCALL),
            clock=clock,
            parts={"sandbox", "api"},
            on_built=record_sandbox_calls,
        )
        await server.start()
        running.append(server)
        return server

    yield start
    for server in reversed(running):
        await server.stop()


async def declare(server: DecklogServer, text: str) -> str:
    fake = server.sandbox
    assert fake is not None
    assert (await fake.run_command(ALICE, GENERAL, f"declare {text}")).status == 200
    ids = await eventually(lambda: server.runtime.store.scope_ids(), what="a declared scope")
    scope = str(ids[0])

    async def listed() -> bool:
        row = await server.runtime.index.get(scope)
        return row is not None and row.is_open

    await eventually(listed, what="the incident in the index")
    return scope


def page_dms(server: DecklogServer, user: str | None = None) -> list[Any]:
    fake = server.sandbox
    assert fake is not None
    posts = slack_calls(fake).calls_to("chat.postMessage", ok=True)
    dms = [c for c in posts if (c.args.get("metadata") or {}).get("event_type") == "decklog_page"]
    if user is None:
        return dms
    channel = fake.workspace.directory.im_with(user).id
    return [c for c in dms if c.args.get("channel") == channel]


async def pages(server: DecklogServer, scope: str) -> list[Page]:
    return [e.payload for e in await server.runtime.store.read(scope, kinds=("page",)) if isinstance(e.payload, Page)]


async def test_a_routed_incident_pages_by_dm_and_the_acknowledge_button_stops_the_escalation(
    make: Make, clock: ManualClock
) -> None:
    server = await make()
    job = server.parts.oncall.job  # type: ignore[union-attr]
    scope = await declare(server, "Checkout is down sev1")
    await job.tick()
    [dm] = await eventually(lambda: page_dms(server, ALICE), what="the page DM to the person on call")
    assert "Checkout is down" in dm.args["text"]
    blocks = dm.args["blocks"]
    actions = next(b for b in blocks if b["type"] == "actions")
    assert [e["action_id"] for e in actions["elements"]] == ["oncall_ack", "oncall_escalate"]
    fake = server.sandbox
    assert fake is not None
    posted = await eventually(
        lambda: [m for m in fake.workspace.messages.all(dm.args["channel"]) if m.metadata], what="the DM"
    )
    out = await fake.click_button(ALICE, dm.args["channel"], posted[0].ts, "oncall_ack")
    assert out.status == 200
    acks = await eventually(lambda: server.runtime.store.read(scope, kinds=("acknowledged",)), what="the ack")
    assert acks[0].payload.user == ALICE and acks[0].payload.via == "button"
    clock.advance(minutes=10)
    await job.tick()
    assert [(p.level, p.target) for p in await pages(server, scope)] == [(0, ALICE)]
    assert page_dms(server, BOB) == []
    state = await server.runtime.store.get_state(scope)
    assert state.page_acknowledged_by == ALICE

    def header_says_acknowledged() -> bool:
        updates = slack_calls(fake).calls_to("chat.update", ok=True)
        return any(f"Acknowledged by <@{ALICE}>" in str(c.args.get("blocks")) for c in updates)

    await eventually(header_says_acknowledged, what="the header showing the acknowledgement")


async def test_page_by_hand_pages_at_once_without_approval_and_ack_by_command(make: Make, clock: ManualClock) -> None:
    server = await make()
    job = server.parts.oncall.job  # type: ignore[union-attr]
    scope = await declare(server, "Search is slow sev3")  # no route for SEV3
    await job.tick()
    assert await pages(server, scope) == []
    fake = server.sandbox
    assert fake is not None
    assert (await fake.run_command(BOB, GENERAL, f"page <@{CAROL}> {scope}")).status == 200
    await eventually(lambda: server.runtime.store.read(scope, kinds=("escalation",)), what="the escalation")
    await job.tick()
    await eventually(lambda: page_dms(server, CAROL), what="Carol's page")
    assert (await fake.run_command(CAROL, GENERAL, f"ack {scope}")).status == 200
    acks = await eventually(lambda: server.runtime.store.read(scope, kinds=("acknowledged",)), what="the ack")
    assert acks[0].payload.user == CAROL and acks[0].payload.via == "command"
    assert not await server.runtime.store.read(scope, kinds=("proposal",))  # nothing waited for an approval


async def test_who_is_on_call_from_slack_and_the_api_and_the_ics_feed_parses(make: Make, clock: ManualClock) -> None:
    server = await make()
    fake = server.sandbox
    assert fake is not None
    assert (await fake.run_command(CAROL, GENERAL, f"oncall override primary <@{CAROL}> 2h")).status == 200

    async def overridden() -> bool:
        try:
            return bool(await server.runtime.store.read("oncall/primary", kinds=("oncall_override",)))
        except NotFound:
            return False

    await eventually(overridden, what="the override")
    await server.parts.oncall.job.tick()  # type: ignore[union-attr]

    def handoffs() -> list[Any]:
        posts = slack_calls(fake).calls_to("chat.postMessage", ok=True)
        return [c for c in posts if (c.args.get("metadata") or {}).get("event_type") == "decklog_handoff"]

    [said] = await eventually(handoffs, what="the handoff said in the alerts channel")
    assert f"<@{CAROL}> is now on call for `primary`" in said.args["text"]
    headers = [c for c in slack_calls(fake).calls_to("chat.postMessage") if "On-call schedule" in str(c.args)]
    assert headers == []  # the schedule's own scope has no header
    base = server.url
    async with aiohttp.ClientSession() as http:
        async with http.get(f"{base}/api/oncall") as r:
            assert r.status == 200
            body = await r.json()
        async with http.get(f"{base}/api/oncall/primary.ics?days=14") as r:
            assert r.status == 200 and r.headers["Content-Type"].startswith("text/calendar")
            ics = await r.read()
        async with http.get(f"{base}/api/oncall/nope.ics") as r:
            assert r.status == 404
        async with http.get(f"{base}/api/oncall/primary.ics?days=999") as r:
            assert r.status == 400 and "days" in (await r.json())["error"]
    by_name = {s["name"]: s for s in body["schedules"]}
    assert by_name["primary"]["on_call"] == CAROL and by_name["secondary"]["on_call"] == BOB
    assert by_name["primary"]["layers"][0]["rotation"] == "1w"
    view = await home(server, CAROL)
    assert "On call now" in str(view["blocks"][0]) and f"<@{CAROL}>" in str(view["blocks"][1])
    cal = icalendar.Calendar.from_ical(ics)
    events = [c for c in cal.walk("VEVENT")]
    now = clock.now()
    covering = [e for e in events if e.decoded("dtstart") <= now < e.decoded("dtend")]
    assert [str(e["summary"]) for e in covering] == [f"On call: {CAROL} (primary)"]
    assert covering[0].decoded("dtend") - covering[0].decoded("dtstart") == timedelta(hours=2)
    print("\nthe .ics feed of primary, opened by icalendar:", cal.get("x-wr-calname"), f"({len(events)} events)")
    for e in events:
        print(
            f"  {e.decoded('dtstart').isoformat()} → {e.decoded('dtend').isoformat()}  {e['summary']}  uid={e['uid']}"
        )
    assert all(str(e["uid"]).endswith("@decklog") for e in events) and len({str(e["uid"]) for e in events}) == len(
        events
    )


async def home(server: DecklogServer, user: str) -> dict[str, Any]:
    from decklog.adapters.slack.listeners.events import home_view

    return await home_view(server.parts.slack.deps)


async def test_a_slack_429_storm_delays_a_page_but_never_doubles_it(make: Make, clock: ManualClock) -> None:
    server = await make()
    fake = server.sandbox
    assert fake is not None
    dm_channel = fake.workspace.directory.im_with(ALICE).id
    plan = slack_faults(fake)
    storm = plan.ratelimit_next(
        "chat.postMessage", retry_after=1, count=4, where=lambda a: a.get("channel") == dm_channel
    )
    job = server.parts.oncall.job  # type: ignore[union-attr]
    scope = await declare(server, "Payments 5xx sev1")
    await job.tick()
    await eventually(lambda: page_dms(server, ALICE), timeout=30, what="the page after the storm")
    assert storm.remaining == 0
    limited = [
        c for c in slack_calls(fake).calls_to("chat.postMessage", ok=False) if c.args.get("channel") == dm_channel
    ]
    assert len(limited) == 4
    await job.tick()
    assert len(page_dms(server, ALICE)) == 1 and len(await pages(server, scope)) == 1


async def test_a_reply_by_sms_acknowledges_the_page(make: Make, clock: ManualClock) -> None:
    from twilio.request_validator import RequestValidator

    from tests.fakes.twilio import ACCOUNT_SID, AUTH_TOKEN, FROM, FakeTwilio

    phone = "+14155550100"
    people = {ALICE: {"phone": phone, "rules": [{"method": "slack"}, {"method": "sms"}]}}
    async with FakeTwilio() as twilio:
        server = await make(
            oncall={**ONCALL, "people": people},
            twilio_account_sid=ACCOUNT_SID,
            twilio_auth_token=AUTH_TOKEN,
            twilio_from=FROM,
            twilio_api_url=twilio.base_url,
        )
        job = server.parts.oncall.job  # type: ignore[union-attr]
        scope = await declare(server, "Checkout is down sev1")
        await job.tick()
        [sms] = await eventually(lambda: twilio.messages, what="the SMS page")
        assert sms["To"] == phone and "Checkout is down" in sms["Body"]
        url = f"{server.url}/twilio/sms"
        reply = {"From": phone, "To": FROM, "Body": "ack", "MessageSid": "SM" + "1" * 32, "AccountSid": ACCOUNT_SID}
        signature = RequestValidator(AUTH_TOKEN).compute_signature(url, reply)
        async with aiohttp.ClientSession() as http:
            async with http.post(url, data=reply, headers={"X-Twilio-Signature": "bad"}) as r:
                assert r.status == 403
            async with http.post(url, data=reply) as r:  # no signature: refused before the body is read
                assert r.status == 403
            async with http.post(url, data=b"x" * (65 * 1024), headers={"X-Twilio-Signature": signature}) as r:
                assert r.status == 413
            assert not await server.runtime.store.read(scope, kinds=("acknowledged",))
            async with http.post(url, data=reply, headers={"X-Twilio-Signature": signature}) as r:
                assert r.status == 200 and f"Acknowledged {scope}" in await r.text()
        [ack] = await server.runtime.store.read(scope, kinds=("acknowledged",))
        assert ack.payload.user == ALICE and ack.payload.via == "sms"
