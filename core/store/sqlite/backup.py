"""``decklog backup DEST`` and ``decklog restore SRC``: an online, verified copy of a SQLite data directory.

Backup copies, through SQLite's backup API from a consistent read-only snapshot of each file (core/store/sqlite/readonly.py,
so a running ``decklog serve`` is neither stopped nor blocked): ``inbox.db`` first, then ``index.db``, then every
scope file. The order makes the copy consistent across files without a global lock: the inbox and the index are
older than the scopes, so an event the inbox copy holds as pending may already be in a scope (a retry, deduped by
its idempotency key), and index rows the copy lacks are still pending in the scopes' outboxes (delivered again
after a restore) — never the other way round, which would lose something. Each scope snapshot is taken after the
backup started, so everything acknowledged before it is in the copy. ``manifest.json`` records each file's
sha256, entry count and last hash, and decklog's version. The copy is built beside DEST and renamed into place
only once every file verifies, so a failed backup leaves no DEST.

Restore checks the manifest (the file list and every sha256) and verifies every scope before it renames the copy
into an empty DECKLOG_DATA_DIR. On PostgreSQL, backup is the database's own business (pg_dump, base backups).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sqlite3
from contextlib import closing
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from decklog.core.errors import Conflict, InvalidInput, NotFound, StorageError
from decklog.core.ids import ScopeId
from decklog.core.store.chain import ChainKey
from decklog.core.store.ports import VerifyReport
from decklog.core.store.sqlite.readonly import read_sqlite, scope_file_head, verify_scope_file

MANIFEST = "manifest.json"
FORMAT = 1
SIDE_DIRS = ("sandbox",)  # plain files (JSON, written atomically) copied as they are


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _inside(child: Path, parent: Path) -> bool:
    child, parent = child.resolve(), parent.resolve()
    return child == parent or parent in child.parents


def _check_empty_target(target: Path, what: str) -> None:
    if target.exists() and not target.is_dir():
        raise InvalidInput(f"{what} {target} is not a directory")
    if target.is_dir() and any(target.iterdir()):
        raise Conflict(f"{what} {target} is not empty")
    if not target.parent.is_dir():
        raise NotFound(f"{what} {target}: its parent directory does not exist")


def _staging(target: Path) -> Path:
    return target.parent / f".{target.name}.partial-{os.getpid()}"


def _put_in_place(staging: Path, target: Path) -> None:
    if target.is_dir():
        target.rmdir()  # empty (checked): rename(2) would replace it too, but say what happens
    os.replace(staging, target)


def _copy_db(src: Path, dst: Path) -> None:
    """A consistent snapshot of ``src`` into a new single file ``dst`` (rollback journal, no side files)."""

    def copy(conn: sqlite3.Connection) -> None:
        with closing(sqlite3.connect(dst)) as out:
            conn.backup(out)
            out.execute("PRAGMA journal_mode=DELETE")
            ok = out.execute("PRAGMA integrity_check").fetchone()[0]
            if ok != "ok":
                raise StorageError(f"the copy of {src.name} fails integrity_check: {ok}")

    read_sqlite(src, copy)


def _sources(data_dir: Path) -> list[tuple[str, Path]]:
    inboxes = ("inbox.db", "alert_inbox.db")  # before the index and the scopes: what they hold pending is older
    found = [(name, data_dir / name) for name in (*inboxes, "index.db") if (data_dir / name).is_file()]
    scopes = data_dir / "scopes"
    if scopes.is_dir():
        found.extend((f"scopes/{p.name}", p) for p in sorted(scopes.glob("*.db")))
    return found


def _scope_of(rel: str) -> str | None:
    if not rel.startswith("scopes/"):
        return None
    return str(ScopeId.from_file_stem(Path(rel).stem))


def backup(data_dir: Path, dest: Path, *, key: ChainKey | None, version: str) -> dict[str, Any]:
    """Copy ``data_dir`` into the new or empty directory ``dest``; return the manifest written there."""
    if not (data_dir / "scopes").is_dir() and not (data_dir / "index.db").is_file():
        raise NotFound(f"no decklog data directory at {data_dir}")
    if _inside(dest, data_dir):
        raise InvalidInput(f"{dest} is inside the data directory {data_dir}: back up to somewhere else")
    _check_empty_target(dest, "backup destination")
    staging = _staging(dest)
    staging.mkdir()
    try:
        manifest = _copy_all(data_dir, staging, key=key, version=version)
        (staging / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
        _put_in_place(staging, dest)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return manifest


def _copy_all(data_dir: Path, out: Path, *, key: ChainKey | None, version: str) -> dict[str, Any]:
    started = datetime.now(UTC).isoformat().replace("+00:00", "Z")
    files: list[dict[str, Any]] = []
    (out / "scopes").mkdir()
    for rel, src in _sources(data_dir):
        scope = _scope_of(rel)
        if scope is not None and scope_file_head(src)[0] == 0:
            continue  # a spare being put in place, or a declaration that failed: nothing acknowledged in it
        _copy_db(src, out / rel)
        item: dict[str, Any] = {"path": rel, "sha256": sha256_of(out / rel), "bytes": (out / rel).stat().st_size}
        if scope is not None:
            report = verify_scope_file(out / rel, scope, key=key)
            _require_ok(report, "the copy of")
            count, last = scope_file_head(out / rel)
            item.update(scope=scope, entries=count, last_hash=last, keyed=report.keyed)
        files.append(item)
    for side in SIDE_DIRS:
        for src in sorted((data_dir / side).glob("*")) if (data_dir / side).is_dir() else []:
            if src.is_file() and not src.name.startswith("."):
                (out / side).mkdir(exist_ok=True)
                shutil.copyfile(src, out / side / src.name)
                files.append({"path": f"{side}/{src.name}", "sha256": sha256_of(out / side / src.name)})
    return {"format": FORMAT, "decklog_version": version, "started_at": started, "files": files}


def _require_ok(report: VerifyReport, what: str) -> None:
    if not report.ok:
        raise StorageError(f"{what} {report.scope} does not verify: seq {report.first_bad_seq}: {report.reason}")


def read_manifest(src: Path) -> dict[str, Any]:
    if not src.is_dir():
        raise NotFound(f"no backup at {src}")
    try:
        manifest = json.loads((src / MANIFEST).read_text())
    except FileNotFoundError:
        raise NotFound(f"{src} has no {MANIFEST}: not a decklog backup") from None
    except ValueError as exc:
        raise InvalidInput(f"{src / MANIFEST} is not valid JSON: {exc}") from None
    if (
        not isinstance(manifest, dict)
        or manifest.get("format") != FORMAT
        or not isinstance(manifest.get("files"), list)
    ):
        raise InvalidInput(f"{src / MANIFEST} is not a decklog backup manifest (format {FORMAT})")
    return manifest


def check_backup(src: Path, manifest: dict[str, Any], *, key: ChainKey | None) -> list[str]:
    """Every problem with the backup at ``src`` against its manifest, one line each (none: it restores)."""
    problems: list[str] = []
    listed: set[str] = set()
    for item in manifest["files"]:
        rel = str(item.get("path", ""))
        listed.add(rel)
        path = src / rel
        if not rel or ".." in Path(rel).parts or Path(rel).is_absolute():
            problems.append(f"manifest lists a path outside the backup: {rel!r}")
        elif not path.is_file():
            problems.append(f"{rel}: listed in the manifest, missing from the backup")
        elif sha256_of(path) != item.get("sha256"):
            problems.append(f"{rel}: sha256 does not match the manifest")
        elif "scope" in item:
            problems.extend(_check_scope_copy(path, item, key))
    present = {str(p.relative_to(src)) for p in src.rglob("*") if p.is_file()} - {MANIFEST}
    problems.extend(f"{rel}: in the backup but not in the manifest" for rel in sorted(present - listed))
    return problems


def _check_scope_copy(path: Path, item: dict[str, Any], key: ChainKey | None) -> list[str]:
    report = verify_scope_file(path, str(item["scope"]), key=key)
    if not report.ok:
        return [f"{item['path']}: does not verify: seq {report.first_bad_seq}: {report.reason}"]
    if (report.entries, scope_file_head(path)[1]) != (item.get("entries"), item.get("last_hash")):
        return [f"{item['path']}: entry count or last hash differs from the manifest"]
    return []


def restore(src: Path, data_dir: Path, *, key: ChainKey | None) -> int:
    """Put the backup at ``src`` into the empty (or absent) ``data_dir``; return the number of scopes. Every
    restored scope is verified again before the copy is renamed into place."""
    if _inside(data_dir, src) or _inside(src, data_dir):
        raise InvalidInput(f"the backup {src} and the data directory {data_dir} overlap")
    _check_empty_target(data_dir, "DECKLOG_DATA_DIR")
    manifest = read_manifest(src)
    problems = check_backup(src, manifest, key=key)
    if problems:
        raise StorageError(f"{src}: {problems[0]}" + (f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""))
    staging = _staging(data_dir)
    staging.mkdir()
    try:
        for item in manifest["files"]:
            (staging / item["path"]).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src / item["path"], staging / item["path"])
            if sha256_of(staging / item["path"]) != item["sha256"]:
                raise StorageError(f"{item['path']}: the restored copy does not match the manifest")
        (staging / "scopes").mkdir(exist_ok=True)
        for item in manifest["files"]:
            if "scope" in item:
                _require_ok(verify_scope_file(staging / item["path"], str(item["scope"]), key=key), "the restored")
        _put_in_place(staging, data_dir)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return sum(1 for item in manifest["files"] if "scope" in item)
