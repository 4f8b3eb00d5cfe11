"""What every ``decklog`` command shares: exit codes, the acting person, the data directory checks, a runtime
opened for one command, and the index brought up to date before the command prints."""

from __future__ import annotations

import asyncio
import getpass
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlsplit, urlunsplit

from decklog.bot.settings import Settings
from decklog.core.entries import Actor
from decklog.core.errors import InvalidInput, NotFound, StorageError
from decklog.core.ids import ScopeId
from decklog.core.index.keys import route_key

if TYPE_CHECKING:
    from decklog.core.outbox.dispatcher import Dispatcher
    from decklog.core.store.ports import IndexPort, LogStore

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INTERNAL = 0, 1, 2, 70
EXIT_UNAVAILABLE = 69  # sysexits' EX_UNAVAILABLE: the database (or the data directory) cannot be used


def cli_actor() -> Actor:
    try:
        user = os.environ.get("DECKLOG_ACTOR") or getpass.getuser()
    except Exception:
        user = "operator"
    return Actor(type="human", id=f"cli:{user}", name=user)


def database_label(url: str) -> str:
    """A database URL as it may be printed: scheme, user, host, port and database name; never the password (nor
    any query parameter, which may carry one)."""
    parts = urlsplit(url)
    try:
        host, port = parts.hostname or "", parts.port
    except ValueError:  # a port that is not a number
        host, port = parts.hostname or "", None
    if ":" in host:
        host = f"[{host}]"
    user = f"{unquote(parts.username)}@" if parts.username else ""
    netloc = user + host + (f":{port}" if port is not None else "")
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def data_location(settings: Settings) -> str:
    """Where the command reads and writes, as a person looks for it: the database (without its password) or the
    data directory, absolute."""
    if settings.database_url:
        return f"the database {database_label(settings.database_url)}"
    return str(Path(settings.data_dir).expanduser().resolve())


def data_exists(settings: Settings) -> bool:
    return bool(settings.database_url) or Path(settings.data_dir).is_dir()


def require_data(settings: Settings, scope: str) -> None:
    sid = ScopeId.parse(scope)
    if settings.database_url:
        return  # the store says NotFound for an unknown scope (the SQLite check spares creating a data dir)
    if not (Path(settings.data_dir) / "scopes" / f"{sid.file_stem}.db").exists():
        raise NotFound(f"no such scope: {scope} (in {data_location(settings)})")


class opened_runtime:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.rt: Any = None

    async def __aenter__(self) -> Any:
        from decklog.bot.runtime import Runtime

        self.rt = await Runtime.open(self.settings)
        self.rt.dispatcher.start()
        return self.rt

    async def __aexit__(self, *exc: object) -> None:
        await self.rt.close()


async def drain_index(dispatcher: Dispatcher, scope: str) -> None:
    """Bring index.db up to date now, so that `decklog scopes` right after shows the change."""
    dispatcher.wake(scope, ["index"])
    await dispatcher.idle()


#: Scopes read and written per step of ``reindex``: memory holds one chunk of history, however long it is.
REINDEX_CHUNK = 100


async def reindex_all(store: LogStore, index: IndexPort, *, data_dir: Path | None = None) -> tuple[int, int]:
    """Rebuild the index from every scope's log, ``REINDEX_CHUNK`` scopes at a time (the first chunk empties the
    derived tables; an interrupted reindex leaves a partial index, and running it again completes it).
    ``data_dir`` (SQLite): the scope files are read as read-only snapshots, a chunk at a time in a worker thread,
    instead of being opened one by one through the store (an engine and a connection each)."""
    if data_dir is not None:
        return await _reindex_files(index, data_dir)
    items: list[Any] = []
    count = total = 0
    fresh = True
    for sid in await store.scope_ids():
        try:
            state = await store.get_state(sid)
        except NotFound:
            continue
        entries = await store.read(sid)
        total += len(entries)
        items.append((state, entries))
        if len(items) >= REINDEX_CHUNK:
            count += await _reindex_chunk(store, index, items, fresh=fresh)
            items, fresh = [], False
    if items or fresh:
        count += await _reindex_chunk(store, index, items, fresh=fresh)
    return count, total


async def reindex_data_dir(data_dir: Path) -> tuple[int, int]:
    """``decklog reindex`` on SQLite: index.db rebuilt from the scope files, with no runtime opened (no store, no
    dispatcher, no boot sweep over the history being read)."""
    from concurrent.futures import ThreadPoolExecutor

    from decklog.core.store.sqlite.index import SqliteIndex

    pool = ThreadPoolExecutor(1, thread_name_prefix="reindex")
    index = SqliteIndex(data_dir / "index.db", pool)
    await index.open()
    try:
        return await _reindex_files(index, data_dir)
    finally:
        await index.close()
        pool.shutdown(wait=True)


