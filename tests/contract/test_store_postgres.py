"""The PostgreSQL backend passes the whole storage contract, plus what only a shared database can show."""

from __future__ import annotations

import asyncio
import json

import psycopg
import pytest
import sqlalchemy as sa

from decklog.core.errors import Conflict, NotFound
from decklog.core.store.ports import StorageFactory
from decklog.core.store.postgres import schema as pg
from decklog.core.store.postgres.factory import PostgresFactory
from decklog.core.store.postgres.inbox import PostgresInbox
from decklog.core.store.postgres.log_store import PostgresLogStore
from tests.store_contract import BODY, SCOPE, TOPICS, MakeFactory, StorageContract, declare, message, read_all


class TestPostgresStorage(StorageContract):
    @pytest.fixture
    def make_factory(self, pg_url: str) -> MakeFactory:
        def make(*, max_open: int | None = None) -> StorageFactory:
            return PostgresFactory(pg_url, threads=max_open or 8)

        return make


async def test_group_commit_takes_concurrent_requests_into_fewer_transactions(pg_url: str) -> None:
    store = PostgresLogStore(pg_url, topics=TOPICS)
    try:
        await declare(store)
        before = store.transactions
        await asyncio.gather(*(store.append(SCOPE, [message(f"m{i}")]) for i in range(64)))
        assert store.transactions - before < 64
        assert len(await read_all(store)) == 65
    finally:
        await store.close()


async def test_quiet_scopes_share_a_commit_and_one_bad_request_fails_alone(pg_url: str) -> None:
    """Group commit across scopes (core/store/postgres/log_store.py): appends to sixteen scopes at once take fewer
    transactions than there are scopes; a request for a scope that does not exist, a failed create and a stale
    compare-and-set fail alone, and every other request in their transactions commits."""
    store = PostgresLogStore(pg_url, topics=TOPICS)
    scopes = [f"incident/quiet-{i:02d}" for i in range(16)]
    try:
        for scope in scopes:
            await declare(store, scope)
        before = store.transactions
        await asyncio.gather(*(store.append(s, [message(f"{s} {n}")]) for n in range(4) for s in scopes))
        assert store.transactions - before < len(scopes)  # fewer commits than scopes: scopes shared them
        results = await asyncio.gather(
            *(store.append(s, [message("fine")]) for s in scopes),
            store.append("incident/nowhere", [message("lost")]),
            store.append("incident/born-wrong", [message("not a declaration")], create=True),
            store.append(scopes[0], [message("stale")], expected_version=1),
            return_exceptions=True,
        )
        assert all(not isinstance(r, BaseException) for r in results[:16]), results
        assert [type(r).__name__ for r in results[16:]] == ["NotFound", "NotFound", "Conflict"]
        for scope in scopes:
            texts = [getattr(e.payload, "text", None) for e in await read_all(store, scope)][1:]
            assert sorted(texts[:4]) == [f"{scope} {n}" for n in range(4)] and texts[4:] == ["fine"]
            assert (await store.verify(scope)).ok
        assert [str(s) for s in await store.scope_ids()] == sorted(scopes)  # no head row left by the bad create
        with psycopg.connect(pg_url) as conn:
            row = conn.execute("SELECT count(*) FROM scope_heads WHERE scope_id = 'incident/born-wrong'").fetchone()
        assert row == (0,)
    finally:
        await store.close()


async def test_payload_columns_hold_the_exact_bytes_the_chain_hashed(pg_url: str) -> None:
    store = PostgresLogStore(pg_url, topics=TOPICS)
    try:
        await declare(store)
        text = 'ünïcode \u2028 tab\t "quotes" {"k": 1}   spaces'
        (entry,) = (await store.append(SCOPE, [message(text)])).entries
        with psycopg.connect(pg_url) as conn:
            payload = conn.execute(
                "SELECT payload FROM entries WHERE scope_id = %s AND seq = %s", (SCOPE, entry.seq)
            ).fetchone()
        assert payload is not None and text in json.loads(payload[0])["text"]
        with psycopg.connect(pg_url) as conn:
            conn.execute("UPDATE entries SET payload = payload || ' ' WHERE scope_id = %s AND seq = 2", (SCOPE,))
        report = await store.verify(SCOPE)
        assert not report.ok and report.first_bad_seq == 2
    finally:
        await store.close()


