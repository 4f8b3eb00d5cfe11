"""The index's SQL, written once over core/index/tables.py and run by each backend's index on its own connection
(core/store/sqlite/index.py on index.db, core/store/postgres/index.py on the shared database): reservations,
lookups, listings, the subscriber positions, and applying log entries (``apply_entries``, ``rebuild``).

Applying entries writes the full-text rows, routes, alert fingerprints and inbound ids of the fresh entries, the
subscriber position, the scope's row and its milestones row. A fork (``ScopeState.forked_from``, core/fork.py; a
replay writes one too) gives no routes, fingerprints or inbound ids: its copied ``thread_linked``, messages and alert
observations name the live incident's thread and alerts, and a fork never changes where a live thread, channel or
alert routes — when it is written, or when ``reindex`` rebuilds the index in whatever order. Its row is listed with
``forked_from`` set (never an open incident).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from decklog.core.changes.facts import change_time
from decklog.core.clock import iso, parse_iso
from decklog.core.entries import Entry, Evidence, Message, Observation, ThreadLinked
from decklog.core.errors import Conflict
from decklog.core.ids import ScopeId
from decklog.core.index.keys import group_fingerprint, route_key
from decklog.core.index.tables import DERIVED, fingerprints, inbound, milestones, routes, scopes, subscriptions
from decklog.core.index.text import searchable_text
from decklog.core.state import ScopeState, mtta
from decklog.core.store.ports import Milestones, ScopeRow

#: The index's own position in each scope (how far ``apply`` has read).
INDEX_SUBSCRIBER = "index"
MANUAL = "manual"  # the source of an incident that holds no alert


# -- reservations ---------------------------------------------------------------------------------------------------


def reserve_scope(
    conn: Connection,
    kind: str,
    base: str,
    *,
    exact: bool,
    on_disk: Callable[[str], bool],
    inbound_key: str | None,
) -> ScopeId:
    """Reserve a never-used scope id: ``base``, else ``base-2``, ``base-3``… (``exact``: ``base`` or Conflict).

    ``on_disk(id)`` says whether the log store already holds an id (the index may be behind or rebuilt); it is
    asked only about the candidates, inside the transaction. With ``inbound_key``, the inbound event is recorded
    against the id in the same transaction — and if that event was already recorded (a concurrent retry won), its
    scope is returned and nothing is reserved.
    """
    if inbound_key is not None:
        known = conn.execute(sa.select(inbound.c.scope).where(inbound.c.key == inbound_key)).scalar()
        if known is not None:
            return ScopeId.parse(str(known))
    existing = {
        r[0]
        for r in conn.execute(
            sa.select(scopes.c.id).where(sa.or_(scopes.c.id == f"{kind}/{base}", scopes.c.id.like(f"{kind}/{base}-%")))
        )
    }

    def taken(scope_id: str) -> bool:
        return scope_id in existing or on_disk(scope_id)

    candidate = ScopeId.parse(f"{kind}/{base}")
    if taken(str(candidate)):
        if exact:
            raise Conflict(f"scope {candidate} already exists (scope ids are never reused)")
        n = 2
        while taken(f"{kind}/{base}-{n}"):
            n += 1
        candidate = ScopeId.parse(f"{kind}/{base}-{n}")
    conn.execute(scopes.insert().values(id=str(candidate), kind=kind, status="reserved", reserved_at=time.time()))
    if inbound_key is not None:
        conn.execute(inbound.insert().values(key=inbound_key, scope=str(candidate), at=time.time()))
    return candidate


def inbound_scope(conn: Connection, key: str) -> str | None:
    found = conn.execute(sa.select(inbound.c.scope).where(inbound.c.key == key)).scalar()
    return None if found is None else str(found)


def claim_fingerprint(conn: Connection, fingerprint: str, scope: str, service: str) -> None:
    conn.execute(fingerprints.delete().where(fingerprints.c.fingerprint == fingerprint, fingerprints.c.scope == scope))
    conn.execute(
        fingerprints.insert().values(
            fingerprint=fingerprint, scope=scope, service=service, status="firing", updated=time.time()
        )
    )


def add_route(conn: Connection, key: str, scope: str) -> None:
    add_routes(conn, {key: scope})


_DELETE_ROUTE = routes.delete().where(routes.c.key == sa.bindparam("b_key"))
_DELETE_INBOUND = inbound.delete().where(inbound.c.key == sa.bindparam("b_key"))


def add_routes(conn: Connection, found: Mapping[str, str]) -> None:
    """Route each key to its scope (the last word wins), with one statement per step however many there are."""
    if not found:
        return
    conn.execute(_DELETE_ROUTE, [{"b_key": key} for key in found])
    conn.execute(routes.insert(), [{"key": key, "scope": scope} for key, scope in found.items()])


# -- lookups --------------------------------------------------------------------------------------------------------


def route(conn: Connection, channel: str, thread_ts: str) -> str | None:
    """The scope a Slack thread (or a dedicated channel) belongs to: the thread's route, else the channel's."""
    keys = [route_key(channel, thread_ts)] if thread_ts else []
    keys.append(route_key(channel))
    for key in keys:
        found = conn.execute(sa.select(routes.c.scope).where(routes.c.key == key)).scalar()
        if found is not None:
            return str(found)
    return None


def open_scope_for_fingerprint(conn: Connection, fingerprint: str) -> str | None:
    found = conn.execute(
        sa.select(fingerprints.c.scope)
        .join(scopes, scopes.c.id == fingerprints.c.scope)
        .where(fingerprints.c.fingerprint == fingerprint, scopes.c.status.not_in(["resolved"]))
        .order_by(fingerprints.c.updated.desc())
    ).first()
    return str(found[0]) if found else None


def last_scope_for_fingerprint(conn: Connection, fingerprint: str) -> str | None:
    found = conn.execute(
        sa.select(fingerprints.c.scope)
        .where(fingerprints.c.fingerprint == fingerprint)
        .order_by(fingerprints.c.updated.desc())
    ).first()
    return str(found[0]) if found else None


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
        changed_at=r.changed_at,
    )


def get(conn: Connection, scope: str) -> ScopeRow | None:
    r = conn.execute(sa.select(scopes).where(scopes.c.id == scope)).first()
    return scope_row(r) if r else None


def list_scopes(
    conn: Connection,
    *,
    kind: str | None = None,
    status: str | None = None,
    severity: int | None = None,
    text: str | None = None,
    open_only: bool = False,
    service: str | None = None,
    updated_since: str | None = None,
    upkeep: bool = False,
    limit: int | None = 500,
    before: tuple[str, str] | None = None,
) -> list[ScopeRow]:
    """``upkeep``: only scopes the periodic actions sweep looks after (not resolved, or with approvals pending),
    however old."""
    stmt = sa.select(scopes).where(scopes.c.status != "reserved")
    if upkeep:
        stmt = stmt.where(sa.or_(scopes.c.status != "resolved", scopes.c.pending_approvals > 0))
    if kind:
        stmt = stmt.where(scopes.c.kind == kind)
    if status:
        stmt = stmt.where(scopes.c.status == status)
    if severity is not None:
        stmt = stmt.where(scopes.c.severity == severity)
    if open_only:  # a fork is never an open incident (nobody works on it; nothing routes to it)
        stmt = stmt.where(scopes.c.status != "resolved", scopes.c.forked_from == "")
    if service:
        stmt = stmt.where(scopes.c.services.like(f'%"{service}"%'))
    if updated_since:  # ISO times in one format (core/clock.py iso): text order is time order
        stmt = stmt.where(scopes.c.updated_at >= updated_since)
    if text:
        pattern = f"%{text.lower()}%"
        stmt = stmt.where(sa.or_(sa.func.lower(scopes.c.title).like(pattern), scopes.c.id.like(pattern)))
    if before is not None:  # the rows after (created_at, id) in the listing's order: a cursor
        stmt = stmt.where(
            sa.or_(scopes.c.created_at < before[0], sa.and_(scopes.c.created_at == before[0], scopes.c.id > before[1]))
        )
    stmt = stmt.order_by(scopes.c.created_at.desc(), scopes.c.id)
    return [scope_row(r) for r in conn.execute(stmt if limit is None else stmt.limit(limit))]


def unresolved_incidents(conn: Connection, limit: int) -> list[str]:
    """Ids of incidents that are open or only reserved (declared, but the index has not seen the declaration yet
    — e.g. a crash before its delivery), newest first: what must be looked at to rebuild routing state."""
    stmt = (
        sa.select(scopes.c.id)
        .where(scopes.c.kind == "incident", scopes.c.status != "resolved", scopes.c.forked_from == "")
        .order_by((scopes.c.created_at == "").desc(), scopes.c.created_at.desc(), scopes.c.id)
        .limit(limit)
    )
    return [str(r[0]) for r in conn.execute(stmt)]


def changes_on(
    conn: Connection, services: Sequence[str], since: datetime, until: datetime | None
) -> list[tuple[ScopeRow, datetime]]:
    """Change scopes on any of ``services`` whose change happened in [``since``, ``until``] (its own time, not
    when decklog recorded it: ``ScopeRow.change_time``), each once, newest first, with that time. Looked for among
    each service's 50 most recently recorded changes."""
    return changes_in(
        (row for service in services for row in list_scopes(conn, kind="change", service=service, limit=50)),
        since,
        until,
    )


