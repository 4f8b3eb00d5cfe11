"""The Slack sender's reconcile-before-repost lookup reads every page since the attempt.

A replica SIGKILLed between Slack applying its post and recording it leaves the message in a channel that, during
an alert storm, has more than one page (200) of other headers within minutes. The survivor must find it on a later
page, or it posts the header a second time (seen in the three-replica SIGKILL test).
"""

from __future__ import annotations

import time

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from decklog.adapters.local.slack import FakeSlackServer
from decklog.adapters.slack.sender import find_posted
from tests.fakes.slack_calls import record_calls, slack_calls

CHANNEL = "C0GENERAL"


def _fail(exc: SlackApiError) -> None:
    raise AssertionError(f"unexpected Slack error: {exc}")


def _header(entry_id: str) -> dict[str, object]:
    return {
        "event_type": "decklog_header",
        "event_payload": {"scope": "incident/x", "entry_id": entry_id, "key": "header"},
    }


async def test_a_header_three_pages_back_is_found_and_a_missing_one_is_not() -> None:
    async with FakeSlackServer() as server:
        record_calls(server)
        ws = server.workspace
        since = time.time()
        posted = ws.post_as_bot(CHANNEL, "the dead replica's header", metadata=_header("e-wanted"))
        for k in range(450):  # other incidents' headers, posted after it
            ws.post_as_bot(CHANNEL, f"header {k}", metadata=_header(f"e-{k}"))
        client = AsyncWebClient(token="xoxb-test", base_url=server.base_url)
        found = await find_posted(client, CHANNEL, None, "e-wanted", "header", since, fail=_fail)
        assert found == posted.ts
        assert await find_posted(client, CHANNEL, None, "e-never", "header", since, fail=_fail) is None
        pages = [c for c in slack_calls(server).calls_to("conversations.history")]
        assert len(pages) >= 3 + 3  # it read past the first page both times
