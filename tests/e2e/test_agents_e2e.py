"""Agent turns end to end: the real server (``decklog serve`` on port 0) against the fake Slack.

An incident linked to a change gets a hypothesis and a rollback obligation in the log and the thread; an
all-clear gets a suggestion whose Accept button resolves; ``@decklog ask`` and ``/incident ask`` answer in the
thread with :fire: while working; pending turns survive a restart.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from decklog.adapters.slack.ids import Action
from decklog.bot.server import DecklogServer
from decklog.bot.settings import Settings
from decklog.core.entries import Actor, Entry, NewEntry
from decklog.core.errors import NotFound
from tests.conftest import ServerFactory, eventually, test_config
from tests.fakes.slack_calls import slack_calls

ALICE = "U0ALICE"
ALERTS_CHANNEL = "C0ALERTS"
CHANGE = "change/payments-v2.4.1"
SYSTEM = Actor.system("alertmanager")


async def incident(server: DecklogServer, *, link: bool = True, title: str = "Payments 5xx") -> tuple[str, str]:
    """A deploy, then an alert-opened incident in #alerts (linked to the deploy); returns (scope, header ts)."""
    rt = server.runtime
    if link and not await rt.store.exists(CHANGE):
        await rt.service.declare(
            title="payments v2.4.1 deployed",
            scope=CHANGE,
            kind="change",
            services=["payments"],
            actor=Actor.system("generic"),
        )
        await rt.store.append(
            CHANGE,
            [
                NewEntry.make(
                    "observation",
                    Actor.system("generic"),
                    {
                        "text": "deploy succeeded",
                        "data": {
                            "version": "v2.4.1",
                            "commits": [{"id": "abc", "message": "raise pool size", "paths": ["src/db/pool.py"]}],
                        },
                    },
                )
            ],
        )
    declared = await rt.service.declare(
        title=title, severity=2, services=["payments"], actor=SYSTEM, via="alert", channel=ALERTS_CHANNEL
    )
    scope = declared.state.scope
    await alert(server, scope, "firing")
    if link:
        await rt.service.link(
            scope, CHANGE, Actor.system("changes"), relation="suspected_cause", reason="deployed 10 min before"
        )
    state = await eventually(lambda: _thread(server, scope), what="the header's thread")
    return scope, state.thread.ts


async def alert(server: DecklogServer, scope: str, status: str) -> None:
    payload = {
        "text": "HTTP 5xx above 5%",
        "source": "alertmanager",
        "service": "payments",
        "fingerprint": "fp-5xx",
        "alert_status": status,
    }
    await server.runtime.store.append(scope, [NewEntry.make("observation", SYSTEM, payload)])


async def _thread(server: DecklogServer, scope: str) -> Any:
    try:
        state = await server.runtime.store.get_state(scope)
    except NotFound:
        return None
    return state if state.thread else None


async def entries(server: DecklogServer, scope: str, kind: str) -> list[Entry]:
    return await server.runtime.store.read(scope, kinds=[kind])


def thread_texts(server: DecklogServer, ts: str) -> list[str]:
    return [m.text for m in server.sandbox.workspace.thread(ALERTS_CHANNEL, ts)[1:]]


def posted_for(server: DecklogServer, ts: str, seq: int) -> Any:
    for message in server.sandbox.workspace.thread(ALERTS_CHANNEL, ts)[1:]:
        meta = (message.metadata or {}).get("event_payload") or {}
        if meta.get("seq") == seq:
            return message
    return None


