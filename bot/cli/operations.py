"""The commands on the whole data directory: backup, restore, doctor, reindex, insights, migrate; and the two that
run a process: serve and demo."""

from __future__ import annotations

import argparse
import asyncio
import json
from datetime import UTC, datetime
from pathlib import Path

from decklog.bot.cli.common import (
    EXIT_OK,
    data_exists,
    data_location,
    log_chain_key,
    opened_runtime,
    package_version,
    reindex_all,
    reindex_data_dir,
)
from decklog.bot.cli.parser import UsageError
from decklog.bot.settings import Settings
from decklog.core.errors import NotFound
from decklog.core.store.ports import StorageFactory


async def cmd_backup(settings: Settings, args: argparse.Namespace) -> int:
    from decklog.core.store.sqlite.backup import backup

    manifest = backup(Path(settings.data_dir), args.dest, key=log_chain_key(settings), version=package_version())
    scopes = [f for f in manifest["files"] if "scope" in f]
    entries = sum(f["entries"] for f in scopes)
    print(f"backed up {len(scopes)} scopes ({entries} entries) and {len(manifest['files']) - len(scopes)} other files")
    print(f"to {args.dest}; every copy verifies (manifest.json)")
    return EXIT_OK


async def cmd_restore(settings: Settings, args: argparse.Namespace) -> int:
    from decklog.core.store.sqlite.backup import restore

    count = restore(args.src, Path(settings.data_dir), key=log_chain_key(settings))
    print(f"restored {count} scopes from {args.src} into {settings.data_dir}; every scope verifies")
    return EXIT_OK


def _doctor_actions(settings: Settings) -> dict[str, str]:
    """The actions that are never proposed here, and why (an executor not configured); returns the outbox topics
    whose sender is not configured (bot/topics.py)."""
    from decklog.bot.actions import build_catalog, unavailable_actions
    from decklog.bot.config import load_config
    from decklog.bot.topics import unconfigured_topics

    config = load_config(settings.resolved_config_path)
    for name, why, example in unavailable_actions(build_catalog(settings, config)):
        print(f"action {name}: unavailable, never proposed: {why}" + (" (an example action)" if example else ""))
    return unconfigured_topics(settings, config)


async def cmd_doctor(settings: Settings, args: argparse.Namespace) -> int:
    unconfigured = _doctor_actions(settings)
    if not data_exists(settings):
        print(f"no data directory at {data_location(settings)}: nothing to check")
        return EXIT_OK
    async with opened_runtime(settings) as rt:
        scopes = await rt.store.scope_ids()
        pending_total, parked_total, revived = 0, 0, 0
        # rows for a sender not configured here are no work: `decklog serve` marks them done (core/outbox/unconfigured.py)
        idle: dict[str, list[int]] = {}  # topic -> [rows, scopes]
        for sid in scopes:
            summary = await rt.store.outbox_summary(sid)
            parked = await rt.store.outbox_parked(sid)
            for topic, n in sorted(summary.pending.items()):
                if topic in unconfigured:
                    counted = idle.setdefault(topic, [0, 0])
                    counted[0] += n
                    counted[1] += 1
                    continue
                pending_total += n
                print(f"{sid}  {topic:<8} pending {n}")
            for item in parked:
                parked_total += 1
                print(
                    f"{sid}  {item.topic:<8} PARKED  #{item.seq} {item.kind} after {item.attempts} attempts: {item.error}"
                )
            if args.retry and parked:
                revived += await rt.store.outbox_retry_parked(sid)
        where = "" if scopes else f" in {data_location(settings)}"  # the same output on both backends, once found
        print(f"{len(scopes)} scopes{where}; {pending_total} pending, {parked_total} parked outbox rows")
        for topic, (rows, in_scopes) in sorted(idle.items()):
            print(
                f"{topic}: {rows} rows in {in_scopes} scopes for a sender that is not configured ({unconfigured[topic]});"
                " not listed: `decklog serve` marks them done without sending"
            )
        if args.retry:
            print(f"{revived} parked rows queued again; a running `decklog serve` delivers them on its next sweep")
        for line in await doctor_inbox(rt.storage, retry=args.retry):  # parked (poison) Slack requests
            print(line)
    return EXIT_OK


