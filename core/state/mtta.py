"""MTTA's one rule, read by the post-incident report and by insights (through the index's ``milestones`` row), so
that both give an incident the same number.

An incident decklog paged (core/oncall/) is measured from its first page to the first acknowledgement after it
(the state's ``paged_at`` and ``page_acknowledged_at``); any other incident from its declaration to the first
human response (``created_at`` and ``acknowledged_at``, see ``NOT_A_RESPONSE`` in core/state/folding.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from decklog.core.clock import parse_iso
from decklog.core.state.model import ScopeState

MttaStart = Literal["page", "declaration"]


@dataclass(frozen=True)
class Mtta:
    """Where an incident's MTTA starts and ends (ISO times; ``end`` is empty while nobody has acknowledged)."""

    start_from: MttaStart
    start: str
    end: str

    @property
    def seconds(self) -> float | None:
        """The elapsed time to the millisecond, never negative; ``None`` until both ends are known."""
        if not self.start or not self.end:
            return None
        return max(0.0, round((parse_iso(self.end) - parse_iso(self.start)).total_seconds(), 3))


def mtta(state: ScopeState) -> Mtta:
    if state.paged_at:
        return Mtta("page", state.paged_at, state.page_acknowledged_at)
    return Mtta("declaration", state.created_at, state.acknowledged_at)
