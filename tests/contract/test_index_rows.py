"""The rows the SQL indexes write (index.db and PostgreSQL's index tables): what ``decklog verify --all`` compares
(core/store/audit.py), beyond what the ``IndexPort`` contract can see (tests/store_contract.py ``IndexContract``)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from decklog.core.index.tables import fingerprints
from decklog.core.store.memory.log_store import MemoryLogStore
from decklog.core.store.ports import IndexPort, StorageFactory
from decklog.core.store.postgres import schema as pg
from decklog.core.store.postgres.factory import PostgresFactory
from decklog.core.store.sqlite.factory import SqliteFactory
from tests.store_contract import declare_scope, feed, obs

Query = Callable[[Callable[[Any], Any]], Any]


@pytest.fixture(params=["sqlite", "postgresql"])
async def index_and_query(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[tuple[IndexPort, Query]]:
    """An index, and ``query(fn)``: ``fn(conn)`` on a connection of its own to the index's storage."""
    if request.param == "sqlite":
        factory: StorageFactory = SqliteFactory(tmp_path)
        url = f"sqlite:///{tmp_path / 'index.db'}"
    else:
        pg_url = request.getfixturevalue("pg_url")
        factory, url = PostgresFactory(pg_url), pg.engine_url(pg_url)
    store = await factory.log_store()
    index = await factory.index()
    engine = sa.create_engine(url)

    def query(fn: Callable[[Any], Any]) -> Any:
        with engine.connect() as conn:
            return fn(conn)

    yield index, query
    engine.dispose()
    await index.close()
    await store.close()
    await factory.close()


async def test_a_batch_of_repeats_keeps_the_row_of_the_last_observation_of_each_fingerprint(
    index_and_query: tuple[IndexPort, Query],
) -> None:
    """One apply of many observations (an alert storm's batch): each fingerprint's row is its last observation's."""
    index, query = index_and_query
    log = MemoryLogStore()
    await declare_scope(log, "incident/storm", "Storm")
    await log.append("incident/storm", [obs("fp1"), obs("fp2", service="db"), obs("fp1"), obs("fp1", "resolved")])
    await feed(index, log, "incident/storm")
    await log.append("incident/storm", [obs("fp2", "resolved", service="db"), obs("fp2", service="db")])
    await feed(index, log, "incident/storm")

    def rows(conn: Any) -> dict[str, tuple[str, str, str]]:
        q = sa.select(fingerprints.c.fingerprint, fingerprints.c.scope, fingerprints.c.status, fingerprints.c.service)
        return {r[0]: (r[1], r[2], r[3]) for r in conn.execute(q)}

    assert query(rows) == {
        "fp1": ("incident/storm", "resolved", "api"),
        "fp2": ("incident/storm", "firing", "db"),
    }
