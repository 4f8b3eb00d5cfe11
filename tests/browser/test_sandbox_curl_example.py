"""The sandbox page's "Send your own" alert example, run exactly as the page shows it: a person
opens *What is this?*, copies the curl command and pastes it into a shell. It used to answer 400 ``fingerprint: is
required`` (decklog's generic alert needs one; the example left it out)."""

from __future__ import annotations

import asyncio
import json
import shutil
from typing import Any

import pytest

from decklog.bot.server import DecklogServer
from tests.browser.test_sandbox_browser import Sandbox, browser  # noqa: F401 - the browser fixture
from tests.conftest import eventually
from tests.fakes.slack_calls import slack_calls

pytestmark = pytest.mark.browser


async def test_the_send_your_own_alert_example_works_as_shown(browser: Any, server: DecklogServer) -> None:  # noqa: F811
    curl = shutil.which("curl")
    if curl is None:
        pytest.skip("no curl here to run the example with")
    sandbox = await Sandbox.open(browser, server, "curl-example")
    await sandbox.page.locator("#tools details summary").click()
    example = sandbox.page.locator("#receiver-info pre")
    await sandbox.expect(example).to_be_visible()
    command = await example.inner_text()
    assert command.startswith(f"curl -X POST '{server.url}/alerts/generic?wait=5'")
    shell = await asyncio.create_subprocess_exec(
        "bash", "-c", command, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    out, err = await asyncio.wait_for(shell.communicate(), timeout=30)
    assert shell.returncode == 0, err.decode()
    answer = json.loads(out)
    assert answer.get("recorded") == 1, answer  # not {"error": "fingerprint: is required"}
    [outcome] = answer["alerts"]
    assert outcome["outcome"] == "new"
    state = await server.runtime.store.get_state(outcome["scope"])
    assert state.title == "disk full on db-1" and state.severity == 2  # "high" is SEV2 for the generic source

    def posted() -> bool:
        texts = [str(c.args.get("text")) for c in slack_calls(server.sandbox).calls_to("chat.postMessage")]
        return any("disk full on db-1" in t for t in texts)

    await eventually(posted, timeout=10, what="the alert's incident in #alerts")
    sandbox.assert_no_page_errors()
