"""Views: task-scoped projections of a scope's log that a short-lived agent reads instead of the whole history.

A view is built from the stored state (``ScopeState``: status, alerts, obligations, proposals, roles, counts per
kind) plus the few entries it needs, fetched with ``read_last`` / ``read_seqs`` and kind filters — never a replay
of the log. Each view has a byte budget; when its content does not fit, the oldest items of its least important
lists are dropped and the drop is summarised (``+ 4,812 earlier messages omitted``), never silent. Its size in
bytes (and an estimate in tokens) is reported with it.

Views: ``triage`` (goal, constraints, recent observations, open obligations), ``investigation`` (hypotheses with
their evidence chains, linked change scopes, similar incidents), ``action`` (one obligation with its evidence and
safety conditions), ``verification`` (decision, expected outcome, recorded result, later evidence) and ``joiner``
(what a newcomer needs: state, last decisions, open obligations, who holds what)::

    view = await build_view(store, "incident/payments-5xx", "joiner", budget=12_000)
    view.text        # what the agent reads (compact JSON)
    view.bytes       # len(view.text.encode())
"""

from __future__ import annotations

import json
import math
import weakref
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from core.entries import (
    ActionResult,
    ActionStarted,
    Actor,
    AgentTurn,
    Approval,
    Decision,
    Declared,
    Entry,
    Hypothesis,
    Observation,
    ProposalClosed,
    ProposalMade,
    ScopeLinked,
    Suggestion,
    Verification,
)
from core.errors import NotFound
from core.index import ScopeRow
from core.state import ObligationState, ScopeState
from core.store import LogStore

VIEW_NAMES = ("triage", "investigation", "action", "verification", "joiner")
DEFAULT_BUDGET = 12_000
CONTEXT_SOURCE = "agent:context"  # observations appended by the context agents (core/agents/context.py)
CONTEXT_MEMO_TOPIC = "agents"  # sender-memo topic where the context agents remember the seqs they appended
CONTEXT_MEMO_KEY = "context"
_SUMMARY_RESERVE = 72  # bytes kept free per list that may need an "omitted" line
_TEXT_CLIP = 200

# Kinds a newcomer's timeline shows (bookkeeping such as agent_turn or thread_linked is left out on purpose).
TIMELINE_KINDS = (
    "declared",
    "goal",
    "constraint",
    "observation",
    "hypothesis",
    "decision",
    "message",
    "evidence",
    "status_changed",
    "severity_changed",
    "role_assigned",
    "scope_linked",
    "obligation_opened",
    "obligation_fulfilled",
    "obligation_cancelled",
    "proposal",
    "approval",
    "proposal_closed",
    "action_started",
    "action_result",
    "effect_compensated",
    "verification",
    "suggestion",
    "suggestion_feedback",
    "answer",
)
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
        sections[p.key] = shown
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


# -- compact shapes ---------------------------------------------------------------------------------------------


def at_text(at: datetime) -> str:
    return at.strftime("%Y-%m-%dT%H:%M:%SZ")


def who(actor: Actor) -> str:
    return f"{actor.type}:{actor.label()}"


def clip(text: str, limit: int = _TEXT_CLIP) -> str:
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


_BRIEFS: OrderedDict[tuple[str, int, str, int], dict[str, Any]] = OrderedDict()
_BRIEFS_MAX = 8192


def brief(entry: Entry, *, limit: int = _TEXT_CLIP) -> dict[str, Any]:
    """An entry as a view shows it: seq, time, kind, who, one line of text, evidence refs (a fresh dict).

    Entries are immutable, so the rendering is remembered by (scope, seq, entry hash, limit)."""
    key = (entry.scope, entry.seq, entry.hash, limit)
    known = _BRIEFS.get(key)
    if known is None:
        known = _BRIEFS[key] = _brief(entry, limit)
        if len(_BRIEFS) > _BRIEFS_MAX:
            _BRIEFS.popitem(last=False)
    return dict(known)


