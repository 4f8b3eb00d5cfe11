"""The PostgreSQL tables of the log and the index, owned by SQLAlchemy Core, with a recorded schema version.

One database holds every scope: ``entries`` keyed by (scope_id, seq), one ``scope_heads`` row per scope (locked
``FOR UPDATE`` by an append: compare-and-set and the hash chain), ``outbox`` rows per (scope, topic, seq) with an
``outbox_cursors`` row per (scope, topic) for drainers (``SKIP LOCKED``), ``sender_memos``, and the index's tables
(the same names and columns as the SQLite index.db, plus ``entries_fts`` with a ``tsvector`` and a GIN index).
Keys are ``COLLATE "C"`` (byte order, the same as SQLite's), payload columns plain ``text`` holding the exact bytes
the chain hashed. ``schema_versions`` records what made the database; a server refuses a newer one.
"""

from __future__ import annotations

import hashlib

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql
from sqlalchemy.engine import Connection
from sqlalchemy.schema import CreateIndex, CreateTable

from decklog.core.errors import InvalidInput

#: Bump when a table changes in a way an older server must not write to.
SCHEMA_VERSION = 4  # 2: due_turns.wake_at / ask_at / asks (durable wake-ups and answers); 3: parked inbox requests;
# 4: the index's scopes.changed_at (a change's own time)
SCHEMA_NAME = "decklog"

metadata = sa.MetaData()


def key(name: str, *, primary_key: bool = False, nullable: bool = False) -> sa.Column[str]:
    return sa.Column(name, sa.Text(collation="C"), primary_key=primary_key, nullable=nullable)


