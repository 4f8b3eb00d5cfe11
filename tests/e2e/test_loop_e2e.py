"""People and agents working one incident, end to end through the fake Slack: people write the typed record, agent
findings are answered, any catalog action can be asked for, a joiner catches up, and the report counts the findings."""

from __future__ import annotations

import json
from typing import Any

from decklog.adapters.local.services import FakeStatuspage
from decklog.adapters.slack.ids import Action
from decklog.bot.server import DecklogServer
from decklog.core.entries import Entry
from decklog.core.reports import build_report, render
from decklog.core.reports.export import read_logs
from decklog.core.views import build_view
from tests.conftest import ServerFactory, eventually, test_config
from tests.e2e.test_agents_e2e import ALERTS_CHANNEL, CHANGE, entries, incident, posted_for
from tests.fakes.slack_calls import slack_calls

ALICE, BOB, CAROL = "U0ALICE", "U0BOB", "U0CAROL"
GENERAL = "C0GENERAL"


async def declared(server: DecklogServer) -> tuple[str, str]:
    fake = server.sandbox
    assert (await fake.run_command(ALICE, GENERAL, "declare Checkout errors sev2")).status == 200
    scope = "incident/checkout-errors"
    state = await eventually(lambda: _thread(server, scope), what="the header's thread")
    return scope, state.thread.ts


async def _thread(server: DecklogServer, scope: str) -> Any:
    if not await server.runtime.store.exists(scope):
        return None
    state = await server.runtime.store.get_state(scope)
    return state if state.thread else None


def ephemerals(server: DecklogServer, user: str) -> list[str]:
    texts = [r.body.get("text", "") for r in server.sandbox.server.responses]
    texts += [
        c.args.get("text", "")
        for c in slack_calls(server.sandbox).calls_to("chat.postEphemeral")
        if c.args.get("user") == user
    ]
    return texts


async def test_an_incident_run_from_slack_only_fills_the_triage_and_joiner_views(server: DecklogServer) -> None:
    fake = server.sandbox
    scope, ts = await declared(server)
    await fake.post_message(ALICE, GENERAL, "@decklog goal restore checkout above 99%", thread_ts=ts)
    await fake.post_message(ALICE, GENERAL, "@decklog constraint no deploys without the commander", thread_ts=ts)
    await fake.post_message(BOB, GENERAL, "502s from the load balancer since 03:10", thread_ts=ts)
    await fake.post_message(CAROL, GENERAL, "the psp dashboard is red", thread_ts=ts)
    await fake.run_command(ALICE, GENERAL, f"decision fail over to the backup psp {scope}")
    got = await eventually(lambda: _kinds_present(server, scope, "goal", "constraint", "decision"), what="the record")
    goal = got["goal"][0]
    assert goal.payload.text == "restore checkout above 99%" and goal.actor.id == ALICE  # type: ignore[attr-defined]
    assert got["decision"][0].to_json()["payload"]["text"] == "fail over to the backup psp"
    await eventually(lambda: _messages(server, scope, 4), what="the people's messages (the two mentions too)")
    triage = (await build_view(server.runtime.store, scope, "triage")).sections
    assert [g["text"] for g in triage["goals"]] == ["Goal: restore checkout above 99%"]
    assert [c["text"] for c in triage["constraints"]] == ["Constraint: no deploys without the commander"]
    said = [m["text"] for m in triage["human_messages"]]
    # newest first by seq: a thread's requests are processed in the order they were stored (decision 126)
    assert said[:2] == ["carol: the psp dashboard is red", "bob: 502s from the load balancer since 03:10"]
    joiner = (await build_view(server.runtime.store, scope, "joiner")).sections
    assert joiner["goal"]["text"] == "Goal: restore checkout above 99%"
    assert [d["text"] for d in joiner["last_decisions"]] == ["Decision (alice): fail over to the backup psp"]
    # the thread shows them; the record is verifiable
    texts = [m.text for m in fake.workspace.thread(GENERAL, ts)]
    await eventually(
        lambda: any(t.startswith("Decision:") for t in [m.text for m in fake.workspace.thread(GENERAL, ts)])
    )
    assert any(t.startswith("Goal:") for t in texts)
    assert (await server.runtime.store.verify(scope)).ok


