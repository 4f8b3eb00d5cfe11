"""``decklog token create|list|revoke`` as a user runs it: the secret printed once on the first line, only its hash
stored, a bad name refused before anything is written, and a revoked token no longer identifies anyone."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

from decklog.core.store.sqlite.factory import SqliteFactory
from decklog.core.tokens import Tokens


def decklog(data: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "DECKLOG_DATA_DIR": str(data)}
    return subprocess.run(
        [sys.executable, "-m", "decklog.bot.cli", *args], capture_output=True, text=True, env=env, timeout=120
    )


async def identify(data: Path, secret: str) -> str | None:
    keys = await SqliteFactory(data).api_keys()
    try:
        who = await Tokens(keys).identify(secret)
        return f"{who.name}:{who.scope}:{who.user}" if who else None
    finally:
        await keys.close()


def test_create_prints_the_secret_once_and_stores_only_its_hash(tmp_path: Path) -> None:
    data = tmp_path / "data"
    bad = decklog(data, "token", "create", "--name", "Not A Name", "--scope", "write")
    assert bad.returncode == 2 and "name:" in bad.stderr and not data.exists()  # refused before anything is written
    made = decklog(data, "token", "create", "--name", "ci-canary", "--scope", "write", "--user", "U0LEAD")
    assert made.returncode == 0, made.stderr
    secret = made.stdout.splitlines()[0]
    assert secret.startswith("dl_") and len(secret) > 40
    assert secret.encode() not in (data / "api.db").read_bytes()
    assert asyncio.run(identify(data, secret)) == "ci-canary:write:U0LEAD"
    again = decklog(data, "token", "create", "--name", "ci-canary", "--scope", "read")
    assert again.returncode == 1 and "exists already" in again.stderr
    listed = json.loads(decklog(data, "token", "list", "--json").stdout)
    assert [(t["name"], t["scope"], t["user"], t["revoked_at"]) for t in listed] == [
        ("ci-canary", "write", "U0LEAD", None)
    ]
    assert secret not in decklog(data, "token", "list").stdout
    assert decklog(data, "token", "revoke", "ci-canary").returncode == 0
    assert asyncio.run(identify(data, secret)) is None
    gone = decklog(data, "token", "revoke", "ci-canary")
    assert gone.returncode == 1 and "no live token" in gone.stderr
