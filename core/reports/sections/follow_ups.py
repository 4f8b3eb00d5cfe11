"""Follow-ups in the team's tracker: each ``follow_up`` entry with its issue's link and state, folded
from ``follow_up_synced`` and ``follow_up_closed`` (``refs``/``follow_up``: the follow-up's seq), in log order."""

from __future__ import annotations

from typing import Any

from decklog.core.clock import iso
from decklog.core.entries import FollowUp, FollowUpClosed, FollowUpSynced
from decklog.core.reports.model import FollowUpLine
from decklog.core.reports.sections.source import Source, http_url


def follow_ups(src: Source) -> tuple[FollowUpLine, ...]:
    lines: dict[int, dict[str, Any]] = {}
    for e in src.entries:
        p = e.payload
        if isinstance(p, FollowUp):
            lines[e.seq] = {
                "seq": e.seq,
                "at": iso(e.at),
                "by": e.actor,
                "text": p.text,
                "owner": p.owner,
                "due": p.due,
                "obligation_id": p.obligation_id,
            }
        elif isinstance(p, FollowUpSynced) and p.follow_up in lines:
            lines[p.follow_up].update(
                state="synced", tracker=p.tracker, number=p.number, url=http_url(p.url), changed_seq=e.seq
            )
        elif isinstance(p, FollowUpClosed) and p.follow_up in lines:
            line = lines[p.follow_up]
            if p.state == "closed":
                line.update(state="closed", closed_by=p.by, reason=p.reason, changed_seq=e.seq)
            else:  # reopened: open in the tracker again
                line.update(state="synced" if line.get("url") else "open", closed_by="", reason="", changed_seq=e.seq)
            if not line.get("url") and http_url(p.url):
                line["url"] = http_url(p.url)
    return tuple(FollowUpLine(**line) for line in lines.values())
