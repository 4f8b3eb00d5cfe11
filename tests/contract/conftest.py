"""Contract tests: suites written once and run on every backend's factory (SQLite, in-memory, PostgreSQL).

The storage contract is a class per backend (tests/store_contract.py ``StorageContract``, subclassed in
test_store_<backend>.py). A test of a port that only some backends have (leases, cursor claims…) takes
``backend_factory`` and skips the backends whose factory answers ``None``. Shared fixtures live in tests/conftest.py.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from decklog.core.store.memory.factory import MemoryFactory
from decklog.core.store.memory.log_store import MemoryStorage
from decklog.core.store.ports import StorageFactory
from decklog.core.store.postgres.factory import PostgresFactory
from decklog.core.store.sqlite.factory import SqliteFactory

BACKENDS = ("sqlite", "postgresql", "memory")


@pytest.fixture(params=BACKENDS)
def backend_factory(request: pytest.FixtureRequest, tmp_path: Path) -> Callable[[], StorageFactory]:
    """``backend_factory()``: a factory of the test's backend on its one storage (each call: another process)."""
    if request.param == "sqlite":
        return lambda: SqliteFactory(tmp_path)
    if request.param == "postgresql":
        url = request.getfixturevalue("pg_url")
        return lambda: PostgresFactory(url)
    storage = MemoryStorage()
    return lambda: MemoryFactory(storage)
