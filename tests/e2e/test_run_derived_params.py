"""``/incident run page_oncall SCOPE`` with nothing else typed. The parameters an action declares
as derived from the incident (``from_incident`` in ``[actions.params.*]``) are filled in from it — the page's
summary from the incident's title, severity, service and link; its PagerDuty severity from the incident's — and the
proposal shows them; what a person types still wins."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from decklog.bot.server import DecklogServer
from decklog.bot.settings import Settings
from decklog.core.entries import ProposalMade
from decklog.core.errors import NotFound
from tests.conftest import eventually, test_config
from tests.fakes.pagerduty import FakePagerDuty

ALICE, BOB, GENERAL = "U0ALICE", "U0BOB", "C0GENERAL"
KEY = "R0UTINGKEY0123456789012345678901"


@pytest.fixture
async def paging() -> AsyncIterator[FakePagerDuty]:
    async with FakePagerDuty(routing_key=KEY) as pd:
        yield pd


@pytest.fixture
async def server(tmp_path: Path, paging: FakePagerDuty) -> AsyncIterator[DecklogServer]:
    settings = Settings(
        data_dir=tmp_path / "data",
        host="127.0.0.1",
        port=0,
        approvers=ALICE,
        pagerduty_routing_key=KEY,
        pagerduty_events_url=f"{paging.base_url}/v2/enqueue",
        first_turn_delay=3600,
        turn_debounce=3600,
    )
    srv = DecklogServer(settings, config=test_config())
    await srv.start()
    yield srv
    await srv.stop()


async def _thread(server: DecklogServer, scope: str) -> object:
    try:
        return (await server.runtime.store.get_state(scope)).thread
    except NotFound:
        return None


async def _proposals(server: DecklogServer, scope: str) -> list[ProposalMade]:
    return [e.payload for e in await server.runtime.store.read(scope, kinds=["proposal"])]  # type: ignore[misc]


async def test_run_page_oncall_with_no_parameters_pages_with_the_incidents_own(
    server: DecklogServer, paging: FakePagerDuty
) -> None:
    fake = server.sandbox
    await fake.run_command(BOB, GENERAL, "declare Checkout 5xx in EU sev2")
    scope = "incident/checkout-5xx-in-eu"
    thread = await eventually(lambda: _thread(server, scope), what="the incident's thread")
    before = len(fake.server.responses)
    out = await fake.run_command(BOB, GENERAL, f"run page_oncall {scope}")
    assert out.status == 200

    def answered() -> list[str]:
        return [str(r.body.get("text", "")) for r in fake.server.responses[before:]]

    (answer,) = await eventually(answered, what="the answer to run")
    assert "is required" not in answer and "parked" in answer, answer
    (proposal,) = await eventually(lambda: _proposals(server, scope), what="the proposal")
    assert proposal.params["severity"] == "error"  # SEV2
    summary = proposal.params["summary"]
    assert "Checkout 5xx in EU" in summary and "SEV2" in summary and thread.permalink in summary  # type: ignore[attr-defined]
    assert summary in proposal.preview and summary.split(" · ")[0] in answer

    await fake.post_message(ALICE, GENERAL, f"@decklog approve {proposal.proposal_id}", thread_ts=thread.ts)  # type: ignore[attr-defined]
    await eventually(lambda: paging.events, timeout=10, what="the page")
    payload = paging.events[0]["payload"]
    assert payload["summary"] == summary and payload["severity"] == "error"


async def test_what_the_person_types_wins_over_the_incident(server: DecklogServer) -> None:
    fake = server.sandbox
    await fake.run_command(BOB, GENERAL, "declare Ledger drift sev3")
    scope = "incident/ledger-drift"
    await eventually(lambda: _thread(server, scope), what="the incident's thread")
    await fake.run_command(BOB, GENERAL, f"run page_oncall summary=wake up the ledger team severity=critical {scope}")
    (proposal,) = await eventually(lambda: _proposals(server, scope), what="the proposal")
    assert proposal.params == {"summary": "wake up the ledger team", "severity": "critical"}