schema_versions = sa.Table(
    "schema_versions",
    metadata,
    key("name", primary_key=True),
    sa.Column("version", sa.Integer, nullable=False),
    sa.Column("installed_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()),
)

scope_heads = sa.Table(
    "scope_heads",
    metadata,
    key("scope_id", primary_key=True),
    sa.Column("version", sa.BigInteger, nullable=False),
    sa.Column("head_hash", sa.Text, nullable=False),
    sa.Column("head_at", sa.Text, nullable=False),
    sa.Column("body", sa.Text, nullable=False),
)

entries = sa.Table(
    "entries",
    metadata,
    key("scope_id", primary_key=True),
    sa.Column("seq", sa.BigInteger, primary_key=True, autoincrement=False),
    key("id"),
    key("kind"),
    sa.Column("at", sa.Text, nullable=False),
    sa.Column("actor", sa.Text, nullable=False),
    sa.Column("payload", sa.Text, nullable=False),
    sa.Column("refs", sa.Text, nullable=False),
    key("idempotency_key", nullable=True),
    sa.Column("prev_hash", sa.Text, nullable=False),
    sa.Column("hash", sa.Text, nullable=False),
    sa.UniqueConstraint("id", name="entries_id_key"),
    sa.UniqueConstraint("scope_id", "idempotency_key", name="entries_scope_key"),
)
sa.Index("entries_kind_seq", entries.c.scope_id, entries.c.kind, entries.c.seq)

outbox = sa.Table(
    "outbox",
    metadata,
    key("scope_id", primary_key=True),
    key("topic", primary_key=True),
    sa.Column("seq", sa.BigInteger, primary_key=True, autoincrement=False),
    sa.Column("attempts", sa.Integer, nullable=False, server_default="0"),
    sa.Column("next_attempt_at", sa.Float(precision=53), nullable=False, server_default="0"),
    sa.Column("published_at", sa.Float(precision=53), nullable=True),
    sa.Column("parked_at", sa.Float(precision=53), nullable=True),
    sa.Column("last_error", sa.Text, nullable=False, server_default=""),
)
sa.Index(
    "outbox_pending",
    outbox.c.scope_id,
    outbox.c.topic,
    outbox.c.seq,
    postgresql_where=sa.and_(outbox.c.published_at.is_(None), outbox.c.parked_at.is_(None)),
)

# One row per (scope, topic): a drainer takes it FOR UPDATE SKIP LOCKED and holds a lease (database clock).
outbox_cursors = sa.Table(
    "outbox_cursors",
    metadata,
    key("scope_id", primary_key=True),
    key("topic", primary_key=True),
    key("owner", nullable=True),
    sa.Column("lease_until", sa.DateTime(timezone=True), nullable=True),
)

sender_memos = sa.Table(
    "sender_memos",
    metadata,
    key("scope_id", primary_key=True),
    key("topic", primary_key=True),
    key("key", primary_key=True),
    sa.Column("value", sa.Text, nullable=False),
    sa.Column("updated_at", sa.Float(precision=53), nullable=False),
)

# -- the index (same names and columns as core/index/tables.py's index.db; keys COLLATE "C") -----------------------------

index_scopes = sa.Table(
    "scopes",
    metadata,
    key("id", primary_key=True),
    key("kind"),
    sa.Column("title", sa.Text, nullable=False, server_default=""),
    sa.Column("status", sa.Text(collation="C"), nullable=False, server_default="reserved"),
    sa.Column("severity", sa.Integer, nullable=True),
    sa.Column("services", sa.Text, nullable=False, server_default="[]"),
    sa.Column("created_at", sa.Text(collation="C"), nullable=False, server_default=""),
    sa.Column("updated_at", sa.Text, nullable=False, server_default=""),
    sa.Column("resolved_at", sa.Text, nullable=False, server_default=""),
    sa.Column("version", sa.BigInteger, nullable=False, server_default="0"),
    sa.Column("thread_channel", sa.Text, nullable=False, server_default=""),
    sa.Column("thread_ts", sa.Text, nullable=False, server_default=""),
    sa.Column("permalink", sa.Text, nullable=False, server_default=""),
    sa.Column("pending_approvals", sa.Integer, nullable=False, server_default="0"),
    sa.Column("reserved_at", sa.Float(precision=53), nullable=False, server_default="0"),
    sa.Column("forked_from", sa.Text(collation="C"), nullable=False, server_default=""),  # core/index/statements.py
    sa.Column("changed_at", sa.Text(collation="C"), nullable=False, server_default=""),  # a change's own time
)

routes = sa.Table("routes", metadata, key("key", primary_key=True), key("scope"))

fingerprints = sa.Table(
    "fingerprints",
    metadata,
    key("fingerprint", primary_key=True),
    key("scope", primary_key=True),
    sa.Column("service", sa.Text, nullable=False, server_default=""),
    sa.Column("status", sa.Text, nullable=False, server_default="firing"),
    sa.Column("updated", sa.Float(precision=53), nullable=False, server_default="0"),
)

subscriptions = sa.Table(
    "subscriptions",
    metadata,
    key("scope", primary_key=True),
    key("subscriber", primary_key=True),
    sa.Column("position", sa.BigInteger, nullable=False, server_default="0"),
)

inbound = sa.Table(
    "inbound",
    metadata,
    key("key", primary_key=True),
    key("scope"),
    sa.Column("at", sa.Float(precision=53), nullable=False),
)

entries_fts = sa.Table(
    "entries_fts",
    metadata,
    key("scope", primary_key=True),
    sa.Column("seq", sa.BigInteger, primary_key=True, autoincrement=False),
    key("kind"),
    sa.Column("text", sa.Text, nullable=False),
    sa.Column("tsv", postgresql.TSVECTOR, sa.Computed("to_tsvector('simple', text)", persisted=True)),
)
sa.Index("entries_fts_tsv", entries_fts.c.tsv, postgresql_using="gin")

# The Slack inbox of every replica (core/store/postgres/inbox.py): a key is refused once, whichever replica got it
# first; a pending row belongs to the replica that stored it until its lease (database clock) runs out.
inbox = sa.Table(
    "inbox",
    metadata,
    sa.Column("id", sa.BigInteger, sa.Identity(), primary_key=True),
    key("key"),
    sa.Column("source", sa.Text, nullable=False),
    sa.Column("body", sa.Text, nullable=False),
    sa.Column("meta", sa.Text, nullable=False),
    sa.Column("received_at", sa.Float(precision=53), nullable=False),
    sa.Column("attempts", sa.Integer, nullable=False, server_default="0"),
    sa.Column("done_at", sa.Float(precision=53), nullable=True),
    key("owner", nullable=True),
    sa.Column("lease_until", sa.Float(precision=53), nullable=True),
    sa.Column("parked_at", sa.Float(precision=53), nullable=True),  # a poison request, given up after its attempts
    sa.Column("error", sa.Text, nullable=True),
    sa.UniqueConstraint("key", name="inbox_key"),
)
sa.Index("inbox_pending", inbox.c.id, postgresql_where=inbox.c.done_at.is_(None))
sa.Index("inbox_done", inbox.c.done_at, postgresql_where=inbox.c.done_at.is_not(None))

# Named leases on the database clock: one replica at a time runs a periodic job or paces a Slack channel.
leases = sa.Table(
    "leases",
    metadata,
    key("name", primary_key=True),
    key("owner"),
    sa.Column("lease_until", sa.Float(precision=53), nullable=False),
)

# Agent turns that are due (core/store/postgres/due_turns.py): one row per scope with a pending turn, its due time
# and the start of its max wait on the database clock (epoch seconds; ``due_at`` is +Infinity when only a wake-up
# or a question waits), ``wants`` counting the deliveries that asked for it (a turn's holder re-arms the row when it
# changed meanwhile), and the replica holding it until ``lease_until``. The same row holds the scope's reasoner
# wake-up (``wake_at``: a forced turn) and its questions to answer (``ask_at``, ``asks`` counting the questions
# delivered), so that whoever holds the row runs them: one turn at a time per scope, across replicas.
due_turns = sa.Table(
    "due_turns",
    metadata,
    key("scope_id", primary_key=True),
    sa.Column("due_at", sa.Float(precision=53), nullable=False),
    sa.Column("first_wanted_at", sa.Float(precision=53), nullable=False),
    sa.Column("trigger", sa.Text, nullable=False),
    sa.Column("wants", sa.BigInteger, nullable=False, server_default="1"),
    key("holder", nullable=True),
    sa.Column("lease_until", sa.Float(precision=53), nullable=True),
    sa.Column("wake_at", sa.Float(precision=53), nullable=True),
    sa.Column("ask_at", sa.Float(precision=53), nullable=True),
    sa.Column("asks", sa.BigInteger, nullable=False, server_default="0"),
)
#: Columns added after version 1 (``ensure_schema`` adds them to a database made by an older decklog).
ADDED_COLUMNS = (
    "ALTER TABLE due_turns ADD COLUMN IF NOT EXISTS wake_at double precision",
    "ALTER TABLE due_turns ADD COLUMN IF NOT EXISTS ask_at double precision",
    "ALTER TABLE due_turns ADD COLUMN IF NOT EXISTS asks bigint NOT NULL DEFAULT 0",
    # 3: an older server would replay a parked (poison) request at every start
    "ALTER TABLE inbox ADD COLUMN IF NOT EXISTS parked_at double precision",
    "ALTER TABLE inbox ADD COLUMN IF NOT EXISTS error text",
    "ALTER TABLE scopes ADD COLUMN IF NOT EXISTS forked_from text COLLATE \"C\" NOT NULL DEFAULT ''",
    "ALTER TABLE milestones ADD COLUMN IF NOT EXISTS paged double precision",  # on-call: MTTA from the first page
    # 4: a change's own time; rows written before it have none until `decklog reindex` (they read created_at)
    "ALTER TABLE scopes ADD COLUMN IF NOT EXISTS changed_at text COLLATE \"C\" NOT NULL DEFAULT ''",
)
sa.Index("due_turns_due", due_turns.c.due_at)

# Slack's per-channel pace, shared by every replica's sender (core/store/postgres/pace.py): the next
# free post slot of each channel, on the database clock (epoch seconds).
channel_pace = sa.Table(
    "channel_pace",
    metadata,
    key("channel", primary_key=True),
    sa.Column("next_at", sa.Float(precision=53), nullable=False),
)

# The alert router's per-source rate limit, shared by every replica (core/store/postgres/rates.py): arrivals per
# source per ``STEP_S`` bucket of the database clock. Added without a schema version: ``create_all`` adds the table
# to an older database, and an older decklog never reads it.
alert_rates = sa.Table(
    "alert_rates",
    metadata,
    key("source", primary_key=True),
    sa.Column("bucket", sa.BigInteger, primary_key=True),
    sa.Column("count", sa.BigInteger, nullable=False),
)

# The REST API's tokens (only the sha256 of each secret; one live token per name) and the first answer of each
# write made under an Idempotency-Key (core/store/postgres/api_keys.py). Added without a schema version:
# ``create_all`` adds them to an older database, and an older decklog never reads them.
api_tokens = sa.Table(
    "api_tokens",
    metadata,
    key("digest", primary_key=True),
    key("name"),
    sa.Column("scope", sa.Text, nullable=False),
    sa.Column("user_id", sa.Text, nullable=False, server_default=""),
    sa.Column("created_at", sa.Float(precision=53), nullable=False),
    sa.Column("revoked_at", sa.Float(precision=53), nullable=True),
)
sa.Index("api_tokens_live_name", api_tokens.c.name, unique=True, postgresql_where=api_tokens.c.revoked_at.is_(None))
api_replies = sa.Table(
    "api_replies",
    metadata,
    key("key", primary_key=True),
    sa.Column("request_hash", sa.Text, nullable=False),
    sa.Column("status", sa.Integer, nullable=False),
    sa.Column("body", sa.Text, nullable=False),
)

# Alert notifications stored raw before their 202 (core/store/postgres/alert_inbox.py), routed after; a routed row
# keeps its outcomes (the receipt) and drops its body. A pending row is the storing replica's until its lease runs
# out (then another replica routes it). Added without a schema version, as ``alert_rates``.
alert_inbox = sa.Table(
    "alert_inbox",
    metadata,
    sa.Column("id", sa.BigInteger, sa.Identity(), primary_key=True),
    key("receipt"),
    sa.Column("source", sa.Text, nullable=False),
    sa.Column("body", sa.LargeBinary, nullable=True),
    sa.Column("accepted", sa.Integer, nullable=False),
    sa.Column("received_at", sa.Float(precision=53), nullable=False),
    sa.Column("attempts", sa.Integer, nullable=False, server_default="0"),
    key("owner", nullable=True),
    sa.Column("lease_until", sa.Float(precision=53), nullable=True),
    sa.Column("routed_at", sa.Float(precision=53), nullable=True),
    sa.Column("outcomes", sa.Text, nullable=True),
    sa.Column("error", sa.Text, nullable=True),
    sa.UniqueConstraint("receipt", name="alert_inbox_receipt"),
)
sa.Index("alert_inbox_pending", alert_inbox.c.id, postgresql_where=alert_inbox.c.routed_at.is_(None))
sa.Index("alert_inbox_routed", alert_inbox.c.routed_at, postgresql_where=alert_inbox.c.routed_at.is_not(None))

LOG_TABLES = (scope_heads, entries, outbox, outbox_cursors, sender_memos)
REPLICA_TABLES = (inbox, leases, due_turns, channel_pace, alert_rates, api_tokens, api_replies, alert_inbox)

# insights: one row per declared incident, as core/insights.py's ``milestones`` (epoch seconds)
milestones = sa.Table(
    "milestones",
    metadata,
    key("scope", primary_key=True),
    sa.Column("declared", sa.Float(precision=53), nullable=False),
    sa.Column("acknowledged", sa.Float(precision=53), nullable=True),
    sa.Column("mitigated", sa.Float(precision=53), nullable=True),
    sa.Column("resolved", sa.Float(precision=53), nullable=True),
    sa.Column("status", sa.Text, nullable=False),
    sa.Column("severity", sa.Integer, nullable=True),
    sa.Column("services", sa.Text, nullable=False, server_default="[]"),
    sa.Column("source", sa.Text, nullable=False, server_default="manual"),
    sa.Column("paged", sa.Float(precision=53), nullable=True),  # the first on-call page (MTTA's start when set)
)
sa.Index("milestones_declared", milestones.c.declared)

INDEX_TABLES = (index_scopes, routes, fingerprints, subscriptions, inbound, entries_fts, milestones)


def ddl() -> list[str]:
    dialect = postgresql.dialect()  # type: ignore[no-untyped-call]
    out = [str(CreateTable(table).compile(dialect=dialect)).strip() for table in metadata.sorted_tables]
    for table in metadata.sorted_tables:
        out.extend(str(CreateIndex(i).compile(dialect=dialect)).strip() for i in sorted(table.indexes, key=str))
    return out


def layout_digest() -> str:
    """A short digest of the DDL (names a test template database after the schema it holds)."""
    return hashlib.sha256("\n".join(ddl()).encode()).hexdigest()[:10]


class SchemaTooNew(InvalidInput):
    """The database was made by a newer decklog: refuse to start rather than write rows it does not expect."""


def ensure_schema(conn: Connection) -> int:
    """Create the tables if missing and record ``SCHEMA_VERSION``; refuse a database recorded as newer.

    Serialised across replicas starting at once by a transaction-scoped advisory lock (where the engine has
    none, ``create_all``'s ``IF NOT EXISTS`` checks and the primary key on ``schema_versions`` still hold).
    """
    conn.execute(sa.text("SELECT pg_advisory_xact_lock(hashtext('decklog schema'))"))
    metadata.create_all(conn, checkfirst=True)
    found = conn.execute(
        sa.select(schema_versions.c.version).where(schema_versions.c.name == SCHEMA_NAME)
    ).scalar_one_or_none()
    if found is None:
        conn.execute(schema_versions.insert().values(name=SCHEMA_NAME, version=SCHEMA_VERSION))
        return SCHEMA_VERSION
    if found > SCHEMA_VERSION:
        raise SchemaTooNew(
            f"the database schema is version {found}, newer than this decklog's {SCHEMA_VERSION}: upgrade decklog"
        )
    if found < SCHEMA_VERSION:
        for statement in ADDED_COLUMNS:
            conn.execute(sa.text(statement))
        conn.execute(
            schema_versions.update().where(schema_versions.c.name == SCHEMA_NAME).values(version=SCHEMA_VERSION)
        )
    return SCHEMA_VERSION


def engine_url(url: str) -> str:
    """``postgresql://…`` or ``postgresql+psycopg://…`` → the SQLAlchemy URL for psycopg 3."""
    for prefix in ("postgresql+psycopg://", "postgresql://", "postgres://"):
        if url.startswith(prefix):
            return "postgresql+psycopg://" + url[len(prefix) :]
    raise InvalidInput(f"not a PostgreSQL URL (postgresql://… or postgresql+psycopg://…): {url.split('@')[-1]}")


def is_postgres_url(url: str | None) -> bool:
    return bool(url) and str(url).startswith(("postgresql://", "postgresql+psycopg://", "postgres://"))


def make_engine(url: str, *, pool_size: int = 8) -> sa.Engine:
    """A sync engine (psycopg 3) at READ COMMITTED; the store runs it on worker threads."""
    return sa.create_engine(
        engine_url(url),
        isolation_level="READ COMMITTED",
        pool_size=pool_size,
        max_overflow=4,
        pool_pre_ping=False,
    )