async def _messages(server: DecklogServer, scope: str, n: int) -> bool:
    return len(await server.runtime.store.read(scope, kinds=["message"])) >= n


async def _kinds_present(server: DecklogServer, scope: str, *kinds: str) -> dict[str, list[Entry]] | None:
    out = {k: await server.runtime.store.read(scope, kinds=[k]) for k in kinds}
    return out if all(out.values()) else None


async def test_a_hypothesis_ruled_out_with_its_button_is_not_repeated(server: DecklogServer) -> None:
    fake = server.sandbox
    scope, ts = await incident(server)
    hyp = (await eventually(lambda: entries(server, scope, "hypothesis"), what="a hypothesis"))[0]
    message = await eventually(lambda: posted_for(server, ts, hyp.seq), what="the hypothesis in the thread")
    assert CHANGE in message.text
    buttons = {el["action_id"] for b in message.blocks if b["type"] == "actions" for el in b["elements"]}
    assert {Action.HYPOTHESIS_CONFIRM, Action.HYPOTHESIS_RULE_OUT} <= buttons
    turn = hyp.payload.turn  # type: ignore[attr-defined]
    assert turn and f"turn #{turn}" in json.dumps(message.blocks)
    turn_entry = (await server.runtime.store.read_seqs(scope, [turn]))[0]
    assert turn_entry.kind == "agent_turn" and "investigation" in turn_entry.payload.view  # type: ignore[attr-defined]
    assert hyp.to_json()["payload"]["turn"] == turn and turn_entry.payload.seq_to >= 1  # type: ignore[attr-defined]
    out = await fake.click_button(ALICE, ALERTS_CHANNEL, message.ts, Action.HYPOTHESIS_RULE_OUT, f"{scope}|{hyp.seq}")
    assert out.status == 200
    answer = (await eventually(lambda: entries(server, scope, "finding_answer"), what="the answer"))[0]
    assert answer.actor.id == ALICE and answer.refs == (hyp.seq,) and answer.payload.verdict == "ruled_out"  # type: ignore[attr-defined]
    assert await entries(server, scope, "obligation_cancelled")  # the rollback of a ruled-out change is dropped
    assert server.parts.agents is not None
    runtime = server.parts.agents.turns
    before = len(await entries(server, scope, "agent_turn"))
    await fake.post_message(BOB, ALERTS_CHANNEL, "still failing", thread_ts=ts)
    await eventually(lambda: _turns(server, scope, before + 1), what="the next turn")
    assert len(await entries(server, scope, "hypothesis")) == 1  # not repeated
    # new evidence (an alert first seen after the ruling) reopens the suspicion
    await server.runtime.store.append(scope, [_alert("fp-new")])
    await runtime.run_turn(scope, force=True)
    assert len(await entries(server, scope, "hypothesis")) == 2
    report = build_report(*await read_logs(server.runtime.store, scope))
    rows = {(f.reasoner, f.kind): f for f in report.findings}
    assert rows[("rules", "hypothesis")].ruled_out == 1 and rows[("rules", "hypothesis")].unanswered == 1
    assert rows[("rules", "obligation")].dismissed >= 1
    md = render(report, "md").decode()
    assert "## Findings" in md and "| rules | hypothesis | 2 | 0 | 1 | 0 | 0 | 1 |" in md
    assert (await server.runtime.store.verify(scope)).ok
    # /metrics: the same counts, per reasoner, kind and outcome (counted in the background after a scrape)
    text = await eventually(_counted(server), timeout=30, what="the findings counted")
    assert 'decklog_findings_total{kind="hypothesis",outcome="ruled_out",reasoner="rules"} 1.0' in text
    assert 'decklog_findings_total{kind="hypothesis",outcome="unanswered",reasoner="rules"} 1.0' in text
    dismissed = rows[("rules", "obligation")].dismissed
    assert f'decklog_findings_total{{kind="obligation",outcome="dismissed",reasoner="rules"}} {dismissed:.1f}' in text
    findings = server.parts.metrics.findings  # a scope whose version did not move is not read again
    before, reads = {k: v for k, (v, _) in findings._cache.items()}, findings.reads
    assert before.get(scope)
    await findings.refresh(server.runtime.store, server.runtime.index)
    await findings.settle()
    moved = [k for k, (v, _) in findings._cache.items() if before.get(k) != v]
    assert findings.reads - reads == len(moved)


