"""The ``decklog`` argument parser (DESIGN §9): one ``add_*`` function a command group. A bad argument raises
``UsageError`` (exit 2), never ``SystemExit``."""

from __future__ import annotations

import argparse
import difflib
from pathlib import Path
from typing import Any, NoReturn


class UsageError(Exception):
    """Bad command-line input (exit 2)."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{message} (see `{self.prog} --help`)")

    def _check_value(self, action: argparse.Action, value: Any) -> None:
        """A mistyped subcommand gets one line naming the closest one, not the list of all of them."""
        if (
            isinstance(action, argparse._SubParsersAction)
            and action.choices is not None
            and value not in action.choices
        ):
            raise UsageError(unknown_command(self.prog, str(value), list(action.choices)))
        super()._check_value(action, value)


ONCALL_VENDORS = ("pagerduty", "opsgenie", "grafana-oncall")  # core/oncall/imports.py IMPORTERS

MOVED = {"experiment": "python -m research.experiment"}
"""Commands that left the product, and how to run them now (from a checkout of the repository)."""


def unknown_command(prog: str, typed: str, commands: list[str]) -> str:
    if typed in MOVED:
        return f"`{prog} {typed}` moved out of {prog}: run `{MOVED[typed]}` from a checkout, with the same options"
    close = difflib.get_close_matches(typed, commands, n=1, cutoff=0.5)
    if not close:  # a prefix or a part of a name ("time" for "timeline") counts too
        close = [c for c in commands if c.startswith(typed) or (len(typed) >= 3 and typed in c)][:1]
    hint = f"did you mean `{prog} {close[0]}`?" if close else f"`{prog} --help` lists the commands"
    return f"unknown command {typed!r}; {hint}"


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="decklog", description="decklog — a Slack-first incident bot with a durable log per scope.")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True
    _add_process_parsers(sub)
    _add_scope_parsers(sub)
    _add_data_parsers(sub)

    _add_fork_parsers(sub)
    _add_token_parsers(sub)
    _add_oncall_parsers(sub)
    return p


def _add_token_parsers(sub: Any) -> None:
    """``decklog token create|list|revoke`` (bot/cli/tokens.py): the REST API's tokens."""
    t = sub.add_parser("token", help="REST API tokens: create (printed once), list, revoke")
    ts = t.add_subparsers(dest="token_command", metavar="ACTION", parser_class=_Parser)
    ts.required = True
    s = ts.add_parser("create", help="make a token and print it once (only its hash is stored)")
    s.add_argument("--name", required=True, help="its name, recorded as the actor of every write it makes")
    s.add_argument("--scope", required=True, choices=("read", "write", "admin"), help="what it may do")
    s.add_argument("--user", default="", metavar="SLACK_USER_ID", help="the person it acts for (approvals)")
    s = ts.add_parser("list", help="every token: name, scope, person, made, revoked")
    s.add_argument("--json", action="store_true", help="print JSON")
    s = ts.add_parser("revoke", help="revoke a token by name (at once, on every replica)")
    s.add_argument("name")


def _add_oncall_parsers(sub: Any) -> None:
    s = sub.add_parser("oncall", help="on-call: import schedules and escalation policies from another tool")
    inner = s.add_subparsers(dest="oncall_command", metavar="SUBCOMMAND", parser_class=_Parser)
    inner.required = True
    imp = inner.add_parser(
        "import", help="print the [oncall] decklog.toml for a PagerDuty, Opsgenie or Grafana OnCall export"
    )
    imp.add_argument("--from", dest="vendor", required=True, choices=ONCALL_VENDORS)
    imp.add_argument("files", nargs="+", metavar="FILE", help="the vendor's JSON (its API responses)")


def _add_process_parsers(sub: Any) -> None:
    s = sub.add_parser("serve", help="run the HTTP server (Slack events, alerts, REST API, health, metrics)")
    s.add_argument("--socket-mode", action="store_true", help="talk to Slack over Socket Mode (SLACK_APP_TOKEN)")

    s = sub.add_parser("demo", help="play the 03:12 story end to end against a local fake Slack")
    s.add_argument("--data-dir", type=Path, help="data directory (default: a new temporary directory, kept)")


def _add_scope_parsers(sub: Any) -> None:
    s = sub.add_parser("scopes", help="list scopes (newest first; says so on stderr when the list is cut)")
    s.add_argument("--json", action="store_true", help="print JSON")
    s.add_argument("--kind", choices=["incident", "change"])
    s.add_argument("--status")
    s.add_argument("--limit", type=int, default=500, help="list at most N, newest first (default 500)")
    s.add_argument("--all", action="store_true", help="list every scope, however many")

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


def _add_data_parsers(sub: Any) -> None:
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


# -- state, fork, replay (bot/replay_cli.py does the work) ----------------------------------------------------


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
    s.add_argument("--reasoner", default="rules", metavar="rules|claude")
    s.add_argument("--fail-on-diff", action="store_true", help="exit 1 when the agents decided differently")