def _brief(entry: Entry, limit: int) -> dict[str, Any]:
    out: dict[str, Any] = {
        "seq": entry.seq,
        "at": at_text(entry.at),
        "kind": entry.kind,
        "by": who(entry.actor),
        "text": clip(entry.text, limit),
    }
    if isinstance(entry.payload, Observation) and entry.payload.alert_status:
        out["alert_status"] = entry.payload.alert_status
    if entry.refs:
        out["refs"] = list(entry.refs)
    return out


def _compact(values: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in values.items() if v not in ("", None, (), [], {}, 0) or k in ("seq", "severity")}


def header(state: ScopeState) -> dict[str, Any]:
    return _compact(
        {
            "title": state.title,
            "kind": state.kind,
            "status": state.status,
            "severity": state.severity,
            "services": list(state.services),
            "declared_at": state.created_at[:19] + "Z" if state.created_at else "",
            "acknowledged_at": state.acknowledged_at[:19] + "Z" if state.acknowledged_at else "",
            "mitigated_at": state.mitigated_at[:19] + "Z" if state.mitigated_at else "",
            "resolved_at": state.resolved_at[:19] + "Z" if state.resolved_at else "",
            "entries": state.version,
            "linked": list(state.linked),
        }
    )


def change_json(row: ScopeRow, linked: Sequence[str]) -> dict[str, Any]:
    """A change scope as the agents see it (context observations, the ``changes`` tool)."""
    return {
        "scope": row.id,
        "title": row.title,
        "services": list(row.services),
        "status": row.status,
        "at": row.created_at[:19],
        "linked": row.id in linked,
    }


def obligation_json(ob: ObligationState) -> dict[str, Any]:
    return _compact(
        {
            "id": ob.id,
            "text": clip(ob.text),
            "purpose": ob.purpose,
            "status": ob.status,
            "holder": ob.holder,
            "fence": ob.fence,
            "lease_until": ob.lease_until,
            "action": ob.action,
            "params": ob.params,
            "conditions": list(ob.conditions),
            "expected_outcome": ob.expected_outcome,
            "run_id": ob.run_id,
            "due_at": ob.due_at,
            "opened_seq": ob.opened_seq,
        }
    )


def _alert_items(state: ScopeState, *, status: str) -> list[dict[str, Any]]:
    alerts = [a for a in state.alerts.values() if (a.status == "resolved") == (status == "resolved")]
    alerts.sort(key=lambda a: (a.last_seq, a.fingerprint))
    return [
        _compact(
            {
                "fingerprint": a.fingerprint[:60],
                "title": clip(a.title, 120),
                "service": a.service,
                "status": a.status,
                "count": a.count,
                "first_seq": a.first_seq,
                "last_seq": a.last_seq,
            }
        )
        for a in alerts
    ]


def _alert_summary(state: ScopeState) -> dict[str, int]:
    firing = len(state.firing_alerts)
    return {"firing": firing, "resolved": len(state.alerts) - firing, "repeats": state.alert_repeats}


def _roles(state: ScopeState) -> dict[str, str]:
    return {role: h.user_name or h.user_id for role, h in sorted(state.roles.items())}


def _proposal_items(state: ScopeState) -> list[dict[str, Any]]:
    return [
        _compact(
            {
                "id": p.id,
                "action": p.action,
                "risk": p.risk,
                "status": p.status,
                "obligation_id": p.obligation_id,
                "proposer": p.proposer,
                "proposed_seq": p.proposed_seq,
                "approvals": list(p.approvals),
                "run_id": p.run_id,
            }
        )
        for p in sorted(state.proposals.values(), key=lambda p: p.proposed_seq)
    ]


# -- reading what a view needs ----------------------------------------------------------------------------------


@dataclass
class _Tail:
    """The newest entries of one group of kinds of one scope, as of ``version`` (``count``: how many exist)."""

    version: int
    count: int
    entries: list[Entry]


