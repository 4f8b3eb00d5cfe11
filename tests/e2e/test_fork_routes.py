"""A fork (or a replay, which writes a fork) never changes where a live thread, channel or alert
routes — neither when it is written nor after ``decklog reindex`` — and ``verify --all`` passes afterwards."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from decklog.bot.server import DecklogServer
from tests.conftest import ServerFactory, eventually
from tests.unit.test_cli import run

ALICE, BOB, GENERAL = "U0ALICE", "U0BOB", "C0GENERAL"


async def _texts(server: DecklogServer, scope: str) -> list[str]:
    return [str(getattr(e.payload, "text", "")) for e in await server.runtime.store.read(scope) if e.kind == "message"]


async def _thread_of(server: DecklogServer, scope: str) -> object:
    from decklog.core.errors import NotFound

    try:
        return (await server.runtime.store.get_state(scope)).thread
    except NotFound:
        return None


async def test_a_fork_never_takes_a_live_threads_replies(make_server: ServerFactory, tmp_path: Path) -> None:
    data = tmp_path / "data"
    server = await make_server(data_dir=data)
    fake = server.sandbox
    await fake.run_command(ALICE, GENERAL, "declare Checkout fork routing sev2")
    scope = "incident/checkout-fork-routing"
    thread = await eventually(lambda: _thread_of(server, scope), what="the incident's thread")
    await fake.post_message(BOB, GENERAL, "before the fork", thread_ts=thread.ts)  # type: ignore[attr-defined]
    await eventually(lambda: _has_text(server, scope, "before the fork"), what="the first reply")
    version = (await server.runtime.store.get_state(scope)).version

    forked = await asyncio.to_thread(run, data, "fork", scope, "--at", str(version))
    assert forked.returncode == 0, forked.stderr
    fork = forked.stdout.splitlines()[0]
    replayed = await asyncio.to_thread(run, data, "replay", scope)
    assert replayed.returncode == 0, replayed.stderr
    replay = replayed.stdout.splitlines()[0]

    await fake.post_message(BOB, GENERAL, "after the fork", thread_ts=thread.ts)  # type: ignore[attr-defined]
    await eventually(lambda: _has_text(server, scope, "after the fork"), what="the reply in the live incident")
    assert "after the fork" not in await _texts(server, fork)
    assert "after the fork" not in await _texts(server, replay)
    assert await server.runtime.index.route(GENERAL, thread.ts) == scope  # type: ignore[attr-defined]

    reindexed = await asyncio.to_thread(run, data, "reindex")
    assert reindexed.returncode == 0, reindexed.stderr
    assert await server.runtime.index.route(GENERAL, thread.ts) == scope  # type: ignore[attr-defined]
    await fake.post_message(BOB, GENERAL, "after the reindex", thread_ts=thread.ts)  # type: ignore[attr-defined]
    await eventually(lambda: _has_text(server, scope, "after the reindex"), what="the reply after reindex")
    assert "after the reindex" not in await _texts(server, fork)

    # the live incident's picker and alert lookups do not offer the fork as an open incident
    listed = [r.id for r in await server.runtime.index.list_scopes(kind="incident", open_only=True)]
    assert scope in listed and fork not in listed and replay not in listed
    assert fork in [r.id for r in await server.runtime.index.list_scopes(kind="incident")]  # still listed
    await server.stop()
    verified = await asyncio.to_thread(run, data, "verify", "--all")
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert json.loads(run(data, "scopes", "--json").stdout)


async def _has_text(server: DecklogServer, scope: str, text: str) -> bool:
    return text in await _texts(server, scope)
