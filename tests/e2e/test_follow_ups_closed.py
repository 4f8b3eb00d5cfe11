"""A follow-up's GitHub issue closed (or reopened) → ``follow_up_closed`` in its incident, end to end: ``decklog
serve`` files the issue in a loopback GitHub (tests/fakes/trackers.py), then GitHub's ``issues`` webhook — a real
captured delivery, tests/fixtures/changes/github/issues — arrives signed on ``/changes/github``."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from decklog.bot.server import DecklogServer
from decklog.core.entries import Actor, FollowUpClosed, FollowUpSynced
from tests.conftest import ServerFactory, eventually
from tests.e2e.test_alerts_e2e import TOKEN, post
from tests.e2e.test_changes_e2e import github_signature
from tests.fakes.trackers import FakeGitHub

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "changes" / "github" / "issues" / "issues_closed.json"
REPO = "C-Saunders/flynn_env_test"  # the captured delivery's repository
ISSUE_URL = f"https://github.com/{REPO}/issues/1"
ALICE = Actor.human("U0ALICE", "alice")
ISSUES = {"X-GitHub-Event": "issues"}


def captured() -> bytes:
    return FIXTURE.read_bytes()


def variant(**issue: Any) -> dict[str, Any]:
    """The captured delivery with some ``issue`` fields changed (``action`` too, via ``action=``)."""
    doc: dict[str, Any] = json.loads(captured())
    action = issue.pop("action", None)
    if action is not None:
        doc["action"] = action
    doc["issue"].update(issue)
    return doc


async def signed(server: DecklogServer, body: bytes | dict[str, Any], event: str = "issues") -> tuple[int, Any]:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    headers = {"X-GitHub-Event": event, "X-Hub-Signature-256": github_signature(data)}
    return await post(server, "/changes/github", data, token=None, headers=headers)


async def declare(server: DecklogServer, title: str = "Checkout 502s") -> str:
    result = await server.runtime.service.declare(title=title, actor=ALICE, severity=2)
    return result.state.scope


async def follow_up(server: DecklogServer, scope: str, text: str) -> int:
    result = await server.runtime.service.record(scope, "follow_up", {"text": text}, ALICE)
    return result.entries[0].seq


async def closings(server: DecklogServer, scope: str) -> list[FollowUpClosed]:
    found = await server.runtime.store.read(scope, kinds=("follow_up_closed",))
    return [e.payload for e in found if isinstance(e.payload, FollowUpClosed)]


async def count(server: DecklogServer) -> int:
    """Scopes, and follow_up_closed entries in them (the Slack side appends on its own: thread_linked, …)."""
    store = server.runtime.store
    scopes = await store.scope_ids()
    return len(scopes) + sum([len(await store.read(s, kinds=("follow_up_closed",))) for s in scopes])


@pytest.fixture
async def github() -> AsyncIterator[FakeGitHub]:
    async with FakeGitHub(repos=(REPO,)) as gh:
        yield gh


@pytest.fixture
async def server(make_server: ServerFactory, github: FakeGitHub) -> DecklogServer:
    return await make_server(
        alert_token=TOKEN, github_token="ghp_test", github_repo=REPO, github_api_url=github.base_url
    )


async def filed(server: DecklogServer, scope: str) -> FollowUpSynced:
    """The follow_up_synced entry, once the trackers sender filed the issue and the index has it."""
    store, index = server.runtime.store, server.runtime.index

    async def synced() -> FollowUpSynced | None:
        found = [e.payload for e in await store.read(scope, kinds=("follow_up_synced",))]
        if not found or not await index.search(ISSUE_URL, kinds=("follow_up_synced",)):
            return None
        assert isinstance(found[0], FollowUpSynced)
        return found[0]

    result: FollowUpSynced = await eventually(synced, timeout=20, what="the follow-up filed and indexed")
    return result


async def test_the_captured_close_marks_the_filed_follow_up_done_and_a_reopen_reverts_it(
    server: DecklogServer, github: FakeGitHub
) -> None:
    scope = await declare(server)
    seq = await follow_up(server, scope, "add a canary for checkout")
    synced = await filed(server, scope)
    assert synced.url == ISSUE_URL and github.issues[REPO][0]["number"] == 1

    status, answer = await signed(server, captured())  # byte-exact, as GitHub signed it; no marker in its body
    assert status == 202, answer
    assert answer["follow_ups"] == [
        {
            "outcome": "recorded",
            "reason": f"follow-up #{seq} closed",
            "scope": scope,
            "follow_up": seq,
            "seq": answer["follow_ups"][0]["seq"],
        }
    ]
    assert answer["scopes"] == [scope] and answer["recorded"] == 1
    [closed] = await closings(server, scope)
    assert (closed.follow_up, closed.state, closed.url, closed.by) == (seq, "closed", ISSUE_URL, "C-Saunders")
    assert closed.changed_at == "2018-11-18T18:42:08.000000Z"
    [entry] = await server.runtime.store.read(scope, kinds=("follow_up_closed",))
    assert entry.refs == (seq,) and entry.actor.id == "tracker:github"
    assert entry.text == f"Follow-up #{seq} closed in the tracker by C-Saunders: {ISSUE_URL}"

    before = await count(server)
    status, again = await signed(server, captured())  # GitHub's redelivery
    assert status == 200 and again["recorded"] == 0 and "already recorded" in again["note"]
    assert await count(server) == before

    reopened = variant(action="reopened", state="open", updated_at="2018-11-19T09:00:00Z")
    status, answer = await signed(server, reopened)
    assert status == 202, answer
    assert [c.state for c in await closings(server, scope)] == ["closed", "open"]

    late = variant(updated_at="2018-11-18T20:00:00Z", state_reason="completed")  # older than the reopen
    status, answer = await signed(server, late)
    assert status == 200 and "older than the open state" in answer["note"]
    closed_again = variant(updated_at="2018-11-20T10:00:00Z", state_reason="not_planned")
    status, _ = await signed(server, closed_again)
    assert status == 202
    last = (await closings(server, scope))[-1]
    assert (last.state, last.reason) == ("closed", "not_planned")
    assert (await server.runtime.store.verify(scope)).ok


async def test_the_marker_finds_a_follow_up_not_synced_yet(make_server: ServerFactory) -> None:
    server = await make_server(alert_token=TOKEN)  # no tracker: nothing is filed, nothing synced
    scope = await declare(server)
    seq = await follow_up(server, scope, "rotate the checkout credentials")
    body = json.loads(captured())["issue"]["body"]
    marked = variant(body=f"{body}\n\n<!-- decklog-follow-up:{scope}#{seq} -->")
    status, answer = await signed(server, marked)
    assert status == 202 and answer["follow_ups"][0]["follow_up"] == seq, answer
    before = await count(server)
    wrong_markers = (f"{scope}#{seq - 1}", f"{scope}#999", "incident/nope#1", "nokind/x#1")  # not a follow-up, …
    for wrong in wrong_markers:
        status, answer = await signed(server, variant(body=f"<!-- decklog-follow-up:{wrong} -->"))
        assert status == 200 and answer["recorded"] == 0 and "not a follow-up decklog filed" in answer["note"]
    assert await count(server) == before


async def test_an_unknown_issue_or_another_action_is_a_2xx_with_a_reason_and_records_nothing(
    server: DecklogServer,
) -> None:
    scope = await declare(server)
    before = await count(server)
    status, answer = await signed(server, captured())
    assert status == 200 and answer["follow_ups"][0]["outcome"] == "unknown" and ISSUE_URL in answer["note"]
    for action in ("opened", "edited", "labeled", "deleted"):
        status, answer = await signed(server, variant(action=action))
        assert status == 200 and "only a closed or reopened issue" in answer["note"]
    status, answer = await signed(server, variant(action="reopened", state="open"))
    assert status == 200 and answer["recorded"] == 0
    assert await count(server) == before and await closings(server, scope) == []


async def test_a_bad_signature_is_401_and_malformed_is_400_naming_the_field(server: DecklogServer) -> None:
    scope = await declare(server)
    await follow_up(server, scope, "a follow-up")
    before = await count(server)
    body = captured()
    bad = {**ISSUES, "X-Hub-Signature-256": github_signature(body, "not the secret")}
    status, answer = await post(server, "/changes/github", body, token=None, headers=bad)
    assert status == 401 and "X-Hub-Signature-256" in answer["error"]
    status, answer = await post(server, "/changes/github", body, token=None, headers=ISSUES)
    assert status == 401 and answer["error"]
    cases: list[tuple[dict[str, Any] | bytes, str]] = [
        ({k: v for k, v in json.loads(body).items() if k != "issue"}, "issue"),
        ({k: v for k, v in json.loads(body).items() if k != "action"}, "action"),
        (variant(number="1"), "issue.number"),
        (variant(number=0), "issue.number"),
        (variant(html_url="javascript:alert(1)"), "issue.html_url"),
        (variant(html_url=None), "issue.html_url"),
        (variant(body=["not", "text"]), "issue.body"),
        (variant(updated_at="yesterday"), "issue.updated_at"),
        (variant(state_reason=7), "issue.state_reason"),
        (b"[]", ""),
        (b'{"action": "closed", "issue": ', ""),
    ]
    for doc, field in cases:
        status, answer = await signed(server, doc)
        assert status == 400 and answer["error"], (field, answer)
        assert answer.get("field", "") == field, (field, answer)
    assert await count(server) == before
