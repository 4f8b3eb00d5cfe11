"""The keyed chain (``DECKLOG_LOG_KEY``): a consistent rewrite made without the key is caught; kinds never mix.

Each test runs on the SQLite backend and on the in-memory one (both share core/store/staging.py and verify.py).
The forger has write access to the stored rows and knows the code, but not the key: they rewrite an entry,
recompute every later hash and the state row (its head and the fold) consistently.
"""

from __future__ import annotations

import dataclasses
import sqlite3
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any, Protocol

import pytest
import sqlalchemy as sa

from decklog.core.entries import Actor, NewEntry, chain_hash
from decklog.core.errors import Conflict
from decklog.core.ids import ScopeId
from decklog.core.state import empty_state, fold
from decklog.core.store.chain import ChainKey, link_hash
from decklog.core.store.memory.log_store import MemoryLogStore, MemoryStorage, StateRow, StoredRow
from decklog.core.store.ports import LogStore
from decklog.core.store.postgres.log_store import PostgresLogStore
from decklog.core.store.rows import row_to_entry
from decklog.core.store.sqlite.log_store import SqliteLogStore

SCOPE = "incident/payments-5xx"
KEY = "correct horse battery staple"
ALICE = Actor.human("U0ALICE", "alice")
COLUMNS = ("seq", "id", "kind", "at", "actor", "payload", "refs", "idempotency_key", "prev_hash", "hash")


class Backend(Protocol):
    async def open(self, key: str | None) -> LogStore: ...
    def load(self) -> tuple[list[dict[str, Any]], dict[str, Any]]: ...
    def save(self, rows: list[dict[str, Any]], state: dict[str, Any]) -> None: ...


class SqliteBackend:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.made: list[LogStore] = []

    async def open(self, key: str | None) -> LogStore:
        store = SqliteLogStore(self.root, log_key=key)
        self.made.append(store)
        return store

    @property
    def path(self) -> Path:
        return self.root / "scopes" / f"{ScopeId.parse(SCOPE).file_stem}.db"

    def load(self) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        with sqlite3.connect(self.path) as raw:
            raw.row_factory = sqlite3.Row
            rows = [dict(r) for r in raw.execute("SELECT * FROM entries ORDER BY seq")]
            state = dict(raw.execute("SELECT version, head_hash, head_at, body FROM state WHERE id = 1").fetchone())
        return rows, state

    def save(self, rows: list[dict[str, Any]], state: dict[str, Any]) -> None:
        with sqlite3.connect(self.path) as raw:
            for r in rows:
                raw.execute(
                    "UPDATE entries SET payload = :payload, prev_hash = :prev_hash, hash = :hash WHERE seq = :seq", r
                )
            raw.execute("UPDATE state SET head_hash = :head_hash, body = :body WHERE id = 1", state)


class MemoryBackend:
    def __init__(self) -> None:
        self.storage = MemoryStorage()

    async def open(self, key: str | None) -> LogStore:
        return MemoryLogStore(self.storage, log_key=key)

    def load(self) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        ms = self.storage.scopes[SCOPE]
        assert ms.state_row is not None
        return [dataclasses.asdict(r) for r in ms.rows], dataclasses.asdict(ms.state_row)

    def save(self, rows: list[dict[str, Any]], state: dict[str, Any]) -> None:
        ms = self.storage.scopes[SCOPE]
        ms.rows = [StoredRow(**r) for r in rows]
        ms.state_row = StateRow(**state)