async def test_keys_use_byte_order_collation(pg_url: str) -> None:
    with psycopg.connect(pg_url) as conn:
        rows = conn.execute(
            "SELECT table_name, column_name FROM information_schema.columns "
            "WHERE column_name IN ('scope_id', 'idempotency_key', 'topic') AND collation_name IS DISTINCT FROM 'C'"
            " AND table_schema = current_schema()"
        ).fetchall()
    assert rows == []


async def test_a_newer_schema_is_refused(pg_url: str) -> None:
    engine = pg.make_engine(pg_url)
    try:
        with engine.begin() as conn:
            conn.execute(pg.schema_versions.update().values(version=pg.SCHEMA_VERSION + 1))
        store = PostgresLogStore(pg_url, topics=TOPICS)
        try:
            with pytest.raises(pg.SchemaTooNew, match="newer"):
                await store.open()
        finally:
            await store.close()
    finally:
        with engine.begin() as conn:
            conn.execute(pg.schema_versions.update().values(version=pg.SCHEMA_VERSION))
        engine.dispose()


async def test_a_version_1_database_gets_the_due_turns_wake_and_ask_columns(pg_url: str) -> None:
    def columns() -> set[str]:
        with psycopg.connect(pg_url) as conn:
            rows = conn.execute(
                "SELECT column_name FROM information_schema.columns WHERE table_name = 'due_turns'"
                " AND table_schema = current_schema()"
            ).fetchall()
        return {str(r[0]) for r in rows}

    with psycopg.connect(pg_url, autocommit=True) as conn:  # as decklog made it before durable wake-ups
        conn.execute("ALTER TABLE due_turns DROP COLUMN wake_at, DROP COLUMN ask_at, DROP COLUMN asks")
        conn.execute("UPDATE schema_versions SET version = 1")
    assert not {"wake_at", "ask_at", "asks"} & columns()
    store = PostgresLogStore(pg_url, topics=TOPICS)
    try:
        await store.open()
    finally:
        await store.close()
    assert {"wake_at", "ask_at", "asks"} <= columns()
    with psycopg.connect(pg_url) as conn:
        assert conn.execute("SELECT version FROM schema_versions").fetchone() == (pg.SCHEMA_VERSION,)


async def test_a_version_2_database_gets_parked_inbox_requests_and_forked_scopes(pg_url: str) -> None:
    """A database made at schema version 2 gains ``inbox.parked_at``/``error`` (poison requests) and the index's
    ``scopes.forked_from`` (forks) on open, with nothing lost."""

    def columns() -> set[tuple[str, str]]:
        with psycopg.connect(pg_url) as conn:
            rows = conn.execute(
                "SELECT table_name, column_name FROM information_schema.columns WHERE table_schema = current_schema()"
            ).fetchall()
        return {(str(r[0]), str(r[1])) for r in rows}

    added = {("inbox", "parked_at"), ("inbox", "error"), ("scopes", "forked_from")}
    with psycopg.connect(pg_url, autocommit=True) as conn:  # as decklog made it at schema version 2
        conn.execute("ALTER TABLE inbox DROP COLUMN parked_at, DROP COLUMN error")
        conn.execute("ALTER TABLE scopes DROP COLUMN forked_from")
        conn.execute("UPDATE schema_versions SET version = 2")
    assert not added & columns()
    store = PostgresLogStore(pg_url, topics=TOPICS)
    try:
        await store.open()
    finally:
        await store.close()
    assert added <= columns()
    with psycopg.connect(pg_url) as conn:
        assert conn.execute("SELECT version FROM schema_versions").fetchone() == (pg.SCHEMA_VERSION,)


