"""``decklog verify --all``: every scope, and the index against what the scopes say — all read-only.

The index is derived from the logs, so the check rebuilds it from the scopes in a private temporary file
(``SqliteIndex.rebuild``, the same code ``decklog reindex`` runs: no second copy of the derivation to drift) and
compares the rows that route and deduplicate: each scope's title, kind, status and severity, the Slack routes
and the alert fingerprints. Only rows of reserved ids (reserved, never declared) may exist without a log.
The live index is index.db on SQLite (``audit``) or the index tables of a PostgreSQL database
(``index_tables_of`` + ``ExpectedIndex`` + ``compare``, from bot/cli/verify.py): the same comparison for both
backends. Scopes are read one at a time and go into the expected index in chunks: memory stays bounded.
On a live deployment the index may trail the logs by a delivery or two; run it on a quiet or restored one.
"""

from __future__ import annotations

import sqlite3
import tempfile
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from decklog.core.entries import Entry
from decklog.core.errors import InvalidInput
from decklog.core.ids import ScopeId
from decklog.core.state import ScopeState
from decklog.core.store.chain import ChainKey
from decklog.core.store.sqlite.index import SqliteIndex
from decklog.core.store.sqlite.readonly import (
    read_sqlite,
    scope_contents,
    table_names,
    verify_scope_file,
)
from decklog.core.store.verify import NO_ENTRIES

SCOPE_COLUMNS = ("kind", "title", "status", "severity")


@dataclass
class AuditResult:
    scopes: int = 0
    ok: int = 0
    keyed: int = 0
    problems: list[str] = field(default_factory=list)
    empty: list[str] = field(default_factory=list)  # scope files of declarations that never committed


def scope_files(data_dir: Path) -> list[tuple[str, Path]]:
    """(scope id, file) for every scope file; a file whose name is not a scope id is reported by the caller."""
    folder = data_dir / "scopes"
    return [(p.stem, p) for p in sorted(folder.glob("*.db"))] if folder.is_dir() else []


#: Verified scopes held in memory at once before they go into the expected index (bounded, however long history is).
CHUNK = 100


class ExpectedIndex:
    """The index rebuilt from verified scopes in a private temporary file, fed a chunk at a time (``add``), then
    read as the rows that route and deduplicate (``tables``)."""

    def __init__(self) -> None:
        self._tmp = tempfile.TemporaryDirectory(prefix="decklog-audit-")
        self._pool = ThreadPoolExecutor(1)
        self._index = SqliteIndex(Path(self._tmp.name) / "index.db", self._pool)
        self._chunk: list[tuple[ScopeState, list[Entry]]] = []
        self._fresh = True

    async def __aenter__(self) -> ExpectedIndex:
        await self._index.open()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._index.close()
        self._pool.shutdown(wait=True)
        self._tmp.cleanup()

    async def add(self, item: tuple[ScopeState, list[Entry]]) -> None:
        self._chunk.append(item)
        if len(self._chunk) >= CHUNK:
            await self._flush()

    async def _flush(self) -> None:
        await self._index.rebuild(self._chunk, fresh=self._fresh)
        self._chunk, self._fresh = [], False

    async def tables(self) -> dict[str, dict[Any, Any]]:
        if self._chunk or self._fresh:
            await self._flush()
        with sqlite3.connect(Path(self._tmp.name) / "index.db") as conn:
            return _index_tables(conn)


async def audit(data_dir: Path, *, key: ChainKey | None) -> AuditResult:
    result = AuditResult()
    async with ExpectedIndex() as expected:
        await _audit_into(data_dir, key, result, expected)
        index = data_dir / "index.db"
        if not index.is_file():
            result.problems.append("index.db: missing (`decklog reindex` rebuilds it from the scope files)")
        else:
            live = read_sqlite(index, _index_tables)
            if "missing" in live:
                result.problems.extend(f"index.db: has no {t} table" for t in live["missing"])
            else:
                result.problems.extend(compare(live, await expected.tables()))
    return result


async def _audit_into(data_dir: Path, key: ChainKey | None, result: AuditResult, expected: ExpectedIndex) -> None:
    """Verify every scope file, one at a time; each verified scope goes into ``expected`` (nothing else is kept)."""
    for stem, path in scope_files(data_dir):
        try:
            scope = str(ScopeId.from_file_stem(stem))
        except InvalidInput:
            result.problems.append(f"scopes/{path.name}: not a scope file name")
            continue
        report = verify_scope_file(path, scope, key=key)
        if report.reason == NO_ENTRIES:  # not a scope: an interrupted declaration left the file (reindex agrees)
            result.empty.append(scope)
            continue
        result.scopes += 1
        if not report.ok:
            result.problems.append(f"{scope}: seq {report.first_bad_seq}: {report.reason}")
            continue
        result.ok += 1
        result.keyed += report.keyed
        contents = scope_contents(path, scope)
        if contents is not None:
            await expected.add((contents.state, contents.entries))