def changes_in(rows: Iterable[ScopeRow], since: datetime, until: datetime | None) -> list[tuple[ScopeRow, datetime]]:
    """``changes_on``'s selection over rows already read (every index backend shares it)."""
    found: dict[str, tuple[ScopeRow, datetime]] = {}
    for row in rows:
        try:
            at = parse_iso(row.change_time) if row.change_time else None
        except ValueError:
            at = None
        if at is not None and since <= at and (until is None or at <= until):
            found[row.id] = (row, at)
    return sorted(found.values(), key=lambda pair: (pair[1], pair[0].id), reverse=True)


def changed_at(state: ScopeState, previous: str, entries: Sequence[Entry]) -> str:
    """A scope row's ``changed_at`` once ``entries`` are applied: for a change scope, the earlier of what the row
    holds (``previous``) and the change time ``entries`` report; "" for any other scope."""
    if state.kind != "change":
        return ""
    found = change_time(entries)
    if found is None:
        return previous
    text = iso(found)
    return min(previous, text) if previous else text  # one ISO format: text order is time order


def titles(conn: Connection, ids: Sequence[str]) -> dict[str, str]:
    rows = conn.execute(sa.select(scopes.c.id, scopes.c.title).where(scopes.c.id.in_(sorted(set(ids)))))
    return {str(r[0]): str(r[1]) for r in rows}


