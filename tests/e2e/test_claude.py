"""The Claude reasoner through the real ``anthropic`` SDK against the scripted fake Messages API (loopback).

Every test ends with ``fake.assert_done()``: no scripted step left over and no request the real API would have
refused (a ``tool_use`` without its ``tool_result``, a bad cache breakpoint, …) — that is how the loop proves
it never sends one.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any

import anthropic
import pytest

from decklog.adapters.anthropic import ClaudeReasoner
from decklog.bot.settings import project_root
from decklog.core.agents import ActionInfo, TurnRuntime
from decklog.core.entries import AgentTurn
from decklog.core.prompts import PromptLibrary
from tests.conftest import eventually
from tests.fakes.anthropic_api import (
    Delay,
    Fail,
    FakeAnthropic,
    Reply,
    Step,
    ToolCall,
    all_of,
    has_cache_breakpoint,
    has_tools,
    tools_withheld,
)
from tests.fakes.slack_calls import slack_calls
from tests.unit.test_agents import (
    ALICE,
    CHANGE,
    ROLLBACK,
    SCOPE,
    Catalog,
    RecordingProposer,
    World,
    alerting_incident,
    world,
)

__all__ = ["world"]

MODEL = "claude-test-model"
Make = Callable[..., Awaitable[tuple[FakeAnthropic, TurnRuntime]]]


@pytest.fixture
async def claude(world: World) -> AsyncIterator[Make]:
    made: list[tuple[FakeAnthropic, anthropic.AsyncAnthropic]] = []

    async def make(
        script: Sequence[Step],
        *,
        max_steps: int = 3,
        max_retries: int = 0,
        timeout_s: float = 10.0,
        max_tokens: int = 512,
        runtime_options: dict[str, Any] | None = None,
        **fake_options: Any,
    ) -> tuple[FakeAnthropic, TurnRuntime]:
        fake = FakeAnthropic(script, **fake_options)
        client = anthropic.AsyncAnthropic(api_key="sk-test", base_url=await fake.start(), max_retries=max_retries)
        made.append((fake, client))
        reasoner = ClaudeReasoner(
            client,
            prompts=PromptLibrary(project_root() / "prompts"),
            model=MODEL,
            max_steps=max_steps,
            max_tokens=max_tokens,
            request_timeout=timeout_s,
        )
        return fake, world.runtime(reasoner, timeout_s=timeout_s, **(runtime_options or {}))

    yield make
    for fake, client in made:
        await client.close()
        await fake.stop()


def last_user_blocks(body: dict[str, Any]) -> list[dict[str, Any]]:
    message = body["messages"][-1]
    assert message["role"] == "user"
    content = message["content"]
    return content if isinstance(content, list) else [{"type": "text", "text": content}]


async def turn_entry(world: World) -> AgentTurn:
    payload = (await world.entries("agent_turn"))[-1].payload
    assert isinstance(payload, AgentTurn)
    return payload


async def test_tool_use_then_tool_results_in_one_message_then_end_turn_records_the_intents(
    world: World, claude: Make
) -> None:
    await alerting_incident(world)
    link = (await world.entries("scope_linked"))[0].seq

    def both_results(body: dict[str, Any]) -> None:
        blocks = last_user_blocks(body)
        assert [b["type"] for b in blocks] == ["tool_result", "tool_result"], blocks
        assert [b["tool_use_id"] for b in blocks] == ["tu-view", "tu-hyp"]
        assert all(not b["is_error"] for b in blocks)
        assert '"status":"success"' in blocks[0]["content"] and "linked_changes" in blocks[0]["content"]

    fake, runtime = await claude(
        [
            Reply(
                text="Reading the investigation view and recording a hypothesis.",
                tool_calls=[
                    ToolCall("read_view", {"name": "investigation"}, id="tu-view"),
                    ToolCall(
                        "record_hypothesis",
                        {
                            "text": f"suspect {CHANGE}: the pool size change",
                            "confidence": 0.7,
                            "suspect_scope": CHANGE,
                            "evidence_seqs": [link],
                        },
                        id="tu-hyp",
                    ),
                ],
                expect=all_of(has_tools("read_view", "record_hypothesis", "propose_action"), has_cache_breakpoint),
                input_tokens=1200,
                output_tokens=80,
            ),
            Reply(text="Recorded one hypothesis.", expect=both_results, input_tokens=1500, output_tokens=20),
        ]
    )
    result = await runtime.run_turn(SCOPE)
    fake.assert_done()
    assert result.status == "recorded"
    hypothesis = (await world.entries("hypothesis"))[0]
    assert hypothesis.payload.suspect_scope == CHANGE and hypothesis.refs == (link,)
    assert hypothesis.actor.id == "claude"
    t = await turn_entry(world)
    assert (t.reasoner, t.model, t.outcome) == ("claude", MODEL, "ok")
    assert (t.input_tokens, t.output_tokens) == (2700, 100)
    assert [c["tool"] for c in t.tool_calls] == ["read_view", "record_hypothesis", "model", "model"]
    assert t.view == "investigation" and t.view_bytes > 0
    assert t.cost_usd == pytest.approx((2700 * 3 + 100 * 15) / 1e6)


async def test_the_tools_are_withheld_on_the_last_step_and_the_cache_prefix_stays_the_same(
    world: World, claude: Make
) -> None:
    await alerting_incident(world)

    def tools_offered(body: dict[str, Any]) -> None:
        assert "tool_choice" not in body and body["tools"]

    prefixes: list[Any] = []

    def same_prefix(body: dict[str, Any]) -> None:
        prefixes.append((body["tools"], body["system"]))

    fake, runtime = await claude(
        [
            Reply(tool_calls=[ToolCall("get_state")], expect=all_of(tools_offered, same_prefix)),
            Reply(tool_calls=[ToolCall("list_recent_changes")], expect=all_of(tools_offered, same_prefix)),
            Reply(text="Nothing to add.", expect=all_of(tools_withheld, same_prefix)),
        ],
        max_steps=3,
    )
    result = await runtime.run_turn(SCOPE)
    fake.assert_done()
    assert result.status == "recorded"  # it spent tokens, so the turn is recorded even without intents
    recorded = await turn_entry(world)
    assert recorded.outcome == "nothing" and recorded.input_tokens > 0  # decided nothing: with what it spent
    assert prefixes[0] == prefixes[1] == prefixes[2]
    assert fake.requests[-1]["tool_choice"] == {"type": "none"}
    assert prefixes[0][1][-1]["cache_control"] == {"type": "ephemeral"}


async def test_max_tokens_in_the_middle_of_a_tool_call_ends_the_loop_without_sending_it_back(
    world: World, claude: Make
) -> None:
    await alerting_incident(world)
    fake, runtime = await claude(
        [Reply(text="The change at", tool_calls=[ToolCall("get_state")], stop_reason="max_tokens")], max_tokens=64
    )
    result = await runtime.ask(SCOPE, "what changed?", ALICE, key="k-max")
    fake.assert_done()  # one request: the half-made tool call was never answered, so no 400 could happen
    assert result.status == "recorded" and len(fake.requests) == 1
    answer = (await world.entries("answer"))[0].payload
    assert answer.text == "The change at … (cut short at max_tokens=64)"
    assert (await turn_entry(world)).output_tokens == 64


async def test_the_fake_refuses_a_tool_use_without_its_tool_result_as_the_real_api_does(claude: Make) -> None:
    """What the loop must never send: every other test's ``assert_done()`` shows it never did."""
    fake, _runtime = await claude([])
    client = anthropic.AsyncAnthropic(api_key="sk-test", base_url=fake.base_url, max_retries=0)
    try:
        with pytest.raises(anthropic.BadRequestError, match="without `tool_result` blocks"):
            await client.messages.create(
                model=MODEL,
                max_tokens=64,
                messages=[
                    {"role": "user", "content": "hi"},
                    {
                        "role": "assistant",
                        "content": [{"type": "tool_use", "id": "tu-1", "name": "get_state", "input": {}}],
                    },
                    {"role": "user", "content": "go on"},
                ],
            )
    finally:
        await client.close()
    assert len(fake.take_failures()) == 1
    fake.assert_done()


