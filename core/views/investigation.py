"""The ``investigation`` view: hypotheses with their evidence chains, linked change scopes, what the context
agents found (similar incidents, recent changes), actions run in related incidents (core/views/related.py; the
section is absent when none ran), observations and messages."""

from __future__ import annotations

from typing import Any

from decklog.core.entries import Declared, Entry, FindingAnswer, Hypothesis, Observation, ScopeLinked
from decklog.core.errors import NotFound
from decklog.core.state import ScopeState
from decklog.core.views.compose import Part
from decklog.core.views.reader import Reader, listed
from decklog.core.views.related import related_actions
from decklog.core.views.shapes import alert_items, alert_summary, clip, compact, header, obligation_json, with_evidence

CONTEXT_SOURCE = "agent:context"  # observations appended by the context agents (core/agents/context.py)
CONTEXT_MEMO_TOPIC = "agents"  # sender-memo topic where the context agents remember the seqs they appended
CONTEXT_MEMO_KEY = "context"


async def investigation(r: Reader) -> list[Part]:
    s = r.state
    got = await r.many(
        {
            "hypothesis": (("hypothesis",), 6),
            "scope_linked": (("scope_linked",), len(s.linked) + 10),
            "observation": (("observation",), 8),
            "message": (("message",), 5),
            "finding_answer": (("finding_answer",), 20),
        }
    )
    hypotheses = got["hypothesis"]
    chain = await r.chains(hypotheses)
    link_seq = {e.payload.scope: e.seq for e in got["scope_linked"] if isinstance(e.payload, ScopeLinked)}
    changes = [x for x in s.linked if x.startswith("change/")][-10:]
    change_items = [await _change_summary(r, c, link_seq.get(c, 0)) for c in changes]
    context = await _context_entries(r)
    suspects = sorted(
        {e.payload.suspect_scope for e in hypotheses if isinstance(e.payload, Hypothesis) and e.payload.suspect_scope}
    )
    related = await related_actions(r)
    return [
        Part("scope", value=header(s)),
        Part("alerts", value=alert_summary(s)),
        Part("firing_alerts", items=alert_items(s, status="firing"), keep=3, priority=40, noun="firing alerts"),
        *([Part("related_actions", items=related, keep=1, priority=55, noun="related actions")] if related else []),
        Part(
            "hypotheses",
            items=[_hypothesis(r, e, chain) for e in hypotheses],
            keep=2,
            priority=60,
            noun="hypotheses",
            total=r.count("hypothesis"),
        ),
        Part("suspects", value=suspects),
        Part("ruled_out", value=ruled_out(s, got["finding_answer"], hypotheses)),
        Part("linked_changes", items=change_items, keep=2, priority=70, noun="linked changes", total=len(changes)),
        Part("other_linked", value=[x for x in s.linked if not x.startswith("change/")][-20:]),
        Part("context", items=[_context_item(r, e) for e in context], keep=1, priority=50, noun="context entries"),
        Part("open_obligations", items=[obligation_json(o) for o in s.obligations.values()], keep=10**6),
        listed(r, "observations", got["observation"], keep=2, priority=10, kind="observation"),
        listed(r, "messages", got["message"], keep=1, priority=20, kind="message"),
    ]


def ruled_out(s: ScopeState, answers: list[Entry], hypotheses: list[Entry]) -> list[dict[str, Any]]:
    """The suspects people ruled out, each with whether new evidence arrived since: an alert first seen
    after the ruling. A suspect hypothesised again after its ruling is not listed (it is a suspect again)."""
    latest: dict[str, Entry] = {}
    for e in answers:
        p = e.payload
        if isinstance(p, FindingAnswer) and p.suspect_scope and p.verdict in ("ruled_out", "confirmed"):
            latest[p.suspect_scope] = e
    out = []
    for scope, e in sorted(latest.items()):
        p = e.payload
        again = any(
            isinstance(h.payload, Hypothesis) and h.payload.suspect_scope == scope and h.seq > e.seq for h in hypotheses
        )
        if not isinstance(p, FindingAnswer) or p.verdict != "ruled_out" or again:
            continue
        new = sorted(a.first_seq for a in s.alerts.values() if a.first_seq > e.seq)
        out.append({"suspect_scope": scope, "seq": e.seq, "by": e.actor.label(), "new_evidence": new[:5]})
    return out


def _hypothesis(r: Reader, e: Entry, chain: dict[int, Entry]) -> dict[str, Any]:
    return {
        **with_evidence(e, chain, cache=r.cache),
        "confidence": e.payload.confidence if isinstance(e.payload, Hypothesis) else None,
        "suspect_scope": e.payload.suspect_scope if isinstance(e.payload, Hypothesis) else "",
    }


async def _context_entries(reader: Reader) -> list[Entry]:
    """What the context agents appended (similar incidents, recent changes): remembered seqs, not a search."""
    memo = await reader.store.memo_get(reader.scope, CONTEXT_MEMO_TOPIC, CONTEXT_MEMO_KEY) or {}
    seqs = [int(s) for s in memo.get("seqs", []) if isinstance(s, int)]
    return await reader.seqs(seqs)


def _context_item(r: Reader, entry: Entry) -> dict[str, Any]:
    out = r.brief(entry, limit=300)
    p = entry.payload
    if isinstance(p, Observation):
        items = p.data.get("items")
        if isinstance(items, list):
            out["items"] = items[:5]
        out["about"] = p.data.get("kind", "")
    return out


async def _change_summary(r: Reader, change: str, link_seq: int) -> dict[str, Any]:
    """A linked change scope, as the incident's investigation sees it: what, where, when, which commits/paths."""
    try:
        cstate = await r.store.get_state(change)
    except NotFound:
        return {"scope": change, "missing": True}
    entries = await r.over(cstate).last(("declared", "observation", "evidence", "message"), 12)
    commits: list[dict[str, Any]] = []
    details: dict[str, Any] = {}
    summary = ""
    for e in entries:
        p = e.payload
        if isinstance(p, Declared):
            summary = p.summary
        elif isinstance(p, Observation):
            _change_details(p, details)
            raw_commits = p.data.get("commits")
            for raw in raw_commits if isinstance(raw_commits, list) else []:
                if isinstance(raw, dict):
                    commits.append(_commit(raw))
    return compact(
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


def _change_details(p: Observation, details: dict[str, Any]) -> None:
    """Fill ``details`` (first value wins) with what a change observation says: its kind (deploy, config, flag)
    and flag, version, where, who, when, paths."""
    for key in ("kind", "flag", "version", "environment", "author", "status", "link", "at"):
        value = p.data.get(key) or p.labels.get(key)
        if value and isinstance(value, str) and key not in details:
            details["deployed_at" if key == "at" else key] = value[:19] + "Z" if key == "at" else value
    touched = p.data.get("paths")
    if isinstance(touched, list) and "paths" not in details:
        details["paths"] = [str(x) for x in touched][:8]


def _commit(raw: dict[str, Any]) -> dict[str, Any]:
    paths = raw.get("paths")
    return compact(
        {
            "id": str(raw.get("id", ""))[:12],
            "message": clip(str(raw.get("message", "")), 100),
            "paths": [str(x) for x in paths][:6] if isinstance(paths, list) else [],
        }
    )
