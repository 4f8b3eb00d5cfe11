"""Reading SQLite files without writing a byte: ``decklog verify`` (a forensic copy) and ``decklog backup``.

A plain ``mode=ro`` open is not enough. On a WAL database whose ``-wal``/``-shm`` are absent (a cleanly closed
file), SQLite creates both and leaves them behind; when they are present it takes read-marks in ``-shm``. So:

- **No committed WAL** (``-wal`` absent or empty, no ``-journal``): everything is in the main file. It is read
  with ``immutable=1`` (no locks, no side files). ``immutable`` is only correct while no writer changes the file,
  so the read is accepted only when, afterwards, ``-wal`` is still empty and the main file's size and mtime are
  unchanged; otherwise it is done again the second way.
- **A WAL with frames, or a hot journal**: the main file and then its ``-wal``/``-journal`` are copied to a
  private temporary directory and the copy is opened there (SQLite rebuilds its index in the copy's own
  ``-shm``). Copying the main file first, then the WAL, is consistent as long as the WAL was not restarted in
  between (a checkpoint only writes pages whose frames are still in the WAL): the WAL header's salt is compared
  before and after, and the copy is retried if it changed.

The source directory is never written: no ``-shm``, no ``-wal``, no ``user_version``, no ``create_all``.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sqlite3
import tempfile
import urllib.parse
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NamedTuple, TypeVar

from decklog.core.entries import Entry
from decklog.core.errors import NotFound, StorageError
from decklog.core.state import ScopeState
from decklog.core.store.chain import ChainKey
from decklog.core.store.ports import VerifyReport
from decklog.core.store.rows import row_to_entry, trusted_row_to_entry
from decklog.core.store.verify import verify_rows

T = TypeVar("T")
ATTEMPTS = 5
ENTRY_COLUMNS = ("seq", "id", "kind", "at", "actor", "payload", "refs", "idempotency_key", "prev_hash", "hash")


class EntryRow(NamedTuple):
    seq: int
    id: str
    kind: str
    at: str
    actor: str
    payload: str
    refs: str
    idempotency_key: str | None
    prev_hash: str
    hash: str


class StateRow(NamedTuple):
    version: int
    head_hash: str
    head_at: str
    body: str


def _stat(path: Path) -> tuple[int, int] | None:
    try:
        st = path.stat()
    except FileNotFoundError:
        return None
    return st.st_size, st.st_mtime_ns


def _side(path: Path, suffix: str) -> Path:
    return path.with_name(path.name + suffix)


def _wal_header(path: Path) -> bytes:
    try:
        with _side(path, "-wal").open("rb") as f:
            return f.read(32)
    except FileNotFoundError:
        return b""


def _uri(path: Path, query: str) -> str:
    return f"file:{urllib.parse.quote(str(path.resolve()))}?{query}"


def read_sqlite(path: Path, fn: Callable[[sqlite3.Connection], T]) -> T:
    """``fn(conn)`` over a consistent read-only snapshot of the SQLite file at ``path``; the file, its
    directory and its side files are left exactly as they were."""
    if not path.is_file():
        raise NotFound(f"no such file: {path}")
    try:
        for _ in range(ATTEMPTS):
            wal, journal = _stat(_side(path, "-wal")), _stat(_side(path, "-journal"))
            if (wal is None or wal[0] == 0) and journal is None:
                before = _stat(path)
                result = _read(_uri(path, "mode=ro&immutable=1"), fn)
                after_wal = _stat(_side(path, "-wal"))
                if (after_wal is None or after_wal[0] == 0) and _stat(path) == before:
                    return result
                continue  # a writer appeared meanwhile: read again, the WAL way
            found = _read_copy(path, fn)
            if found is not None:
                return found[0]
    except sqlite3.DatabaseError as exc:
        raise StorageError(f"cannot read {path}: {exc}") from None
    raise StorageError(f"{path} kept changing while being read ({ATTEMPTS} attempts): try again")


def _read(uri: str, fn: Callable[[sqlite3.Connection], T]) -> T:
    conn = sqlite3.connect(uri, uri=True, isolation_level=None, check_same_thread=False)
    try:
        conn.execute("BEGIN")  # one read transaction: every query sees the same snapshot
        try:
            return fn(conn)
        finally:
            conn.execute("COMMIT")
    finally:
        conn.close()


def _read_copy(path: Path, fn: Callable[[sqlite3.Connection], T]) -> tuple[T] | None:
    """Copy the main file, then its WAL (or hot journal), privately; None when the WAL restarted meanwhile."""
    with tempfile.TemporaryDirectory(prefix="decklog-ro-") as tmp:
        copy = Path(tmp) / path.name
        header = _wal_header(path)
        shutil.copyfile(path, copy)
        for suffix in ("-wal", "-journal"):
            with contextlib.suppress(FileNotFoundError):
                shutil.copyfile(_side(path, suffix), _side(copy, suffix))
        if _wal_header(path) != header:
            return None
        return (_read(_uri(copy, "mode=rw"), fn),)


# -- scope files ----------------------------------------------------------------------------------------------------


def table_names(conn: sqlite3.Connection) -> set[str]:
    return {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}


def entry_rows(conn: sqlite3.Connection) -> Iterator[Any]:
    cur = conn.execute(f"SELECT {', '.join(ENTRY_COLUMNS)} FROM entries ORDER BY seq")
    for row in cur:
        yield EntryRow(*row)


def verify_scope_file(path: Path, scope: str, *, key: ChainKey | None = None) -> VerifyReport:
    """``verify`` over a scope file, read-only (core/store/verify.py on the stored rows)."""

    def q(conn: sqlite3.Connection) -> VerifyReport:
        if not {"entries", "state"} <= table_names(conn):
            return VerifyReport(scope, False, 0, None, f"{path.name} is not a decklog scope file")
        found = conn.execute("SELECT version, head_hash, head_at, body FROM state WHERE id = 1").fetchone()
        return verify_rows(scope, entry_rows(conn), StateRow(*found) if found else None, key=key)

    return read_sqlite(path, q)


def scope_file_head(path: Path) -> tuple[int, str]:
    """The entry count and the last entry's hash of a scope file (read-only)."""

    def q(conn: sqlite3.Connection) -> tuple[int, str]:
        if "entries" not in table_names(conn):
            return 0, ""
        row = conn.execute(
            "SELECT count(*), (SELECT hash FROM entries ORDER BY seq DESC LIMIT 1) FROM entries"
        ).fetchone()
        return int(row[0]), str(row[1] or "")

    return read_sqlite(path, q)