@pytest.mark.parametrize("status", [429, 529])
async def test_429_and_529_are_retried_by_the_sdk_honouring_retry_after(
    world: World, claude: Make, status: int
) -> None:
    await alerting_incident(world)
    fake, runtime = await claude([Fail(status, retry_after=0.05), Reply(text="ok")], max_retries=1)
    result = await runtime.run_turn(SCOPE)
    fake.assert_done()
    assert result.status == "recorded"
    assert [c.status for c in fake.calls] == [status, 200]
    assert fake.calls[0].at <= fake.calls[1].at


@pytest.mark.parametrize(
    ("status", "words"),
    [
        (429, "rate limited by the model API (429, retry-after 1s)"),
        (529, "the model API is overloaded (529, retry-after 2s)"),
    ],
)
async def test_a_429_or_529_past_the_retries_is_a_failed_turn_and_the_next_turn_proceeds(
    world: World, claude: Make, status: int, words: str
) -> None:
    await alerting_incident(world)
    fake, runtime = await claude([Fail(status, retry_after=1 if status == 429 else 2)], max_retries=0)
    result = await runtime.run_turn(SCOPE)
    assert result.status == "failed"
    t = await turn_entry(world)
    assert (t.outcome, t.error) == ("failed", words)
    assert await world.entries("hypothesis") == []
    fake.extend(
        Reply(tool_calls=[ToolCall("suggest", {"text": "check the pool metrics"})]), Reply(text="Suggested a check.")
    )
    await world.add("message", ALICE, {"text": "any idea?"})
    again = await runtime.run_turn(SCOPE)
    fake.assert_done()
    assert again.status == "recorded" and len(await world.entries("suggestion")) == 1


