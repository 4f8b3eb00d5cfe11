"""``decklog verify``: read-only checks of the hash chains and that each stored state equals the fold of its
log (SQLite scope files or PostgreSQL), and with ``--all`` the index against the scopes."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from decklog.bot.cli.common import EXIT_FAILED, EXIT_OK, data_location, log_chain_key, require_data
from decklog.bot.cli.parser import UsageError
from decklog.bot.settings import Settings
from decklog.core.errors import NotFound
from decklog.core.ids import ScopeId


async def cmd_verify(settings: Settings, args: argparse.Namespace) -> int:
    """Read-only: scope files are opened with SQLite ``mode=ro``/``immutable`` or a private copy
    (core/store/sqlite/readonly.py); no index, no dispatcher, nothing written into the data directory."""
    from decklog.core.store.sqlite.readonly import verify_scope_file

    if args.all == bool(args.scope):
        raise UsageError("name one SCOPE, or --all")
    key = log_chain_key(settings)
    if settings.database_url:
        return await _verify_database(settings, None if args.all else str(ScopeId.parse(args.scope)))
    if args.all:
        return await _verify_all(settings, key)
    scope = str(ScopeId.parse(args.scope))
    require_data(settings, scope)
    path = Path(settings.data_dir) / "scopes" / f"{ScopeId.parse(scope).file_stem}.db"
    return _verify_said(scope, verify_scope_file(path, scope, key=key), key)


def _verify_said(scope: str, report: Any, key: Any) -> int:
    if report.ok:
        chain = "keyed hash chain (HMAC-SHA256)" if report.keyed else "hash chain"
        print(f"ok: {scope}: {report.entries} entries, {chain} intact, stored state equals the fold of the log")
        if key is not None and not report.keyed:
            print(f"decklog: warning: {scope} is not keyed (declared without DECKLOG_LOG_KEY)", file=sys.stderr)
        return EXIT_OK
    print(f"decklog: verify failed: {scope}: seq {report.first_bad_seq}: {report.reason}", file=sys.stderr)
    return EXIT_FAILED


async def _verify_database(settings: Settings, scope: str | None) -> int:
    """On PostgreSQL: each chain re-computed in a read-only REPEATABLE READ snapshot (no dispatcher, no writes);
    with no SCOPE (``--all``) every scope, and the index's rows against the scopes' states."""
    from decklog.core.store.audit import ExpectedIndex, compare, index_tables_of
    from decklog.core.store.postgres import schema as pg
    from decklog.core.store.postgres.log_store import PostgresLogStore

    assert settings.database_url is not None
    log_key = settings.log_key.get_secret_value() if settings.log_key else None
    store = PostgresLogStore(settings.database_url, log_key=log_key, threads=2)
    try:
        if scope is not None:
            return _verify_said(scope, await store.verify(scope), store.chain_key)
        problems: list[str] = []
        scopes = [str(s) for s in await store.scope_ids()]
        async with ExpectedIndex() as expected:  # one scope at a time in memory, however long history is
            for sid in scopes:
                report = await store.verify(sid)
                if not report.ok:
                    problems.append(f"{sid}: seq {report.first_bad_seq}: {report.reason}")
                    continue
                await expected.add((await store.get_state(sid), await store.read(sid)))
            live = await store.run(lambda conn: index_tables_of(conn, pg.index_scopes, pg.routes, pg.fingerprints))
            problems += compare(live, await expected.tables())
    finally:
        await store.close()
    for line in problems:
        print(f"decklog: {line}", file=sys.stderr)
    ok = len(scopes) - sum(1 for p in problems if ": seq " in p)
    summary = f"{ok} of {len(scopes)} scopes verify" + ("" if scopes else f" (no scopes in {data_location(settings)})")
    if problems:
        print(f"decklog: verify --all: {len(problems)} problems; {summary}", file=sys.stderr)
        return EXIT_FAILED
    print(f"ok: {summary}; the index agrees with the scopes")
    return EXIT_OK


async def _verify_all(settings: Settings, key: Any) -> int:
    from decklog.core.store.audit import audit

    data_dir = Path(settings.data_dir)
    if not data_dir.is_dir():
        raise NotFound(f"no data directory at {data_location(settings)}")
    result = await audit(data_dir, key=key)
    if result.empty:
        print(
            f"decklog: note: {len(result.empty)} empty scope file(s), declarations that never committed (nothing of "
            f"them was acknowledged): {', '.join(result.empty)}",
            file=sys.stderr,
        )
    for line in result.problems:
        print(f"decklog: {line}", file=sys.stderr)
    summary = f"{result.ok} of {result.scopes} scopes verify ({result.keyed} keyed)"
    if not result.scopes:
        summary += f" (no scopes in {data_location(settings)})"
    if result.problems:
        print(f"decklog: verify --all: {len(result.problems)} problems; {summary}", file=sys.stderr)
        return EXIT_FAILED
    print(f"ok: {summary}; index.db agrees with the scopes")
    return EXIT_OK
