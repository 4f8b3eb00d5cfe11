"""Empty scope files made ahead of time, so that declaring an incident does not wait for SQLite to create one.

Creating a scope file costs several fsyncs (the file, the switch to WAL, the schema's commit) before the first
entry can be written — about half of a declaration's time on this machine. ``SpareFiles`` keeps a couple of
ready files (WAL mode, current schema, no entries) in ``DATA_DIR/spare/`` (the same file system as
``DATA_DIR/scopes/``) and hands one over by renaming it into place. See docs/decisions/0037-spare-scope-files.md.

Handing over is safe with several processes on one data directory:

1. ``rename(spare, claim-<unique>)`` — atomic; of two processes reaching for one spare exactly one wins;
2. ``link(claim, target)`` — never replaces an existing scope file (a plain rename would);
3. ``unlink(claim)``, then fsync the scopes directory so that the new name is durable before the first commit.

A crash between the steps leaves only ``claim-*`` / ``tmp-*`` names in ``spare/``; ``fill`` removes them once
they are a minute old (by then no live claim can still be using the name). Everything here is synchronous and
runs on a worker thread.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import sqlite3
import time
from collections.abc import Sequence
from pathlib import Path

STALE_S = 60.0


def fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class SpareFiles:
    """Up to ``keep`` ready scope files. ``ddl`` makes the schema; ``user_version`` marks it as current."""

    def __init__(
        self, directory: Path, *, ddl: Sequence[str], user_version: int, keep: int = 2, page_size: int | None = None
    ) -> None:
        self.directory = directory
        self.page_size = page_size
        self.ddl = tuple(ddl)
        self.user_version = user_version
        self.keep = keep
        self.taken = 0
        self.made = 0

    def _spares(self) -> list[Path]:
        try:
            return sorted(p for p in self.directory.iterdir() if p.name.startswith("spare-") and p.suffix == ".db")
        except FileNotFoundError:
            return []

    def take(self, target: Path) -> bool:
        """Put a ready file at ``target`` (which must not exist). False when there was none (or ``target``
        appeared meanwhile): the caller then creates the file the ordinary way."""
        for spare in self._spares():
            claim = self.directory / f"claim-{os.getpid()}-{secrets.token_hex(6)}.db"
            try:
                os.rename(spare, claim)
            except FileNotFoundError:
                continue  # another process took this one
            try:
                os.link(claim, target)
            except OSError:  # the scope file exists already (or no hard links here): give the spare back
                os.rename(claim, spare)
                return False
            os.unlink(claim)
            fsync_dir(target.parent)
            self.taken += 1
            return True
        return False

    def fill(self) -> int:
        """Make spares until there are ``keep``; clear leftovers of crashed claims. Returns how many were made."""
        self.directory.mkdir(parents=True, exist_ok=True)
        now = time.time()
        for leftover in self.directory.iterdir():
            if leftover.name.startswith(("claim-", "tmp-")):
                with contextlib.suppress(FileNotFoundError):
                    if now - leftover.stat().st_mtime > STALE_S:
                        leftover.unlink()
        made = 0
        while len(self._spares()) < self.keep:
            stem = secrets.token_hex(8)
            tmp = self.directory / f"tmp-{stem}.db"
            self._make(tmp)
            os.rename(tmp, self.directory / f"spare-{stem}.db")
            made += 1
        if made:
            fsync_dir(self.directory)
            self.made += made
        return made

    def _make(self, path: Path) -> None:
        """The page size, WAL mode, the schema, ``user_version``; closed cleanly (checkpointed: no -wal file
        remains)."""
        conn = sqlite3.connect(path, isolation_level=None)
        try:
            if self.page_size is not None:  # before anything writes the file's first page
                conn.execute(f"PRAGMA page_size={int(self.page_size)}")
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=FULL")
            conn.execute("BEGIN IMMEDIATE")
            for statement in self.ddl:
                conn.execute(statement)
            conn.execute(f"PRAGMA user_version={int(self.user_version)}")
            conn.execute("COMMIT")
        finally:
            conn.close()
        for suffix in ("-wal", "-shm"):
            Path(f"{path}{suffix}").unlink(missing_ok=True)