async def test_usage_and_cache_fields_land_in_the_agent_turn(world: World, claude: Make) -> None:
    await alerting_incident(world)
    fake, runtime = await claude(
        [
            Reply(
                tool_calls=[ToolCall("get_state")],
                input_tokens=100,
                output_tokens=20,
                cache_creation_input_tokens=900,
                cache_read_input_tokens=0,
            ),
            Reply(
                text="done",
                input_tokens=30,
                output_tokens=10,
                cache_creation_input_tokens=0,
                cache_read_input_tokens=900,
            ),
        ]
    )
    await runtime.run_turn(SCOPE)
    fake.assert_done()
    t = await turn_entry(world)
    assert (t.input_tokens, t.output_tokens, t.cache_creation_input_tokens, t.cache_read_input_tokens) == (
        130,
        30,
        900,
        900,
    )
    assert t.cost_usd == pytest.approx(((130 + 1.25 * 900 + 0.1 * 900) * 3 + 30 * 15) / 1e6)
    timeline = (await world.entries("agent_turn"))[-1].to_json()
    for field in ("input_tokens", "output_tokens", "cache_read_input_tokens", "cache_creation_input_tokens"):
        assert field in timeline["payload"]


async def test_the_cache_breakpoint_makes_the_second_step_read_the_prefix(world: World, claude: Make) -> None:
    await alerting_incident(world)
    fake, runtime = await claude(
        [Reply(tool_calls=[ToolCall("get_state")]), Reply(text="done")], simulate_cache=True, min_cache_tokens=200
    )
    await runtime.run_turn(SCOPE)
    fake.assert_done()
    t = await turn_entry(world)
    assert t.cache_creation_input_tokens > 0 and t.cache_read_input_tokens > 0


async def test_a_script_that_runs_out_fails_loudly(world: World, claude: Make) -> None:
    await alerting_incident(world)
    fake, runtime = await claude([Reply(tool_calls=[ToolCall("get_state")])], max_steps=3)
    result = await runtime.run_turn(SCOPE)
    assert result.status == "failed"
    t = await turn_entry(world)
    assert "script exhausted" in t.error and t.error.startswith("the model API answered 500")
    assert t.input_tokens > 0  # the first step's usage is kept in the failed turn's provenance
    failures = fake.take_failures()
    assert len(failures) == 1 and "script exhausted" in failures[0]


async def test_a_tool_error_is_typed_and_precise_enough_to_correct(world: World, claude: Make) -> None:
    await alerting_incident(world)
    last = (await world.store.get_state(SCOPE)).version

    def bad_then(body: dict[str, Any]) -> None:
        block = last_user_blocks(body)[0]
        assert block["is_error"] is True
        assert f"seq(s) [999] do not exist; this incident's entries are numbered 1..{last}" in block["content"]

    def good(body: dict[str, Any]) -> None:
        block = last_user_blocks(body)[0]
        assert block["is_error"] is False and '"status":"success"' in block["content"]

    fake, runtime = await claude(
        [
            Reply(tool_calls=[ToolCall("read_entries", {"seqs": [999]})]),
            Reply(tool_calls=[ToolCall("read_entries", {"seqs": [1, 2]})], expect=bad_then),
            Reply(text="Read them.", expect=good),
        ]
    )
    await runtime.run_turn(SCOPE)
    fake.assert_done()
    statuses = [c["status"] for c in (await turn_entry(world)).tool_calls if c["tool"] == "read_entries"]
    assert statuses == ["error", "success"]


