"""Applying log entries to the index (``Index.apply`` and ``rebuild``, core/index.py): full-text rows, routes,
alert fingerprints and inbound ids from the fresh entries, the subscriber position, and the scope's row.

A fork (``ScopeState.forked_from``, core/fork.py; a replay writes one too) gives no routes, fingerprints or inbound
ids: its copied ``thread_linked``, messages and alert observations name the live incident's thread and alerts, and a
fork never changes where a live thread, channel or alert routes — when it is written, or when ``reindex`` rebuilds
the index in whatever order. Its row is listed with ``forked_from`` set (never an open incident).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from core.entries import Entry, Evidence, Message, Observation, ThreadLinked
from core.index_schema import (
    INDEX_SUBSCRIBER,
    fingerprints,
    group_fingerprint,
    inbound,
    route_key,
    routes,
    scopes,
    searchable_text,
    subscriptions,
)
from core.insights import apply_milestones
from core.state import ScopeState


def set_position(conn: Connection, scope: str, subscriber: str, position: int, *, only_forward: bool) -> None:
    current = conn.execute(
        sa.select(subscriptions.c.position).where(
            subscriptions.c.scope == scope, subscriptions.c.subscriber == subscriber
        )
    ).scalar()
    if current is None:
        conn.execute(subscriptions.insert().values(scope=scope, subscriber=subscriber, position=position))
    elif not only_forward or position > current:
        conn.execute(
            subscriptions.update()
            .where(subscriptions.c.scope == scope, subscriptions.c.subscriber == subscriber)
            .values(position=position)
        )


def apply_entries(
    conn: Connection, state: ScopeState, entries: Sequence[Entry], *, milestones_known: bool = False
) -> None:
    """Index the entries the index has not seen yet, then the scope's row (unless an newer state is there).

    ``milestones_known``: the caller has applied this very milestones row already (``Index.apply`` remembers what
    it wrote), so it is not written again: an alert storm changes the scope's row every time, its milestones never.
    """
    scope = state.scope
    position = conn.execute(
        sa.select(subscriptions.c.position).where(
            subscriptions.c.scope == scope, subscriptions.c.subscriber == INDEX_SUBSCRIBER
        )
    ).scalar()
    fresh = [e for e in entries if e.seq > int(position or 0)]
    fts_rows = [{"scope": scope, "seq": e.seq, "kind": e.kind, "text": searchable_text(e)} for e in fresh]
    if fts_rows:
        conn.execute(
            sa.text("INSERT INTO entries_fts(scope, seq, kind, text) VALUES (:scope, :seq, :kind, :text)"),
            fts_rows,
        )
    if not state.forked_from:  # a fork copies its source's thread and alerts: they still route to the source
        for e in fresh:
            _index_entry(conn, scope, e)
        _index_fingerprints(conn, scope, fresh)
    if fresh and position is None:
        conn.execute(subscriptions.insert().values(scope=scope, subscriber=INDEX_SUBSCRIBER, position=fresh[-1].seq))
    elif fresh:  # forward: every fresh entry is past the position read above, in this transaction
        conn.execute(
            subscriptions.update()
            .where(subscriptions.c.scope == scope, subscriptions.c.subscriber == INDEX_SUBSCRIBER)
            .values(position=fresh[-1].seq)
        )
    existing = conn.execute(sa.select(scopes.c.version).where(scopes.c.id == scope)).first()
    if existing is None:
        conn.execute(scopes.insert().values(id=scope, **_scope_values(state)))
    elif existing[0] <= state.version:
        conn.execute(scopes.update().where(scopes.c.id == scope).values(**_scope_values(state)))
    else:
        return  # an older state than the one applied already
    if not milestones_known:
        apply_milestones(conn, state)


def _route(conn: Connection, key: str, scope: str) -> None:
    conn.execute(routes.delete().where(routes.c.key == key))
    conn.execute(routes.insert().values(key=key, scope=scope))


def _index_entry(conn: Connection, scope: str, e: Entry) -> None:
    """The routes and inbound id one entry gives (its fingerprint: ``_index_fingerprints``)."""
    p = e.payload
    if isinstance(p, ThreadLinked):
        keys = [route_key(p.channel, p.ts)] if p.ts else []
        if p.dedicated_channel or not p.ts:
            keys.append(route_key(p.channel))
        for key in keys:
            _route(conn, key, scope)
    elif isinstance(p, Message | Evidence) and p.channel and p.ts:
        _route(conn, route_key(p.channel, p.ts), scope)
    if e.kind == "declared" and e.idempotency_key:
        conn.execute(inbound.delete().where(inbound.c.key == e.idempotency_key))
        conn.execute(inbound.insert().values(key=e.idempotency_key, scope=scope, at=e.at.timestamp()))


_DELETE_FINGERPRINT = fingerprints.delete().where(
    fingerprints.c.fingerprint == sa.bindparam("b_fingerprint"), fingerprints.c.scope == sa.bindparam("b_scope")
)


def _index_fingerprints(conn: Connection, scope: str, entries: Sequence[Entry]) -> None:
    """The fingerprint rows of the alert observations among ``entries`` (and of the source groups they name,
    which the alert router claimed before appending them): the last observation of each wins (as applying them one
    by one would), written with one statement per table however many there are (an
    alert storm delivers hundreds of repeats of a few fingerprints)."""
    last: dict[str, dict[str, Any]] = {}
    for e in entries:
        p = e.payload
        if not isinstance(p, Observation):
            continue
        at = e.at.timestamp()
        if p.fingerprint:
            status = p.alert_status or "firing"
            last[p.fingerprint] = {
                "fingerprint": p.fingerprint,
                "scope": scope,
                "service": p.service,
                "status": status,
                "updated": at,
            }
        group = p.data.get("group")
        if isinstance(group, str) and group:  # the source's group, claimed by the alert router before the append
            key = group_fingerprint(group)
            last[key] = {"fingerprint": key, "scope": scope, "service": p.service, "status": "firing", "updated": at}
    if not last:
        return
    rows = list(last.values())
    conn.execute(_DELETE_FINGERPRINT, [{"b_fingerprint": r["fingerprint"], "b_scope": scope} for r in rows])
    conn.execute(fingerprints.insert(), rows)


def _scope_values(state: ScopeState) -> dict[str, Any]:
    return {
        "kind": state.kind,
        "title": state.title,
        "status": state.status,
        "severity": state.severity,
        "services": json.dumps(list(state.services)),
        "created_at": state.created_at,
        "updated_at": state.updated_at,
        "resolved_at": state.resolved_at,
        "version": state.version,
        "thread_channel": state.thread.channel if state.thread else "",
        "thread_ts": state.thread.ts if state.thread else "",
        "permalink": state.thread.permalink if state.thread else "",
        "pending_approvals": sum(1 for p in state.proposals.values() if p.status == "waiting_for_approval"),
        "forked_from": state.forked_from,
    }