async def test_an_incident_with_a_linked_change_gets_a_hypothesis_and_rollback_obligation_in_log_and_thread(
    server: DecklogServer,
) -> None:
    scope, ts = await incident(server)
    hypothesis = await eventually(lambda: entries(server, scope, "hypothesis"), what="a hypothesis")
    obligation = await eventually(lambda: entries(server, scope, "obligation_opened"), what="an obligation")
    assert hypothesis[0].actor.type == "agent" and hypothesis[0].payload.suspect_scope == CHANGE
    assert obligation[0].payload.text == f"roll back {CHANGE} only if the recorded safety conditions hold"
    assert obligation[0].payload.action == "rollback_deploy"
    await eventually(
        lambda: any("Hypothesis" in t and CHANGE in t for t in thread_texts(server, ts)),
        what="the hypothesis in the thread",
    )
    await eventually(
        lambda: any(t.startswith("Obligation:") for t in thread_texts(server, ts)), what="the obligation in the thread"
    )
    turns = await eventually(lambda: entries(server, scope, "agent_turn"), what="the turn's provenance")
    assert turns[0].payload.trigger == "first" and turns[0].payload.outcome == "ok"
    assert (await server.runtime.store.verify(scope)).ok


async def test_an_all_clear_gets_a_suggestion_whose_accept_button_resolves(server: DecklogServer) -> None:
    fake = server.sandbox
    scope, ts = await incident(server, link=False)
    await alert(server, scope, "resolved")
    suggestion = await eventually(lambda: _resolve_suggestion(server, scope), what="a suggestion to resolve")
    message = await eventually(lambda: posted_for(server, ts, suggestion.seq), what="the suggestion in the thread")
    buttons = [e["action_id"] for b in message.blocks if b.get("type") == "actions" for e in b["elements"]]
    assert buttons == [Action.SUGGESTION_ACCEPT, Action.SUGGESTION_DISMISS]
    await fake.click_button(ALICE, ALERTS_CHANNEL, message.ts, Action.SUGGESTION_ACCEPT)
    feedback = await eventually(lambda: entries(server, scope, "suggestion_feedback"), what="the feedback entry")
    assert feedback[0].payload.verdict == "accepted" and feedback[0].actor.id == ALICE
    state = await eventually(lambda: _resolved(server, scope), what="the incident resolved")
    assert state.status == "resolved"


async def _resolve_suggestion(server: DecklogServer, scope: str) -> Entry | None:
    found = [e for e in await entries(server, scope, "suggestion") if e.payload.action == "resolve"]
    return found[0] if found else None


async def _resolved(server: DecklogServer, scope: str) -> Any:
    state = await server.runtime.store.get_state(scope)
    return state if state.status == "resolved" else None


def reaction_calls(server: DecklogServer, method: str, ts: str) -> list[Any]:
    return [
        c
        for c in slack_calls(server.sandbox).calls_to(method)
        if c.args.get("timestamp") == ts and c.args.get("name") == "fire"
    ]


async def test_mention_ask_in_the_thread_shows_fire_answers_in_the_thread_and_removes_fire(
    server: DecklogServer,
) -> None:
    fake = server.sandbox
    scope, ts = await incident(server)
    asked = await fake.post_message(ALICE, ALERTS_CHANNEL, "@decklog ask what changed?", thread_ts=ts)
    await eventually(lambda: reaction_calls(server, "reactions.add", asked.ts), what=":fire: added")
    answer = await eventually(lambda: entries(server, scope, "answer"), what="an answer entry")
    assert answer[0].payload.question == "what changed?" and CHANGE in answer[0].payload.text
    assert answer[0].payload.question_ts == asked.ts
    posted = await eventually(lambda: posted_for(server, ts, answer[0].seq), what="the answer in the thread")
    assert "what changed?" in posted.blocks[0]["text"]["text"]
    removed = await eventually(lambda: reaction_calls(server, "reactions.remove", asked.ts), what=":fire: removed")
    added = reaction_calls(server, "reactions.add", asked.ts)
    post = next(c for c in slack_calls(fake).calls_to("chat.postMessage") if "Answer" in c.args.get("text", ""))
    assert added[0].at <= post.at <= removed[0].at
    assert "fire" not in {r.get("name") for r in (fake.workspace.message(ALERTS_CHANNEL, asked.ts).reactions or [])}
    # a Slack retry of the same mention runs no second turn
    await fake.redeliver(next(d for d in fake.deliveries if d.payload.get("event", {}).get("type") == "app_mention"))
    await server.parts.agents.scheduler.idle()
    assert len(await entries(server, scope, "answer")) == 1


