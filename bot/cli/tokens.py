"""``decklog token create|list|revoke``: the REST API's tokens (core/tokens.py), on either backend.

``create`` prints the secret once, on the first line of stdout; nothing can show it again (only its sha256 is
stored). Arguments are checked before the data directory or the database is touched.
"""

from __future__ import annotations

import argparse
import json
from datetime import UTC, datetime

from decklog.bot.cli.common import EXIT_OK, opened_runtime
from decklog.bot.settings import Settings
from decklog.core.tokens import Tokens, check_name, check_scope


def _iso(at: float | None) -> str | None:
    return datetime.fromtimestamp(at, UTC).isoformat().replace("+00:00", "Z") if at is not None else None


async def cmd_token(settings: Settings, args: argparse.Namespace) -> int:
    if args.token_command == "create":
        check_name(args.name)
        check_scope(args.scope)
    async with opened_runtime(settings) as rt:
        tokens = Tokens(rt.api_keys)
        if args.token_command == "create":
            secret = await tokens.create(args.name, args.scope, user=args.user)
            print(secret)
            print(f"# token {args.name!r} ({args.scope}) made; it is shown only now: keep it in a secret store")
            return EXIT_OK
        if args.token_command == "revoke":
            await tokens.revoke(args.name)
            print(f"revoked {args.name!r}")
            return EXIT_OK
        rows = await tokens.list()
    listed = [
        {
            "name": r.name,
            "scope": r.scope,
            "user": r.user,
            "created_at": _iso(r.created_at),
            "revoked_at": _iso(r.revoked_at),
        }
        for r in rows
    ]
    if args.json:
        print(json.dumps(listed, indent=2))
    else:
        for r in listed:
            state = f"revoked {r['revoked_at']}" if r["revoked_at"] else "live"
            print(f"{r['name']}\t{r['scope']}\t{r['user'] or '-'}\t{r['created_at']}\t{state}")
    return EXIT_OK