def counts(conn: Connection) -> dict[str, int]:
    rows = conn.execute(sa.select(scopes.c.status, sa.func.count()).group_by(scopes.c.status))
    return {r[0]: int(r[1]) for r in rows}


# -- subscriptions --------------------------------------------------------------------------------------------------


def position(conn: Connection, scope: str, subscriber: str) -> int:
    found = conn.execute(
        sa.select(subscriptions.c.position).where(
            subscriptions.c.scope == scope, subscriptions.c.subscriber == subscriber
        )
    ).scalar()
    return int(found or 0)


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


def subscribers(conn: Connection, scope: str) -> dict[str, int]:
    rows = conn.execute(
        sa.select(subscriptions.c.subscriber, subscriptions.c.position).where(subscriptions.c.scope == scope)
    )
    return {r[0]: int(r[1]) for r in rows}


# -- milestones (core/insights.py computes its numbers from these rows) -----------------------------------------------


def _epoch(text: str) -> float | None:
    return parse_iso(text).timestamp() if text else None


def milestone_values(state: ScopeState) -> dict[str, Any] | None:
    """The ``milestones`` row of an incident's state, or ``None`` (not an incident, or not declared yet)."""
    declared = _epoch(state.created_at) if state.kind == "incident" else None
    if declared is None:
        return None
    first_alert = min(state.alerts.values(), key=lambda a: (a.first_seq, a.fingerprint), default=None)
    span = mtta(state)  # the rule the report reads too: from the first page when paged, else the declaration
    return {
        "declared": declared,
        "paged": _epoch(span.start) if span.start_from == "page" else None,
        "acknowledged": _epoch(span.end),
        "mitigated": _epoch(state.mitigated_at),
        "resolved": _epoch(state.resolved_at) if state.status == "resolved" else None,
        "status": state.status,
        "severity": state.severity,
        "services": json.dumps(list(state.services)),
        "source": (first_alert.source or "alert") if first_alert is not None else MANUAL,
    }


def apply_milestones(conn: Connection, state: ScopeState, *, new: bool = False) -> None:
    values = milestone_values(state)
    if values is None:
        return
    if not new:
        conn.execute(milestones.delete().where(milestones.c.scope == state.scope))
    conn.execute(milestones.insert(), [{"scope": state.scope, **values}])


def _after(at: float | None, declared: float) -> float | None:
    return None if at is None else max(0.0, at - declared)


def read_milestones(conn: Connection, since: float | None) -> list[Milestones]:
    """Every incident declared at or after ``since`` (epoch seconds; all with ``None``), oldest first."""
    m = milestones
    stmt = sa.select(
        m.c.scope, m.c.declared, m.c.acknowledged, m.c.mitigated, m.c.resolved, m.c.status, m.c.severity,
        m.c.services, m.c.source, m.c.paged,
    )  # fmt: skip
    if since is not None:
        stmt = stmt.where(m.c.declared >= since)
    out = []
    for scope, declared, ack, mit, res, status, severity, services, source, paged in conn.execute(
        stmt.order_by(m.c.declared, m.c.scope)
    ):
        names = tuple(json.loads(services)) if services and services != "[]" else ()
        out.append(
            Milestones(
                scope,
                status,
                severity,
                names,
                source,
                _after(ack, paged if paged is not None else declared),
                _after(mit, declared),
                _after(res, declared),
            )
        )
    return out


