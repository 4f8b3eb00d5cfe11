"""Context agents: evidence an incident's responders (and its turns) would otherwise have to go and look for.

- Similar past incidents: full-text search over the index (other incidents' entries), the top ``k`` incidents with
  why they matched (the matching terms and a snippet).
- Recent changes on the incident's services: change scopes within ``link_window_hours``.

Each is appended as one ``observation`` (source ``agent:context``) into the scope it serves, once: similar
incidents once per scope, recent changes once per set of services (an incident that learns a new service gets a
fresh look; only changes not reported yet are appended). Idempotency keys make a second process (or a retry)
append nothing; the seqs appended are remembered in the scope's sender memo so that views find them without a
search.
"""

from __future__ import annotations

import logging
import re
from datetime import timedelta
from typing import Any

from decklog.core.clock import Clock, SystemClock, parse_iso
from decklog.core.entries import Actor, NewEntry, Observation
from decklog.core.state import ScopeState
from decklog.core.store.ports import IndexPort, LogStore
from decklog.core.views import CONTEXT_MEMO_KEY, CONTEXT_MEMO_TOPIC, CONTEXT_SOURCE, change_json, clip

log = logging.getLogger(__name__)

ACTOR = Actor.agent("context", "decklog context")
_STOP = frozenset(
    {
        "a",
        "an",
        "and",
        "are",
        "as",
        "at",
        "be",
        "by",
        "for",
        "from",
        "has",
        "have",
        "in",
        "is",
        "it",
        "of",
        "on",
        "or",
        "the",
        "to",
        "was",
        "were",
        "with",
        "alert",
        "alerts",
        "firing",
        "incident",
        "incidents",
        "resolved",
        "high",
        "error",
        "errors",
    }
)


def search_terms(state: ScopeState) -> list[str]:
    """The words an incident is about: its title, services and firing alert titles, minus filler words."""
    text = " ".join([state.title, *state.services, *(a.title for a in state.alerts.values())])
    words = [w for w in re.findall(r"[\w.-]+", text.lower()) if len(w) > 1 and w not in _STOP]
    return list(dict.fromkeys(words))[:24]


class ContextAgents:
    def __init__(
        self,
        store: LogStore,
        index: IndexPort,
        *,
        clock: Clock | None = None,
        link_window_hours: float = 6.0,
        top_k: int = 3,
    ) -> None:
        self.store = store
        self.index = index
        self.clock: Clock = clock or SystemClock()
        self.link_window_hours = link_window_hours
        self.top_k = top_k

    async def gather(self, state: ScopeState) -> list[int]:
        """Append what is new for ``state``'s scope; returns the seqs appended (or found already appended)."""
        if state.kind != "incident":
            return []
        scope = state.scope
        memo = await self.store.memo_get(scope, CONTEXT_MEMO_TOPIC, CONTEXT_MEMO_KEY) or {}
        seqs: list[int] = [int(s) for s in memo.get("seqs", []) if isinstance(s, int)]
        changed = False
        if not memo.get("similar_done") and search_terms(state):
            items = await self.similar_incidents(state)
            if items:
                seqs += await self._append(
                    scope, "similar_incidents", _similar_text(items), items, f"context:similar:{scope}"
                )
            memo["similar_done"] = True
            changed = True
        services = sorted(state.services)
        if services and memo.get("changes_for") != services:
            seen = set(memo.get("changes_seen", []))
            items = [c for c in await self.recent_changes(state) if c["scope"] not in seen]
            if items:
                key = f"context:changes:{scope}:{'+'.join(sorted(c['scope'] for c in items))}"[:400]
                seqs += await self._append(scope, "recent_changes", _changes_text(items), items, key)
            memo["changes_for"] = services
            memo["changes_seen"] = sorted(seen | {c["scope"] for c in items})
            changed = True
        if changed:
            memo["seqs"] = sorted(set(seqs))
            await self.store.memo_put(scope, CONTEXT_MEMO_TOPIC, CONTEXT_MEMO_KEY, memo)
        return seqs

    async def similar_incidents(self, state: ScopeState) -> list[dict[str, Any]]:
        terms = search_terms(state)
        hits = await self.index.search(" ".join(terms), limit=60, exclude_scope=state.scope)
        grouped: dict[str, dict[str, Any]] = {}
        for hit in hits:
            if not hit.scope.startswith("incident/"):
                continue
            item = grouped.get(hit.scope)
            if item is None:
                item = grouped[hit.scope] = {"scope": hit.scope, "rank": hit.rank, "matched": [], "seq": hit.seq}
                item["snippet"] = clip(hit.snippet, 160)
            for term in re.findall(r"\[([^\]]+)\]", hit.snippet):
                term = term.lower()
                if term not in item["matched"] and len(item["matched"]) < 8:
                    item["matched"].append(term)
        ranked = sorted(grouped.values(), key=lambda i: (-len(i["matched"]), i["rank"], i["scope"]))
        out: list[dict[str, Any]] = []
        for item in ranked:
            if len(out) >= self.top_k:
                break
            if (await self.store.get_state(item["scope"])).forked_from:
                continue  # a fork (decklog fork / replay) is a copy of an incident, not a past incident
            row = await self.index.get(item["scope"])
            out.append(
                {
                    "scope": item["scope"],
                    "title": row.title if row else "",
                    "status": row.status if row else "",
                    "declared_at": row.created_at[:19] if row else "",
                    "matched": item["matched"],
                    "snippet": item["snippet"],
                    "seq": item["seq"],
                }
            )
        return out

    async def recent_changes(self, state: ScopeState) -> list[dict[str, Any]]:
        anchor = parse_iso(state.created_at) if state.created_at else self.clock.now()
        since = anchor - timedelta(hours=self.link_window_hours)
        until = max(self.clock.now(), anchor)
        return [
            {**change_json(row, state.linked), "minutes_before_incident": round((anchor - at).total_seconds() / 60, 1)}
            for row, at in (await self.index.changes_on(state.services, since, until))[:10]
        ]

    async def _append(self, scope: str, kind: str, text: str, items: list[dict[str, Any]], key: str) -> list[int]:
        payload = Observation(text=text, source=CONTEXT_SOURCE, data={"kind": kind, "items": items})
        try:
            result = await self.store.append(scope, [NewEntry.make("observation", ACTOR, payload, idempotency_key=key)])
        except Exception:
            log.exception("context agent: could not append %s to %s", kind, scope)
            return []
        return [e.seq for e in result.entries]


def _similar_text(items: list[dict[str, Any]]) -> str:
    parts = [
        f"{i['scope']} (“{clip(i['title'], 60)}”, {i['status'] or 'unknown'}; matched {', '.join(i['matched'][:4]) or 'text'})"
        for i in items
    ]
    return "Similar past incidents: " + "; ".join(parts)


def _changes_text(items: list[dict[str, Any]]) -> str:
    parts = [
        f"{c['scope']} ({c['status']}, {c['minutes_before_incident']:g} min before the incident"
        + (", linked" if c["linked"] else "")
        + ")"
        for c in items[:5]
    ]
    more = f" and {len(items) - 5} more" if len(items) > 5 else ""
    return "Recent changes on the incident's services: " + "; ".join(parts) + more
