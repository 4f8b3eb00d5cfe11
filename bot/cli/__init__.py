"""The ``decklog`` command line (DESIGN §9). Works from any directory: only its options and environment count.

Bad input → one clear line on stderr, a non-zero exit (2 for usage, 1 for a refused operation), no traceback,
and nothing written: arguments are validated before the data directory is touched.

The parser is bot/cli/parser.py; the commands: bot/cli/scopes.py (one scope's log), verify.py, operations.py
(the data directory, serve, demo); bot/cli/common.py what they share. ``python -m decklog.bot.cli`` runs ``main``.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
from collections.abc import Callable, Coroutine, Sequence
from typing import Any

from pydantic import ValidationError

from decklog.bot.cli.common import (
    EXIT_FAILED,
    EXIT_INTERNAL,
    EXIT_OK,
    EXIT_UNAVAILABLE,
    EXIT_USAGE,
    data_location,
    storage_problem,
)
from decklog.bot.cli.oncall import cmd_oncall
from decklog.bot.cli.operations import (
    cmd_backup,
    cmd_demo,
    cmd_doctor,
    cmd_insights,
    cmd_migrate,
    cmd_reindex,
    cmd_restore,
    cmd_serve,
)
from decklog.bot.cli.parser import UsageError, build_parser
from decklog.bot.cli.scopes import (
    cmd_append,
    cmd_declare,
    cmd_export,
    cmd_fork,
    cmd_replay,
    cmd_scopes,
    cmd_state,
    cmd_timeline,
)
from decklog.bot.cli.tokens import cmd_token
from decklog.bot.cli.verify import cmd_verify
from decklog.bot.config import load_config
from decklog.bot.settings import Settings, SettingsError, load_settings
from decklog.core.entries.registry import invalid_input
from decklog.core.errors import Conflict, DecklogError, Forbidden, InvalidInput, NotFound

__all__ = [
    "COMMANDS",
    "EXIT_FAILED",
    "EXIT_INTERNAL",
    "EXIT_OK",
    "EXIT_UNAVAILABLE",
    "EXIT_USAGE",
    "UsageError",
    "build_parser",
    "main",
]

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
    "token": cmd_token,
    "oncall": cmd_oncall,
}


def _fail(message: str, code: int) -> int:
    print(f"decklog: {message}", file=sys.stderr)
    return code


def _located(message: str, settings: Settings | None) -> str:
    """A "not found" names where it looked: the data directory or the database."""
    if settings is None:
        return message
    where = data_location(settings)
    named = (where, str(settings.data_dir)) if not settings.database_url else (where,)
    return message if any(n in message for n in named) else f"{message} (in {where})"


def main(argv: Sequence[str] | None = None) -> int:
    logging.basicConfig(
        level=os.environ.get("DECKLOG_LOG_LEVEL", "WARNING").upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    settings: Settings | None = None
    args: argparse.Namespace | None = None
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
        return asyncio.run(COMMANDS[args.command](settings, args))
    except UsageError as exc:
        return _fail(f"error: {exc}", EXIT_USAGE)
    except SettingsError as exc:
        return _fail(f"configuration error: {exc}", EXIT_USAGE)
    except InvalidInput as exc:
        return _fail(f"error: {exc}", EXIT_USAGE)
    except ValidationError as exc:  # a model built from the command's input: the caller's mistake, not a bug
        return _fail(f"error: {invalid_input(exc)}", EXIT_USAGE)
    except NotFound as exc:
        return _fail(f"error: {_located(str(exc), settings)}", EXIT_FAILED)
    except (Conflict, Forbidden) as exc:
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
        target = getattr(args, "to", None) if args is not None and args.command == "migrate" else None
        problem = storage_problem(exc, settings, target_url=target)
        if problem is not None:
            return _fail(problem, EXIT_UNAVAILABLE)
        return _fail(
            f"internal error: {exc.__class__.__name__}: {exc} (DECKLOG_DEBUG=1 shows a traceback)", EXIT_INTERNAL
        )
