"""Follow-ups filed in GitHub Issues / Jira through the ``trackers`` outbox topic, against loopback fakes."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from decklog.adapters.trackers.github import GitHubTracker
from decklog.adapters.trackers.jira import JiraTracker
from decklog.bot.runtime import OUTBOX_TOPICS, TOPIC_KINDS
from decklog.core.alarm import AsyncioAlarm
from decklog.core.entries import Actor, FollowUpSynced, NewEntry
from decklog.core.errors import InvalidInput
from decklog.core.follow_ups import FollowUpsSender, Tracker, parse_follow_up
from decklog.core.outbox.dispatcher import Dispatcher
from decklog.core.outbox.sender import PermanentFailure, RetryAfter
from decklog.core.store.sqlite.log_store import SqliteLogStore
from tests.fakes.polling import poll_until
from tests.fakes.trackers import FakeGitHub, FakeJira

ALICE = Actor(type="human", id="U0ALICE", name="alice")
SCOPE = "incident/checkout-502"


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SqliteLogStore]:
    s = SqliteLogStore(tmp_path / "data", topics=OUTBOX_TOPICS, topic_kinds=TOPIC_KINDS)
    await s.append(SCOPE, [NewEntry.make("declared", ALICE, {"title": "Checkout 502s", "severity": 2})], create=True)
    yield s
    await s.close()


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


async def follow_up(store: SqliteLogStore, text: str) -> int:
    result = await store.append(SCOPE, [NewEntry.make("follow_up", ALICE, parse_follow_up(text))])
    return result.entries[0].seq


def url_of(api: str) -> str:
    return f"https://decklog.test/{api}"


def test_the_grammar_takes_text_owner_and_due_in_either_order() -> None:
    p = parse_follow_up("add a canary for checkout <@U123> due 2026-12-24")
    assert (p.text, p.owner, p.due) == ("add a canary for checkout", "U123", "2026-12-24")
    p = parse_follow_up("write the runbook due 2027-01-05 @bob")
    assert (p.text, p.owner, p.due) == ("write the runbook", "bob", "2027-01-05")
    assert parse_follow_up("just text").model_dump() == {
        "text": "just text",
        "owner": "",
        "due": "",
        "obligation_id": "",
    }


@pytest.mark.parametrize(
    "bad",
    [
        "",
        "   ",
        "@bob",
        "due 2026-12-24",
        "fix it due tomorrow",
        "fix it due 2026-02-30",
        "x" * 501,
        "fix @bob due 2026-1-5",
    ],
)
def test_bad_follow_ups_are_refused_with_a_reason(bad: str) -> None:
    with pytest.raises(InvalidInput) as exc:
        parse_follow_up(bad)
    assert str(exc.value)


async def test_github_issue_is_filed_once_with_label_body_link_and_recorded(store: SqliteLogStore, http: Any) -> None:
    async with FakeGitHub() as gh:
        tracker = GitHubTracker(http, repo="acme/shop", token="ghp_test", api_url=gh.base_url)
        sender = FollowUpsSender(store, tracker, url_of)
        seq = await follow_up(store, "add a canary for checkout <@U123> due 2026-12-24")
        entries = await store.read(SCOPE)
        await sender.deliver(SCOPE, entries)
        await sender.deliver(SCOPE, entries)  # a repeated delivery files nothing
        [issue] = gh.issues["acme/shop"]
        assert issue["title"] == "add a canary for checkout"
        assert url_of(SCOPE) in issue["body"] and f"decklog-follow-up:{SCOPE}#{seq}" in issue["body"]
        assert issue["labels"] == [{"name": "incident-follow-up"}]
        [synced] = await store.read(SCOPE, kinds=("follow_up_synced",))
        assert isinstance(synced.payload, FollowUpSynced)
        assert synced.payload.url == issue["html_url"] and issue["html_url"] in synced.payload.text
        assert synced.payload.number == "1" and synced.refs == (seq,)
        assert [c for c in gh.calls if c[0] == "POST"] == [("POST", "/repos/acme/shop/issues", 201)]


class CrashAfterCreate:
    """A tracker whose process dies right after the issue was created (before the entry is recorded)."""

    def __init__(self, inner: Tracker) -> None:
        self.inner = inner
        self.name = inner.name

    async def find(self, marker: str) -> Any:
        return await self.inner.find(marker)

    async def create(self, draft: Any) -> Any:
        await self.inner.create(draft)
        raise ConnectionResetError("killed between create and record")


@pytest.mark.parametrize("kind", ["github", "jira"])
async def test_a_crash_between_create_and_record_files_no_duplicate(
    kind: str, store: SqliteLogStore, http: Any
) -> None:
    async with FakeGitHub(page_size=2) as gh, FakeJira() as jira:
        tracker: Tracker
        if kind == "github":
            tracker = GitHubTracker(http, repo="acme/shop", token="ghp_test", api_url=gh.base_url)
        else:
            tracker = JiraTracker(http, url=jira.base_url, email="bot@acme.test", token="jira_test", project="OPS")
        for n in range(3):  # other follow-ups first, so the lookup pages (GitHub: 2 per page)
            await follow_up(store, f"earlier follow-up {n}")
        seq = await follow_up(store, "rotate the checkout credentials @carol")
        entries = await store.read(SCOPE)
        with pytest.raises(ConnectionResetError):
            await FollowUpsSender(store, CrashAfterCreate(tracker), url_of).deliver(SCOPE, entries[-1:])
        assert await store.read(SCOPE, kinds=("follow_up_synced",)) == []
        await FollowUpsSender(store, tracker, url_of).deliver(SCOPE, entries)  # the restart delivers all again
        filed = gh.issues["acme/shop"] if kind == "github" else jira.issues
        assert len(filed) == 4
        synced = {e.payload.follow_up: e.payload for e in await store.read(SCOPE, kinds=("follow_up_synced",))}
        assert sorted(synced) == [2, 3, 4, 5] and seq in synced
        assert len({p.url for p in synced.values()}) == 4  # type: ignore[attr-defined]


async def test_jira_issue_has_project_type_labels_and_browse_url(store: SqliteLogStore, http: Any) -> None:
    async with FakeJira() as jira:
        tracker = JiraTracker(
            http, url=jira.base_url, email="bot@acme.test", token="jira_test", project="OPS", issue_type="Bug"
        )
        await follow_up(store, "add retries to the payment client due 2027-01-10")
        await FollowUpsSender(store, tracker, url_of).deliver(SCOPE, await store.read(SCOPE))
        [issue] = jira.issues
        f = issue["fields"]
        assert f["project"] == {"key": "OPS"} and f["issuetype"] == {"name": "Bug"} and f["duedate"] == "2027-01-10"
        assert "incident-follow-up" in f["labels"] and url_of(SCOPE) in f["description"]
        [synced] = await store.read(SCOPE, kinds=("follow_up_synced",))
        assert synced.payload.text.endswith(f"{jira.base_url}/browse/OPS-1")  # type: ignore[attr-defined]


async def test_rate_limits_retry_later_and_bad_config_parks(store: SqliteLogStore, http: Any) -> None:
    async with FakeGitHub() as gh, FakeJira() as jira:
        await follow_up(store, "a follow-up")
        entries = await store.read(SCOPE)
        good = GitHubTracker(http, repo="acme/shop", token="ghp_test", api_url=gh.base_url)
        gh.rate_limit(retry_after=7)
        with pytest.raises(RetryAfter) as limited:
            await FollowUpsSender(store, good, url_of).deliver(SCOPE, entries)
        assert limited.value.seconds == 7
        jira.rate_limit(retry_after=3)
        jt = JiraTracker(http, url=jira.base_url, email="bot@acme.test", token="jira_test", project="OPS")
        with pytest.raises(RetryAfter):
            await FollowUpsSender(store, jt, url_of).deliver(SCOPE, entries)
        cases: Sequence[tuple[Tracker, str]] = [
            (GitHubTracker(http, repo="acme/shop", token="wrong", api_url=gh.base_url), "Bad credentials"),
            (GitHubTracker(http, repo="acme/nope", token="ghp_test", api_url=gh.base_url), "Not Found"),
            (JiraTracker(http, url=jira.base_url, email="bot@acme.test", token="bad", project="OPS"), "401"),
            (JiraTracker(http, url=jira.base_url, email="bot@acme.test", token="jira_test", project="NOPE"), "project"),
        ]
        for tracker, why in cases:
            with pytest.raises(PermanentFailure, match=why):
                await FollowUpsSender(store, tracker, url_of).deliver(SCOPE, entries)
        assert gh.issues["acme/shop"] == [] and jira.issues == []
        assert await store.read(SCOPE, kinds=("follow_up_synced",)) == []


async def test_github_422_is_permanent(http: Any) -> None:
    from decklog.core.follow_ups import IssueDraft, TrackerError

    async with FakeGitHub() as gh:
        tracker = GitHubTracker(http, repo="acme/shop", token="ghp_test", api_url=gh.base_url)
        with pytest.raises(TrackerError) as exc:
            await tracker.create(IssueDraft(title=" ", body="", marker="m"))
        assert exc.value.status == 422 and exc.value.permanent and "Validation Failed" in str(exc.value)


async def test_through_the_outbox_the_trackers_topic_takes_only_follow_ups(store: SqliteLogStore, http: Any) -> None:
    async with FakeGitHub() as gh:
        tracker = GitHubTracker(http, repo="acme/shop", token="ghp_test", api_url=gh.base_url)
        dispatcher = Dispatcher(store, [FollowUpsSender(store, tracker, url_of)], alarm=AsyncioAlarm())
        dispatcher.start()
        try:
            await store.append(SCOPE, [NewEntry.make("message", ALICE, {"text": "not a follow-up"})])
            await follow_up(store, "tune the checkout alert")
            await dispatcher.sweep()
            await poll_until(lambda: len(gh.issues["acme/shop"]) == 1, timeout=20, what="the issue")
            synced = await poll_until_async(store)
            assert synced == 1
        finally:
            await dispatcher.stop()
        assert len(gh.issues["acme/shop"]) == 1
        assert "trackers" not in store.topics_for("message") and "trackers" in store.topics_for("follow_up")


async def poll_until_async(store: SqliteLogStore) -> int:
    import asyncio

    loop = asyncio.get_running_loop()
    deadline = loop.time() + 20
    while loop.time() < deadline:
        found = await store.read(SCOPE, kinds=("follow_up_synced",))
        if found:
            return len(found)
        await asyncio.sleep(0.02)
    raise AssertionError("no follow_up_synced entry within 20s")


def test_the_slack_row_parses_and_refuses_with_usage() -> None:
    from decklog.adapters.slack.grammar import UsageError, follow_up_args
    from decklog.adapters.slack.subcommands.table import TABLE

    assert "follow-up" in [row.name for row in TABLE]
    assert follow_up_args(["page", "the", "db", "team", "<@U9>", "due", "2027-02-01"]) == {
        "text": "page the db team",
        "owner": "U9",
        "due": "2027-02-01",
    }
    for bad in ([], ["due", "2027-02-31"], ["x", "due", "soon"]):
        with pytest.raises(UsageError):
            follow_up_args(bad)