# -- applying the log -----------------------------------------------------------------------------------------------


def apply_entries(
    conn: Connection,
    state: ScopeState,
    entries: Sequence[Entry],
    *,
    milestones_known: bool = False,
    new: bool = False,
) -> None:
    """Index the entries the index has not seen yet, then the scope's row (unless an newer state is there).

    ``milestones_known``: the caller has applied this very milestones row already (an index remembers what it
    wrote), so it is not written again: an alert storm changes the scope's row every time, its milestones never.
    ``new``: the index holds nothing of this scope (a rebuild emptied it), so nothing is read back first.
    """
    scope = state.scope
    position = (
        None
        if new
        else conn.execute(
            sa.select(subscriptions.c.position).where(
                subscriptions.c.scope == scope, subscriptions.c.subscriber == INDEX_SUBSCRIBER
            )
        ).scalar()
    )
    fresh = [e for e in entries if e.seq > int(position or 0)]
    fts_rows = [{"scope": scope, "seq": e.seq, "kind": e.kind, "text": searchable_text(e)} for e in fresh]
    if fts_rows:
        conn.execute(
            sa.text("INSERT INTO entries_fts(scope, seq, kind, text) VALUES (:scope, :seq, :kind, :text)"),
            fts_rows,
        )
    if not state.forked_from:  # a fork copies its source's thread and alerts: they still route to the source
        _index_routes(conn, scope, fresh)
        _index_fingerprints(conn, scope, fresh)
    if fresh and position is None:
        conn.execute(
            subscriptions.insert(), [{"scope": scope, "subscriber": INDEX_SUBSCRIBER, "position": fresh[-1].seq}]
        )
    elif fresh:  # forward: every fresh entry is past the position read above, in this transaction
        conn.execute(
            subscriptions.update()
            .where(subscriptions.c.scope == scope, subscriptions.c.subscriber == INDEX_SUBSCRIBER)
            .values(position=fresh[-1].seq)
        )
    existing = (
        None
        if new
        else conn.execute(sa.select(scopes.c.version, scopes.c.changed_at).where(scopes.c.id == scope)).first()
    )
    if existing is None:
        values = scope_values(state) | {"changed_at": changed_at(state, "", fresh)}
        conn.execute(scopes.insert(), [{"id": scope, **values}])
    elif existing[0] <= state.version:
        values = scope_values(state) | {"changed_at": changed_at(state, existing[1], fresh)}
        conn.execute(scopes.update().where(scopes.c.id == scope).values(**values))
    else:
        return  # an older state than the one applied already
    if not milestones_known:
        apply_milestones(conn, state, new=new)


def rebuild(
    conn: Connection,
    items: Sequence[tuple[ScopeState, Sequence[Entry]]],
    *,
    fresh: bool = True,
    more_routes: Mapping[str, str] | None = None,
) -> None:
    """Replace every derived row with what the given scopes' logs say (``decklog reindex``); ``fresh=False``: add
    them to a rebuild begun before (one chunk of history at a time); a scope comes once per rebuild (nothing of
    it is read back). ``more_routes``: routes (key → scope) that
    no entry implies (the Slack sender's memos), written in the same transaction."""
    if fresh:
        for table in DERIVED:
            conn.execute(table.delete())
        conn.execute(sa.text("DELETE FROM entries_fts"))
    for state, entries in items:  # each scope once per rebuild: nothing of it is in the emptied index
        apply_entries(conn, state, entries, new=True)
    add_routes(conn, more_routes or {})


def _index_routes(conn: Connection, scope: str, entries: Sequence[Entry]) -> None:
    """The routes and inbound ids the entries give (their fingerprints: ``_index_fingerprints``), written with one
    statement per table and step however many entries there are (a reindex writes every scope's at once)."""
    found: dict[str, str] = {}
    keys: dict[str, float] = {}
    for e in entries:
        p = e.payload
        if isinstance(p, ThreadLinked):
            if p.ts:
                found[route_key(p.channel, p.ts)] = scope
            if p.dedicated_channel or not p.ts:
                found[route_key(p.channel)] = scope
        elif isinstance(p, Message | Evidence) and p.channel and p.ts:
            found[route_key(p.channel, p.ts)] = scope
        if e.kind == "declared" and e.idempotency_key:
            keys[e.idempotency_key] = e.at.timestamp()
    add_routes(conn, found)
    if keys:
        conn.execute(_DELETE_INBOUND, [{"b_key": key} for key in keys])
        conn.execute(inbound.insert(), [{"key": key, "scope": scope, "at": at} for key, at in keys.items()])


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


def scope_values(state: ScopeState) -> dict[str, Any]:
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
