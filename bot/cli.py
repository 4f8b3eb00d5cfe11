"""The ``decklog`` command line (DESIGN §9). Works from any directory: only its options and environment count.

Bad input → one clear line on stderr, a non-zero exit (2 for usage, 1 for a refused operation), no traceback,
and nothing written: arguments are validated before the data directory is touched.
"""

from __future__ import annotations

import argparse
import asyncio
import getpass
import json
import logging
import os
import sys
from collections.abc import Callable, Coroutine, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NoReturn

from bot.config import load_config
from bot.settings import Settings, SettingsError, load_settings
from core.clock import iso
from core.entries import Actor, parse_payload
from core.errors import Conflict, DecklogError, Forbidden, InvalidInput, NotFound, StorageError
from core.ids import ScopeId
from core.service import parse_severity

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INTERNAL = 0, 1, 2, 70


class UsageError(Exception):
    """Bad command-line input (exit 2)."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{message} (see `{self.prog} --help`)")


def _cli_actor() -> Actor:
    try:
        user = os.environ.get("DECKLOG_ACTOR") or getpass.getuser()
    except Exception:
        user = "operator"
    return Actor(type="human", id=f"cli:{user}", name=user)


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="decklog", description="decklog — a Slack-first incident bot with a durable log per scope.")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True

    s = sub.add_parser("serve", help="run the HTTP server (Slack events, alerts, REST API, health, metrics)")
    s.add_argument("--socket-mode", action="store_true", help="talk to Slack over Socket Mode (SLACK_APP_TOKEN)")

    s = sub.add_parser("demo", help="play the 03:12 story end to end against a local fake Slack")
    s.add_argument("--data-dir", type=Path, help="data directory (default: a new temporary directory, kept)")

    s = sub.add_parser("scopes", help="list scopes")
    s.add_argument("--json", action="store_true", help="print JSON")
    s.add_argument("--kind", choices=["incident", "change"])
    s.add_argument("--status")

    s = sub.add_parser("declare", help="declare an incident; prints the new scope id on the first line")
    s.add_argument("--title", required=True)
    s.add_argument("--severity", help="1-4 (1 is the worst)")
    s.add_argument("--scope", help="an explicit new scope id, e.g. incident/payments-5xx")
    s.add_argument("--service", action="append", default=[], help="affected service (repeatable)")

    s = sub.add_parser("append", help="append one entry to a scope")
    s.add_argument("scope")
    s.add_argument("kind")
    s.add_argument("--json", dest="payload", required=True, metavar="PAYLOAD", help="the entry's payload as JSON")
    s.add_argument("--ref", type=int, action="append", default=[], help="seq of an entry this one refers to")
    s.add_argument("--idempotency-key")

    s = sub.add_parser("timeline", help="print a scope's log")
    s.add_argument("scope")
    s.add_argument("--json", action="store_true", help="print a JSON array of entries")
    s.add_argument("--after", type=int, default=0)
    s.add_argument("--limit", type=int)

    s = sub.add_parser("export", help="export the post-incident report")
    s.add_argument("scope")
    s.add_argument("--format", choices=["md", "json", "html"], default="md")
    s.add_argument("--output", type=Path, help="write to FILE instead of stdout")

    s = sub.add_parser(
        "verify", help="check the hash chain and that the stored state equals the fold of the log (read-only)"
    )
    s.add_argument("scope", nargs="?")
    s.add_argument("--all", action="store_true", help="every scope, and index.db against the scopes")

    s = sub.add_parser("backup", help="a consistent copy of the data directory, online (manifest.json, verified)")
    s.add_argument("dest", type=Path, help="a new or empty directory outside the data directory")

    s = sub.add_parser("restore", help="put a backup into an empty DECKLOG_DATA_DIR")
    s.add_argument("src", type=Path, help="a directory made by `decklog backup`")

    s = sub.add_parser("doctor", help="pending and parked outbox rows per sender")
    s.add_argument("--retry", action="store_true", help="put parked rows back in the queue")

    sub.add_parser("reindex", help="rebuild index.db from the scope files alone")

    s = sub.add_parser("insights", help="counts, MTTA, MTTM and MTTR over the incidents declared lately")
    s.add_argument("--since", metavar="DAYS", default="30", help="the window in days (default 30)")
    s.add_argument("--json", action="store_true", help="print JSON")

    s = sub.add_parser("migrate", help="copy the SQLite data directory into an empty PostgreSQL database")
    s.add_argument("--to", required=True, metavar="URL", help="postgresql://… (the data directory is only read)")

    from bot.experiment.cli import add_parser as add_experiment  # issue 17 (H17)

    add_experiment(sub)
    _add_fork_parsers(sub)
    return p


# -- state, fork, replay (issue 17: bot/replay_cli.py does the work) ------------------------------------------


def _seq_arg(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a seq: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"a seq is at least 1, not {value}")
    return value


def _add_fork_parsers(sub: Any) -> None:
    s = sub.add_parser("state", help="print a scope's folded state as of any seq")
    s.add_argument("scope")
    s.add_argument("--at", type=_seq_arg, metavar="SEQ", help="fold entries 1..SEQ (default: all)")
    s.add_argument("--json", action="store_true", help="print JSON (the only format)")

    s = sub.add_parser("fork", help="copy entries 1..SEQ into a new scope; prints its id first (never delivered)")
    s.add_argument("scope")
    s.add_argument("--at", type=_seq_arg, metavar="SEQ", required=True)
    s.add_argument("--scope", dest="new_scope", metavar="NEW", help="the new scope id (default: <scope>-fork-N)")

    s = sub.add_parser("replay", help="fork, re-deliver the recorded inputs, regenerate the agents' entries, diff")
    s.add_argument("scope")
    s.add_argument("--at", type=_seq_arg, metavar="SEQ", help="fork here (default: before the first agent entry)")
    s.add_argument("--reasoner", default="rules", metavar="rules|claude|recorded:DIR")
    s.add_argument("--fail-on-diff", action="store_true", help="exit 1 when the agents decided differently")


async def cmd_state(settings: Settings, args: argparse.Namespace) -> int:
    from core.fork import state_at

    scope = str(ScopeId.parse(args.scope))
    _require_data(settings, scope)
    async with _runtime(settings) as rt:
        state = await state_at(rt.store, scope, args.at)
    print(json.dumps(state.to_json(), indent=2, ensure_ascii=False))
    return EXIT_OK


async def cmd_fork(settings: Settings, args: argparse.Namespace) -> int:
    from core.fork import fork_scope

    scope = str(ScopeId.parse(args.scope))
    new = str(ScopeId.parse(args.new_scope)) if args.new_scope else None
    _require_data(settings, scope)
    async with _runtime(settings) as rt:
        result = await fork_scope(rt.store, rt.index, scope, at=args.at, new=new)
        await _drain_index(rt, result.scope)
    print(result.scope)
    print(f"forked {scope} at seq {result.seq} ({len(result.entries)} entries); never delivered to Slack or executors")
    return EXIT_OK


async def cmd_replay(settings: Settings, args: argparse.Namespace) -> int:
    from bot.replay_cli import run_replay

    scope = str(ScopeId.parse(args.scope))
    _require_data(settings, scope)
    return await run_replay(settings, scope, at=args.at, reasoner=args.reasoner, fail_on_diff=args.fail_on_diff)


# -- commands -------------------------------------------------------------------------------------------------


async def cmd_scopes(settings: Settings, args: argparse.Namespace) -> int:
    if not _data_exists(settings):
        rows: list[Any] = []
    else:
        async with _runtime(settings) as rt:
            if not settings.database_url and not (Path(settings.data_dir) / "index.db").exists():
                await _reindex(rt)
            rows = await rt.index.list_scopes(kind=args.kind, status=args.status)
    if args.json:
        print(json.dumps([r.to_json() for r in rows], indent=2))
        return EXIT_OK
    if not rows:
        print("no scopes yet — `decklog declare --title …` opens one")
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
    async with _runtime(settings) as rt:
        result = await rt.service.declare(
            title=title, severity=severity, scope=scope, actor=_cli_actor(), via="cli", services=args.service
        )
        await _drain_index(rt, result.state.scope)
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
    _require_data(settings, scope)
    async with _runtime(settings) as rt:
        result = await rt.service.record(
            scope, args.kind, data, _cli_actor(), refs=args.ref, idempotency_key=args.idempotency_key
        )
        await _drain_index(rt, scope)
    for entry in result.entries:
        print(json.dumps(entry.to_json()))
    if result.duplicate:
        print("(duplicate idempotency key: nothing appended)", file=sys.stderr)
    return EXIT_OK


async def cmd_timeline(settings: Settings, args: argparse.Namespace) -> int:
    scope = str(ScopeId.parse(args.scope))
    if args.limit is not None and args.limit < 1:
        raise UsageError("--limit must be at least 1")
    _require_data(settings, scope)
    async with _runtime(settings) as rt:
        entries = await rt.store.read(scope, after=max(0, args.after), limit=args.limit)
    if args.json:
        print(json.dumps([e.to_json() for e in entries], indent=2, ensure_ascii=False))
        return EXIT_OK
    for e in entries:
        print(f"#{e.seq:<4} {iso(e.at)[:19]}Z  [{e.actor.type}] {e.text}")
    return EXIT_OK


async def cmd_export(settings: Settings, args: argparse.Namespace) -> int:
    scope = str(ScopeId.parse(args.scope))
    _require_data(settings, scope)
    from bot.reports import record_export, render_report

    async with _runtime(settings) as rt:
        body, digest, fmt = await render_report(rt.store, scope, args.format, templates=rt.reports)
        # Deliver first, then record: a report_exported entry must never claim a file that was not written.
        if args.output:
            _write_atomically(args.output, body)
        else:
            sys.stdout.buffer.write(body)
            sys.stdout.flush()
        await record_export(rt.store, scope, fmt, body, destination=str(args.output or "stdout"), actor=_cli_actor())
        await _drain_index(rt, scope)
    if args.output:
        print(f"{args.output} sha256:{digest}")
    return EXIT_OK


def _write_atomically(path: Path, body: bytes) -> None:
    target = path.expanduser()
    tmp = target.with_name(f".{target.name}.tmp-{os.getpid()}")
    try:
        tmp.write_bytes(body)
        os.replace(tmp, target)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise StorageError(f"cannot write {path}: {exc.strerror}") from None


async def cmd_verify(settings: Settings, args: argparse.Namespace) -> int:
    """Read-only: scope files are opened with SQLite ``mode=ro``/``immutable`` or a private copy
    (core/store/readonly.py); no index, no dispatcher, nothing written into the data directory."""
    from core.store.readonly import verify_scope_file

    if args.all == bool(args.scope):
        raise UsageError("name one SCOPE, or --all")
    key = _log_key(settings)
    if settings.database_url:
        return await _verify_database(settings, None if args.all else str(ScopeId.parse(args.scope)))
    if args.all:
        return await _verify_all(settings, key)
    scope = str(ScopeId.parse(args.scope))
    _require_data(settings, scope)
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
    from core.index_postgres import PostgresIndex
    from core.store.postgres import PostgresLogStore

    assert settings.database_url is not None
    log_key = settings.log_key.get_secret_value() if settings.log_key else None
    store = PostgresLogStore(settings.database_url, log_key=log_key, threads=2)
    try:
        if scope is not None:
            return _verify_said(scope, await store.verify(scope), store.chain_key)
        problems: list[str] = []
        scopes = [str(s) for s in await store.scope_ids()]
        for sid in scopes:
            report = await store.verify(sid)
            if not report.ok:
                problems.append(f"{sid}: seq {report.first_bad_seq}: {report.reason}")
        index = PostgresIndex(store.engine, store.executor)
        rows = {r.id: r for r in await index.list_scopes()}
        for sid in scopes:
            state, row = await store.get_state(sid), rows.get(sid)
            if row is None:
                problems.append(f"{sid}: missing from the index")
            elif (row.title, row.status, row.severity) != (state.title, state.status, state.severity):
                problems.append(
                    f"{sid}: the index says {row.title!r} {row.status} SEV{row.severity}, the log says "
                    f"{state.title!r} {state.status} SEV{state.severity}"
                )
        problems += [f"{sid}: in the index but has no log" for sid in sorted(set(rows) - set(scopes))]
    finally:
        await store.close()
    for line in problems:
        print(f"decklog: {line}", file=sys.stderr)
    summary = f"{len(scopes) - sum(1 for p in problems if ': seq ' in p)} of {len(scopes)} scopes verify"
    if problems:
        print(f"decklog: verify --all: {len(problems)} problems; {summary}", file=sys.stderr)
        return EXIT_FAILED
    print(f"ok: {summary}; the index agrees with the scopes")
    return EXIT_OK


async def _verify_all(settings: Settings, key: Any) -> int:
    from core.store.audit import audit

    data_dir = Path(settings.data_dir)
    if not data_dir.is_dir():
        raise NotFound(f"no data directory at {data_dir}")
    result = await audit(data_dir, key=key)
    for line in result.problems:
        print(f"decklog: {line}", file=sys.stderr)
    summary = f"{result.ok} of {result.scopes} scopes verify ({result.keyed} keyed)"
    if result.problems:
        print(f"decklog: verify --all: {len(result.problems)} problems; {summary}", file=sys.stderr)
        return EXIT_FAILED
    print(f"ok: {summary}; index.db agrees with the scopes")
    return EXIT_OK


def _log_key(settings: Settings) -> Any:
    from core.store.chain import ChainKey

    return ChainKey.of(settings.log_key.get_secret_value() if settings.log_key else None)


async def cmd_backup(settings: Settings, args: argparse.Namespace) -> int:
    from core.store.backup import backup

    manifest = backup(Path(settings.data_dir), args.dest, key=_log_key(settings), version=_version())
    scopes = [f for f in manifest["files"] if "scope" in f]
    entries = sum(f["entries"] for f in scopes)
    print(f"backed up {len(scopes)} scopes ({entries} entries) and {len(manifest['files']) - len(scopes)} other files")
    print(f"to {args.dest}; every copy verifies (manifest.json)")
    return EXIT_OK


async def cmd_restore(settings: Settings, args: argparse.Namespace) -> int:
    from core.store.backup import restore

    count = restore(args.src, Path(settings.data_dir), key=_log_key(settings))
    print(f"restored {count} scopes from {args.src} into {settings.data_dir}; every scope verifies")
    return EXIT_OK


def _version() -> str:
    from importlib import metadata

    try:
        return metadata.version("decklog")
    except metadata.PackageNotFoundError:
        return "unknown"


async def cmd_doctor(settings: Settings, args: argparse.Namespace) -> int:
    if not _data_exists(settings):
        print(f"no data directory at {settings.data_dir}: nothing to check")
        return EXIT_OK
    async with _runtime(settings) as rt:
        scopes = await rt.store.scope_ids()
        pending_total, parked_total, revived = 0, 0, 0
        for sid in scopes:
            summary = await rt.store.outbox_summary(sid)
            parked = await rt.store.outbox_parked(sid)
            for topic, n in sorted(summary.pending.items()):
                pending_total += n
                print(f"{sid}  {topic:<8} pending {n}")
            for item in parked:
                parked_total += 1
                print(
                    f"{sid}  {item.topic:<8} PARKED  #{item.seq} {item.kind} after {item.attempts} attempts: {item.error}"
                )
            if args.retry and parked:
                revived += await rt.store.outbox_retry_parked(sid)
        print(f"{len(scopes)} scopes; {pending_total} pending, {parked_total} parked outbox rows")
        if args.retry:
            print(f"{revived} parked rows queued again; a running `decklog serve` delivers them on its next sweep")
    return EXIT_OK


async def cmd_reindex(settings: Settings, _args: argparse.Namespace) -> int:
    if not _data_exists(settings):
        raise NotFound(f"no data directory at {settings.data_dir}")
    async with _runtime(settings) as rt:
        count, entries = await _reindex(rt)
    where = "the database's index" if settings.database_url else Path(settings.data_dir) / "index.db"
    print(f"reindexed {count} scopes ({entries} entries) into {where}")
    return EXIT_OK


async def cmd_insights(settings: Settings, args: argparse.Namespace) -> int:
    from core.insights import compute, parse_days, render_text

    days = parse_days(args.since, field="--since")
    now = datetime.now(UTC).timestamp()
    if not _data_exists(settings):
        from core.insights import insights

        body = insights([], since_days=days, now=now)
    else:
        async with _runtime(settings) as rt:
            if not settings.database_url and not (Path(settings.data_dir) / "index.db").exists():
                await _reindex(rt)
            body = await compute(rt.index, since_days=days, now=now)
    print(json.dumps(body, indent=2) if args.json else render_text(body))
    return EXIT_OK


async def cmd_migrate(settings: Settings, args: argparse.Namespace) -> int:
    from bot.migrate import describe, migrate
    from core.store.postgres_schema import is_postgres_url

    if not is_postgres_url(args.to):
        raise UsageError("--to must be a postgresql:// or postgresql+psycopg:// URL")
    counts = await asyncio.to_thread(migrate, Path(settings.data_dir), args.to)
    for line in describe(counts):
        print(line)
    return EXIT_OK


def cmd_serve(settings: Settings, args: argparse.Namespace) -> int:
    from bot.server import serve_forever

    code: int = serve_forever(settings, socket_mode=args.socket_mode)
    return code


def cmd_demo(settings: Settings, args: argparse.Namespace) -> int:
    from bot.demo import run_demo

    code: int = asyncio.run(run_demo(settings, data_dir=args.data_dir))
    return code


# -- plumbing -------------------------------------------------------------------------------------------------


def _data_exists(settings: Settings) -> bool:
    return bool(settings.database_url) or Path(settings.data_dir).is_dir()


def _require_data(settings: Settings, scope: str) -> None:
    sid = ScopeId.parse(scope)
    if settings.database_url:
        return  # the store says NotFound for an unknown scope (the SQLite check spares creating a data dir)
    if not (Path(settings.data_dir) / "scopes" / f"{sid.file_stem}.db").exists():
        raise NotFound(f"no such scope: {scope} (in {settings.data_dir})")


class _runtime:
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


async def _drain_index(rt: Any, scope: str) -> None:
    """Bring index.db up to date now, so that `decklog scopes` right after shows the change."""
    rt.dispatcher.wake(scope, ["index"])
    await rt.dispatcher.idle()


async def _reindex(rt: Any) -> tuple[int, int]:
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
    return len(items), total


COMMANDS: dict[str, Callable[[Settings, argparse.Namespace], Coroutine[Any, Any, int]]] = {
    "scopes": cmd_scopes,
    "declare": cmd_declare,
    "append": cmd_append,
    "timeline": cmd_timeline,
    "export": cmd_export,
    "verify": cmd_verify,
    "backup": cmd_backup,
    "restore": cmd_restore,
    "doctor": cmd_doctor,
    "reindex": cmd_reindex,
    "insights": cmd_insights,
    "migrate": cmd_migrate,
    "state": cmd_state,
    "fork": cmd_fork,
    "replay": cmd_replay,
}


def _fail(message: str, code: int) -> int:
    print(f"decklog: {message}", file=sys.stderr)
    return code


def main(argv: Sequence[str] | None = None) -> int:
    logging.basicConfig(
        level=os.environ.get("DECKLOG_LOG_LEVEL", "WARNING").upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        args = build_parser().parse_args(argv)
        overrides: dict[str, Any] = {}
        if args.command == "demo" and args.data_dir:
            overrides["data_dir"] = args.data_dir
        settings = load_settings(**overrides)
        load_config(settings.resolved_config_path)  # a bad decklog.toml stops every command, not just serve
        if args.command == "serve":
            return cmd_serve(settings, args)
        if args.command == "demo":
            return cmd_demo(settings, args)
        if args.command == "experiment":  # issue 17 (H17): its own processes and data directories
            from bot.experiment.cli import run as run_experiment

            return run_experiment(args)
        return asyncio.run(COMMANDS[args.command](settings, args))
    except UsageError as exc:
        return _fail(f"error: {exc}", EXIT_USAGE)
    except SettingsError as exc:
        return _fail(f"configuration error: {exc}", EXIT_USAGE)
    except InvalidInput as exc:
        return _fail(f"error: {exc}", EXIT_USAGE)
    except (NotFound, Conflict, Forbidden) as exc:
        return _fail(f"error: {exc}", EXIT_FAILED)
    except DecklogError as exc:
        return _fail(f"error: {exc}", EXIT_FAILED)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `decklog timeline … | head`
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_OK
    except Exception as exc:
        if os.environ.get("DECKLOG_DEBUG"):
            raise
        return _fail(
            f"internal error: {exc.__class__.__name__}: {exc} (DECKLOG_DEBUG=1 shows a traceback)", EXIT_INTERNAL
        )


if __name__ == "__main__":
    sys.exit(main())