class _Memo:
    """Entries are immutable: what a view read once need not be read (and parsed) again.

    Per store: the tails of the kind groups views ask for (each turn then reads only what was appended since the
    last one) and the entries evidence chains point to. Bounded LRUs; a store that goes away takes its memo along.
    """

    TAILS = 1024
    ENTRIES = 4096

    def __init__(self) -> None:
        self.tails: OrderedDict[tuple[str, tuple[str, ...]], _Tail] = OrderedDict()
        self.entries: OrderedDict[tuple[str, int], Entry] = OrderedDict()

    def tail(self, key: tuple[str, tuple[str, ...]]) -> _Tail | None:
        found = self.tails.get(key)
        if found is not None:
            self.tails.move_to_end(key)
        return found

    def keep_tail(self, key: tuple[str, tuple[str, ...]], tail: _Tail) -> None:
        self.tails[key] = tail
        self.tails.move_to_end(key)
        while len(self.tails) > self.TAILS:
            self.tails.popitem(last=False)

    def keep_entries(self, scope: str, entries: Sequence[Entry]) -> None:
        for e in entries:
            self.entries[(scope, e.seq)] = e
        while len(self.entries) > self.ENTRIES:
            self.entries.popitem(last=False)


_MEMOS: weakref.WeakKeyDictionary[Any, _Memo] = weakref.WeakKeyDictionary()
ALL_KINDS: tuple[str, ...] = ()  # a group of no kinds means every kind
_REFRESH_MAX = 200  # at most this many new entries are read to refresh remembered tails; more: read afresh


def _memo(store: LogStore) -> _Memo:
    try:
        memo = _MEMOS.get(store)
        if memo is None:
            memo = _MEMOS[store] = _Memo()
        return memo
    except TypeError:  # a store that cannot be weakly referenced gets no memo
        return _Memo()


