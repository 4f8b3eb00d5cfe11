"""A resolved incident's scope file made small: its delivered outbox rows dropped, then the file rewritten (VACUUM).

Years of incidents are kept one SQLite file each, and a resolved one is read now and then but no longer grows
(docs/decisions/0179-small-resolved-scope-files.md). Two steps, each safe if the process dies in it:

1. ``drop_delivered`` runs inside the transaction that marks a scope's last pending rows delivered
   (``SqliteLogStore.outbox_done``), when the scope is resolved and no row waits for any sender: it deletes the
   rows already published. Parked rows stay (``decklog doctor`` lists them); a row still pending is never touched.
   Nothing reads a published row: the senders read pending rows, ``doctor`` and ``/metrics`` count pending and
   parked ones, and the hash chain, ``verify``, reports and exports read entries. If the transaction is lost, the
   rows are simply published rows again.
2. ``vacuum`` runs when the file is closed (evicted from the open-file cache, or the store closing) if step 1
   flagged it: SQLite's VACUUM rewrites the file without its free pages, as one transaction through the WAL, so a
   kill in the middle leaves the file as it was. It never waits for another connection: when one holds the lock
   (a reader is fine), the file stays as it is until the next time.
"""

from __future__ import annotations

import logging
import sqlite3
from typing import Any

log = logging.getLogger(__name__)

#: Any row waiting for a sender (over the partial index ``outbox_pending``).
ANY_PENDING = "SELECT 1 FROM outbox WHERE published_at IS NULL AND parked_at IS NULL LIMIT 1"
DROP_DELIVERED = "DELETE FROM outbox WHERE published_at IS NOT NULL"
#: How long a VACUUM at close may wait for another connection's write lock (then it gives up: it is housekeeping).
VACUUM_WAIT_MS = 200


def drop_delivered(cursor: Any) -> int:
    """In the caller's transaction: when no outbox row is pending, delete the published ones; how many went."""
    if cursor.execute(ANY_PENDING).fetchone() is not None:
        return 0
    cursor.execute(DROP_DELIVERED)
    return int(cursor.rowcount or 0)


def vacuum(dbapi: Any) -> bool:
    """Rewrite the file without its free pages (none: nothing to do). True when it did; never raises for a busy
    file. ``dbapi`` is a sqlite3 connection in autocommit mode with no transaction open."""
    if dbapi.in_transaction:
        return False
    if dbapi.execute("PRAGMA freelist_count").fetchone()[0] == 0:
        return False
    busy = dbapi.execute("PRAGMA busy_timeout").fetchone()[0]
    dbapi.execute(f"PRAGMA busy_timeout={VACUUM_WAIT_MS}")
    try:
        dbapi.execute("VACUUM")
    except sqlite3.OperationalError as exc:  # another connection is writing (or reading in a way VACUUM minds)
        log.debug("vacuum skipped: %s", exc)
        return False
    finally:
        dbapi.execute(f"PRAGMA busy_timeout={int(busy)}")
    return True
