"""What every ``decklog`` command shares: exit codes, the acting person, the data directory checks, a runtime
opened for one command, and the index brought up to date before the command prints."""

from __future__ import annotations

import getpass
import os
from pathlib import Path
from typing import Any

from bot.settings import Settings
from core.entries import Actor
from core.errors import NotFound, StorageError
from core.ids import ScopeId
from core.index_schema import route_key

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INTERNAL = 0, 1, 2, 70


def cli_actor() -> Actor:
    try:
        user = os.environ.get("DECKLOG_ACTOR") or getpass.getuser()
    except Exception:
        user = "operator"
    return Actor(type="human", id=f"cli:{user}", name=user)


def data_exists(settings: Settings) -> bool:
    return bool(settings.database_url) or Path(settings.data_dir).is_dir()


def require_data(settings: Settings, scope: str) -> None:
    sid = ScopeId.parse(scope)
    if settings.database_url:
        return  # the store says NotFound for an unknown scope (the SQLite check spares creating a data dir)
    if not (Path(settings.data_dir) / "scopes" / f"{sid.file_stem}.db").exists():
        raise NotFound(f"no such scope: {scope} (in {settings.data_dir})")


class opened_runtime:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.rt: Any = None

    async def __aenter__(self) -> Any:
        from bot.runtime import Runtime

        self.rt = await Runtime.open(self.settings)
        self.rt.dispatcher.start()
        return self.rt

    async def __aexit__(self, *exc: object) -> None:
        await self.rt.close()


async def drain_index(rt: Any, scope: str) -> None:
    """Bring index.db up to date now, so that `decklog scopes` right after shows the change."""
    rt.dispatcher.wake(scope, ["index"])
    await rt.dispatcher.idle()


async def reindex_all(rt: Any) -> tuple[int, int]:
    items = []
    total = 0
    for sid in await rt.store.scope_ids():
        try:
            state = await rt.store.get_state(sid)
        except NotFound:
            continue
        entries = await rt.store.read(sid)
        total += len(entries)
        items.append((state, entries))
    await rt.index.rebuild(items)
    for state, _entries in items:
        await _sender_routes(rt, str(state.scope))
    return len(items), total


async def _sender_routes(rt: Any, scope: str) -> None:
    """The routes of the bot messages the Slack sender posted (its memos hold their channel and ts): a reply under
    any of them belongs to the scope. No log entry implies them (decision 92), so the rebuild alone loses them."""
    for memo in (await rt.store.memo_all(scope, "slack")).values():
        channel, ts = memo.get("channel"), memo.get("ts")
        if isinstance(channel, str) and isinstance(ts, str) and channel and ts:
            await rt.index.add_route(route_key(channel, ts), scope)


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
    from core.store.chain import ChainKey

    return ChainKey.of(settings.log_key.get_secret_value() if settings.log_key else None)


def package_version() -> str:
    from importlib import metadata

    try:
        return metadata.version("decklog")
    except metadata.PackageNotFoundError:
        return "unknown"