class _Reader:
    """The reads a view makes: newest entries per kind group, incrementally, skipping kinds the scope has none of."""

    def __init__(self, store: LogStore, state: ScopeState) -> None:
        self.store = store
        self.state = state
        self.scope = state.scope
        self.memo = _memo(store)

    def count(self, *kinds: str) -> int:
        """How many entries of ``kinds`` (of any kind, for none) the scope holds as of the state's version."""
        counts = self.state.kind_counts
        if not kinds or (not counts and self.state.version):
            return self.state.version  # (a state stored before kind counts existed: assume there may be some)
        return sum(counts.get(k, 0) for k in kinds)

    async def last(self, kinds: Sequence[str], limit: int) -> list[Entry]:
        """The newest ``limit`` entries of ``kinds`` as of the state's version (oldest first)."""
        got = await self.many({"_": (tuple(kinds), limit)})
        return got["_"]

    async def recent(self, limit: int) -> list[Entry]:
        """The newest ``limit`` entries of any kind."""
        return await self.last(ALL_KINDS, limit)

    async def many(self, wants: dict[str, tuple[tuple[str, ...], int]]) -> dict[str, list[Entry]]:
        """Several "newest N of these kinds" reads, as cheaply as the log allows.

        ``wants`` maps a name to (kinds, limit). Groups read before only need what was appended since: ONE short
        range read after the oldest remembered version serves them all. Otherwise a group with many entries is
        read from the end of the log; the sparse groups — whose entries could sit anywhere — share ONE query
        limited to how many of them exist (``state.kind_counts``), so that a view pays for at most one long scan.
        """
        out: dict[str, list[Entry]] = {name: [] for name in wants}
        version = self.state.version
        todo: dict[str, tuple[tuple[str, ...], int]] = {}
        tails: dict[str, _Tail] = {}
        for name, (kinds, limit) in wants.items():
            if limit <= 0 or self.count(*kinds) == 0:
                continue
            tail = self.memo.tail((self.scope, kinds))
            if tail is not None and tail.version <= version and len(tail.entries) >= min(limit, tail.count):
                tails[name] = tail
            else:
                todo[name] = (kinds, limit)
        if tails:
            since = min(t.version for t in tails.values())
            if version - since <= _REFRESH_MAX:
                rows = await self.store.read(self.scope, after=since, limit=version - since) if version > since else []
                for name, tail in tails.items():
                    kinds, limit = wants[name]
                    new = [e for e in rows if e.seq > tail.version and (not kinds or e.kind in kinds)]
                    out[name] = self._remember(kinds, limit, self.count(*kinds), [*tail.entries, *new])[-limit:]
            else:
                todo.update((name, wants[name]) for name in tails)
        sparse: dict[str, tuple[tuple[str, ...], int]] = {}
        for name, (kinds, limit) in todo.items():
            n = self.count(*kinds)
            if kinds and self.state.kind_counts and n < 4 * limit:
                sparse[name] = (kinds, limit)
                continue
            rows = await self.store.read_last(self.scope, limit=limit, kinds=kinds)
            out[name] = self._remember(kinds, limit, n, [e for e in rows if e.seq <= version])
        if sparse:
            every = tuple(sorted({k for ks, _ in sparse.values() for k in ks}))
            rows = [e for e in await self.store.read_last(self.scope, limit=self.count(*every) + 20, kinds=every)]
            rows = [e for e in rows if e.seq <= version]
            for name, (group, limit) in sparse.items():
                out[name] = self._remember(group, limit, self.count(*group), [e for e in rows if e.kind in group])
        return out

    def _remember(self, kinds: tuple[str, ...], limit: int, n: int, entries: list[Entry]) -> list[Entry]:
        kept = entries[-max(limit, 1) :]
        self.memo.keep_tail((self.scope, kinds), _Tail(self.state.version, n, kept))
        return kept

    async def seqs(self, seqs: Sequence[int]) -> list[Entry]:
        wanted = sorted({s for s in seqs if 0 < s <= self.state.version})
        known = {s: self.memo.entries[(self.scope, s)] for s in wanted if (self.scope, s) in self.memo.entries}
        missing = [s for s in wanted if s not in known]
        if missing:
            fetched = await self.store.read_seqs(self.scope, missing)
            self.memo.keep_entries(self.scope, fetched)
            known.update((e.seq, e) for e in fetched)
        return [known[s] for s in wanted if s in known]

    async def chains(self, entries: Sequence[Entry], depth: int = 2) -> dict[int, Entry]:
        """Every entry the given entries point to, transitively up to ``depth`` hops (evidence chains)."""
        found: dict[int, Entry] = {}
        frontier = {r for e in entries for r in e.refs}
        for _ in range(depth):
            frontier -= set(found)
            if not frontier:
                break
            fetched = await self.seqs(sorted(frontier))
            found.update((e.seq, e) for e in fetched)
            frontier = {r for e in fetched for r in e.refs}
        return found


def _with_evidence(entry: Entry, chain: dict[int, Entry], depth: int = 2) -> dict[str, Any]:
    out = brief(entry)
    if depth and entry.refs:
        out["evidence"] = [_with_evidence(chain[r], chain, depth - 1) for r in entry.refs if r in chain]
    return out


async def _context_entries(reader: _Reader) -> list[Entry]:
    """What the context agents appended (similar incidents, recent changes): remembered seqs, not a search."""
    memo = await reader.store.memo_get(reader.scope, CONTEXT_MEMO_TOPIC, CONTEXT_MEMO_KEY) or {}
    seqs = [int(s) for s in memo.get("seqs", []) if isinstance(s, int)]
    return await reader.seqs(seqs)


def _context_item(entry: Entry) -> dict[str, Any]:
    out = brief(entry, limit=300)
    p = entry.payload
    if isinstance(p, Observation):
        items = p.data.get("items")
        if isinstance(items, list):
            out["items"] = items[:5]
        out["about"] = p.data.get("kind", "")
    return out


