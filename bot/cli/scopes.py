"""The commands on one scope's log: scopes, declare, append, timeline, export, and state / fork / replay
(bot/replay_cli.py does the replay's work)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from decklog.bot.cli.common import (
    EXIT_OK,
    cli_actor,
    data_exists,
    data_location,
    drain_index,
    opened_runtime,
    reindex_all,
    require_data,
    write_atomically,
)
from decklog.bot.cli.parser import UsageError
from decklog.bot.settings import Settings
from decklog.core.clock import iso
from decklog.core.entries import parse_payload
from decklog.core.ids import ScopeId
from decklog.core.service import parse_severity


async def cmd_scopes(settings: Settings, args: argparse.Namespace) -> int:
    if args.limit < 1:
        raise UsageError("--limit must be at least 1")
    limit = None if args.all else args.limit
    if not data_exists(settings):
        rows: list[Any] = []
    else:
        async with opened_runtime(settings) as rt:
            if not settings.database_url and not (Path(settings.data_dir) / "index.db").exists():
                await reindex_all(rt.store, rt.index)
            rows = await rt.index.list_scopes(
                kind=args.kind, status=args.status, limit=None if limit is None else limit + 1
            )
    if limit is not None and len(rows) > limit:  # never cut without saying so
        rows = rows[:limit]
        print(
            f"decklog: listed the newest {limit} scopes; there are more (--limit N lists more, --all lists every one)",
            file=sys.stderr,
        )
    if args.json:
        print(json.dumps([r.to_json() for r in rows], indent=2))
        return EXIT_OK
    if not rows:
        which = " matching" if args.kind or args.status else ""
        print(f"no{which} scopes in {data_location(settings)} — `decklog declare --title …` opens one", end="")
        print("" if settings.database_url else " (DECKLOG_DATA_DIR chooses another directory)")
        return EXIT_OK
    width = max(len(r.id) for r in rows)
    for r in rows:
        sev = f"SEV{r.severity}" if r.severity else "SEV?"
        print(f"{r.id:<{width}}  {r.status:<13} {sev:<5} {r.title}")
    return EXIT_OK


async def cmd_declare(settings: Settings, args: argparse.Namespace) -> int:
    title = " ".join(args.title.split())
    if not title:
        raise UsageError("--title must not be empty")
    severity = parse_severity(args.severity, field="--severity") if args.severity is not None else None
    scope = str(ScopeId.parse(args.scope)) if args.scope else None
    async with opened_runtime(settings) as rt:
        result = await rt.service.declare(
            title=title, severity=severity, scope=scope, actor=cli_actor(), via="cli", services=args.service
        )
        await drain_index(rt.dispatcher, result.state.scope)
    print(result.state.scope)
    print(f"declared “{title}” (seq {result.entries[0].seq}); Slack will show it once `decklog serve` runs")
    return EXIT_OK


async def cmd_append(settings: Settings, args: argparse.Namespace) -> int:
    scope = str(ScopeId.parse(args.scope))
    try:
        data = json.loads(args.payload)
    except json.JSONDecodeError as exc:
        raise UsageError(f"--json is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from None
    if args.kind == "declared":
        raise UsageError("use `decklog declare` to open a scope")
    parse_payload(args.kind, data)  # validate before touching the data directory
    require_data(settings, scope)
    async with opened_runtime(settings) as rt:
        result = await rt.service.record(
            scope, args.kind, data, cli_actor(), refs=args.ref, idempotency_key=args.idempotency_key
        )
        await drain_index(rt.dispatcher, scope)
    for entry in result.entries:
        print(json.dumps(entry.to_json()))
    if result.duplicate:
        print("(duplicate idempotency key: nothing appended)", file=sys.stderr)
    return EXIT_OK


async def cmd_timeline(settings: Settings, args: argparse.Namespace) -> int:
    scope = str(ScopeId.parse(args.scope))
    if args.limit is not None and args.limit < 1:
        raise UsageError("--limit must be at least 1")
    require_data(settings, scope)
    async with opened_runtime(settings) as rt:
        entries = await rt.store.read(scope, after=max(0, args.after), limit=args.limit)
    if args.json:
        print(json.dumps([e.to_json() for e in entries], indent=2, ensure_ascii=False))
        return EXIT_OK
    for e in entries:
        print(f"#{e.seq:<4} {iso(e.at)[:19]}Z  [{e.actor.type}] {e.text}")
    return EXIT_OK


async def cmd_export(settings: Settings, args: argparse.Namespace) -> int:
    scope = str(ScopeId.parse(args.scope))
    require_data(settings, scope)
    from decklog.core.reports.export import record_export, render_report

    async with opened_runtime(settings) as rt:
        body, digest, fmt = await render_report(rt.store, scope, args.format, templates=rt.reports)
        # Deliver first, then record: a report_exported entry must never claim a file that was not written.
        if args.output:
            write_atomically(args.output, body)
        else:
            sys.stdout.buffer.write(body)
            sys.stdout.flush()
        await record_export(rt.store, scope, fmt, body, destination=str(args.output or "stdout"), actor=cli_actor())
        await drain_index(rt.dispatcher, scope)
    if args.output:
        print(f"{args.output} sha256:{digest}")
    return EXIT_OK


async def cmd_state(settings: Settings, args: argparse.Namespace) -> int:
    from decklog.core.fork import state_at

    scope = str(ScopeId.parse(args.scope))
    require_data(settings, scope)
    async with opened_runtime(settings) as rt:
        state = await state_at(rt.store, scope, args.at)
    print(json.dumps(state.to_json(), indent=2, ensure_ascii=False))
    return EXIT_OK


async def cmd_fork(settings: Settings, args: argparse.Namespace) -> int:
    from decklog.core.fork import fork_scope

    scope = str(ScopeId.parse(args.scope))
    new = str(ScopeId.parse(args.new_scope)) if args.new_scope else None
    require_data(settings, scope)
    async with opened_runtime(settings) as rt:
        result = await fork_scope(rt.store, rt.index, scope, at=args.at, new=new)
        await drain_index(rt.dispatcher, result.scope)
    print(result.scope)
    print(f"forked {scope} at seq {result.seq} ({len(result.entries)} entries); never delivered to Slack or executors")
    return EXIT_OK


async def cmd_replay(settings: Settings, args: argparse.Namespace) -> int:
    from decklog.bot.replay_cli import run_replay

    scope = str(ScopeId.parse(args.scope))
    require_data(settings, scope)
    return await run_replay(settings, scope, at=args.at, reasoner=args.reasoner, fail_on_diff=args.fail_on_diff)