async def test_proposals_go_to_the_proposer_only_for_available_actions(world: World, claude: Make) -> None:
    await alerting_incident(world)
    proposer = RecordingProposer()

    def refused(body: dict[str, Any]) -> None:
        block = last_user_blocks(body)[0]
        assert (
            block["is_error"]
            and "action 'drop_database' is not available; available: rollback_deploy" in block["content"]
        )

    fake, runtime = await claude(
        [
            Reply(
                tool_calls=[
                    ToolCall(
                        "propose_action",
                        {"action": "drop_database", "params": {}, "rationale": "x", "obligation_id": "ob-1"},
                    )
                ]
            ),
            Reply(
                tool_calls=[
                    ToolCall(
                        "open_obligation",
                        {
                            "text": f"roll back {CHANGE} if it is still the latest",
                            "purpose": "rollback",
                            "action": "rollback_deploy",
                            "params": {"service": "payments"},
                        },
                        id="tu-ob",
                    )
                ],
                expect=refused,
            ),
            Reply(text="Opened the obligation; proposing next turn."),
        ],
        runtime_options={"proposer": proposer, "catalog": Catalog(ActionInfo("rollback_deploy", "roll back", "R2"))},
    )
    await runtime.run_turn(SCOPE)
    obligation = (await world.entries("obligation_opened"))[0].payload
    oid = obligation.obligation_id

    def proposed(body: dict[str, Any]) -> None:
        assert "propose_action" in [t["name"] for t in body["tools"]]

    fake.extend(
        Reply(
            tool_calls=[
                ToolCall(
                    "propose_action",
                    {
                        "action": "rollback_deploy",
                        "params": {"service": "payments"},
                        "rationale": "pool change",
                        "obligation_id": oid,
                    },
                )
            ],
            expect=proposed,
        ),
        Reply(text="Proposed."),
    )
    follow_up = await runtime.run_turn(SCOPE)
    fake.assert_done()
    assert follow_up.status == "recorded" and (await turn_entry(world)).trigger == "follow_up"
    assert [c["action"] for c in proposer.calls] == ["rollback_deploy"] and proposer.calls[0]["obligation_id"] == oid
    assert ROLLBACK.name == "rollback_deploy"


async def test_pause_turn_is_sent_back_and_refusal_is_recorded(world: World, claude: Make) -> None:
    await alerting_incident(world)

    def continues(body: dict[str, Any]) -> None:
        assert body["messages"][-1] == {"role": "assistant", "content": [{"type": "text", "text": "Looking…"}]}

    fake, runtime = await claude(
        [Reply(text="Looking…", stop_reason="pause_turn"), Reply(text="Nothing changed recently.", expect=continues)]
    )
    result = await runtime.ask(SCOPE, "what changed?", ALICE, key="k-pause")
    assert result.status == "recorded"
    assert (await world.entries("answer"))[0].payload.text == "Nothing changed recently."
    fake.extend(Reply(stop_reason="refusal", refusal_explanation="no"))
    refused = await runtime.ask(SCOPE, "something bad", ALICE, key="k-refuse")
    fake.assert_done()
    assert refused.status == "refused"
    t = await turn_entry(world)
    assert t.outcome == "refused" and "refusal" in t.error
    assert (await world.entries("answer"))[-1].payload.text == "The model declined to answer this question."


async def test_a_turn_that_outlives_its_timeout_is_recorded_as_failed(world: World, claude: Make) -> None:
    await alerting_incident(world)
    fake, runtime = await claude([Delay(5, then=Reply(text="late"))], timeout_s=0.3)
    result = await runtime.run_turn(SCOPE)
    assert result.status == "failed"
    assert (await turn_entry(world)).error in ("the turn timed out after 0.3s", "the model API timed out")
    await fake.wait_for_requests(1)
    fake.assert_done()


async def test_over_slack_a_failed_claude_turn_is_shown_briefly_and_ask_is_answered_by_claude(make_server: Any) -> None:
    from tests.e2e.test_agents_e2e import ALERTS_CHANNEL, entries, incident, thread_texts

    text = "Only change/payments-v2.4.1 changed payments, 10 min before the alert (#3)."
    fake = FakeAnthropic([Fail(529, retry_after=0.01)] * 3 + [Reply(text=text), Reply(text=text)])
    base_url = await fake.start()
    try:
        server = await make_server(
            anthropic_api_key="sk-test", anthropic_base_url=base_url, first_turn_delay=0.3, turn_debounce=0.3
        )
        scope, ts = await incident(server)
        failed = await eventually(lambda: entries(server, scope, "agent_turn"), what="the failed first turn")
        assert failed[0].payload.outcome == "failed" and "overloaded (529" in failed[0].payload.error
        await eventually(lambda: any("turn failed" in t for t in thread_texts(server, ts)), what="the failure, shown")
        asked = await server.sandbox.post_message(ALICE.id, ALERTS_CHANNEL, "@decklog ask what changed?", thread_ts=ts)
        answer = await eventually(lambda: entries(server, scope, "answer"), what="Claude's answer")
        assert answer[0].payload.text == text and answer[0].actor.id == "claude"
        await eventually(lambda: len(fake.requests) == 5, what="the debounced turn after the question")
        await eventually(
            lambda: any(
                c.args.get("timestamp") == asked.ts for c in slack_calls(server.sandbox).calls_to("reactions.remove")
            )
        )
    finally:
        await fake.stop()
    fake.assert_done()
    assert [c.status for c in fake.calls] == [529, 529, 529, 200, 200]