async def _change_summary(store: LogStore, change: str, link_seq: int) -> dict[str, Any]:
    """A linked change scope, as the incident's investigation sees it: what, where, when, which commits/paths."""
    try:
        cstate = await store.get_state(change)
    except NotFound:
        return {"scope": change, "missing": True}
    entries = await _Reader(store, cstate).last(("declared", "observation", "evidence", "message"), 12)
    commits: list[dict[str, Any]] = []
    details: dict[str, Any] = {}
    summary = ""
    for e in entries:
        p = e.payload
        if isinstance(p, Declared):
            summary = p.summary
        elif isinstance(p, Observation):
            for key in ("version", "environment", "author", "status", "link", "at"):
                value = p.data.get(key) or p.labels.get(key)
                if value and isinstance(value, str) and key not in details:
                    details["deployed_at" if key == "at" else key] = value[:19] + "Z" if key == "at" else value
            touched = p.data.get("paths")
            if isinstance(touched, list) and "paths" not in details:
                details["paths"] = [str(x) for x in touched][:8]
            for raw in p.data.get("commits", []) if isinstance(p.data.get("commits"), list) else []:
                if isinstance(raw, dict):
                    commits.append(
                        _compact(
                            {
                                "id": str(raw.get("id", ""))[:12],
                                "message": clip(str(raw.get("message", "")), 100),
                                "paths": [str(x) for x in raw.get("paths", [])][:6]
                                if isinstance(raw.get("paths"), list)
                                else [],
                            }
                        )
                    )
    return _compact(
        {
            "scope": change,
            "title": cstate.title,
            "services": list(cstate.services),
            "status": cstate.status,
            "at": cstate.created_at[:19] + "Z" if cstate.created_at else "",
            "recorded_at": cstate.created_at,
            "summary": clip(summary, 200),
            **details,
            "commits": commits[:8],
            "link_seq": link_seq,
        }
    )


# -- the views --------------------------------------------------------------------------------------------------


async def build_view(
    store: LogStore,
    scope: str,
    name: str,
    *,
    budget: int = DEFAULT_BUDGET,
    obligation_id: str | None = None,
    state: ScopeState | None = None,
) -> View:
    """Build view ``name`` of ``scope`` (``obligation_id`` picks the obligation of an action/verification view)."""
    if name not in VIEW_NAMES:
        raise ValueError(f"unknown view {name!r} (views: {', '.join(VIEW_NAMES)})")
    state = state or await store.get_state(scope)
    reader = _Reader(store, state)
    if name == "triage":
        parts = await _triage(reader)
    elif name == "investigation":
        parts = await _investigation(reader)
    elif name == "action":
        parts = await _action(reader, obligation_id)
    elif name == "verification":
        parts = await _verification(reader, obligation_id)
    else:
        parts = await _joiner(reader)
    return compose(name, state.scope, state.version, parts, budget)


async def _triage(r: _Reader) -> list[Part]:
    s = r.state
    got = await r.many(
        {
            "goal": (("goal",), 3),
            "constraint": (("constraint",), 5),
            "observation": (("observation",), 10),
            "suggestion": (("suggestion",), 5),
        }
    )
    goals, constraints, observations, suggestions = (
        got["goal"],
        got["constraint"],
        got["observation"],
        got["suggestion"],
    )
    human = await r.seqs([s.last_human_seq]) if s.last_human_seq else []
    activity = _compact(
        {
            "last_human_seq": s.last_human_seq,
            "last_human_at": at_text(human[0].at) if human else "",
            "last_turn_seq": s.last_turn_seq,
        }
    )
    open_suggestions = set(s.suggestions)
    return [
        Part("scope", value=header(s)),
        Part("alerts", value=_alert_summary(s)),
        Part("goals", items=[brief(e) for e in goals], keep=1, priority=80, noun="goals", total=r.count("goal")),
        Part(
            "constraints",
            items=[brief(e) for e in constraints],
            keep=2,
            priority=70,
            noun="constraints",
            total=r.count("constraint"),
        ),
        Part("open_obligations", items=[obligation_json(o) for o in s.obligations.values()], keep=10**6),
        Part("firing_alerts", items=_alert_items(s, status="firing"), keep=3, priority=40, noun="firing alerts"),
        Part(
            "observations",
            items=[brief(e) for e in observations],
            keep=3,
            priority=10,
            noun="observations",
            total=r.count("observation"),
        ),
        Part(
            "suggestions",
            items=[
                {
                    **brief(e),
                    "id": e.payload.suggestion_id if isinstance(e.payload, Suggestion) else "",
                    "action": e.payload.action if isinstance(e.payload, Suggestion) else "",
                    "open": isinstance(e.payload, Suggestion) and e.payload.suggestion_id in open_suggestions,
                }
                for e in suggestions
            ],
            keep=2,
            priority=30,
            noun="suggestions",
            total=r.count("suggestion"),
        ),
        Part("activity", value=activity),
    ]


