"""The index's tables, as SQLAlchemy Core: the statements of core/index/statements.py are written over them.

The same names and columns in index.db (SQLite creates them from here, core/store/sqlite/index.py) and in
PostgreSQL (core/store/postgres/schema.py declares them again with ``COLLATE "C"`` keys and its own types). The
full-text table ``entries_fts`` is each backend's own (an FTS5 virtual table, or a table with a ``tsvector``); its
rows are written by plain SQL that both accept.
"""

from __future__ import annotations

import sqlalchemy as sa

md = sa.MetaData()

scopes = sa.Table(
    "scopes",
    md,
    sa.Column("id", sa.String, primary_key=True),
    sa.Column("kind", sa.String, nullable=False),
    sa.Column("title", sa.String, nullable=False, server_default=""),
    sa.Column("status", sa.String, nullable=False, server_default="reserved"),
    sa.Column("severity", sa.Integer, nullable=True),
    sa.Column("services", sa.Text, nullable=False, server_default="[]"),
    sa.Column("created_at", sa.String, nullable=False, server_default=""),
    sa.Column("updated_at", sa.String, nullable=False, server_default=""),
    sa.Column("resolved_at", sa.String, nullable=False, server_default=""),
    sa.Column("version", sa.Integer, nullable=False, server_default="0"),
    sa.Column("thread_channel", sa.String, nullable=False, server_default=""),
    sa.Column("thread_ts", sa.String, nullable=False, server_default=""),
    sa.Column("permalink", sa.String, nullable=False, server_default=""),
    sa.Column("pending_approvals", sa.Integer, nullable=False, server_default="0"),
    sa.Column("reserved_at", sa.Float, nullable=False, server_default="0"),
    # a fork (core/fork.py): its source scope. A fork is listed, but it is never an open incident and never routes.
    sa.Column("forked_from", sa.String, nullable=False, server_default=""),
    # a change scope: the change's own time as its sender reported it (the recording time when it reported none),
    # ISO like ``created_at``; "" for other scopes, and for change rows an older index wrote (``decklog reindex``)
    sa.Column("changed_at", sa.String, nullable=False, server_default=""),
)

routes = sa.Table(
    "routes",
    md,
    sa.Column("key", sa.String, primary_key=True),  # slack:<channel>:<thread_ts> or slack:<channel>
    sa.Column("scope", sa.String, nullable=False),
)

fingerprints = sa.Table(
    "fingerprints",
    md,
    sa.Column("fingerprint", sa.String, primary_key=True),
    sa.Column("scope", sa.String, primary_key=True),
    sa.Column("service", sa.String, nullable=False, server_default=""),
    sa.Column("status", sa.String, nullable=False, server_default="firing"),
    sa.Column("updated", sa.Float, nullable=False, server_default="0"),
)

subscriptions = sa.Table(
    "subscriptions",
    md,
    sa.Column("scope", sa.String, primary_key=True),
    sa.Column("subscriber", sa.String, primary_key=True),
    sa.Column("position", sa.Integer, nullable=False, server_default="0"),
)

inbound = sa.Table(
    "inbound",
    md,
    sa.Column("key", sa.String, primary_key=True),
    sa.Column("scope", sa.String, nullable=False),
    sa.Column("at", sa.Float, nullable=False),
)

#: One row per declared incident, kept in step with its folded state by ``apply`` (the numbers of core/insights.py
#: are read from here, never by replaying logs). Times are epoch seconds.
milestones = sa.Table(
    "milestones",
    md,
    sa.Column("scope", sa.String, primary_key=True),
    sa.Column("declared", sa.Float, nullable=False),
    sa.Column("acknowledged", sa.Float, nullable=True),
    sa.Column("mitigated", sa.Float, nullable=True),
    sa.Column("resolved", sa.Float, nullable=True),
    sa.Column("status", sa.String, nullable=False),
    sa.Column("severity", sa.Integer, nullable=True),
    sa.Column("services", sa.Text, nullable=False, server_default="[]"),
    sa.Column("source", sa.String, nullable=False, server_default="manual"),
    sa.Column("paged", sa.Float, nullable=True),  # the first on-call page: MTTA is measured from it when set
)
sa.Index("milestones_declared", milestones.c.declared)

#: The tables a rebuild empties (with ``entries_fts``).
DERIVED = (scopes, routes, fingerprints, subscriptions, inbound, milestones)
