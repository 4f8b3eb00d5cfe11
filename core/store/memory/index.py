"""The index in memory: the ``IndexPort`` over plain dicts (tests, and the proof that the port does not leak SQL).

Several ``MemoryIndex`` on one ``IndexTables`` behave like several processes on one index. It does what
core/index/statements.py does with SQL, row for row: the same reservations, routes, fingerprints (the last
observation of each wins), inbound ids, subscriber positions, scope rows (never replaced by an older state), forks
kept out of routing, and milestones. Full-text search matches whole words (a query word with dots or dashes as
consecutive words), ranks by the number of words an entry matches, and marks them ``[like this]`` in the snippet.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from types import SimpleNamespace
from typing import Any

from decklog.core.entries import Entry, Evidence, Message, Observation, ThreadLinked
from decklog.core.errors import Conflict
from decklog.core.ids import ScopeId
from decklog.core.index.keys import group_fingerprint, route_key
from decklog.core.index.statements import (
    INDEX_SUBSCRIBER,
    changed_at,
    changes_in,
    milestone_values,
    scope_row,
    scope_values,
)
from decklog.core.index.text import search_words, searchable_text
from decklog.core.state import ScopeState
from decklog.core.store.ports import Milestones, ScopeRow, SearchHit

SNIPPET_WORDS = 12


@dataclass
class IndexTables:
    """The index's rows (the same columns as core/index/tables.py)."""

    scopes: dict[str, dict[str, Any]] = field(default_factory=dict)
    routes: dict[str, str] = field(default_factory=dict)
    fingerprints: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    subscriptions: dict[tuple[str, str], int] = field(default_factory=dict)
    inbound: dict[str, str] = field(default_factory=dict)
    fts: dict[tuple[str, int], tuple[str, str]] = field(default_factory=dict)  # (scope, seq) -> (kind, text)
    milestones: dict[str, dict[str, Any]] = field(default_factory=dict)

    def clear(self) -> None:
        for table in (
            self.scopes,
            self.routes,
            self.fingerprints,
            self.subscriptions,
            self.inbound,
            self.fts,
            self.milestones,
        ):
            table.clear()


def _tokens(text: str) -> list[str]:
    return re.findall(r"\w+", text.lower())


