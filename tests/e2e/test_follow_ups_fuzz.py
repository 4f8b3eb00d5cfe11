"""Bad input on the GitHub ``issues`` path of ``/changes/github`` (follow-ups closed in GitHub), fuzzed over real HTTP
like every receiver (tests/e2e/test_alerts_fuzz.py): arbitrary JSON, arbitrary bytes and mutations of the captured
delivery — whose body carries the marker of a real follow-up, so that a valid mutation does record. Never a 5xx;
every 4xx is ``{"error": ...}`` and records nothing (the closer is never reached)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from decklog.core.entries import Actor
from tests.e2e.test_alerts_fuzz import FUZZ, Live, _mutate, check, json_values, live

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "changes" / "github" / "issues" / "issues_closed.json"
ISSUES = {"X-GitHub-Event": "issues"}

__all__ = ["live"]  # the module-scoped server fixture, shared with the other receivers' fuzz tests


class Seeded:
    def __init__(self, live: Live, scope: str, seq: int) -> None:
        self.live, self.scope, self.seq = live, scope, seq
        self.reached: list[int] = []

    def run(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.live.loop).result(30)

    def recorded(self) -> int:
        return len(self.run(self.live.server.runtime.store.read(self.scope, kinds=("follow_up_closed",))))


@pytest.fixture(scope="module")
def seeded(live: Live) -> Iterator[Seeded]:
    rt = live.server.runtime
    actor = Actor.human("U0FUZZ", "fuzz")

    async def seed() -> tuple[str, int]:
        declared = await rt.service.declare(title="Fuzzed follow-ups", actor=actor)
        scope = declared.state.scope
        made = await rt.service.record(scope, "follow_up", {"text": "a follow-up to close"}, actor)
        return scope, made.entries[0].seq

    state = Seeded(live, *asyncio.run_coroutine_threadsafe(seed(), live.loop).result(30))
    part = live.server.parts.receivers
    assert part is not None and part.receivers.follow_ups is not None
    closer = part.receivers.follow_ups
    receive = closer.receive

    async def counted(event: Any) -> Any:
        state.reached.append(1)
        return await receive(event)

    closer.receive = counted  # type: ignore[method-assign]
    yield state
    closer.receive = receive  # type: ignore[method-assign]


def sample(seeded: Seeded) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(FIXTURE.read_bytes())
    doc["issue"]["body"] += f"\n\n<!-- decklog-follow-up:{seeded.scope}#{seeded.seq} -->"
    return doc


def checked(seeded: Seeded, body: bytes) -> tuple[int, Any]:
    before, reached = seeded.recorded(), len(seeded.reached)
    status, answer = check(seeded.live, "/changes/github", body, ISSUES)
    if status >= 400:
        assert seeded.recorded() == before and len(seeded.reached) == reached, answer
    else:
        assert seeded.recorded() - before == answer["recorded"], answer
    return status, answer


def test_the_marked_sample_records_once(seeded: Seeded) -> None:
    doc = sample(seeded)
    doc["issue"]["updated_at"] = "2099-01-01T00:00:00Z"  # after anything a mutation may have recorded
    status, answer = checked(seeded, json.dumps(doc).encode())
    assert status == 202, answer
    status, answer = checked(seeded, json.dumps(doc).encode())
    assert status == 200 and answer["recorded"] == 0


@FUZZ
@given(data=st.data())
def test_mutated_captured_deliveries_never_get_a_5xx(seeded: Seeded, data: st.DataObject) -> None:
    checked(seeded, json.dumps(_mutate(sample(seeded), data)).encode())


@FUZZ
@given(value=json_values)
def test_arbitrary_json_never_gets_a_5xx(seeded: Seeded, value: Any) -> None:
    checked(seeded, json.dumps(value).encode())


@FUZZ
@given(body=st.binary(max_size=300))
def test_arbitrary_bytes_never_get_a_5xx(seeded: Seeded, body: bytes) -> None:
    checked(seeded, body)


@FUZZ
@given(scope=st.text(max_size=60), seq=st.integers(min_value=-5, max_value=10**14))
def test_any_marker_in_the_body_never_gets_a_5xx(seeded: Seeded, scope: str, seq: int) -> None:
    doc = sample(seeded)
    doc["issue"]["body"] = f"<!-- decklog-follow-up:{scope}#{seq} --> decklog-follow-up:incident/{scope}#{seq}"
    checked(seeded, json.dumps(doc).encode())
