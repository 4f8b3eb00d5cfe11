"""People record evidence and open obligations from Slack (``/incident evidence <text>``, ``/incident obligation
<text>``, and the same words after ``@decklog``), in the sandbox's fake Slack speaking the real wire format."""

from __future__ import annotations

import pytest

from decklog.adapters.slack.grammar import UsageError, record_args
from decklog.bot.server import DecklogServer
from decklog.core.entries import Evidence, ObligationOpened
from tests.conftest import eventually
from tests.e2e.test_agents_e2e import ALERTS_CHANNEL, ALICE, incident


async def test_evidence_and_an_obligation_from_slash_commands_and_mentions(server: DecklogServer) -> None:
    fake, store = server.sandbox, server.runtime.store
    scope, ts = await incident(server, link=False)
    out = await fake.run_command(ALICE, ALERTS_CHANNEL, f"evidence {scope} pool at 100/100 on db-1 since 14:02")
    assert out.status == 200
    out = await fake.run_command(ALICE, ALERTS_CHANNEL, f"obligation {scope} check the replica lag before failing over")
    assert out.status == 200
    await fake.post_message(ALICE, ALERTS_CHANNEL, "@decklog evidence grafana shows p99 at 4 s", thread_ts=ts)

    async def recorded() -> tuple[list[Evidence], list[ObligationOpened]] | None:
        entries = await store.read(scope)
        ev = [e.payload for e in entries if isinstance(e.payload, Evidence)]
        ob = [e.payload for e in entries if isinstance(e.payload, ObligationOpened)]
        return (ev, ob) if len(ev) == 2 and ob else None

    ev, ob = await eventually(recorded, what="two evidence entries and an obligation")
    assert [e.text for e in ev] == ["pool at 100/100 on db-1 since 14:02", "grafana shows p99 at 4 s"]
    assert all(e.author == ALICE and e.source == "slack" for e in ev)
    assert ob[0].text == "check the replica lag before failing over" and ob[0].purpose == "task"
    assert (await store.get_state(scope)).evidence == 2
    # the usage names an example when the text is missing
    with pytest.raises(UsageError, match=r"`evidence` needs a text, e\.g\. `evidence pool at"):
        record_args("evidence")([])
