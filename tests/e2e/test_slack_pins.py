"""Slack's pins and taking things back, through the real door: signed events posted to /slack/events of a live
server, the fake Slack behind the real client. ``pin_added`` records the message as evidence, once per message
whether pinned or 📌-reacted; removing the last 📌 (or the pin) records a ``retracted`` entry that refers to the
evidence; removing the last ✅ takes back the verdict on a suggestion. Redeliveries record once."""

from __future__ import annotations

from typing import Any

import aiohttp

from decklog.adapters.local.slack import FakeSlack
from decklog.bot.server import DecklogServer
from decklog.core.entries import Actor, Entry, NewEntry
from tests.conftest import eventually
from tests.e2e.test_slack_e2e import ALERTS, ALICE, BOB, CAROL, GENERAL, declare

TEXT = "db-1 connection pool at 100/100 since 14:02"


def pin_added(user: str, channel: str, message: dict[str, Any], *, added: bool = True) -> dict[str, Any]:
    """A ``pin_added`` / ``pin_removed`` event as Slack documents it (docs.slack.dev/reference/events/pin_added:
    ``user``, ``channel_id``, ``item`` with the pinned message, ``event_ts``)."""
    return {
        "type": "pin_added" if added else "pin_removed",
        "user": user,
        "channel_id": channel,
        "item": {
            "type": "message",
            "channel": channel,
            "message": message,
            "created": 1799999999,
            "created_by": user,
        },
        "event_ts": "1799999999.000200",
    }


async def entries(server: DecklogServer, scope: str, kind: str) -> list[Entry]:
    return await server.runtime.store.read(scope, kinds=[kind])


async def at_least(server: DecklogServer, scope: str, kind: str, n: int) -> list[Entry] | None:
    found = await entries(server, scope, kind)
    return found if len(found) >= n else None


async def settled(server: DecklogServer) -> None:
    """Every event delivered so far has been worked (the durable inbox holds nothing still to process)."""

    async def idle() -> bool:
        return await server.parts.slack.inbox.pending_count() == 0

    await eventually(idle, what="the Slack inbox drained")


async def thread_message(server: DecklogServer) -> tuple[str, Any, Any]:
    fake: FakeSlack = server.sandbox
    scope, state = await declare(server)
    reply = await fake.post_message(BOB, GENERAL, TEXT, thread_ts=state.thread.ts)
    await eventually(lambda: at_least(server, scope, "message", 1), what="the reply recorded")
    return scope, state, reply


def thread_text(fake: FakeSlack, thread_ts: str) -> str:
    return "\n".join(m.text for m in fake.workspace.thread(GENERAL, thread_ts))


async def test_a_pin_records_the_message_as_evidence_once_with_a_pushpin_and_a_redelivery(
    server: DecklogServer,
) -> None:
    fake: FakeSlack = server.sandbox
    scope, state, reply = await thread_message(server)
    message = {"type": "message", "user": BOB, "text": TEXT, "ts": reply.ts, "thread_ts": state.thread.ts}
    first = await fake.driver.event(pin_added(CAROL, GENERAL, message), event_id="Ev0PIN1")
    assert first.status == 200
    found = await eventually(lambda: at_least(server, scope, "evidence", 1), what="the pin as evidence")
    p = found[0].payload
    assert (p.text, p.channel, p.ts, p.author, p.source) == (TEXT, GENERAL, reply.ts, BOB, "pin")  # type: ignore[attr-defined]
    assert found[0].actor.id == CAROL
    # Slack retries the same delivery; a 📌 of the same message; a second pin event (another delivery id)
    retry = await fake.driver.event(pin_added(CAROL, GENERAL, message), event_id="Ev0PIN1", retry_num=1)
    assert retry.status == 200
    await fake.add_reaction(ALICE, GENERAL, reply.ts, "pushpin")
    await fake.driver.event(pin_added(ALICE, GENERAL, message), event_id="Ev0PIN2")
    await settled(server)
    assert server.parts.slack.inbox.stats.duplicates >= 1  # the retry was refused at the door
    assert len(await entries(server, scope, "evidence")) == 1
    assert (await server.runtime.store.get_state(scope)).evidence == 1


async def test_a_pin_outside_any_incident_records_nothing(server: DecklogServer) -> None:
    fake: FakeSlack = server.sandbox
    scope, _state, reply = await thread_message(server)
    loose = await fake.post_message(BOB, ALERTS, "unrelated chatter")
    message = {"type": "message", "user": BOB, "text": "unrelated chatter", "ts": loose.ts}
    assert (await fake.driver.event(pin_added(CAROL, ALERTS, message), event_id="Ev0PIN3")).status == 200
    await fake.add_reaction(CAROL, GENERAL, reply.ts, "pushpin")
    await settled(server)
    assert [e.payload.ts for e in await entries(server, scope, "evidence")] == [reply.ts]  # type: ignore[attr-defined]


