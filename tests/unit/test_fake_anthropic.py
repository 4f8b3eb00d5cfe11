"""Tests of the scripted Anthropic fake, driven by the real ``anthropic.AsyncAnthropic`` 2.x client.

They pin down the wire format decklog relies on (headers, JSON shapes, error classes, retry behaviour) and
the fake's strictness (script order, expectations, real-API validation, loud failure when the script ends).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any

import aiohttp
import anthropic
import pytest

from tests.fakes.anthropic_api import (
    Delay,
    Fail,
    FakeAnthropic,
    Reply,
    Step,
    ToolCall,
    all_of,
    estimate_input_tokens,
    has_cache_breakpoint,
    has_tools,
    no_tools,
    tools_withheld,
)

MODEL = "claude-test-model"
TOOLS: list[anthropic.types.ToolParam] = [
    {
        "name": "recent_changes",
        "description": "Deploys and config changes for a service in the last hours.",
        "input_schema": {
            "type": "object",
            "properties": {"service": {"type": "string"}},
            "required": ["service"],
        },
    }
]

MakeFake = Callable[..., Awaitable[tuple[FakeAnthropic, anthropic.AsyncAnthropic]]]


@pytest.fixture
async def make_fake() -> AsyncIterator[MakeFake]:
    started: list[tuple[FakeAnthropic, anthropic.AsyncAnthropic]] = []

    async def make(
        script: Sequence[Step], *, max_retries: int = 0, timeout: float = 10.0, **kwargs: Any
    ) -> tuple[FakeAnthropic, anthropic.AsyncAnthropic]:
        fake = FakeAnthropic(script, **kwargs)
        base_url = await fake.start()
        client = anthropic.AsyncAnthropic(
            api_key="sk-test", base_url=base_url, max_retries=max_retries, timeout=timeout
        )
        started.append((fake, client))
        return fake, client

    yield make
    for fake, client in started:
        await client.close()
        await fake.stop()


def user(text: str) -> anthropic.types.MessageParam:
    return {"role": "user", "content": text}


async def test_tool_use_loop_round_trip(make_fake: MakeFake) -> None:
    fake, client = await make_fake(
        [
            Reply(
                text="Let me look at recent changes.",
                tool_calls=[ToolCall("recent_changes", {"service": "payments"})],
                expect=has_tools("recent_changes"),
            ),
            Reply(text="The 14:02 deploy of payments is the likely cause.", expect=tools_withheld),
        ]
    )
    messages: list[Any] = [user("payments 5xx since 14:03, why?")]
    first = await client.messages.create(model=MODEL, max_tokens=512, tools=TOOLS, messages=messages)

    assert first.type == "message" and first.role == "assistant" and first.model == MODEL
    assert first.stop_reason == "tool_use"
    assert [b.type for b in first.content] == ["text", "tool_use"]
    tool_use = first.content[1]
    assert isinstance(tool_use, anthropic.types.ToolUseBlock)
    assert tool_use.name == "recent_changes" and tool_use.input == {"service": "payments"}
    assert tool_use.id.startswith("toolu_")

    messages.append({"role": "assistant", "content": first.content})  # SDK models go back as-is
    messages.append(
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": tool_use.id, "content": "14:02 deploy v812"}],
        }
    )
    last = await client.messages.create(
        model=MODEL, max_tokens=512, tools=TOOLS, tool_choice={"type": "none"}, messages=messages
    )
    assert last.stop_reason == "end_turn"
    assert isinstance(last.content[0], anthropic.types.TextBlock)
    assert "14:02 deploy" in last.content[0].text

    sent_back = fake.requests[1]["messages"][1]["content"]
    assert sent_back[1] == {
        "type": "tool_use",
        "id": tool_use.id,
        "name": "recent_changes",
        "input": {"service": "payments"},
    }
    fake.assert_done()


async def test_sdk_wire_headers(make_fake: MakeFake) -> None:
    fake, client = await make_fake([Reply(text="hi")])
    await client.messages.create(model=MODEL, max_tokens=16, messages=[user("hello")])
    headers = {k.lower(): v for k, v in fake.calls[0].headers.items()}
    assert headers["authorization"] == "Bearer sk-test"  # 2.x: Bearer, not x-api-key
    assert "x-api-key" not in headers
    assert headers["anthropic-version"]  # required by the fake, as by the real API
    assert headers["content-type"] == "application/json"
    assert headers["x-stainless-retry-count"] == "0"


async def test_max_tokens_stop(make_fake: MakeFake) -> None:
    fake, client = await make_fake([Reply(text="The likely cause is", stop_reason="max_tokens")])
    msg = await client.messages.create(model=MODEL, max_tokens=7, messages=[user("why?")])
    assert msg.stop_reason == "max_tokens"
    assert msg.usage.output_tokens == 7
    fake.assert_done()


@pytest.mark.parametrize("stop_reason", ["pause_turn", "refusal"])
async def test_other_stop_reasons_pass_through(make_fake: MakeFake, stop_reason: Any) -> None:
    fake, client = await make_fake([Reply(text="", stop_reason=stop_reason, refusal_explanation="no")])
    msg = await client.messages.create(model=MODEL, max_tokens=64, messages=[user("x")])
    assert msg.stop_reason == stop_reason
    if stop_reason == "refusal":
        assert msg.stop_details is not None and msg.stop_details.type == "refusal"
    fake.assert_done()


async def test_tool_use_without_tool_result_is_400(make_fake: MakeFake) -> None:
    fake, client = await make_fake([Reply(text="unused")])
    messages: list[Any] = [
        user("why?"),
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "toolu_a", "name": "recent_changes", "input": {}}],
        },
        user("never mind the tool"),
    ]
    with pytest.raises(anthropic.BadRequestError) as err:
        await client.messages.create(model=MODEL, max_tokens=64, tools=TOOLS, messages=messages)
    assert err.value.status_code == 400
    assert err.value.type == "invalid_request_error"
    assert err.value.api_message == (
        "messages.1: `tool_use` ids were found without `tool_result` blocks immediately after: toolu_a. "
        "Each `tool_use` block must have a corresponding `tool_result` block in the next message."
    )
    assert err.value.request_id and err.value.request_id.startswith("req_")
    assert fake.remaining == 1  # a rejected request consumes no step
    assert len(fake.take_failures()) == 1  # ... but is recorded as a failure
    with pytest.raises(AssertionError, match="never requested"):
        fake.assert_done()


def _tool_use(tid: str) -> dict[str, Any]:
    return {"type": "tool_use", "id": tid, "name": "recent_changes", "input": {"service": "payments"}}


def _tool_result(tid: str) -> dict[str, Any]:
    return {"type": "tool_result", "tool_use_id": tid, "content": "ok"}


@pytest.mark.parametrize(
    ("messages", "expected"),
    [
        pytest.param(
            [{"role": "assistant", "content": "hi"}, user("x")],
            'first message must use the "user" role',
            id="first-role",
        ),
        pytest.param([user("a"), user("b")], 'found multiple "user" roles in a row', id="alternation"),
        pytest.param(
            [
                user("why?"),
                {"role": "assistant", "content": [_tool_use("toolu_a"), _tool_use("toolu_b")]},
                {"role": "user", "content": [_tool_result("toolu_a")]},
            ],
            "found without `tool_result` blocks immediately after: toolu_b.",
            id="one-result-missing",
        ),
        pytest.param(
            [
                user("why?"),
                {"role": "assistant", "content": [_tool_use("toolu_a")]},
                {"role": "user", "content": [{"type": "text", "text": "here:"}, _tool_result("toolu_a")]},
            ],
            "messages.2: Did not find 1 `tool_result` block(s) at the beginning of this message.",
            id="results-not-first",
        ),
        pytest.param(
            [
                user("why?"),
                {"role": "assistant", "content": [_tool_use("toolu_a")]},
                {"role": "user", "content": [_tool_result("toolu_a"), _tool_result("toolu_zzz")]},
            ],
            "messages.2.content.1: unexpected `tool_use_id` found in `tool_result` blocks: toolu_zzz.",
            id="unexpected-result",
        ),
        pytest.param(
            [user("why?"), {"role": "assistant", "content": [_tool_use("toolu_a")]}],
            "found without `tool_result` blocks immediately after: toolu_a.",
            id="trailing-tool-use",
        ),
        pytest.param([user("")], "all messages must have non-empty content", id="empty-content"),
    ],
)
async def test_invalid_conversations_are_rejected_like_the_real_api(
    make_fake: MakeFake, messages: list[Any], expected: str
) -> None:
    fake, client = await make_fake([])
    with pytest.raises(anthropic.BadRequestError) as err:
        await client.messages.create(model=MODEL, max_tokens=64, tools=TOOLS, messages=messages)
    assert expected in (err.value.api_message or "")
    assert len(fake.take_failures()) == 1
    fake.assert_done()


async def test_more_than_four_cache_breakpoints_is_400(make_fake: MakeFake) -> None:
    fake, client = await make_fake([])
    cc = {"type": "ephemeral"}
    system: Any = [{"type": "text", "text": f"part {i}", "cache_control": cc} for i in range(3)]
    content: Any = [
        {"type": "text", "text": "a", "cache_control": cc},
        {"type": "text", "text": "b", "cache_control": cc},
    ]
    with pytest.raises(anthropic.BadRequestError) as err:
        await client.messages.create(
            model=MODEL, max_tokens=64, system=system, messages=[{"role": "user", "content": content}]
        )
    assert err.value.api_message == "A maximum of 4 blocks with cache_control may be provided. Found 5."
    assert len(fake.take_failures()) == 1


async def test_missing_max_tokens_and_version_header_are_400() -> None:
    async with FakeAnthropic([]) as fake, aiohttp.ClientSession() as http:
        ok_headers = {"Authorization": "Bearer sk-test", "anthropic-version": "2026-10-21"}
        body = {"model": MODEL, "messages": [user("x")]}
        async with http.post(f"{fake.base_url}/v1/messages", json=body, headers=ok_headers) as resp:
            assert resp.status == 400
            payload = await resp.json()
            assert payload["type"] == "error"
            assert payload["error"] == {
                "type": "invalid_request_error",
                "message": "max_tokens: Field required",
            }
        async with http.post(
            f"{fake.base_url}/v1/messages",
            json={**body, "max_tokens": 10},
            headers={"x-api-key": "sk-test"},  # the pre-2.x header is accepted too
        ) as resp:
            assert resp.status == 400
            assert (await resp.json())["error"]["message"] == "anthropic-version: header is required"
        async with http.post(f"{fake.base_url}/v1/messages", json={**body, "max_tokens": 10}) as resp:
            assert resp.status == 401
            assert (await resp.json())["error"]["type"] == "authentication_error"
        assert len(fake.take_failures()) == 3
        fake.assert_done()


async def test_wrong_api_key_is_authentication_error(make_fake: MakeFake) -> None:
    fake, client = await make_fake([Reply(text="x")], api_key="sk-other")
    with pytest.raises(anthropic.AuthenticationError):
        await client.messages.create(model=MODEL, max_tokens=8, messages=[user("x")])
    assert fake.remaining == 1
    assert fake.take_failures()


async def test_rate_limit_surfaces_as_rate_limit_error(make_fake: MakeFake) -> None:
    fake, client = await make_fake([Fail(429, retry_after=7)])
    with pytest.raises(anthropic.RateLimitError) as err:
        await client.messages.create(model=MODEL, max_tokens=8, messages=[user("x")])
    assert err.value.status_code == 429
    assert err.value.type == "rate_limit_error"
    assert err.value.response.headers["retry-after"] == "7"
    fake.assert_done()


async def test_overloaded_529_is_overloaded_error_an_internal_server_error(make_fake: MakeFake) -> None:
    fake, client = await make_fake([Fail(529), Fail(500)])
    with pytest.raises(anthropic.OverloadedError) as err:
        await client.messages.create(model=MODEL, max_tokens=8, messages=[user("x")])
    assert isinstance(err.value, anthropic.InternalServerError)
    assert err.value.status_code == 529 and err.value.type == "overloaded_error"
    assert "retry-after" not in err.value.response.headers
    with pytest.raises(anthropic.InternalServerError) as err500:
        await client.messages.create(model=MODEL, max_tokens=8, messages=[user("x")])
    assert not isinstance(err500.value, anthropic.OverloadedError)
    assert err500.value.type == "api_error"
    fake.assert_done()


async def test_sdk_retries_429_honouring_retry_after(make_fake: MakeFake) -> None:
    # 0.8 s is longer than the SDK's own first backoff (0.5 s * jitter <= 0.5 s), so the gap proves the
    # retry-after header was honoured.
    fake, client = await make_fake([Fail(429, retry_after=0.8), Reply(text="ok after retry")], max_retries=2)
    msg = await client.messages.create(model=MODEL, max_tokens=8, messages=[user("x")])
    assert isinstance(msg.content[0], anthropic.types.TextBlock) and msg.content[0].text == "ok after retry"
    first, second = fake.calls
    assert first.status == 429 and second.status == 200
    assert second.headers["x-stainless-retry-count"] == "1"
    assert second.at - first.at >= 0.8
    assert fake.requests[0] == fake.requests[1]  # the same body is replayed
    fake.assert_done()


async def test_sdk_retries_529_then_succeeds(make_fake: MakeFake) -> None:
    fake, client = await make_fake([Fail(529, retry_after=0.01), Reply(text="ok")], max_retries=1)
    msg = await client.messages.create(model=MODEL, max_tokens=8, messages=[user("x")])
    assert msg.stop_reason == "end_turn"
    assert [c.status for c in fake.calls] == [529, 200]
    fake.assert_done()


async def test_usage_and_explicit_cache_fields(make_fake: MakeFake) -> None:
    fake, client = await make_fake(
        [
            Reply(
                text="ok",
                input_tokens=12,
                output_tokens=3,
                cache_read_input_tokens=2048,
                cache_creation_input_tokens=0,
            )
        ]
    )
    msg = await client.messages.create(model=MODEL, max_tokens=64, messages=[user("x")])
    assert msg.usage.input_tokens == 12
    assert msg.usage.output_tokens == 3
    assert msg.usage.cache_read_input_tokens == 2048
    assert msg.usage.cache_creation_input_tokens == 0
    fake.assert_done()


async def test_simulated_prompt_cache_writes_then_reads(make_fake: MakeFake) -> None:
    system: Any = [
        {
            "type": "text",
            "text": "You are decklog's incident analyst. " * 40,
            "cache_control": {"type": "ephemeral"},
        }
    ]
    step = Reply(text="ok", cache=True, expect=has_cache_breakpoint)
    fake, client = await make_fake([step, step, Reply(text="ok", cache=True)], min_cache_tokens=100)

    first = await client.messages.create(model=MODEL, max_tokens=64, system=system, messages=[user("first")])
    second = await client.messages.create(model=MODEL, max_tokens=64, system=system, messages=[user("second")])
    tiny = await client.messages.create(
        model=MODEL,
        max_tokens=64,
        system=[{"type": "text", "text": "short", "cache_control": {"type": "ephemeral"}}],
        messages=[user("x")],
    )
    assert first.usage.cache_creation_input_tokens and first.usage.cache_creation_input_tokens >= 100
    assert first.usage.cache_read_input_tokens == 0
    assert second.usage.cache_read_input_tokens == first.usage.cache_creation_input_tokens
    assert second.usage.cache_creation_input_tokens == 0
    # below the minimum cacheable length nothing is cached
    assert tiny.usage.cache_creation_input_tokens == 0 and tiny.usage.cache_read_input_tokens == 0

    counted = await client.messages.count_tokens(model=MODEL, system=system, messages=[user("second")])
    usage = second.usage
    assert counted.input_tokens == (
        usage.input_tokens + (usage.cache_read_input_tokens or 0) + (usage.cache_creation_input_tokens or 0)
    )
    fake.assert_done()


async def test_count_tokens_is_deterministic_and_consumes_no_step(make_fake: MakeFake) -> None:
    fake, client = await make_fake([Reply(text="x")])
    small = await client.messages.count_tokens(model=MODEL, messages=[user("hello")])
    again = await client.messages.count_tokens(model=MODEL, messages=[user("hello")])
    big = await client.messages.count_tokens(model=MODEL, tools=TOOLS, system="s" * 400, messages=[user("hello")])
    assert small.input_tokens == again.input_tokens > 0
    assert big.input_tokens > small.input_tokens + 100
    assert big.input_tokens == estimate_input_tokens(fake.count_tokens_requests[-1])
    assert fake.remaining == 1 and fake.requests == []
    await client.messages.create(model=MODEL, max_tokens=8, messages=[user("x")])
    fake.assert_done()


async def test_script_running_out_fails_loudly(make_fake: MakeFake) -> None:
    fake, client = await make_fake([Reply(text="only one")], max_retries=2)
    await client.messages.create(model=MODEL, max_tokens=8, messages=[user("x")])
    with pytest.raises(anthropic.InternalServerError) as err:
        await client.messages.create(model=MODEL, max_tokens=8, messages=[user("again")])
    assert "script exhausted" in (err.value.api_message or "")
    assert len(fake.requests) == 2  # x-should-retry: false stops the SDK from retrying the loud failure
    with pytest.raises(AssertionError, match="script exhausted"):
        fake.assert_done()


async def test_unconsumed_steps_fail_assert_done(make_fake: MakeFake) -> None:
    fake, client = await make_fake([Reply(text="a"), Reply(text="b")])
    await client.messages.create(model=MODEL, max_tokens=8, messages=[user("x")])
    with pytest.raises(AssertionError, match="1 scripted step"):
        fake.assert_done()


async def test_failed_expectation_is_400_and_recorded(make_fake: MakeFake) -> None:
    fake, client = await make_fake([Reply(text="final", expect=all_of(has_cache_breakpoint, tools_withheld))])
    with pytest.raises(anthropic.BadRequestError) as err:
        await client.messages.create(model=MODEL, max_tokens=8, tools=TOOLS, messages=[user("x")])
    assert "step 0 expectation failed" in (err.value.api_message or "")
    assert fake.remaining == 0
    with pytest.raises(AssertionError, match="expectation failed"):
        fake.assert_done()


async def test_delay_drives_client_timeout(make_fake: MakeFake) -> None:
    fake, client = await make_fake([Delay(5.0), Reply(text="after the timeout")], timeout=0.3)
    with pytest.raises(anthropic.APITimeoutError):
        await client.messages.create(model=MODEL, max_tokens=8, messages=[user("x")])
    msg = await client.messages.create(model=MODEL, max_tokens=8, messages=[user("x")])
    assert isinstance(msg.content[0], anthropic.types.TextBlock) and msg.content[0].text == "after the timeout"
    fake.assert_done()


async def test_wait_for_requests_polls_with_deadline() -> None:
    async with FakeAnthropic([]) as fake:
        with pytest.raises(TimeoutError):
            await fake.wait_for_requests(1, timeout=0.05)


def test_script_steps_are_checked_when_built() -> None:
    with pytest.raises(ValueError):
        Reply(stop_reason="tool_use")
    with pytest.raises(ValueError):
        Reply(tool_calls=[ToolCall("x")], stop_reason="end_turn")
    with pytest.raises(ValueError):
        Fail(200)


async def test_alternation_can_be_relaxed_like_the_real_api(make_fake: MakeFake) -> None:
    # The 2.x API combines consecutive same-role turns; the fake refuses them unless told otherwise.
    fake, client = await make_fake([Reply(text="ok")], strict_alternation=False)
    messages: list[Any] = [
        user("why?"),
        {"role": "assistant", "content": [_tool_use("toolu_a"), _tool_use("toolu_b")]},
        {"role": "user", "content": [_tool_result("toolu_a")]},
        {"role": "user", "content": [_tool_result("toolu_b")]},
    ]
    msg = await client.messages.create(model=MODEL, max_tokens=64, tools=TOOLS, messages=messages)
    assert msg.stop_reason == "end_turn"
    fake.assert_done()


async def test_no_tools_predicate(make_fake: MakeFake) -> None:
    fake, client = await make_fake([Reply(text="final", expect=no_tools), Reply(text="x", expect=no_tools)])
    await client.messages.create(model=MODEL, max_tokens=8, messages=[user("x")])
    with pytest.raises(anthropic.BadRequestError, match="expected no tools"):
        await client.messages.create(model=MODEL, max_tokens=8, tools=TOOLS, messages=[user("x")])
    assert len(fake.take_failures()) == 1
    fake.assert_done()
