"""``decklog reindex`` and ``verify --all`` read history a chunk at a time (bounded memory): the index they build
is the same as one built at once, whatever the chunk size."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from decklog.bot.cli import common
from decklog.core.store import audit
from decklog.core.store.sqlite.index import SqliteIndex
from decklog.core.store.sqlite.log_store import SqliteLogStore
from tests.store_contract import declare, message, observation


async def test_reindex_and_verify_in_chunks_agree_with_the_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(common, "REINDEX_CHUNK", 2)
    monkeypatch.setattr(audit, "CHUNK", 2)
    store = SqliteLogStore(tmp_path, topics=("index",))
    with ThreadPoolExecutor(1) as pool:
        index = SqliteIndex(tmp_path / "index.db", pool)
        await index.open()
        try:
            scopes = [f"incident/old-{i}" for i in range(5)]
            for i, s in enumerate(scopes):
                await declare(store, s)
                await store.append(s, [message(f"note {i}"), observation(f"fp-{i}")])
            count, entries = await common.reindex_all(store, index)
            assert (count, entries) == (5, 15)
            assert {r.id for r in await index.list_scopes(limit=None)} == set(scopes)  # not only the last chunk
            assert {await index.open_scope_for_fingerprint(f"fp-{i}") for i in range(5)} == set(scopes)
        finally:
            await index.close()
            await store.close()
    result = await audit.audit(tmp_path, key=None)
    assert (result.scopes, result.ok, result.problems) == (5, 5, [])

    with ThreadPoolExecutor(1) as pool:  # a scope the index lost is found, whichever chunk it was in
        index = SqliteIndex(tmp_path / "index.db", pool)
        await index.open()
        await index.file.write(lambda conn, _: conn.exec_driver_sql("DELETE FROM scopes WHERE id = 'incident/old-0'"))
        await index.close()
    result = await audit.audit(tmp_path, key=None)
    assert result.problems == ["index: incident/old-0 is not listed"]