async def test_removing_the_last_pushpin_takes_the_evidence_back_and_the_report_shows_it(
    server: DecklogServer,
) -> None:
    fake: FakeSlack = server.sandbox
    scope, state, reply = await thread_message(server)
    await fake.add_reaction(CAROL, GENERAL, reply.ts, "pushpin")
    await fake.add_reaction(ALICE, GENERAL, reply.ts, "pushpin")
    pinned = await eventually(lambda: at_least(server, scope, "evidence", 1), what="the evidence")
    # Alice's 📌 goes, Carol's still stands: nothing is taken back
    await fake.remove_reaction(ALICE, GENERAL, reply.ts, "pushpin")
    await settled(server)
    assert await entries(server, scope, "retracted") == []
    # Carol's goes too: the evidence is taken back, once, however often Slack delivers the removal
    removed = await fake.remove_reaction(CAROL, GENERAL, reply.ts, "pushpin")
    taken = await eventually(lambda: at_least(server, scope, "retracted", 1), what="the withdrawal")
    p = taken[0].payload
    assert taken[0].refs == (pinned[0].seq,) and taken[0].actor.id == CAROL
    assert (p.what, p.text, p.channel, p.ts) == ("evidence", TEXT, GENERAL, reply.ts)  # type: ignore[attr-defined]
    assert removed.responses and removed.responses[0].status == 200
    delivered = fake.deliveries[-1]
    assert delivered.payload["event"]["type"] == "reaction_removed"
    assert (await fake.redeliver(delivered)).status == 200  # refused at the door (same event id)
    again_id = await fake.driver.event(delivered.payload["event"], event_id="Ev0UNPIN9")  # past it: the log's key
    assert again_id.status == 200
    await settled(server)
    assert len(await entries(server, scope, "retracted")) == 1
    assert (await server.runtime.store.get_state(scope)).evidence == 0
    # the thread and the report show it; the evidence entry itself is still in the log
    await eventually(lambda: "took back the evidence" in thread_text(fake, state.thread.ts), what="the thread note")
    async with aiohttp.ClientSession() as http, http.get(f"{server.url}/api/scopes/{scope}/report.md") as resp:
        report = await resp.text()
    assert resp.status == 200 and "took back the evidence" in report and "pinned" in report
    # pinned again later, it is evidence again
    await fake.add_reaction(BOB, GENERAL, reply.ts, "round_pushpin")
    again = await eventually(lambda: at_least(server, scope, "evidence", 2), what="evidence again")
    assert again[-1].seq > taken[0].seq
    assert (await server.runtime.store.get_state(scope)).evidence == 1


async def test_unpinning_takes_the_pins_evidence_back(server: DecklogServer) -> None:
    fake: FakeSlack = server.sandbox
    scope, state, reply = await thread_message(server)
    message = {"type": "message", "user": BOB, "text": TEXT, "ts": reply.ts, "thread_ts": state.thread.ts}
    await fake.driver.event(pin_added(CAROL, GENERAL, message), event_id="Ev0PIN4")
    pinned = await eventually(lambda: at_least(server, scope, "evidence", 1), what="the pin as evidence")
    await fake.driver.event(pin_added(CAROL, GENERAL, message, added=False), event_id="Ev0UNPIN4")
    taken = await eventually(lambda: at_least(server, scope, "retracted", 1), what="the unpin")
    assert taken[0].refs == (pinned[0].seq,)
    assert (await server.runtime.store.get_state(scope)).evidence == 0


async def test_removing_the_check_mark_takes_the_verdict_back(server: DecklogServer) -> None:
    fake: FakeSlack = server.sandbox
    scope, state = await declare(server)
    await server.runtime.store.append(
        scope,
        [NewEntry.make("suggestion", Actor.agent("rules"), {"suggestion_id": "s-roll", "text": "try a rollback"})],
    )

    def posted() -> Any:
        return next((m for m in fake.workspace.thread(GENERAL, state.thread.ts) if "try a rollback" in m.text), None)

    carrier = await eventually(posted, what="the suggestion in the thread")
    await fake.add_reaction(BOB, GENERAL, carrier.ts, "white_check_mark")
    verdict = await eventually(lambda: at_least(server, scope, "suggestion_feedback", 1), what="the verdict")
    assert "s-roll" not in (await server.runtime.store.get_state(scope)).suggestions
    await fake.remove_reaction(BOB, GENERAL, carrier.ts, "white_check_mark")
    taken = await eventually(lambda: at_least(server, scope, "retracted", 1), what="the verdict taken back")
    p = taken[0].payload
    assert taken[0].refs == (verdict[0].seq,)
    assert (p.what, p.suggestion_id) == ("suggestion_feedback", "s-roll")  # type: ignore[attr-defined]
    state_now = await server.runtime.store.get_state(scope)
    assert state_now.suggestions.get("s-roll") == "try a rollback"  # open again
    # a new verdict after the withdrawal counts
    await fake.add_reaction(CAROL, GENERAL, carrier.ts, "x")
    both = await eventually(lambda: at_least(server, scope, "suggestion_feedback", 2), what="the second verdict")
    assert both[-1].payload.verdict == "dismissed"  # type: ignore[attr-defined]