async def _investigation(r: _Reader) -> list[Part]:
    s = r.state
    got = await r.many(
        {
            "hypothesis": (("hypothesis",), 6),
            "scope_linked": (("scope_linked",), len(s.linked) + 10),
            "observation": (("observation",), 8),
            "message": (("message",), 5),
        }
    )
    hypotheses, links, observations, messages = (
        got["hypothesis"],
        got["scope_linked"],
        got["observation"],
        got["message"],
    )
    chain = await r.chains(hypotheses)
    link_seq = {e.payload.scope: e.seq for e in links if isinstance(e.payload, ScopeLinked)}
    changes = [x for x in s.linked if x.startswith("change/")][-10:]
    change_items = [await _change_summary(r.store, c, link_seq.get(c, 0)) for c in changes]
    context = await _context_entries(r)
    suspects = sorted(
        {e.payload.suspect_scope for e in hypotheses if isinstance(e.payload, Hypothesis) and e.payload.suspect_scope}
    )
    return [
        Part("scope", value=header(s)),
        Part("alerts", value=_alert_summary(s)),
        Part("firing_alerts", items=_alert_items(s, status="firing"), keep=3, priority=40, noun="firing alerts"),
        Part(
            "hypotheses",
            items=[
                {
                    **_with_evidence(e, chain),
                    "confidence": e.payload.confidence if isinstance(e.payload, Hypothesis) else None,
                    "suspect_scope": e.payload.suspect_scope if isinstance(e.payload, Hypothesis) else "",
                }
                for e in hypotheses
            ],
            keep=2,
            priority=60,
            noun="hypotheses",
            total=r.count("hypothesis"),
        ),
        Part("suspects", value=suspects),
        Part("linked_changes", items=change_items, keep=2, priority=70, noun="linked changes", total=len(changes)),
        Part(
            "other_linked",
            value=[x for x in s.linked if not x.startswith("change/")][-20:],
        ),
        Part("context", items=[_context_item(e) for e in context], keep=1, priority=50, noun="context entries"),
        Part("open_obligations", items=[obligation_json(o) for o in s.obligations.values()], keep=10**6),
        Part(
            "observations",
            items=[brief(e) for e in observations],
            keep=2,
            priority=10,
            noun="observations",
            total=r.count("observation"),
        ),
        Part(
            "messages",
            items=[brief(e) for e in messages],
            keep=1,
            priority=20,
            noun="messages",
            total=r.count("message"),
        ),
    ]


def pick_obligation(
    state: ScopeState, obligation_id: str | None, *, purpose: str | None = None
) -> ObligationState | None:
    """The obligation a view is about: the given id, else the oldest open one (of ``purpose``; with an action)."""
    if obligation_id:
        return state.obligations.get(obligation_id)
    candidates = [
        o
        for o in state.obligations.values()
        if (purpose is None and o.action) or (purpose is not None and o.purpose == purpose)
    ]
    return min(candidates, key=lambda o: o.opened_seq) if candidates else None


