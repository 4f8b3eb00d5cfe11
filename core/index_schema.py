"""The index's tables and rows (core/index.py): the same names and columns in index.db and in PostgreSQL
(core/store/postgres_schema.py), the ``IndexFile`` port the ``Index`` runs its transactions on, and the small pure
helpers (full-text query text, the searchable text of an entry, route keys).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from core.entries import Entry, Observation

T = TypeVar("T")


class IndexFile(Protocol):
    """Where the index's transactions run: an ``SqliteFile`` (index.db), or PostgreSQL (core/index_postgres.py)."""

    async def open(self) -> None: ...

    async def close(self) -> None: ...

    async def read(self, fn: Callable[[Connection], T], *, small: bool = False) -> T: ...

    async def write(
        self, fn: Callable[[Connection, None], T], *, savepoint: bool = True, durable: bool = True
    ) -> T: ...


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

FTS_DDL = (
    "CREATE VIRTUAL TABLE IF NOT EXISTS entries_fts USING fts5(scope UNINDEXED, seq UNINDEXED, kind UNINDEXED, text)"
)
INDEX_SUBSCRIBER = "index"


@dataclass(frozen=True)
class ScopeRow:
    id: str
    kind: str
    title: str
    status: str
    severity: int | None
    services: tuple[str, ...]
    created_at: str
    updated_at: str
    resolved_at: str
    version: int
    thread_channel: str
    thread_ts: str
    permalink: str
    pending_approvals: int
    forked_from: str = ""

    @property
    def is_open(self) -> bool:
        """An incident (or change) people work on: not resolved, not only reserved, and not a fork."""
        return self.status not in ("resolved", "reserved") and not self.forked_from

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "kind": self.kind,
            "title": self.title,
            "status": self.status,
            "severity": self.severity,
            "services": list(self.services),
            "created_at": self.created_at,
            "updated_at": self.updated_at,
            "resolved_at": self.resolved_at or None,
            "version": self.version,
            "thread": {"channel": self.thread_channel, "ts": self.thread_ts, "permalink": self.permalink}
            if self.thread_channel
            else None,
            "pending_approvals": self.pending_approvals,
        }


@dataclass(frozen=True)
class SearchHit:
    scope: str
    seq: int
    kind: str
    snippet: str
    rank: float


def scope_row(r: Any) -> ScopeRow:
    return ScopeRow(
        id=r.id,
        kind=r.kind,
        title=r.title,
        status=r.status,
        severity=r.severity,
        services=tuple(json.loads(r.services or "[]")),
        created_at=r.created_at,
        updated_at=r.updated_at,
        resolved_at=r.resolved_at,
        version=r.version,
        thread_channel=r.thread_channel,
        thread_ts=r.thread_ts,
        permalink=r.permalink,
        pending_approvals=r.pending_approvals,
        forked_from=r.forked_from,
    )


def fts_query(text: str) -> str:
    """Turn free text into a safe FTS5 query: each word quoted, OR-ed (ranked by bm25)."""
    words = [w for w in re.findall(r"[\w.-]+", text.lower()) if len(w) > 1][:32]
    return " OR ".join(f'"{w}"' for w in words)


def searchable_text(entry: Entry) -> str:
    parts = [entry.text]
    p = entry.payload
    if isinstance(p, Observation):
        parts.extend([p.service, *(f"{k}={v}" for k, v in sorted(p.labels.items()))])
    return " ".join(x for x in parts if x)


def route_key(channel: str, thread_ts: str = "") -> str:
    return f"slack:{channel}:{thread_ts}" if thread_ts else f"slack:{channel}"


def group_fingerprint(group: str) -> str:
    """The index key under which a source's group is claimed (next to the alerts' own fingerprints)."""
    if len(group) <= 400:
        return f"group:{group}"
    return "group:sha256:" + hashlib.sha256(group.encode("utf-8", "replace")).hexdigest()
