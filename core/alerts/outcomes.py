"""What each alert of a request did, as the receiver answers it: pure functions over what an append chose and
wrote (``batch.Chosen`` and the entries), no I/O."""

from __future__ import annotations

from collections.abc import Sequence

from decklog.core.alerts.batch import Chosen, Prepared
from decklog.core.alerts.rules import AlertOutcome, Outcome
from decklog.core.entries import Entry

Indexed = list[tuple[int, AlertOutcome]]
#: Why a duplicate appended nothing.
SAME = "the same notification of this alert was already recorded (a retry or a resend that changes nothing)"


def ignored(items: Sequence[Prepared]) -> Indexed:
    """A resolve or acknowledgement that no open incident has: it opens nothing."""
    return [
        (
            p.index,
            AlertOutcome(
                p.signal.fingerprint,
                p.signal.status,
                "ignored",
                severity=p.severity,
                reason=f"no open incident has this alert; a {p.signal.status} alert opens none",
            ),
        )
        for p in items
    ]


def duplicates(scope: str, items: Sequence[Prepared], seq: int = 0) -> Indexed:
    """A retry (or a resend that changes nothing): nothing appended."""
    return [
        (p.index, AlertOutcome(p.signal.fingerprint, p.signal.status, "duplicate", scope, seq, p.severity, reason=SAME))
        for p in items
    ]


def appended(
    scope: str,
    chosen: Chosen,
    entries: Sequence[Entry],
    *,
    joined: bool,
    storm: bool = False,
    opened: bool = False,
) -> Indexed:
    """The outcomes of one part's append to ``scope`` (``entries``: what it wrote), in request order."""
    suggested = any(e.kind == "suggestion" for e in entries)
    out = duplicates(scope, chosen.skipped)
    observations = [e for e in entries if e.kind == "observation"]
    for n, (item, entry) in enumerate(zip(chosen.items, observations, strict=False)):
        s = item.signal
        outcome: Outcome
        if opened:
            outcome = "new" if n == 0 else "joined"
        elif s.fingerprint not in chosen.known and joined:
            outcome = "joined"
        elif s.status in ("resolved", "acknowledged"):
            outcome = "resolved" if s.status == "resolved" else "acknowledged"
        elif s.fingerprint not in chosen.known:
            outcome = "joined"
        else:
            outcome = "repeat"
        out.append(
            (
                item.index,
                AlertOutcome(
                    s.fingerprint,
                    s.status,
                    outcome,
                    scope,
                    entry.seq,
                    item.severity,
                    storm=storm,
                    suggested_resolve=suggested and s.status == "resolved",
                ),
            )
        )
    return sorted(out, key=lambda pair: pair[0])