async def _action(r: _Reader, obligation_id: str | None) -> list[Part]:
    s = r.state
    ob = pick_obligation(s, obligation_id)
    parts = [Part("scope", value=header(s))]
    if ob is None:
        missing = f"no open obligation {obligation_id}" if obligation_id else "no open obligation with an action"
        return [*parts, Part("obligation", value={"missing": missing})]
    opened = await r.seqs([ob.opened_seq])
    chain = await r.chains(opened)
    got = await r.many(
        {
            "history": (("proposal", "proposal_closed", "approval", "action_started", "action_result"), 60),
            "suggestion": (("suggestion",), 20),
            "agent_turn": (("agent_turn",), 30),
        }
    )
    history = got["history"]
    proposal_ids = {e.payload.proposal_id for e in history if isinstance(e.payload, ProposalMade)} | {
        p.id for p in s.proposals.values() if p.obligation_id == ob.id
    }
    related: list[Entry] = []
    run_ids: set[str] = set()
    for e in history:
        p = e.payload
        mine = isinstance(p, ProposalMade) and p.obligation_id == ob.id
        if mine or (isinstance(p, ProposalClosed | Approval) and p.proposal_id in proposal_ids):
            related.append(e)
        elif isinstance(p, ActionStarted) and (p.obligation_id == ob.id or p.proposal_id in proposal_ids):
            related.append(e)
            run_ids.add(p.run_id)
        elif isinstance(p, ActionResult) and p.run_id in run_ids:
            related.append(e)
    related.extend(e for e in got["suggestion"] if ob.opened_seq and ob.opened_seq in e.refs)
    related.sort(key=lambda e: e.seq)
    handed = [  # turns that handed a proposal for this obligation to the action desk (whatever the desk did)
        e.seq
        for e in got["agent_turn"]
        if isinstance(e.payload, AgentTurn)
        and any(c.get("tool") == "propose" and c.get("obligation_id") == ob.id for c in e.payload.tool_calls)
    ]
    return [
        *parts,
        Part("obligation", value=obligation_json(ob)),
        Part("opened", value=_with_evidence(opened[0], chain) if opened else {}),
        Part("safety_conditions", value=list(ob.conditions)),
        Part(
            "pending_proposals",
            items=[p for p in _proposal_items(s) if p.get("obligation_id") == ob.id],
            keep=10**6,
        ),
        Part(
            "runs",
            value=[
                _compact({"run_id": run.run_id, "action": run.action, "fence": run.fence, "outcome": run.outcome})
                for run in s.runs.values()
                if run.obligation_id == ob.id
            ],
        ),
        Part("history", items=[brief(e) for e in related], keep=4, priority=30, noun="history entries"),
        Part("proposed_in_turns", value=handed),
        Part("firing_alerts", items=_alert_items(s, status="firing"), keep=3, priority=40, noun="firing alerts"),
    ]