def _counted(server: DecklogServer) -> Any:
    async def scrape() -> str | None:
        text = await _scrape(server)
        return text if "decklog_findings_uncounted_scopes 0.0" in text else None

    return scrape


async def _scrape(server: DecklogServer) -> str:
    import aiohttp

    async with aiohttp.ClientSession() as http, http.get(f"{server.url}/metrics") as response:
        assert response.status == 200
        return await response.text()


def _alert(fingerprint: str) -> Any:
    from decklog.core.entries import Actor, NewEntry

    payload = {
        "text": "p99 latency above 2s",
        "source": "alertmanager",
        "service": "payments",
        "fingerprint": fingerprint,
        "alert_status": "firing",
    }
    return NewEntry.make("observation", Actor.system("alertmanager"), payload)


async def _turns(server: DecklogServer, scope: str, n: int) -> bool:
    return len(await entries(server, scope, "agent_turn")) >= n


async def test_run_status_page_update_validates_parks_and_is_approved(make_server: ServerFactory) -> None:
    config = test_config()
    data = config.model_dump()
    data["actions"] = [
        *data["actions"],
        {
            "name": "drop_database",
            "description": "never",
            "risk": "R4",
            "executor": {"type": "http", "url": "http://127.0.0.1:9"},
        },
    ]
    from decklog.bot.config import DecklogConfig

    async with FakeStatuspage() as statuspage:
        server = await make_server(
            config=DecklogConfig.model_validate(data),
            statuspage_api_url=f"{statuspage.base_url}/v1/pages/{statuspage.page_id}",
            approvers=BOB,
        )
        fake = server.sandbox
        scope, ts = await declared(server)
        await fake.run_command(ALICE, GENERAL, "actions")
        await eventually(
            lambda: any("status_page_update" in t and "[R2]" in t for t in ephemerals(server, ALICE)),
            what="the catalog",
        )
        await fake.run_command(ALICE, GENERAL, f"run status_page_update status=sideways message=hi {scope}")
        await eventually(lambda: any("status" in t and "sideways" in t for t in ephemerals(server, ALICE)), what="400")
        assert not await entries(server, scope, "proposal")
        await fake.run_command(
            ALICE, GENERAL, f"run status_page_update status=investigating message=We are on it {scope}"
        )
        prop = (await eventually(lambda: entries(server, scope, "proposal"), what="the proposal"))[0]
        assert prop.payload.status == "waiting_for_approval" and prop.actor.id == ALICE  # type: ignore[attr-defined]
        message = await eventually(lambda: _posted(server, GENERAL, ts, prop.seq), what="the parked proposal")
        await fake.click_button(
            BOB, GENERAL, message.ts, Action.PROPOSAL_APPROVE, f"{scope}|{prop.payload.proposal_id}"
        )  # type: ignore[attr-defined]
        await eventually(lambda: entries(server, scope, "action_result"), what="the status page update ran")
        runs = [e.payload.action for e in await entries(server, scope, "action_started")]  # type: ignore[attr-defined]
        assert runs == ["status_page_update"]
        # an R4 is refused with its reason, ephemerally, and the refusal is recorded (DESIGN §1: denied outright)
        await fake.run_command(ALICE, GENERAL, f"run drop_database {scope}")
        refused = await eventually(
            lambda: next((t for t in ephemerals(server, ALICE) if "`drop_database` was refused" in t), None),
            what="the R4 refusal",
        )
        assert "(R4)" in refused and "never run by decklog" in refused
        denied = [e.payload for e in await entries(server, scope, "proposal") if e.payload.action == "drop_database"]  # type: ignore[attr-defined]
        assert [(p.status, p.proposer, p.expires_at) for p in denied] == [("denied", ALICE, "")]
        assert "drop_database" not in [e.payload.action for e in await entries(server, scope, "action_started")]  # type: ignore[attr-defined]
        # never offered: the refusal may show in the thread as a record, but with no Approve / Deny on it
        offered = [
            m
            for m in fake.workspace.thread(GENERAL, ts)
            if "drop_database" in m.text and Action.PROPOSAL_APPROVE.value in json.dumps(m.blocks or [])
        ]
        assert not offered, [m.text for m in offered]


