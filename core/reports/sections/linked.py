"""Linked scopes and the integrity of every chain the report is made of."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from decklog.core.clock import iso
from decklog.core.entries import (
    Declared,
    Entry,
)
from decklog.core.reports.model import (
    Integrity,
    LinkedScope,
)
from decklog.core.reports.sections.source import Source, report_entries
from decklog.core.state import fold_all
from decklog.core.store.ports import VerifyReport


def linked(src: Source) -> tuple[LinkedScope, ...]:
    merged = set(src.merged_scopes())
    out: list[LinkedScope] = []
    for scope, (e, p) in src.links().items():
        base: dict[str, Any] = {
            "scope": scope,
            "relation": p.relation,
            "reason": p.reason,
            "linked_seq": e.seq,
            "linked_at": iso(e.at),
        }
        log = src.linked_logs.get(scope)
        if log is None or not log.found:
            out.append(LinkedScope(**base, found=False))
            continue
        entries = report_entries(log.entries)
        st = fold_all(scope, entries)
        declared = next((x for x in entries if isinstance(x.payload, Declared)), None)
        out.append(
            LinkedScope(
                **base,
                kind=st.kind,
                title=st.title,
                status=st.status,
                severity=st.severity,
                services=st.services,
                declared_at=iso(declared.at) if declared is not None else None,
                resolved_at=st.resolved_at or None,
                merged_into_timeline=scope in merged,
            )
        )
    return tuple(out)


def integrity(src: Source) -> tuple[Integrity, ...]:
    out = [_integrity_of(src.main.scope, src.entries, src.main.verify)]
    for scope in src.links():
        log = src.linked_logs.get(scope)
        if log is not None and log.found:
            out.append(_integrity_of(scope, report_entries(log.entries), log.verify))
    return tuple(out)


def _integrity_of(scope: str, entries: Sequence[Entry], verify: VerifyReport | None) -> Integrity:
    last = entries[-1] if entries else None
    common: dict[str, Any] = {
        "scope": scope,
        "last_seq": last.seq if last is not None else 0,
        "head_hash": last.hash if last is not None else "",
    }
    if verify is None:
        return Integrity(**common, checked=False, ok=False, reason="not checked")
    return Integrity(
        **common,
        checked=True,
        ok=verify.ok,
        first_bad_seq=verify.first_bad_seq,
        reason="" if verify.ok else verify.reason,
    )