async def _verification(r: _Reader, obligation_id: str | None) -> list[Part]:
    s = r.state
    ob = pick_obligation(s, obligation_id, purpose="verification")
    parts = [Part("scope", value=header(s))]
    if ob is None:
        missing = f"no open obligation {obligation_id}" if obligation_id else "no open verification obligation"
        return [*parts, Part("obligation", value={"missing": missing})]
    got = await r.many(
        {
            "decision": (("decision",), 3),
            "runs": (("action_started", "action_result"), 60 if ob.run_id else 0),
            "verification": (("verification",), 10),
        }
    )
    decisions, runs = got["decision"], got["runs"]
    started = next((e for e in runs if isinstance(e.payload, ActionStarted) and e.payload.run_id == ob.run_id), None)
    result = next(
        (e for e in reversed(runs) if isinstance(e.payload, ActionResult) and e.payload.run_id == ob.run_id), None
    )
    later: list[Entry] = []
    if result is not None:
        later = [
            e
            for e in await r.store.read(r.scope, after=result.seq, kinds=("observation",), limit=40)
            if isinstance(e.payload, Observation) and e.payload.fingerprint
        ]
    earlier = [
        e for e in got["verification"] if isinstance(e.payload, Verification) and e.payload.obligation_id == ob.id
    ]

    def run_json(e: Entry | None) -> dict[str, Any]:
        if e is None:
            return {}
        out = brief(e)
        if isinstance(e.payload, ActionResult):
            out.update(_compact({"outcome": e.payload.outcome, "error": clip(e.payload.error, 160)}))
        return out

    return [
        *parts,
        Part("obligation", value=obligation_json(ob)),
        Part("expected_outcome", value=ob.expected_outcome),
        Part(
            "decisions",
            items=[
                {**brief(e), "expected_outcome": e.payload.expected_outcome}
                if isinstance(e.payload, Decision) and e.payload.expected_outcome
                else brief(e)
                for e in decisions
            ],
            keep=1,
            priority=60,
            noun="decisions",
            total=r.count("decision"),
        ),
        Part("run_started", value=run_json(started)),
        Part("result", value=run_json(result)),
        Part("alerts", value=_alert_summary(s)),
        Part("firing_alerts", items=_alert_items(s, status="firing"), keep=3, priority=40, noun="firing alerts"),
        Part("resolved_alerts", items=_alert_items(s, status="resolved"), keep=3, priority=35, noun="resolved alerts"),
        Part(
            "after_result",
            items=[brief(e) for e in later],
            keep=3,
            priority=20,
            noun="alert observations after the result",
        ),
        Part("earlier_verifications", items=[brief(e) for e in earlier], keep=1, priority=25, noun="verifications"),
    ]


async def _joiner(r: _Reader) -> list[Part]:
    s = r.state
    got = await r.many({"decision": (("decision",), 3), "hypothesis": (("hypothesis",), 3)})
    decisions, hypotheses = got["decision"], got["hypothesis"]
    timeline = [e for e in await r.recent(30) if e.kind in TIMELINE_KINDS][-20:]
    holders = {o.id: o.holder for o in s.obligations.values() if o.holder}
    breakdown = {k: n for k, n in s.kind_counts.items() if k in TIMELINE_KINDS}
    open_suggestions = [
        {"id": sid, "text": clip(text, 160), "action": s.suggestion_actions.get(sid, "")}
        for sid, text in s.suggestions.items()
    ]
    return [
        Part("scope", value=header(s)),
        Part("roles", value=_roles(s)),
        Part("holders", value=holders),
        Part("alerts", value=_alert_summary(s)),
        Part("open_obligations", items=[obligation_json(o) for o in s.obligations.values()], keep=10**6),
        Part(
            "last_decisions",
            items=[brief(e, limit=300) for e in decisions],
            keep=1,
            priority=60,
            noun="decisions",
            total=r.count("decision"),
        ),
        Part("waiting_proposals", items=_proposal_items(s), keep=10**6),
        Part(
            "hypotheses",
            items=[brief(e) for e in hypotheses],
            keep=1,
            priority=40,
            noun="hypotheses",
            total=r.count("hypothesis"),
        ),
        Part("firing_alerts", items=_alert_items(s, status="firing"), keep=2, priority=30, noun="firing alerts"),
        Part("open_suggestions", items=open_suggestions, keep=1, priority=35, noun="open suggestions"),
        Part(
            "timeline",
            items=[brief(e, limit=160) for e in timeline],
            keep=3,
            priority=10,
            noun="entries",
            total=sum(breakdown.values()) if breakdown else None,
            breakdown=breakdown,
        ),
    ]


__all__ = [
    "DEFAULT_BUDGET",
    "VIEW_NAMES",
    "Part",
    "View",
    "brief",
    "build_view",
    "compose",
    "header",
    "obligation_json",
    "pick_obligation",
]
