"""The receivers and their reactions across restarts of ``decklog serve`` (same data directory): a 2xx means the
entries are committed, change links and alert summaries left undone by a stopped process are done by the next one,
and a storm or an alert group goes on in the same incident after a restart."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path
from typing import Any

from decklog.bot.server import DecklogServer
from decklog.bot.wiring import Parts
from decklog.core.alerts import AlertPolicy, AlertRouter
from decklog.core.clock import SystemClock
from decklog.core.entries import Actor
from decklog.core.ids import ScopeId
from tests.conftest import ServerFactory, eventually, test_config
from tests.e2e.test_alerts_e2e import TOKEN, generic, post, summaries
from tests.reliability.test_reactions_durable import Process, alert


def committed_seqs(server: DecklogServer, scope: str) -> set[int]:
    """The seqs of ``scope`` as another connection sees them: only what is committed to the file."""
    path = server.runtime.store.path_for(ScopeId.parse(scope))
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as raw:
        return {int(r[0]) for r in raw.execute("SELECT seq FROM entries")}


async def alerts_server(make_server: ServerFactory, data_dir: Path, **alerts: Any) -> DecklogServer:
    server = await make_server(
        data_dir=data_dir, alert_token=TOKEN, config=test_config(alerts=alerts) if alerts else None
    )
    server.parts.receivers.receivers.summarizer.interval = 0.3
    return server


# -- 2xx only after the commit ---------------------------------------------------------------------------------


async def test_every_2xx_alert_answer_names_entries_already_committed(
    make_server: ServerFactory, tmp_path: Path
) -> None:
    server = await alerts_server(make_server, tmp_path / "data")

    async def one(n: int) -> None:
        status, answer = await post(server, "/alerts/generic", generic(f"fp-{n % 5}", event_id=f"ev-{n}"))
        assert status == 202, answer
        for routed in answer["alerts"]:  # read right when the answer arrives, on a connection of our own
            assert routed["seq"] in committed_seqs(server, routed["scope"]), routed

    await asyncio.gather(*(one(n) for n in range(40)))


async def test_every_2xx_change_answer_names_entries_already_committed(
    make_server: ServerFactory, tmp_path: Path
) -> None:
    server = await alerts_server(make_server, tmp_path / "data")

    async def one(n: int) -> None:
        body = {"id": f"r-{n}", "service": f"svc-{n % 3}", "version": f"v{n}", "status": "succeeded"}
        status, answer = await post(server, "/changes/generic", body)
        assert status == 202, answer
        (change,) = answer["changes"]
        assert {1, change["seq"]} <= committed_seqs(server, change["scope"])

    await asyncio.gather(*(one(n) for n in range(20)))


# -- change links across a restart -----------------------------------------------------------------------------


async def test_an_incident_declared_by_a_process_without_the_links_sender_is_linked_by_the_next_one(
    make_server: ServerFactory, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    first = await alerts_server(make_server, data)
    status, _ = await post(first, "/changes/generic", {"id": "r-7", "service": "payments", "author": "lee"})
    assert status == 202
    await first.stop()
    bare = await make_server(data_dir=data, parts=())  # no receivers: nothing delivers the changes topic
    declared = await bare.runtime.service.declare(
        title="Payments down", services=["payments"], actor=Actor.human("U0ALICE"), via="slack"
    )
    incident = declared.state.scope
    assert [i.entry.kind for i in await bare.runtime.store.outbox_pending(incident, "changes")] == ["declared"]
    await bare.stop()

    third = await alerts_server(make_server, data)
    store = third.runtime.store
    await eventually(lambda: _linked(third, incident, "change/r-7"), what="the link made after the restart")
    await eventually(lambda: _no_pending(third, incident, "changes"), what="the changes row delivered")
    assert [e.payload.scope for e in await store.read(incident, kinds=("scope_linked",))] == ["change/r-7"]
    evidence = [e for e in await store.read(incident, kinds=("observation",)) if e.payload.source == "change"]
    assert len(evidence) == 1


# -- alert summaries across a restart --------------------------------------------------------------------------


async def test_alerts_committed_by_a_process_that_died_before_arming_a_summary_are_summarised(
    make_server: ServerFactory, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    writer = await Process.open(data, _clock(), senders=())  # no summarizer, no index delivery: the worst case
    router = AlertRouter(writer.store, writer.index, writer.service, writer.clock, AlertPolicy.build())
    outcomes = []
    for n in range(4):
        outcomes += await router.receive("alertmanager", [alert(f"fp-{n % 2}", event_id=f"e{n}")])
    scope = outcomes[0].scope
    assert {o.scope for o in outcomes} == {scope} and [o.outcome for o in outcomes][:2] == ["new", "joined"]
    await writer.close()

    def fast_summaries(parts: Parts) -> None:  # runs before the boot re-arm task gets to run
        assert parts.receivers is not None
        parts.receivers.receivers.summarizer.interval = 0.3

    server = await make_server(data_dir=data, alert_token=TOKEN, on_built=fast_summaries)
    made = await eventually(lambda: summaries(server, scope), timeout=20.0, what="the summary derived at boot")
    assert sum(e.payload.data["summary"]["alerts"] for e in made) == 3  # everything the header does not show


async def _linked(server: DecklogServer, scope: str, other: str) -> bool:
    return other in (await server.runtime.store.get_state(scope)).linked


async def _no_pending(server: DecklogServer, scope: str, topic: str) -> bool:
    return not await server.runtime.store.outbox_pending(scope, topic)


def _clock() -> Any:
    return SystemClock()


# -- a storm and a group across a restart of the server ---------------------------------------------------------


async def test_a_server_restarted_mid_storm_and_mid_group_keeps_both_incidents(
    make_server: ServerFactory, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    first = await alerts_server(make_server, data, rate_limit_per_minute=3)
    answers = [await post(first, "/alerts/generic", generic(f"fp-{n}", service=f"s{n}")) for n in range(5)]
    outcomes = [a for _, answer in answers for a in answer["alerts"]]
    assert [o["outcome"] for o in outcomes] == ["new"] * 4 + ["joined"]
    storm, group = outcomes[3]["scope"], outcomes[0]["scope"]
    await first.stop()

    second = await alerts_server(make_server, data, rate_limit_per_minute=3)
    _, grouped = await post(second, "/alerts/generic", generic("fp-latency", service="s0"))
    assert grouped["alerts"][0] | {"outcome": "joined", "scope": group} == grouped["alerts"][0]
    later = [await post(second, "/alerts/generic", generic(f"fp-{n}", service=f"s{n}")) for n in range(5, 9)]
    assert {(a["outcome"], a["scope"]) for _, answer in later for a in answer["alerts"]} == {("joined", storm)}
    incidents = [s for s in await second.runtime.store.scope_ids() if s.kind == "incident"]
    assert len(incidents) == 4