async def _reindex_files(index: IndexPort, data_dir: Path) -> tuple[int, int]:
    from decklog.core.store.audit import scope_files

    files = scope_files(data_dir)
    count = total = 0
    for start in range(0, max(len(files), 1), REINDEX_CHUNK):
        items, routes = await asyncio.to_thread(_read_files, files[start : start + REINDEX_CHUNK])
        await index.rebuild(items, fresh=start == 0, routes=routes)  # one transaction per chunk
        count += len(items)
        total += sum(len(entries) for _state, entries in items)
    return count, total


def _read_files(files: list[tuple[str, Path]]) -> tuple[list[Any], dict[str, str]]:
    """The states and entries of these scope files, and the routes of their Slack memos (read-only snapshots)."""
    from decklog.core.store.sqlite.readonly import scope_contents

    items: list[Any] = []
    routes: dict[str, str] = {}
    for stem, path in files:
        try:
            scope = str(ScopeId.from_file_stem(stem))
        except InvalidInput:
            continue  # not a scope file (verify --all names it)
        contents = scope_contents(path, scope, memo_topic="slack", trusted=True)
        if contents is None:
            continue  # a declaration that never committed
        items.append((contents.state, contents.entries))
        _memo_routes(contents.memos, scope, routes)
    return items, routes


def _memo_routes(memos: dict[str, dict[str, Any]], scope: str, routes: dict[str, str]) -> None:
    """The routes of the bot messages the Slack sender posted (its memos hold their channel and ts): a reply under
    any of them belongs to the scope. No log entry implies them (decision 92), so the rebuild alone loses them."""
    for memo in memos.values():
        channel, ts = memo.get("channel"), memo.get("ts")
        if isinstance(channel, str) and isinstance(ts, str) and channel and ts:
            routes[route_key(channel, ts)] = scope


async def _reindex_chunk(store: LogStore, index: IndexPort, items: list[Any], *, fresh: bool) -> int:
    routes: dict[str, str] = {}
    for state, _entries in items:
        await _sender_routes(store, str(state.scope), routes)
    await index.rebuild(items, fresh=fresh, routes=routes)  # one transaction: the chunk's entries and routes
    return len(items)


async def _sender_routes(store: LogStore, scope: str, routes: dict[str, str]) -> None:
    _memo_routes(await store.memo_all(scope, "slack"), scope, routes)


def write_atomically(path: Path, body: bytes) -> None:
    target = path.expanduser()
    tmp = target.with_name(f".{target.name}.tmp-{os.getpid()}")
    try:
        tmp.write_bytes(body)
        os.replace(tmp, target)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise StorageError(f"cannot write {path}: {exc.strerror}") from None


def log_chain_key(settings: Settings) -> Any:
    from decklog.core.store.chain import ChainKey

    return ChainKey.of(settings.log_key.get_secret_value() if settings.log_key else None)


def package_version() -> str:
    from importlib import metadata

    try:
        return metadata.version("decklog")
    except metadata.PackageNotFoundError:
        return "unknown"


def storage_problem(exc: BaseException, settings: Settings | None, *, target_url: str | None = None) -> str | None:
    """One line for an error of the database or the data directory itself (unreachable, refused, missing, not
    writable), naming which one without its password; None for any other error. ``target_url``: the database a
    command writes to besides its own (``migrate --to``)."""
    import sqlite3

    import sqlalchemy.exc

    orig: BaseException = exc
    if isinstance(exc, sqlalchemy.exc.DBAPIError) and exc.orig is not None:
        if not isinstance(exc, sqlalchemy.exc.OperationalError | sqlalchemy.exc.InterfaceError):
            return None
        orig = exc.orig
    if isinstance(orig, sqlite3.OperationalError):
        where = f"the data directory {data_location(settings)}" if settings else "the data directory"
        return f"cannot use {where}: {_one_line(str(orig))}"
    try:
        import psycopg
    except ImportError:  # pragma: no cover - psycopg is a dependency
        return None
    if not isinstance(orig, psycopg.OperationalError | psycopg.InterfaceError):
        return None
    url = target_url or (settings.database_url if settings else None) or ""
    problem = _one_line(str(orig))
    for secret in {urlsplit(url).password or ""} - {""}:
        problem = problem.replace(secret, "***")
    problem = problem.removeprefix("connection failed: ")
    variable = "--to" if target_url else "DECKLOG_DATABASE_URL"
    return f"cannot use the database {database_label(url)} ({variable}): {problem}"


def _one_line(text: str) -> str:
    """The first line of a driver's message, its whitespace collapsed (psycopg adds a hint on a second line)."""
    lines = [" ".join(line.split()) for line in text.splitlines() if line.strip()]
    return lines[0] if lines else "unknown error"
