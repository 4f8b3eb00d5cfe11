"""``catch me up`` with Claude is one bounded summarising call over the joiner view (no tools, a
max_tokens cap), recorded as an ``agent_turn``; when the call fails, the answer is the deterministic catch-up."""

from __future__ import annotations

from typing import Any

from tests.conftest import ServerFactory, eventually
from tests.e2e.test_agents_e2e import entries
from tests.e2e.test_loop_e2e import ALICE, CAROL, GENERAL, _kinds_present, declared, ephemerals
from tests.fakes.anthropic_api import Body, Fail, FakeAnthropic, Reply, all_of, no_tools

SUMMARY = "Checkout is failing (SEV2). Goal: restore checkout above 99% (#3). Decided: fail over (#4)."


def bounded(body: Body) -> None:
    assert body["max_tokens"] <= 600, body["max_tokens"]
    [message] = body["messages"]
    assert message["role"] == "user" and "restore checkout above 99%" in str(message["content"])
    assert '"view": "joiner"' in str(message["content"]) or '"view":"joiner"' in str(message["content"])


async def test_catch_me_up_with_claude_is_one_bounded_call_recorded_like_a_turn(make_server: ServerFactory) -> None:
    fake = FakeAnthropic([Reply(text=SUMMARY, expect=all_of(no_tools, bounded)), Fail(400, message="bad request")])
    base_url = await fake.start()
    try:
        server = await make_server(
            anthropic_api_key="sk-test", anthropic_base_url=base_url, first_turn_delay=3600, turn_debounce=3600
        )
        fake_slack = server.sandbox
        scope, ts = await declared(server)
        await fake_slack.post_message(ALICE, GENERAL, "@decklog goal restore checkout above 99%", thread_ts=ts)
        await fake_slack.post_message(ALICE, GENERAL, "@decklog decision fail over to the backup psp", thread_ts=ts)
        await eventually(lambda: _kinds_present(server, scope, "goal", "decision"))
        version = (await server.runtime.store.get_state(scope)).version
        await fake_slack.post_message(CAROL, GENERAL, "@decklog catch me up", thread_ts=ts)
        text = await eventually(lambda: _catchup(server, CAROL, SUMMARY), what="Claude's catch-up")
        assert SUMMARY in text and "turn #" in text
        [turn] = await eventually(lambda: entries(server, scope, "agent_turn"), what="the catch-up's turn")
        p: Any = turn.payload
        assert (p.reasoner, p.view, p.outcome, p.trigger) == ("claude", "joiner", "ok", "ask")
        assert p.model and p.input_tokens > 0 and p.output_tokens > 0 and p.cost_usd > 0
        assert p.seq_from == 1 and version <= p.seq_to < turn.seq and p.view_bytes > 0  # the log as the view read it
        assert p.tool_calls[0]["tool"] == "catchup" and p.tool_calls[0]["asked_by"] == CAROL
        assert f"turn #{turn.seq}" in text
        assert len(fake.requests) == 1
        # the model fails: the deterministic catch-up, saying so, and a failed turn
        await fake_slack.run_command(CAROL, GENERAL, f"catchup {scope}")
        text = await eventually(lambda: _catchup(server, CAROL, "deterministic"), what="the fallback")
        assert "*Goal:* restore checkout above 99%" in text and "deterministic catch-up" in text
        turns = await entries(server, scope, "agent_turn")
        assert [t.payload.outcome for t in turns] == ["ok", "failed"]  # type: ignore[attr-defined]
        assert "400" in turns[1].payload.error  # type: ignore[attr-defined]
        thread = [m.text for m in fake_slack.workspace.thread(GENERAL, ts)]
        assert not any(SUMMARY in t for t in thread)  # ephemeral: only Carol saw it
        assert (await server.runtime.store.verify(scope)).ok
    finally:
        await fake.stop()
    fake.take_failures()
    fake.assert_done()


def _catchup(server: Any, user: str, needle: str) -> str | None:
    return next((t for t in ephemerals(server, user) if "Catch-up" in t and needle in t), None)