async def test_slash_ask_in_the_channel_echoes_the_question_into_the_thread_first(server: DecklogServer) -> None:
    fake = server.sandbox
    scope, ts = await incident(server)
    out = await fake.run_command(ALICE, ALERTS_CHANNEL, f"ask {scope} what changed?")
    assert out.status == 200
    echo = await eventually(lambda: _echo(server, scope), what="the question echoed as a message entry")
    assert echo.actor.id == ALICE and echo.payload.text == "what changed?"
    echoed = await eventually(lambda: posted_for(server, ts, echo.seq), what="the echo in the thread")
    await eventually(lambda: reaction_calls(server, "reactions.add", echoed.ts), what=":fire: on the echo")
    answer = await eventually(lambda: entries(server, scope, "answer"), what="an answer")
    assert answer[0].payload.question_ts == echoed.ts
    await eventually(lambda: posted_for(server, ts, answer[0].seq), what="the answer in the thread")
    await eventually(lambda: reaction_calls(server, "reactions.remove", echoed.ts), what=":fire: removed")


async def _echo(server: DecklogServer, scope: str) -> Entry | None:
    found = [e for e in await entries(server, scope, "message") if e.actor.type == "human"]
    return found[0] if found else None


async def test_pending_turns_survive_a_restart(make_server: ServerFactory, tmp_path: Path) -> None:
    data_dir = tmp_path / "shared"
    settings = Settings(data_dir=data_dir, host="127.0.0.1", port=0, first_turn_delay=3600, turn_debounce=3600)
    first = DecklogServer(settings, config=test_config())  # stopped by hand below (make_server's would stop twice)
    await first.start()
    try:
        scope, _ts = await incident(first)
        await first.runtime.dispatcher.idle()
        assert await entries(first, scope, "agent_turn") == []  # armed for an hour from now: still pending
    finally:
        await first.stop()
    second = await make_server(data_dir=data_dir, first_turn_delay=0.05, turn_debounce=0.05)
    hypothesis = await eventually(
        lambda: entries(second, scope, "hypothesis"), what="the pending turn, run after the restart", timeout=20
    )
    assert hypothesis[0].payload.suspect_scope == CHANGE
    turns = await entries(second, scope, "agent_turn")
    assert turns[0].payload.trigger in ("boot", "first", "debounce")
    # the runtime counts a turn after its append returns: poll, the entry can be visible a moment earlier
    await eventually(lambda: second.parts.agents.turns.stats.recorded >= 1, what="the turn counted as recorded")


async def test_a_deploy_then_an_alert_through_the_receivers_gets_the_suspect_and_the_rollback(
    make_server: ServerFactory,
) -> None:
    """The whole story through the HTTP receivers: POST /changes, POST /alerts → the agent's hypothesis."""
    token = "agents-e2e-token"
    server = await make_server(alert_token=token)

    post = _poster(server, token)

    change = {
        "service": "payments",
        "version": "v2.4.1",
        "environment": "production",
        "author": "dev1",
        "commits": [{"id": "a1b2c3d", "message": "raise the db pool size", "paths": ["config/db-pool.yaml"]}],
    }
    await post("/changes/generic", change)
    opened = await post(
        "/alerts/generic?wait=30",
        {"title": "payments 5xx above 5%", "fingerprint": "payments-5xx", "service": "payments", "severity": "high"},
    )
    scope = opened["scopes"][0]
    hypothesis = await eventually(lambda: entries(server, scope, "hypothesis"), what="the agent's hypothesis")
    suspect = hypothesis[0].payload.suspect_scope
    assert suspect.startswith("change/payments") and "config/db-pool.yaml" in hypothesis[0].payload.text
    obligation = await eventually(lambda: entries(server, scope, "obligation_opened"), what="the rollback obligation")
    assert obligation[0].payload.params == {"service": "payments", "change": suspect}
    assert obligation[0].payload.conditions  # the desk's safety conditions for rollback_deploy, by name
    # with the action desk wired, the follow-up turn's proposal parks for approval
    proposals = await eventually(lambda: entries(server, scope, "proposal"), what="a parked proposal")
    assert (
        proposals[0].payload.action == "rollback_deploy"
        and proposals[0].payload.obligation_id == obligation[0].payload.obligation_id
    )