def _posted(server: DecklogServer, channel: str, ts: str, seq: int) -> Any:
    for m in server.sandbox.workspace.thread(channel, ts)[1:]:
        if ((m.metadata or {}).get("event_payload") or {}).get("seq") == seq:
            return m
    return None


async def test_catch_me_up_answers_a_joiner_ephemerally(server: DecklogServer) -> None:
    fake = server.sandbox
    scope, ts = await declared(server)
    await fake.post_message(ALICE, GENERAL, "@decklog goal restore checkout above 99%", thread_ts=ts)
    await fake.post_message(ALICE, GENERAL, "@decklog decision fail over to the backup psp", thread_ts=ts)
    await eventually(lambda: _kinds_present(server, scope, "goal", "decision"))
    await fake.post_message(CAROL, GENERAL, "@decklog catch me up", thread_ts=ts)
    text = await eventually(
        lambda: next((t for t in ephemerals(server, CAROL) if "Catch-up" in t), None), what="the catch-up"
    )
    assert "restore checkout above 99%" in text and "fail over to the backup psp" in text and "SEV2" in text
    assert "*Last 30 min:*" in text
    await fake.run_command(CAROL, GENERAL, f"catchup {scope}")
    await eventually(lambda: len([t for t in ephemerals(server, CAROL) if "Catch-up" in t]) >= 2)
    thread = [m.text for m in fake.workspace.thread(GENERAL, ts)]
    assert not any("Catch-up" in t for t in thread)  # only the person who asked sees it


async def test_the_header_shows_the_current_goal_the_constraints_and_the_last_decision(server: DecklogServer) -> None:
    fake = server.sandbox
    scope, ts = await declared(server)
    await fake.post_message(ALICE, GENERAL, "@decklog goal stop the bleeding", thread_ts=ts)
    await fake.post_message(ALICE, GENERAL, "@decklog goal restore checkout above 99%", thread_ts=ts)
    await fake.post_message(BOB, GENERAL, "@decklog constraint no deploys without the commander", thread_ts=ts)
    await fake.post_message(BOB, GENERAL, "@decklog decision page the psp", thread_ts=ts)
    await fake.post_message(ALICE, GENERAL, "@decklog decision fail over to the backup psp", thread_ts=ts)

    def shown() -> str | None:
        updates = [c for c in slack_calls(fake).calls_to("chat.update") if c.args.get("ts") == ts]
        text = json.dumps(updates[-1].args.get("blocks")) if updates else ""
        return text if "fail over to the backup psp" in text else None

    blocks = await eventually(shown, what="the header updated with the record", timeout=10)
    assert "*Goal:* restore checkout above 99%" in blocks and "stop the bleeding" not in blocks  # the current goal
    assert "*Constraints:* no deploys without the commander" in blocks
    assert "*Last decision:* fail over to the backup psp" in blocks and "page the psp" not in blocks
    assert (await server.runtime.store.verify(scope)).ok  # nothing new in the stored state