class PostgresBackend:
    """The same forgery on PostgreSQL: the entries and the scope's head row rewritten in place."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.made: list[LogStore] = []
        self.engine = sa.create_engine(url.replace("postgresql://", "postgresql+psycopg://", 1))

    async def open(self, key: str | None) -> LogStore:
        store = PostgresLogStore(self.url, topics=("index",), log_key=key)
        await store.open()
        self.made.append(store)
        return store

    def load(self) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        with self.engine.connect() as conn:
            cols = ", ".join(COLUMNS)
            rows = [
                dict(r._mapping)
                for r in conn.execute(
                    sa.text(f"SELECT {cols} FROM entries WHERE scope_id = :s ORDER BY seq"), {"s": SCOPE}
                )
            ]
            head = conn.execute(
                sa.text("SELECT version, head_hash, head_at, body FROM scope_heads WHERE scope_id = :s"), {"s": SCOPE}
            ).one()
        return rows, dict(head._mapping)

    def save(self, rows: list[dict[str, Any]], state: dict[str, Any]) -> None:
        with self.engine.begin() as conn:
            for r in rows:
                conn.execute(
                    sa.text(
                        "UPDATE entries SET payload = :payload, prev_hash = :prev_hash, hash = :hash"
                        " WHERE scope_id = :s AND seq = :seq"
                    ),
                    {**r, "s": SCOPE},
                )
            conn.execute(
                sa.text("UPDATE scope_heads SET head_hash = :head_hash, body = :body WHERE scope_id = :s"),
                {**state, "s": SCOPE},
            )


@pytest.fixture(params=["sqlite", "memory", "postgresql"])
async def backend(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Backend]:
    made: Backend
    if request.param == "sqlite":
        made = SqliteBackend(tmp_path)
    elif request.param == "memory":
        made = MemoryBackend()
    else:
        made = PostgresBackend(request.getfixturevalue("pg_url"))
    yield made
    for store in getattr(made, "made", []):
        await store.close()
    if isinstance(made, PostgresBackend):
        made.engine.dispose()


async def write_scope(backend: Backend, key: str | None, entries: int = 8) -> None:
    store = await backend.open(key)
    await store.append(SCOPE, [NewEntry.make("declared", ALICE, {"title": "Payments 5xx"})], create=True)
    for n in range(2, entries + 1):
        await store.append(SCOPE, [NewEntry.make("message", ALICE, {"text": f"note {n}"})])


Hasher = Callable[..., str]


def plain(**columns: Any) -> str:
    return chain_hash(**columns)


def forge(backend: Backend, seq: int, text: str, hasher: Hasher) -> None:
    """Rewrite entry ``seq``'s text, then recompute every later hash and the state row, consistently."""
    rows, state = backend.load()
    prev = rows[seq - 2]["hash"] if seq > 1 else ""
    folded = empty_state(SCOPE)
    for r in rows:
        if r["seq"] == seq:
            r["payload"] = r["payload"].replace(f"note {seq}", text)
            assert text in r["payload"]
        if r["seq"] >= seq:
            r["prev_hash"] = prev
            r["hash"] = hasher(
                prev_hash=prev,
                seq=r["seq"],
                entry_id=r["id"],
                kind=r["kind"],
                at=r["at"],
                actor_json=r["actor"],
                payload=r["payload"],
                refs_json=r["refs"],
                idempotency_key=r["idempotency_key"],
            )
            prev = r["hash"]
        folded = fold(folded, row_to_entry(SCOPE, dataclasses.make_dataclass("R", COLUMNS)(**r)))
    backend.save(rows, {**state, "head_hash": prev, "body": folded.model_dump_json()})


async def test_a_keyed_scope_verifies_with_its_key_and_says_so(backend: Backend) -> None:
    await write_scope(backend, KEY)
    rows, _state = backend.load()
    assert all(r["hash"].startswith("hmac:") for r in rows)
    report = await (await backend.open(KEY)).verify(SCOPE)
    assert report.ok and report.keyed and report.entries == 8


async def test_a_consistent_rewrite_passes_unkeyed_and_fails_keyed(backend: Backend, tmp_path: Path) -> None:
    """The point of the key: the same forgery that an unkeyed chain cannot see, a keyed one names."""
    await write_scope(backend, None)
    forge(backend, 3, "nothing to see here", plain)
    unkeyed = await (await backend.open(None)).verify(SCOPE)
    assert unkeyed.ok and not unkeyed.keyed, unkeyed  # the weakness the key exists for

    other = SqliteBackend(tmp_path / "keyed") if isinstance(backend, SqliteBackend) else MemoryBackend()
    await write_scope(other, KEY)
    guessed = ChainKey.of("a guess")
    assert guessed is not None
    forged_key = ChainKey(guessed.secret, ChainKey.of(KEY).key_id)  # type: ignore[union-attr]
    forge(other, 3, "nothing to see here", lambda **c: link_hash(forged_key, **c))  # the right format, a wrong key
    keyed = await (await other.open(KEY)).verify(SCOPE)
    assert not keyed.ok and keyed.first_bad_seq == 3 and "altered" in keyed.reason, keyed
    for store in getattr(other, "made", []):
        await store.close()


async def test_a_keyed_scope_rewritten_with_plain_hashes_is_a_mix_and_fails(backend: Backend) -> None:
    await write_scope(backend, KEY)
    forge(backend, 5, "forged", plain)
    report = await (await backend.open(KEY)).verify(SCOPE)
    assert not report.ok and report.first_bad_seq == 5 and "never mix" in report.reason, report


async def test_verify_of_a_keyed_scope_without_the_key_names_the_setting(backend: Backend) -> None:
    await write_scope(backend, KEY)
    report = await (await backend.open(None)).verify(SCOPE)
    assert not report.ok and "DECKLOG_LOG_KEY" in report.reason
    wrong = await (await backend.open("another key")).verify(SCOPE)
    assert not wrong.ok and "another DECKLOG_LOG_KEY" in wrong.reason


async def test_appends_keep_the_scope_kind_and_a_keyed_scope_needs_its_key(backend: Backend) -> None:
    await write_scope(backend, KEY, entries=2)
    for key in (None, "another key"):
        with pytest.raises(Conflict, match="DECKLOG_LOG_KEY"):
            await (await backend.open(key)).append(SCOPE, [NewEntry.make("message", ALICE, {"text": "x"})])
    assert [r["seq"] for r in backend.load()[0]] == [1, 2]  # nothing was written by the refused appends

    keyed = await backend.open(KEY)
    other = "incident/plain-one"
    await (await backend.open(None)).append(other, [NewEntry.make("declared", ALICE, {"title": "plain"})], create=True)
    await keyed.append(other, [NewEntry.make("message", ALICE, {"text": "appended with a key set"})])
    entries = await keyed.read(other)
    assert [e.hash.startswith("hmac:") for e in entries] == [False, False]  # the plain scope stays plain
    report = await keyed.verify(other)
    assert report.ok and not report.keyed
    assert (await keyed.verify(SCOPE)).ok
