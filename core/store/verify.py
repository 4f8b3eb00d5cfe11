"""Verify a scope from its stored columns: the hash chain, gapless seqs, and the stored state against the fold.

Backend-neutral: it takes the stored rows (anything with the ``entries`` columns as attributes, oldest first) and
the stored state row (``version``, ``head_hash``, ``body``; None when missing). A keyed scope (its first entry's
hash is an HMAC, core/store/chain.py) needs the key; every entry of a scope must be of the first entry's kind.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from decklog.core.errors import InvalidInput
from decklog.core.state import empty_state, fold, private_folds
from decklog.core.store.chain import KEY_SETTING, ChainKey, key_id_of, link_hash
from decklog.core.store.ports import VerifyReport
from decklog.core.store.rows import row_to_entry

#: A scope file without a single entry: a declaration that never committed (its process died after the file was
#: put in place). Nothing of it was acknowledged; `decklog verify --all` and `reindex` pass over it.
NO_ENTRIES = "the scope has no entries"


def verify_rows(scope: str, rows: Iterable[Any], state_row: Any | None, *, key: ChainKey | None = None) -> VerifyReport:
    state = empty_state(scope)
    prev_hash = ""
    count = 0
    kind: tuple[str | None] | None = None  # (the key id of the scope's chain,) once its first entry is read
    with private_folds():  # only the last state is kept: a map the loop copied is updated in place after that
        for row in rows:
            count += 1
            if kind is None:
                kind = (key_id_of(row.hash),)
                refused = _key_refused(scope, kind[0], key)
                if refused is not None:
                    return refused
            if key_id_of(row.hash) != kind[0]:
                return VerifyReport(
                    scope,
                    False,
                    count,
                    row.seq,
                    f"entry {row.seq} is chained {_kind_text(key_id_of(row.hash))}, "
                    f"its scope {_kind_text(kind[0])}: the two never mix",
                    keyed=kind[0] is not None,
                )
            bad = _check_row(scope, row, count, prev_hash, key if kind[0] is not None else None)
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
        return VerifyReport(scope, False, 0, None, NO_ENTRIES)
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
    return VerifyReport(scope, True, count, keyed=kind is not None and kind[0] is not None)


def _kind_text(key_id: str | None) -> str:
    return "without a key" if key_id is None else f"with key id {key_id}"


def _key_refused(scope: str, key_id: str | None, key: ChainKey | None) -> VerifyReport | None:
    if key_id is None:
        return None
    if key is None:
        return VerifyReport(
            scope,
            False,
            0,
            None,
            f"the scope has a keyed hash chain (key id {key_id}): set {KEY_SETTING} to verify it",
            keyed=True,
        )
    if key.key_id != key_id:
        return VerifyReport(
            scope,
            False,
            0,
            None,
            f"the scope is chained with another {KEY_SETTING} (key id {key_id}; the one set is {key.key_id})",
            keyed=True,
        )
    return None


def _check_row(scope: str, row: Any, count: int, prev_hash: str, key: ChainKey | None) -> VerifyReport | None:
    if row.seq != count:
        return VerifyReport(scope, False, count, count, f"entry {count} is missing (found {row.seq})")
    if row.prev_hash != prev_hash:
        return VerifyReport(scope, False, count, row.seq, f"entry {row.seq} does not follow entry {row.seq - 1}")
    digest = link_hash(
        key,
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