def _index_tables(conn: sqlite3.Connection) -> dict[str, dict[Any, Any]]:
    missing = {"scopes", "routes", "fingerprints"} - table_names(conn)
    if missing:
        return {"missing": {t: True for t in sorted(missing)}}
    cols = ", ".join(SCOPE_COLUMNS)
    return _tables(
        conn.execute(f"SELECT id, {cols} FROM scopes WHERE status != 'reserved'"),
        conn.execute("SELECT key, scope FROM routes"),
        conn.execute("SELECT fingerprint, scope, service, status FROM fingerprints"),
        conn.execute("SELECT id FROM scopes WHERE status = 'reserved'"),
    )


def index_tables_of(conn: sa.Connection, scopes: sa.Table, routes: sa.Table, fingerprints: sa.Table) -> dict[str, Any]:
    """The same rows as ``_index_tables``, from any database through SQLAlchemy Core (PostgreSQL's index tables)."""
    c = scopes.c
    return _tables(
        conn.execute(sa.select(c.id, *(c[n] for n in SCOPE_COLUMNS)).where(c.status != "reserved")),
        conn.execute(sa.select(routes.c.key, routes.c.scope)),
        conn.execute(sa.select(*(fingerprints.c[n] for n in ("fingerprint", "scope", "service", "status")))),
        conn.execute(sa.select(c.id).where(c.status == "reserved")),
    )


def _tables(scopes: Any, routes: Any, fingerprints: Any, reserved: Any) -> dict[str, dict[Any, Any]]:
    return {
        "scopes": {r[0]: tuple(r[1:]) for r in scopes},
        "reserved": {r[0]: True for r in reserved},
        "routes": {r[0]: r[1] for r in routes},
        "fingerprints": {(r[0], r[1]): (r[2], r[3]) for r in fingerprints},
    }


def compare(live: dict[str, dict[Any, Any]], expected: dict[str, dict[Any, Any]]) -> list[str]:
    """What differs between the live index's rows and the expected ones (``ExpectedIndex.tables``)."""
    problems: list[str] = []
    for sid, want in sorted(expected["scopes"].items()):
        got = live["scopes"].get(sid)
        if got is None:
            problems.append(f"index: {sid} is not listed")
            continue
        for name, w, g in zip(SCOPE_COLUMNS, want, got, strict=True):
            if w != g:
                problems.append(f"index: {sid}: {name} is {g!r}, the log says {w!r}")
    problems.extend(
        f"index: lists {sid}, which has no log" for sid in sorted(set(live["scopes"]) - set(expected["scopes"]))
    )
    # a reserved id (reserved, never declared: a replica died between the reservation and the first append) may
    # already have the fingerprint its router claimed for it
    known = set(expected["scopes"]) | set(live.get("reserved", ()))
    problems.extend(_diff("route", expected["routes"], live["routes"], lambda k, v: v in known))
    problems.extend(_diff("fingerprint", expected["fingerprints"], live["fingerprints"], lambda k, v: k[1] in known))
    return problems


def _diff(what: str, expected: dict[Any, Any], live: dict[Any, Any], recorded: Callable[[Any, Any], bool]) -> list[str]:
    """Rows the logs imply must be there and agree. A live row the logs do not imply is fine when ``recorded``
    says it belongs to a known scope: the Slack sender routes every message it posts and the router claims
    fingerprints and group keys in the index directly (lookups, not history: ``reindex`` does not bring them back)."""
    out: list[str] = []
    for k in sorted(set(expected) | set(live), key=str):
        label = "/".join(map(str, k)) if isinstance(k, tuple) else str(k)
        if k not in live:
            out.append(f"index: {what} {label} is missing (the logs say {expected[k]})")
        elif k not in expected:
            if not recorded(k, live[k]):
                out.append(f"index: {what} {label} → {live[k]} is in no log")
        elif live[k] != expected[k]:
            out.append(f"index: {what} {label} is {live[k]}, the logs say {expected[k]}")
    return out


__all__ = [
    "AuditResult",
    "ExpectedIndex",
    "audit",
    "compare",
    "index_tables_of",
    "scope_files",
]