async def test_a_feature_flag_flip_then_an_alert_gets_the_flag_turned_off_not_a_rollback(
    make_server: ServerFactory,
) -> None:
    """``kind: "flag"`` on POST /changes/generic → the proposal is the catalog's flag_off, with the flag's name."""
    from decklog.bot.config import DecklogConfig

    data = test_config().model_dump()
    rollback = next(a for a in data["actions"] if a["name"] == "rollback_deploy")
    flag_param = {"type": "string", "required": True, "description": "the feature flag"}
    flag_off = rollback | {
        "name": "flag_off",
        "description": "Turn a feature flag off",
        "safety_conditions": ["no_other_run_in_flight"],
        "params": {"service": rollback["params"]["service"], "flag": flag_param},
        "compensation": None,
    }
    token = "agents-flag-token"
    server = await make_server(
        alert_token=token, config=DecklogConfig.model_validate(data | {"actions": [*data["actions"], flag_off]})
    )

    post = _poster(server, token)

    await post("/changes/generic", {"service": "payments", "kind": "flag", "flag": "newPsp", "author": "dev1"})
    opened = await post(
        "/alerts/generic?wait=30",
        {"title": "payments 5xx above 5%", "fingerprint": "payments-5xx", "service": "payments", "severity": "high"},
    )
    scope = opened["scopes"][0]
    obligation = await eventually(lambda: entries(server, scope, "obligation_opened"), what="the undo obligation")
    suspect = obligation[0].payload.params["change"]
    assert obligation[0].payload.action == "flag_off" and suspect.startswith("change/payments")
    assert obligation[0].payload.text.startswith(f"turn the flag newPsp off ({suspect})")
    proposals = await eventually(lambda: entries(server, scope, "proposal"), what="a parked proposal")
    assert (proposals[0].payload.action, proposals[0].payload.params) == (
        "flag_off",
        {"service": "payments", "flag": "newPsp"},
    )


async def test_a_change_that_landed_after_the_alert_is_never_suspected(make_server: ServerFactory) -> None:
    """A deploy made after the incident began is a candidate fix: linked as related, never proposed for rollback."""
    token = "agents-fix-token"
    server = await make_server(alert_token=token)

    post = _poster(server, token)

    opened = await post(
        "/alerts/generic?wait=30",
        {"title": "checkout 5xx", "fingerprint": "checkout-5xx", "service": "checkout", "severity": "high"},
    )
    scope = opened["scopes"][0]
    await eventually(lambda: server.parts.agents.turns.stats.runs >= 1, what="the first turn")
    await post("/changes/generic", {"service": "checkout", "version": "v9.9.9-hotfix", "author": "oncall"})
    await eventually(lambda: _linked(server, scope), what="the change linked to the incident")
    runs = server.parts.agents.turns.stats.runs
    await eventually(lambda: server.parts.agents.turns.stats.runs > runs, what="a turn after the link")
    assert not await entries(server, scope, "hypothesis")
    assert not [
        o for o in (await server.runtime.store.get_state(scope)).obligations.values() if o.purpose == "rollback"
    ]


def _poster(server: DecklogServer, token: str) -> Any:
    """``await post(path, body)``: a JSON POST to the server's receivers with the bearer token; asserts a 2xx."""
    import aiohttp

    async def post(path: str, body: dict[str, Any]) -> Any:
        async with (
            aiohttp.ClientSession() as http,
            http.post(server.url + path, json=body, headers={"Authorization": f"Bearer {token}"}) as response,
        ):
            assert response.status in (200, 202), await response.text()
            return await response.json()

    return post


async def _linked(server: DecklogServer, scope: str) -> bool:
    return any(x.startswith("change/") for x in (await server.runtime.store.get_state(scope)).linked)