async def test_a_version_3_database_gets_the_index_change_time(pg_url: str) -> None:
    """A database made at schema version 3 gains the index's ``scopes.changed_at`` (a change's own time) on open;
    its rows read as before (their recording time) until ``decklog reindex`` fills it."""

    def columns() -> set[str]:
        with psycopg.connect(pg_url) as conn:
            rows = conn.execute(
                "SELECT column_name FROM information_schema.columns WHERE table_name = 'scopes'"
                " AND table_schema = current_schema()"
            ).fetchall()
        return {str(r[0]) for r in rows}

    with psycopg.connect(pg_url, autocommit=True) as conn:  # as decklog made it at schema version 3
        conn.execute("ALTER TABLE scopes DROP COLUMN changed_at")
        conn.execute("UPDATE schema_versions SET version = 3")
    assert "changed_at" not in columns()
    store = PostgresLogStore(pg_url, topics=TOPICS)
    try:
        await store.open()
    finally:
        await store.close()
    assert "changed_at" in columns()
    with psycopg.connect(pg_url) as conn:
        assert conn.execute("SELECT version FROM schema_versions").fetchone() == (pg.SCHEMA_VERSION,)


async def test_one_cursor_owner_at_a_time_with_leases_on_the_database_clock(pg_url: str) -> None:
    one, two = PostgresLogStore(pg_url, topics=TOPICS), PostgresLogStore(pg_url, topics=TOPICS)
    try:
        await declare(one)
        assert await one.claim_cursor(SCOPE, "slack", "replica-1", lease_s=60)
        assert not await two.claim_cursor(SCOPE, "slack", "replica-2", lease_s=60)
        assert await two.claim_cursor(SCOPE, "index", "replica-2", lease_s=60)  # another topic is free
        assert await one.claim_cursor(SCOPE, "slack", "replica-1", lease_s=60)  # renewing is fine
        await one.release_cursor(SCOPE, "slack", "replica-1")
        assert await two.claim_cursor(SCOPE, "slack", "replica-2", lease_s=0)
        # a lease of 0 s has run out by the database's clock: the other replica takes over
        assert await one.claim_cursor(SCOPE, "slack", "replica-1", lease_s=60)
        engine = pg.make_engine(pg_url)
        try:
            with engine.begin() as conn:
                owner = conn.execute(
                    sa.select(pg.outbox_cursors.c.owner).where(pg.outbox_cursors.c.topic == "slack")
                ).scalar()
        finally:
            engine.dispose()
        assert owner == "replica-1"
    finally:
        await one.close()
        await two.close()


async def test_quiet_scopes_share_one_transaction_and_a_failing_request_fails_alone(pg_url: str) -> None:
    """Group commit across scopes: appends to many scopes waiting at once commit in fewer transactions than
    scopes; each scope's chain and order hold; a conflict or an unknown scope fails only its own request."""
    store = PostgresLogStore(pg_url, topics=TOPICS, threads=2)
    try:
        scopes = [f"incident/quiet-{i}" for i in range(24)]
        for scope in scopes:
            await declare(store, scope)
        before = store.transactions
        calls = [store.append(s, [message(f"{s} {n}")]) for n in range(3) for s in scopes]
        calls.append(store.append(scopes[0], [message("stale")], expected_version=1))
        calls.append(store.append("incident/nobody", [message("lost")]))
        outcomes = await asyncio.gather(*calls, return_exceptions=True)
        assert isinstance(outcomes[-2], Conflict) and isinstance(outcomes[-1], NotFound)
        assert not [o for o in outcomes[:-2] if isinstance(o, BaseException)]
        assert store.transactions - before < len(scopes)  # far fewer commits than appends (3 per scope)
        for scope in scopes:
            entries = await read_all(store, scope)
            assert [e.payload.text for e in entries[1:]] == [f"{scope} {n}" for n in range(3)]  # type: ignore[attr-defined]
            assert (await store.verify(scope)).ok
            assert [i.entry.seq for i in await store.outbox_pending(scope, "slack")] == [1, 2, 3, 4]
    finally:
        await store.close()


async def test_a_parked_request_is_no_replicas_and_a_retried_one_any_replicas(pg_url: str) -> None:
    store = PostgresLogStore(pg_url, topics=("index",))
    await store.open()
    try:
        mine = PostgresInbox(store.engine, store.executor, owner="a")
        other = PostgresInbox(store.engine, store.executor, owner="b")
        assert await mine.put(key="poison", source="http", body=BODY, meta={})
        await mine.park(key="poison", error="boom", attempts=3)
        assert await mine.pending() == [] and await other.pending() == []
        assert await other.retry_parked() == 1
        assert [i.key for i in await other.pending()] == ["poison"]  # freed: the first replica to look takes it
        assert await mine.pending() == []
    finally:
        await store.close()