async def cmd_reindex(settings: Settings, _args: argparse.Namespace) -> int:
    if not data_exists(settings):
        raise NotFound(f"no data directory at {data_location(settings)}")
    if settings.database_url:
        async with opened_runtime(settings) as rt:
            count, entries = await reindex_all(rt.store, rt.index)
    else:
        count, entries = await reindex_data_dir(Path(settings.data_dir))
    place = data_location(settings)
    where = f"the index in {place}" if settings.database_url else Path(place) / "index.db"
    print(f"reindexed {count} scopes ({entries} entries) into {where}")
    return EXIT_OK


async def cmd_insights(settings: Settings, args: argparse.Namespace) -> int:
    from decklog.core.insights import compute, parse_days, render_text

    days = parse_days(args.since, field="--since")
    now = datetime.now(UTC).timestamp()
    if not data_exists(settings):
        from decklog.core.insights import insights

        body = insights([], since_days=days, now=now)
    else:
        async with opened_runtime(settings) as rt:
            if not settings.database_url and not (Path(settings.data_dir) / "index.db").exists():
                await reindex_all(rt.store, rt.index, data_dir=Path(settings.data_dir))
            body = await compute(rt.index, since_days=days, now=now)
    if args.json:
        print(json.dumps(body, indent=2))
    else:
        print(render_text(body, where="" if body["incidents"] else data_location(settings)))
    return EXIT_OK


async def cmd_migrate(settings: Settings, args: argparse.Namespace) -> int:
    from decklog.bot.migrate import describe, migrate
    from decklog.core.store.postgres.schema import is_postgres_url

    if not is_postgres_url(args.to):
        raise UsageError("--to must be a postgresql:// or postgresql+psycopg:// URL")
    counts = await asyncio.to_thread(migrate, Path(settings.data_dir), args.to)
    for line in describe(counts):
        print(line)
    return EXIT_OK


def cmd_serve(settings: Settings, args: argparse.Namespace) -> int:
    from decklog.bot.server import serve_forever

    if settings.database_url:
        probe_database(settings.database_url)

    code: int = serve_forever(settings, socket_mode=args.socket_mode)
    return code


def probe_database(url: str) -> None:
    """Connect once before anything starts, so that a database that cannot be used stops ``serve`` with its one
    line (bot/cli/common.py ``storage_problem``) before the sandbox or any part has logged a word."""
    from decklog.core.store.postgres.schema import make_engine

    engine = make_engine(url, pool_size=1)
    try:
        with engine.connect():
            pass
    finally:
        engine.dispose()


def cmd_demo(settings: Settings, args: argparse.Namespace) -> int:
    from decklog.bot.demo import run_demo

    code: int = asyncio.run(run_demo(settings, data_dir=args.data_dir))
    return code


async def doctor_inbox(storage: StorageFactory, *, retry: bool) -> list[str]:
    """``decklog doctor``'s lines about the Slack inbox: each parked request with its error, the counts, and with
    ``retry`` the parked requests queued again (a running server replays them: ``inbox-replay``/``inbox-takeover``).
    Storage without an inbox yet (a SQLite data directory without ``inbox.db``: no Slack request ever stored) is
    left alone."""
    if not storage.inbox_exists():
        return ["inbox: 0 pending, 0 parked Slack requests"]
    inbox = await storage.inbox()
    try:
        lines = []
        parked = await inbox.parked()
        for p in parked:
            received = datetime.fromtimestamp(p.received_at, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
            lines.append(
                f"inbox  PARKED  {p.key} ({describe_request(p.body)}, received {received}) after {p.attempts} "
                f"attempts: {p.error}"
            )
        lines.append(f"inbox: {await inbox.pending_count()} pending, {len(parked)} parked Slack requests")
        if retry and parked:
            queued = await inbox.retry_parked()
            lines.append(
                f"{queued} parked Slack requests queued again; a running `decklog serve` replays them within "
                "seconds (or at its next start)"
            )
        return lines
    finally:
        await inbox.close()


def describe_request(body: dict[str, object]) -> str:
    """A stored Slack request in a few words: ``event_callback/message``, ``/incident sev 2``, ``block_actions``."""
    event = body.get("event")
    if body.get("type") == "event_callback" and isinstance(event, dict):
        return f"event_callback/{str(event.get('type', '?'))[:40]}"
    if "command" in body:
        return f"{str(body.get('command'))[:20]} {str(body.get('text', ''))[:60]}".strip()
    return str(body.get("type") or "request")[:40]
