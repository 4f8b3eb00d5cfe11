"""Verify a scope from its stored columns: the hash chain, gapless seqs, and the stored state against the fold.

Backend-neutral: it takes the stored rows (anything with the ``entries`` columns as attributes, oldest first) and
the stored state row (``version``, ``head_hash``, ``body``; None when missing).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from core.entries import chain_hash
from core.errors import InvalidInput
from core.state import empty_state, fold
from core.store.ports import VerifyReport
from core.store.statements import row_to_entry


def verify_rows(scope: str, rows: Iterable[Any], state_row: Any | None) -> VerifyReport:
    state = empty_state(scope)
    prev_hash = ""
    count = 0
    for row in rows:
        count += 1
        bad = _check_row(scope, row, count, prev_hash)
        if bad is not None:
            return bad
        try:
            entry = row_to_entry(scope, row)
        except (InvalidInput, ValueError) as exc:
            return VerifyReport(scope, False, count, row.seq, f"entry {row.seq} does not parse: {exc}")
        state = fold(state, entry)
        prev_hash = row.hash
    if state_row is None:
        if count:
            return VerifyReport(scope, False, count, 1, "the stored state is missing")
        return VerifyReport(scope, False, 0, None, "the scope has no entries")
    if state_row.version != count or state_row.head_hash != prev_hash:
        bad_seq = min(state_row.version, count) + 1 if state_row.version != count else count
        return VerifyReport(
            scope,
            False,
            count,
            bad_seq,
            f"the stored head (version {state_row.version}) does not match the log ({count})",
        )
    try:
        stored = json.loads(state_row.body)
    except ValueError:
        stored = None
    if not isinstance(stored, dict):
        return VerifyReport(scope, False, count, count, "the stored state is not a JSON object")
    folded = state.to_json()
    if stored != folded:
        diff = sorted(k for k in set(stored) | set(folded) if stored.get(k) != folded.get(k))
        return VerifyReport(
            scope, False, count, count, f"the stored state differs from the fold of the log in: {', '.join(diff)}"
        )
    return VerifyReport(scope, True, count)


def _check_row(scope: str, row: Any, count: int, prev_hash: str) -> VerifyReport | None:
    if row.seq != count:
        return VerifyReport(scope, False, count, count, f"entry {count} is missing (found {row.seq})")
    if row.prev_hash != prev_hash:
        return VerifyReport(scope, False, count, row.seq, f"entry {row.seq} does not follow entry {row.seq - 1}")
    digest = chain_hash(
        prev_hash=prev_hash,
        seq=row.seq,
        entry_id=row.id,
        kind=row.kind,
        at=row.at,
        actor_json=row.actor,
        payload=row.payload,
        refs_json=row.refs,
        idempotency_key=row.idempotency_key,
    )
    if digest != row.hash:
        return VerifyReport(scope, False, count, row.seq, f"entry {row.seq} was altered (hash mismatch)")
    return None