class ScopeContents(NamedTuple):
    """What a scope file holds, as read-only readers want it (``decklog reindex``, ``verify --all``)."""

    state: ScopeState
    entries: list[Entry]
    memos: dict[str, dict[str, Any]]  # one sender's memos (``memo_topic``), key → value


def scope_contents(path: Path, scope: str, *, memo_topic: str = "", trusted: bool = False) -> ScopeContents | None:
    """The state, the entries and ``memo_topic``'s memos of a scope file, over a read-only snapshot; None for a
    file with no state (a declaration that never committed). ``trusted``: rows this store wrote, parsed without a
    second validation (the read path's ``trusted_row_to_entry``); else validated as if they came from outside."""

    def q(conn: sqlite3.Connection) -> ScopeContents | None:
        if not {"entries", "state"} <= table_names(conn):
            return None
        found = conn.execute("SELECT version, head_hash, head_at, body FROM state WHERE id = 1").fetchone()
        if found is None:
            return None
        convert = trusted_row_to_entry if trusted else row_to_entry
        entries = [convert(scope, r) for r in entry_rows(conn)]
        memos: dict[str, dict[str, Any]] = {}
        if memo_topic and "sender_memo" in table_names(conn):
            for key, value in conn.execute("SELECT key, value FROM sender_memo WHERE topic = ?", (memo_topic,)):
                with contextlib.suppress(ValueError):
                    loaded = json.loads(value)
                    if isinstance(loaded, dict):
                        memos[str(key)] = loaded
        return ScopeContents(ScopeState.model_validate_json(StateRow(*found).body), entries, memos)

    return read_sqlite(path, q)


def listdir_if_any(path: Path) -> list[str]:
    return sorted(os.listdir(path)) if path.is_dir() else []
