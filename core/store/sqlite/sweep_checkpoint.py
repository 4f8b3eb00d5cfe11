"""Which scope files the boot sweep must open: those that may hold rows waiting for delivery, not all of history.

A boot sweep opens every file it is given and wakes the scopes with rows pending for the senders this process runs.
When it has checked them it writes ``sweep-checkpoint.json`` in the data directory: the wall-clock time it started
(``at``), the senders it checked for, the scopes it found pending, and the identity of the scopes directory. The
next boot opens only

* the scopes the checkpoint found pending, and
* every scope file (or its ``-wal``) modified since ``at`` (less ``SLACK_S``): a commit, a delivery, a retry or a
  park writes the file, so a scope untouched since then is as the checkpoint found it.

By induction every scope left out had nothing pending at the last check and nothing written since. Anything the
rule cannot vouch for means a full sweep: no checkpoint, one that does not parse, one made for fewer senders than
run now (a newly configured sender's rows were never looked for), or a scopes directory that is not the same one
(restored from a backup, copied). Listing the files' times costs one ``stat`` per file, far less than opening it.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Collection, Sequence
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

NAME = "sweep-checkpoint.json"
#: File times are compared with a margin: a commit a little before the checkpoint's start, a clock step.
SLACK_S = 60.0


def _identity(scopes_dir: Path) -> list[int]:
    st = scopes_dir.stat()
    return [st.st_dev, st.st_ino]


def _read(data_dir: Path) -> dict[str, Any] | None:
    try:
        point = json.loads((data_dir / NAME).read_text())
    except (OSError, ValueError):
        return None
    return point if isinstance(point, dict) else None


def candidates(data_dir: Path, scopes_dir: Path, names: Sequence[str], topics: Collection[str]) -> list[str]:
    """The file names (``*.db``, of ``names``) the boot sweep must open; all of them when the checkpoint cannot
    vouch for the others."""
    files = [n for n in names if n.endswith(".db")]
    point = _read(data_dir)
    try:
        usable = (
            point is not None
            and set(topics) <= set(point["topics"])
            and point["dir"] == _identity(scopes_dir)
            and isinstance(point["at"], int | float)
        )
    except (KeyError, TypeError, OSError):
        usable = False
    if not usable:
        return files
    assert point is not None
    since = float(point["at"]) - SLACK_S
    pending = {str(p) for p in point.get("pending", [])}
    out = []
    for name in files:
        if name in pending or _touched_since(scopes_dir / name, since):
            out.append(name)
    return out


def _touched_since(path: Path, since: float) -> bool:
    for p in (path, path.with_name(path.name + "-wal")):
        try:
            if p.stat().st_mtime >= since:
                return True
        except FileNotFoundError:
            continue
    return False


def write(data_dir: Path, scopes_dir: Path, *, at: float, topics: Collection[str], pending: Sequence[str]) -> None:
    """Record a finished check (``at``: when it started): the scope files in ``pending`` had rows waiting for
    ``topics``; every other file it opened, and every file it did not, had none."""
    body = json.dumps({"at": at, "topics": sorted(topics), "dir": _identity(scopes_dir), "pending": sorted(pending)})
    tmp = data_dir / f".{NAME}.tmp-{os.getpid()}"
    try:
        with tmp.open("w") as f:
            f.write(body)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, data_dir / NAME)
    except OSError:
        log.warning("boot sweep: could not write %s; the next boot opens every scope file", NAME, exc_info=True)
        tmp.unlink(missing_ok=True)
