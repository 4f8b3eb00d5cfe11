"""Cross-incident numbers (``decklog insights``, ``GET /api/insights``): counts, MTTA, MTTM and MTTR.

Computed from one row per incident in the index's ``milestones`` table (core/index/tables.py), which the index's
``apply`` keeps in step with the scope's folded state (core/state/) — never by replaying logs. The milestones, measured from the
``declared`` entry's time (MTTA of a paged incident from its first page):

- acknowledged (MTTA), by the one rule the report reads too (core/state/mtta.py): for an incident decklog paged
  (core/oncall/), from its first page to the first acknowledgement after it (the state's ``paged_at`` and
  ``page_acknowledged_at``); otherwise the state's ``acknowledged_at`` — the first entry a person makes in response (a
  declaration by a person counts, so a person's declaration is acknowledged at once; exports, thread links and
  agent turns do not count), or an ``acknowledged`` notification from the alert source, whichever comes first;
- mitigated (MTTM): the first ``status_changed`` to ``mitigated``, or to ``resolved`` when the incident was never
  marked mitigated;
- resolved (MTTR): the latest ``status_changed`` to ``resolved``; a reopened incident has none until it resolves
  again.

Each of ``mtta_seconds``, ``mttm_seconds`` and ``mttr_seconds`` is ``{"p50", "p90", "mean"}`` over the incidents
that reached that milestone (percentiles linearly interpolated between the closest ranks), or ``None``. An
incident's source is the alert source of its earliest alert, ``manual`` when it holds no alert.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import Any

from decklog.core.clock import iso
from decklog.core.errors import InvalidInput
from decklog.core.store.ports import IndexPort, Milestones

MAX_DAYS = 3650
DEFAULT_DAYS = 30
NO_SEVERITY, NO_SERVICE = "none", "none"

# -- the numbers --------------------------------------------------------------------------------------------------


def percentile(ordered: Sequence[float], q: float) -> float:
    """The ``q`` quantile (0..1) of sorted values, linearly interpolated between the closest ranks."""
    rank = q * (len(ordered) - 1)
    low, high = math.floor(rank), math.ceil(rank)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def summary(values: Iterable[float]) -> dict[str, float] | None:
    ordered = sorted(values)
    if not ordered:
        return None
    return {
        "p50": round(percentile(ordered, 0.5), 3),
        "p90": round(percentile(ordered, 0.9), 3),
        "mean": round(math.fsum(ordered) / len(ordered), 3),
    }


def aggregate(rows: Sequence[Milestones]) -> dict[str, Any]:
    resolved = sum(1 for r in rows if r.status == "resolved")
    return {
        "incidents": len(rows),
        "open": len(rows) - resolved,
        "resolved": resolved,
        "mtta_seconds": summary([r.tta for r in rows if r.tta is not None]),
        "mttm_seconds": summary([r.ttm for r in rows if r.ttm is not None]),
        "mttr_seconds": summary([r.ttr for r in rows if r.ttr is not None]),
    }


def _grouped(rows: Sequence[Milestones], keys: Any) -> dict[str, Any]:
    groups: dict[str, list[Milestones]] = {}
    for r in rows:
        for key in keys(r):
            groups.setdefault(key, []).append(r)
    return {key: aggregate(groups[key]) for key in sorted(groups)}


def insights(rows: Sequence[Milestones], *, since_days: int | None, now: float) -> dict[str, Any]:
    body = aggregate(rows)
    body["by_severity"] = _grouped(rows, lambda r: [f"SEV{r.severity}" if r.severity else NO_SEVERITY])
    body["by_service"] = _grouped(rows, lambda r: list(r.services) or [NO_SERVICE])
    body["by_source"] = _grouped(rows, lambda r: [r.source])
    body["since_days"] = since_days
    start = now - since_days * 86400 if since_days is not None else None
    body["window_start"] = iso(datetime.fromtimestamp(start, UTC)) if start is not None else None
    return body


def parse_days(value: Any, *, field: str = "since") -> int:
    text = str(value).strip()
    if not text.isascii() or not text.isdigit() or len(text) > 5:
        raise InvalidInput(f"must be a whole number of days from 1 to {MAX_DAYS}, not {value!r}", field=field)
    days = int(text)
    if not 1 <= days <= MAX_DAYS:
        raise InvalidInput(f"must be from 1 to {MAX_DAYS} days, not {days}", field=field)
    return days


async def compute(index: IndexPort, *, since_days: int | None, now: float) -> dict[str, Any]:
    """Insights over the incidents declared in the last ``since_days`` days (all of them with ``None``)."""
    since = now - since_days * 86400 if since_days is not None else None
    return insights(await index.milestones(since), since_days=since_days, now=now)


# -- text -------------------------------------------------------------------------------------------------------


def times_line(body: dict[str, Any]) -> str:
    """MTTA / MTTM / MTTR in the words and the rounding of the report's milestones (``core.reports.text.duration``,
    whole seconds cut, never rounded up), so that an incident's MTTA here reads as the MTTA line of its report."""
    from decklog.core.reports.text import duration  # here: reading the numbers need not load the reports

    parts = []
    for label, key in (("MTTA", "mtta_seconds"), ("MTTM", "mttm_seconds"), ("MTTR", "mttr_seconds")):
        s = body.get(key)
        parts.append(f"{label} {duration(s['p50'])} (p90 {duration(s['p90'])})" if s else f"{label} –")
    return " · ".join(parts)


def render_text(body: dict[str, Any], *, where: str = "") -> str:
    """The text of ``decklog insights``; ``where`` names the data directory or database it read (the CLI gives it
    when it found nothing there)."""
    window = f"the last {body['since_days']} days" if body.get("since_days") else "all time"
    place = f" ({where})" if where else ""
    lines = [
        f"{body['incidents']} incidents declared in {window}: {body['open']} open, {body['resolved']} resolved{place}",
        times_line(body),
    ]
    for title, key in (("by severity", "by_severity"), ("by service", "by_service"), ("by source", "by_source")):
        groups = body.get(key) or {}
        if groups:
            lines.append(f"{title}:")
            width = max(len(k) for k in groups)
            for name, group in groups.items():
                lines.append(f"  {name:<{width}}  {group['incidents']:>5}  {times_line(group)}")
    return "\n".join(lines)