class MemoryIndex:
    """The ``IndexPort`` over ``tables`` (shared by every index made on one ``MemoryStorage``)."""

    def __init__(self, tables: IndexTables | None = None) -> None:
        self.t = tables or IndexTables()
        self._milestones_written: dict[str, dict[str, Any] | None] = {}

    async def open(self) -> None:
        return None

    async def close(self) -> None:
        return None

    async def ping(self) -> None:
        return None

    # -- reservations -----------------------------------------------------------------------------------------

    async def reserve_scope(
        self,
        kind: str,
        base: str,
        *,
        exact: bool,
        on_disk: Callable[[str], bool] = lambda _scope: False,
        inbound_key: str | None = None,
    ) -> ScopeId:
        if inbound_key is not None and inbound_key in self.t.inbound:
            return ScopeId.parse(self.t.inbound[inbound_key])
        prefix = f"{kind}/{base}"
        existing = {sid for sid in self.t.scopes if sid == prefix or sid.startswith(prefix + "-")}

        def taken(scope_id: str) -> bool:
            return scope_id in existing or on_disk(scope_id)

        candidate = ScopeId.parse(prefix)
        if taken(str(candidate)):
            if exact:
                raise Conflict(f"scope {candidate} already exists (scope ids are never reused)")
            n = 2
            while taken(f"{prefix}-{n}"):
                n += 1
            candidate = ScopeId.parse(f"{prefix}-{n}")
        self.t.scopes[str(candidate)] = _reserved_row(str(candidate), kind)
        if inbound_key is not None:
            self.t.inbound[inbound_key] = str(candidate)
        return candidate

    async def inbound_scope(self, key: str) -> str | None:
        return self.t.inbound.get(key)

    async def claim_fingerprint(self, fingerprint: str, scope: str, service: str) -> None:
        self.t.fingerprints[(fingerprint, scope)] = {"service": service, "status": "firing", "updated": time.time()}

    async def add_route(self, key: str, scope: str) -> None:
        self.t.routes[key] = scope

    # -- lookups ----------------------------------------------------------------------------------------------

    async def route(self, channel: str, thread_ts: str = "") -> str | None:
        keys = [route_key(channel, thread_ts)] if thread_ts else []
        keys.append(route_key(channel))
        return next((self.t.routes[k] for k in keys if k in self.t.routes), None)

    def _claims(self, fingerprint: str) -> list[tuple[float, str]]:
        """(updated, scope) of the claims of ``fingerprint``, newest first."""
        found = [(row["updated"], scope) for (fp, scope), row in self.t.fingerprints.items() if fp == fingerprint]
        return sorted(found, key=lambda pair: pair[0], reverse=True)

    async def open_scope_for_fingerprint(self, fingerprint: str) -> str | None:
        for _updated, scope in self._claims(fingerprint):
            row = self.t.scopes.get(scope)
            if row is not None and row["status"] != "resolved":
                return scope
        return None

    async def last_scope_for_fingerprint(self, fingerprint: str) -> str | None:
        claims = self._claims(fingerprint)
        return claims[0][1] if claims else None

    async def get(self, scope: str) -> ScopeRow | None:
        row = self.t.scopes.get(scope)
        return _row(row) if row is not None else None

    async def list_scopes(
        self,
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
        return self._list(
            kind=kind,
            status=status,
            severity=severity,
            text=text,
            open_only=open_only,
            service=service,
            updated_since=updated_since,
            upkeep=upkeep,
            limit=limit,
            before=before,
        )

    def _list(
        self,
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
        def wanted(r: dict[str, Any]) -> bool:
            if r["status"] == "reserved":
                return False
            if (kind and r["kind"] != kind) or (status and r["status"] != status):
                return False
            if severity is not None and r["severity"] != severity:
                return False
            if open_only and (r["status"] == "resolved" or r["forked_from"]):
                return False
            if upkeep and r["status"] == "resolved" and not r["pending_approvals"]:
                return False
            if service and f'"{service}"' not in r["services"]:
                return False
            if updated_since and r["updated_at"] < updated_since:
                return False
            if before is not None and not (
                r["created_at"] < before[0] or (r["created_at"] == before[0] and r["id"] > before[1])
            ):
                return False
            return not text or text.lower() in r["title"].lower() or text.lower() in r["id"].lower()

        rows = sorted((r for r in self.t.scopes.values() if wanted(r)), key=lambda r: r["id"])
        rows.sort(key=lambda r: r["created_at"], reverse=True)
        return [_row(r) for r in (rows if limit is None else rows[:limit])]

    async def unresolved_incidents(self, *, limit: int = 2000) -> list[str]:
        rows = [
            r
            for r in self.t.scopes.values()
            if r["kind"] == "incident" and r["status"] != "resolved" and not r["forked_from"]
        ]
        rows.sort(key=lambda r: r["id"])
        rows.sort(key=lambda r: r["created_at"], reverse=True)
        rows.sort(key=lambda r: r["created_at"] != "")  # not seen declared yet: first
        return [r["id"] for r in rows[:limit]]

    async def changes_on(
        self, services: Sequence[str], since: datetime, until: datetime | None = None
    ) -> list[tuple[ScopeRow, datetime]]:
        rows = (row for service in services for row in self._list(kind="change", service=service, limit=50))
        return changes_in(rows, since, until)

    async def search(
        self,
        text: str,
        *,
        limit: int = 20,
        exclude_scope: str | None = None,
        scope_kind: str | None = None,
        kinds: Sequence[str] = (),
    ) -> list[SearchHit]:
        phrases = [_tokens(w) for w in search_words(text)]
        phrases = [p for p in phrases if p]
        if not phrases:
            return []
        hits: list[SearchHit] = []
        for (scope, seq), (kind, body) in self.t.fts.items():
            if exclude_scope and scope == exclude_scope:
                continue
            if scope_kind and not scope.startswith(f"{scope_kind}/"):
                continue
            if kinds and kind not in kinds:
                continue
            words = _tokens(body)
            matched = _matches(words, phrases)
            if matched:
                hits.append(SearchHit(scope, seq, kind, _snippet(body, matched), -float(len(matched))))
        hits.sort(key=lambda h: (h.rank, h.scope, h.seq))
        return hits[:limit]

    async def titles(self, ids: Sequence[str]) -> dict[str, str]:
        return {i: self.t.scopes[i]["title"] for i in set(ids) if i in self.t.scopes}

    async def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for r in self.t.scopes.values():
            out[r["status"]] = out.get(r["status"], 0) + 1
        return out

    async def milestones(self, since: float | None) -> list[Milestones]:
        rows = sorted(self.t.milestones.items(), key=lambda item: (item[1]["declared"], item[0]))
        out = []
        for scope, m in rows:
            if since is not None and m["declared"] < since:
                continue
            declared = m["declared"]
            names = tuple(json.loads(m["services"])) if m["services"] and m["services"] != "[]" else ()
            out.append(
                Milestones(
                    scope,
                    m["status"],
                    m["severity"],
                    names,
                    m["source"],
                    *(
                        None if m[k] is None else max(0.0, m[k] - (_start(m) if k == "acknowledged" else declared))
                        for k in ("acknowledged", "mitigated", "resolved")
                    ),
                )
            )
        return out

    # -- subscriptions ----------------------------------------------------------------------------------------

    async def position(self, scope: str, subscriber: str = INDEX_SUBSCRIBER) -> int:
        return self.t.subscriptions.get((scope, subscriber), 0)

    async def subscribe(self, scope: str, subscriber: str, position: int = 0) -> None:
        self.t.subscriptions[(scope, subscriber)] = position

    async def subscribers(self, scope: str) -> dict[str, int]:
        return {sub: pos for (s, sub), pos in self.t.subscriptions.items() if s == scope}

    # -- feeding from the log ---------------------------------------------------------------------------------

    async def apply(self, state: ScopeState, entries: Sequence[Entry]) -> None:
        seen = self._milestones_written
        values = milestone_values(state)
        known = state.scope in seen and seen[state.scope] == values
        self._apply(state, entries, milestones_known=known)
        seen.pop(state.scope, None)
        seen[state.scope] = values
        while len(seen) > 4096:
            seen.pop(next(iter(seen)))

    async def rebuild(
        self,
        items: Sequence[tuple[ScopeState, Sequence[Entry]]],
        *,
        fresh: bool = True,
        routes: Mapping[str, str] | None = None,
    ) -> None:
        if fresh:
            self.t.clear()
        for state, entries in items:
            self._apply(state, entries)
        for key, scope in (routes or {}).items():
            await self.add_route(key, scope)

    def _apply(self, state: ScopeState, entries: Sequence[Entry], *, milestones_known: bool = False) -> None:
        scope = state.scope
        key = (scope, INDEX_SUBSCRIBER)
        fresh = [e for e in entries if e.seq > self.t.subscriptions.get(key, 0)]
        for e in fresh:
            self.t.fts[(scope, e.seq)] = (e.kind, searchable_text(e))
        if not state.forked_from:  # a fork copies its source's thread and alerts: they still route to the source
            for e in fresh:
                self._index_entry(scope, e)
            self._index_fingerprints(scope, fresh)
        if fresh:
            self.t.subscriptions[key] = fresh[-1].seq
        existing = self.t.scopes.get(scope)
        if existing is not None and existing["version"] > state.version:
            return  # an older state than the one applied already
        previous = str((existing or {}).get("changed_at", ""))
        self.t.scopes[scope] = {
            **(existing or {"reserved_at": 0.0}),
            "id": scope,
            **scope_values(state),
            "changed_at": changed_at(state, previous, fresh),
        }
        if not milestones_known:
            values = milestone_values(state)
            if values is not None:
                self.t.milestones[scope] = values

    def _index_entry(self, scope: str, e: Entry) -> None:
        p = e.payload
        if isinstance(p, ThreadLinked):
            keys = [route_key(p.channel, p.ts)] if p.ts else []
            if p.dedicated_channel or not p.ts:
                keys.append(route_key(p.channel))
            for k in keys:
                self.t.routes[k] = scope
        elif isinstance(p, Message | Evidence) and p.channel and p.ts:
            self.t.routes[route_key(p.channel, p.ts)] = scope
        if e.kind == "declared" and e.idempotency_key:
            self.t.inbound[e.idempotency_key] = scope

    def _index_fingerprints(self, scope: str, entries: Sequence[Entry]) -> None:
        for e in entries:
            p = e.payload
            if not isinstance(p, Observation):
                continue
            at = e.at.timestamp()
            if p.fingerprint:
                status = p.alert_status or "firing"
                self.t.fingerprints[(p.fingerprint, scope)] = {"service": p.service, "status": status, "updated": at}
            group = p.data.get("group")
            if isinstance(group, str) and group:
                row = {"service": p.service, "status": "firing", "updated": at}
                self.t.fingerprints[(group_fingerprint(group), scope)] = row


def _matches(words: list[str], phrases: list[list[str]]) -> set[str]:
    """The words of ``words`` that the query's phrases match (a phrase: consecutive words)."""
    found: set[str] = set()
    for phrase in phrases:
        n = len(phrase)
        for i in range(len(words) - n + 1):
            if words[i : i + n] == phrase:
                found.update(phrase)
    return found


def _snippet(body: str, matched: set[str]) -> str:
    """Up to ``SNIPPET_WORDS`` words of ``body`` from a little before the first match, matches in brackets."""
    parts = body.split()
    marked = []
    first = None
    for i, part in enumerate(parts):
        core = re.sub(r"\W+", "", part).lower()
        if core in matched:
            first = i if first is None else first
            marked.append(
                re.sub(r"\w+", lambda m: f"[{m.group(0)}]" if m.group(0).lower() in matched else m.group(0), part)
            )
        else:
            marked.append(part)
    start = max(0, (first or 0) - 2)
    return " ".join(marked[start : start + SNIPPET_WORDS])


def _reserved_row(scope: str, kind: str) -> dict[str, Any]:
    return {
        "id": scope,
        "kind": kind,
        "title": "",
        "status": "reserved",
        "severity": None,
        "services": "[]",
        "created_at": "",
        "updated_at": "",
        "resolved_at": "",
        "version": 0,
        "thread_channel": "",
        "thread_ts": "",
        "permalink": "",
        "pending_approvals": 0,
        "reserved_at": time.time(),
        "forked_from": "",
        "changed_at": "",
    }


def _row(r: dict[str, Any]) -> ScopeRow:
    return scope_row(SimpleNamespace(**r))


def _start(row: dict[str, Any]) -> float:
    """Where MTTA is measured from: the first on-call page when there was one, else the declaration."""
    paged = row.get("paged")
    return float(paged) if paged is not None else float(row["declared"])
