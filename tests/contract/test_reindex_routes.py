"""``decklog reindex`` brings back the index rows that are lookups rather than history (decision 92):

- the route of every bot message the Slack sender posted (its memos hold channel and ts), so a reply under a
  non-header bot message still reaches its incident after a reindex;
- a source's group claimed by the alert router (an Alertmanager ``groupKey``): the group's alerts carry it in
  their observations, so the index derives it from the log, and the next notification of the group joins the
  open incident after a reindex.

On SQLite files and on PostgreSQL.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from decklog.bot.cli.common import reindex_all
from decklog.bot.runtime import Runtime
from decklog.bot.settings import Settings
from decklog.core.entries import Actor, NewEntry
from decklog.core.index.keys import group_fingerprint

GROUP = '{}/{}:{alertname="HighLatency", cluster="eu-1"}'


@pytest.fixture(params=["sqlite", "postgresql"])
async def rt(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Runtime]:
    url = request.getfixturevalue("pg_url") if request.param == "postgresql" else None
    runtime = await Runtime.open(Settings(data_dir=tmp_path / "data", database_url=url, host="127.0.0.1", port=0))
    runtime.dispatcher.start()
    try:
        yield runtime
    finally:
        await runtime.close()


async def test_reindex_keeps_the_routes_of_bot_messages_and_the_claimed_groups(rt: Runtime) -> None:
    declared = await rt.service.declare(title="HighLatency eu-1", severity=2, actor=Actor.system("alertmanager"))
    scope = declared.state.scope
    alert = {"text": "HighLatency firing", "source": "alertmanager", "fingerprint": "fp-1", "data": {"group": GROUP}}
    await rt.store.append(scope, [NewEntry.make("observation", Actor.system("alertmanager"), alert)])
    await rt.store.memo_put(scope, "slack", "post:2", {"state": "posted", "channel": "C0ALERTS", "ts": "1.000200"})
    await rt.dispatcher.idle()
    assert await rt.index.open_scope_for_fingerprint(group_fingerprint(GROUP)) == scope  # derived from the log

    # through the store, and on SQLite also as `decklog reindex` reads them: the scope files' read-only snapshots
    sources = [None] if rt.settings.database_url else [None, Path(rt.settings.data_dir)]
    for data_dir in sources:
        await reindex_all(rt.store, rt.index, data_dir=data_dir)

        assert await rt.index.route("C0ALERTS", "1.000200") == scope
        assert await rt.index.open_scope_for_fingerprint(group_fingerprint(GROUP)) == scope
        assert await rt.index.open_scope_for_fingerprint("fp-1") == scope