async def test_the_record_in_incident_shortcut_turns_a_thread_message_into_a_typed_entry(server: DecklogServer) -> None:
    fake = server.sandbox
    scope, ts = await declared(server)
    said = await fake.post_message(BOB, GENERAL, "we only roll back with the commander's ok", thread_ts=ts)
    message = await eventually(lambda: _said(server, scope, said.ts), what="the message in the log")
    out = await fake.message_shortcut(ALICE, GENERAL, said.ts, "record_in_incident")
    assert out.responses[0].status == 200
    offer = await eventually(
        lambda: next(
            (e for e in fake.workspace.messages.ephemerals(user=ALICE) if "Record this message" in e.text), None
        ),
        what="the kinds offered to Alice only",
    )
    assert not fake.workspace.messages.ephemerals(user=BOB)
    buttons = [el for b in offer.blocks if b["type"] == "actions" for el in b["elements"]]
    assert [b["text"]["text"] for b in buttons] == ["Goal", "Constraint", "Decision", "Hypothesis"]
    constraint = next(b["value"] for b in buttons if b["text"]["text"] == "Constraint")
    await fake.click_button(ALICE, GENERAL, offer.ts, Action.RECORD_AS_CONSTRAINT, constraint)
    [entry] = await eventually(lambda: entries(server, scope, "constraint"), what="the constraint")
    assert entry.payload.text == "we only roll back with the commander's ok"  # type: ignore[attr-defined]
    assert entry.actor.id == ALICE and entry.refs == (message.seq,)  # recorded by Alice, referencing Bob's message
    await fake.click_button(
        ALICE, GENERAL, offer.ts, Action.RECORD_AS_CONSTRAINT, constraint
    )  # a second click: no second entry
    await eventually(lambda: any("already recorded" in t for t in ephemerals(server, ALICE)), what="the repeat")
    assert len(await entries(server, scope, "constraint")) == 1


async def _said(server: DecklogServer, scope: str, ts: str) -> Entry | None:
    found = [e for e in await server.runtime.store.read(scope, kinds=["message"]) if getattr(e.payload, "ts", "") == ts]
    return found[-1] if found else None


async def test_take_it_then_done_on_an_agent_obligation(server: DecklogServer) -> None:
    fake = server.sandbox
    scope, ts = await incident(server)
    opened = (await eventually(lambda: entries(server, scope, "obligation_opened"), what="the obligation"))[0]
    oid = opened.payload.obligation_id  # type: ignore[attr-defined]
    assert opened.actor.type == "agent"
    message = await eventually(lambda: posted_for(server, ts, opened.seq), what="the obligation in the thread")
    buttons = {el["action_id"] for b in message.blocks if b["type"] == "actions" for el in b["elements"]}
    assert {Action.OBLIGATION_TAKE, Action.OBLIGATION_DONE} <= buttons
    value = f"{scope}|{opened.seq}"
    await fake.click_button(ALICE, ALERTS_CHANNEL, message.ts, Action.OBLIGATION_TAKE, value)
    await eventually(lambda: entries(server, scope, "obligation_claimed"), what="the claim")
    held = (await server.runtime.store.get_state(scope)).obligations[oid]
    assert held.holder == "alice"
    await fake.click_button(ALICE, ALERTS_CHANNEL, message.ts, Action.OBLIGATION_DONE, value)
    await eventually(lambda: entries(server, scope, "obligation_fulfilled"), what="done")
    assert oid not in (await server.runtime.store.get_state(scope)).obligations
    answers = [(a.actor.id, a.refs, a.payload.verdict) for a in await entries(server, scope, "finding_answer")]  # type: ignore[attr-defined]
    assert answers == [(ALICE, (opened.seq,), "taken"), (ALICE, (opened.seq,), "done")]
    report = build_report(*await read_logs(server.runtime.store, scope))
    rows = {(f.reasoner, f.kind): f for f in report.findings}
    assert rows[("rules", "obligation")].accepted >= 1
    assert (await server.runtime.store.verify(scope)).ok
