"""Composition and byte budget: fit a view's parts into its budget and say what was left out, never silently.

A view is a list of :class:`Part` (fixed values, or lists of items oldest first). :func:`compose` drops the oldest
items of the least important lists until the JSON fits, summarises each drop (``+ 4,812 earlier messages
omitted``) and, as a last resort, shortens long texts. Pure: the same parts give the same view.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

VIEW_NAMES = ("triage", "investigation", "action", "verification", "joiner")
DEFAULT_BUDGET = 12_000
_SUMMARY_RESERVE = 72  # bytes kept free per list that may need an "omitted" line

_PLURAL = {
    "hypothesis": "hypotheses",
    "evidence": "evidence entries",
    "status_changed": "status changes",
    "severity_changed": "severity changes",
    "role_assigned": "role assignments",
    "scope_linked": "links",
    "obligation_opened": "obligations opened",
    "obligation_fulfilled": "obligations fulfilled",
    "obligation_cancelled": "obligations cancelled",
    "proposal_closed": "closed proposals",
    "action_started": "action starts",
    "action_result": "action results",
    "effect_compensated": "compensations",
    "suggestion_feedback": "suggestion feedback entries",
    "declared": "declarations",
}


def plural(kind: str) -> str:
    """``message`` → ``messages``, ``hypothesis`` → ``hypotheses``: the noun an omission line uses."""
    return _PLURAL.get(kind, kind.replace("_", " ") + "s")


# -- the view ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class View:
    """A built view. ``text`` is what an agent reads; ``bytes`` its size; ``omitted`` what was left out."""

    name: str
    scope: str
    version: int
    budget: int
    sections: dict[str, Any]
    omitted: tuple[str, ...]
    text: str

    @property
    def bytes(self) -> int:
        return len(self.text.encode("utf-8"))

    @property
    def tokens(self) -> int:
        """A rough token estimate (about four bytes a token)."""
        return math.ceil(self.bytes / 4)

    def to_json(self) -> dict[str, Any]:
        return {
            "view": self.name,
            "scope": self.scope,
            "version": self.version,
            "budget_bytes": self.budget,
            "bytes": self.bytes,
            "tokens": self.tokens,
            "sections": self.sections,
            "omitted": list(self.omitted),
        }


@dataclass
class Part:
    """One section of a view: a fixed value, or a list of items (oldest first) that may be trimmed to fit.

    ``keep``: how many of the newest items are never dropped. ``priority``: lists with a lower priority lose their
    oldest items first. ``noun`` / ``total``: the omission line says ``+ {total - shown} earlier {noun} omitted``.
    ``breakdown``: per-kind totals for a mixed list (the joiner's timeline), summarised per kind.
    """

    key: str
    value: Any = None
    items: list[dict[str, Any]] | None = None
    keep: int = 0
    priority: int = 50
    noun: str = "items"
    total: int | None = None
    breakdown: dict[str, int] = field(default_factory=dict)
    newest_first: bool = False  # shown newest first (items are still given, and dropped, oldest first)


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)


def compose(name: str, scope: str, version: int, parts: Sequence[Part], budget: int) -> View:
    """Fit ``parts`` into ``budget`` bytes (dropping the oldest items of the least important lists first) and
    summarise what was dropped. Pure: the same parts give the same view."""
    whole = _assemble(name, scope, version, budget, parts, {p.key: 0 for p in parts})
    if whole.bytes <= budget:
        return whole  # the common case: everything fits, nothing to measure item by item
    sizes = {p.key: [len(_dumps(item).encode("utf-8")) + 1 for item in p.items or []] for p in parts}
    dropped = {p.key: 0 for p in parts}
    skeleton = {p.key: (p.value if p.items is None else []) for p in parts}
    base = len(_dumps({"view": name, "scope": scope, "version": version, **skeleton, "omitted": []}).encode())
    lists = [p for p in parts if p.items is not None]
    used = base + sum(sum(s) for s in sizes.values())
    reserve = sum(_reserve(p) for p in lists if (p.total or 0) > len(p.items or []) or p.breakdown)
    order = sorted(lists, key=lambda p: p.priority)
    floor = {p.key: p.keep for p in lists}
    while used + reserve > budget:
        victim = next((p for p in order if len(p.items or []) - dropped[p.key] > floor[p.key]), None)
        if victim is None:
            if not any(floor.values()):
                break
            floor = {k: 0 for k in floor}  # the budget is a promise: below the minimums before over it
            continue
        if dropped[victim.key] == 0 and not ((victim.total or 0) > len(victim.items or []) or victim.breakdown):
            reserve += _reserve(victim)
        used -= sizes[victim.key][dropped[victim.key]]
        dropped[victim.key] += 1
    view = _assemble(name, scope, version, budget, parts, dropped)
    if view.bytes > budget:
        view = _squeeze(view)
    return view


def _assemble(name: str, scope: str, version: int, budget: int, parts: Sequence[Part], dropped: dict[str, int]) -> View:
    sections: dict[str, Any] = {}
    omitted: list[str] = []
    for p in parts:
        if p.items is None:
            sections[p.key] = p.value
            continue
        shown = p.items[dropped[p.key] :]
        sections[p.key] = shown[::-1] if p.newest_first else shown
        omitted.extend(_omission_lines(p, shown))
    return _render(name, scope, version, budget, sections, omitted)


def _reserve(p: Part) -> int:
    return _SUMMARY_RESERVE * (5 if p.breakdown else 1)


def _omission_lines(p: Part, shown: list[dict[str, Any]]) -> list[str]:
    if p.breakdown:
        shown_by_kind: dict[str, int] = {}
        for item in shown:
            kind = str(item.get("kind", ""))
            shown_by_kind[kind] = shown_by_kind.get(kind, 0) + 1
        missing = {k: n - shown_by_kind.get(k, 0) for k, n in p.breakdown.items() if n > shown_by_kind.get(k, 0)}
        ranked = sorted(missing.items(), key=lambda kv: (-kv[1], kv[0]))
        lines = [f"{p.key}: + {n:,} earlier {plural(k)} omitted" for k, n in ranked[:4]]
        rest = sum(n for _, n in ranked[4:])
        if rest:
            lines.append(f"{p.key}: + {rest:,} earlier entries of other kinds omitted")
        return lines
    total = p.total if p.total is not None else len(p.items or [])
    if total > len(shown):
        return [f"{p.key}: + {total - len(shown):,} earlier {p.noun} omitted"]
    return []


def _render(name: str, scope: str, version: int, budget: int, sections: dict[str, Any], omitted: list[str]) -> View:
    text = _dumps({"view": name, "scope": scope, "version": version, **sections, "omitted": omitted})
    return View(name, scope, version, budget, sections, tuple(omitted), text)


def _squeeze(view: View) -> View:
    """Last resort when the items that must stay do not fit: shorten long texts (marked with …), then give up."""
    for limit in (120, 80, 48):
        sections = _clip_strings(view.sections, limit)
        squeezed = _render(view.name, view.scope, view.version, view.budget, sections, list(view.omitted))
        if squeezed.bytes <= view.budget:
            return squeezed
    return squeezed


def _clip_strings(value: Any, limit: int) -> Any:
    if isinstance(value, str):
        return value if len(value) <= limit else value[: limit - 1] + "…"
    if isinstance(value, dict):
        return {k: _clip_strings(v, limit) for k, v in value.items()}
    if isinstance(value, list):
        return [_clip_strings(v, limit) for v in value]
    return value
