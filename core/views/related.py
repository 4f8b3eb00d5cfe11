"""Actions already run in RELATED incidents: one cause often opens several incidents, and views are per
incident, so a fresh turn would not see that the mitigation already ran next door and would run it again.

Related: another incident linked to this one, sharing a service with it, or declared within ``CO_OCCURRING`` of it
(one cause breaking several services at once opens incidents that share neither a link nor a service: the storm).
Listed: each run started or ended within ``WINDOW`` before this incident's newest entry (or since) — the other
scope, the action, its target (its params), how it ended (``applied`` / ``failed`` / ``uncertain``: no result
yet, or one the runner has not settled / ``compensated``: it applied and a later run undid it, so the mitigation is
no longer in place), when, and the entry to cite (for a compensated run, the compensation). From stored state only:
the index lists the candidates (without one, the linked incidents only), the other scopes' logs say which actions ran and how they
ended. The window is anchored on stored times, never on a clock, so the same stored state gives the same list.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from decklog.core.clock import iso, parse_iso
from decklog.core.entries import ActionResult, ActionStarted, EffectCompensated, Entry
from decklog.core.errors import NotFound
from decklog.core.views.reader import Reader
from decklog.core.views.shapes import at_text

WINDOW = timedelta(hours=6)  # the agents' change window (core/agents/runtime.py ``change_window_hours``)
CO_OCCURRING = timedelta(hours=1)
CANDIDATES = 20  # the most recently updated incidents the index is asked for
RUNS = 12  # the newest runs read per related incident
FINDING = "already applied:"  # how a finding that cites a related run starts (the reasoners write it)


def target_of(params: Mapping[str, Any]) -> str:
    """What an action acts on, as the views show it: its params, ``key=value`` sorted by key."""
    return ",".join(f"{k}={params[k]}" for k in sorted(params))


def applied_in(items: Sequence[Mapping[str, Any]], action: str, params: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The newest related run of ``action`` on the same target that applied, if a view's section lists one."""
    target = target_of(params)
    done = [i for i in items if i.get("action") == action and i.get("target") == target and i["outcome"] == "applied"]
    return done[-1] if done else None


def finding_text(item: Mapping[str, Any]) -> str:
    """The finding a reasoner records instead of proposing again: what ran where, when, and the entry it cites."""
    return (
        f"{FINDING} {item['action']}({item['target']}) in {item['scope']} at {item['at']} ({item['ref']}, "
        f"related: {item['relation']}); not proposing it again"
    )


def _when(text: str) -> datetime | None:
    try:
        return parse_iso(text) if text else None
    except ValueError:
        return None


async def related_actions(reader: Reader, *, target: tuple[str, str] | None = None) -> list[dict[str, Any]]:
    """The runs of related incidents in the window, oldest first (``target``: only those of this action+target)."""
    s = reader.state
    anchor = _when(s.updated_at) or _when(s.created_at)
    if anchor is None:
        return []
    since = anchor - WINDOW
    items: list[dict[str, Any]] = []
    for scope, relation in (await _related_scopes(reader, since)).items():
        try:
            other = await reader.store.get_state(scope)
        except NotFound:
            continue
        entries = await reader.over(other).last(("action_started", "action_result", "effect_compensated"), 3 * RUNS)
        items += _runs(scope, relation, entries, since)
    if target is not None:
        items = [i for i in items if (i["action"], i["target"]) == target]
    items.sort(key=lambda i: (i["at"], i["scope"], i["ref"]))
    return items


async def _related_scopes(reader: Reader, since: datetime) -> dict[str, str]:
    """Related incident → how it is related (linked first, then the index's candidates, newest first)."""
    s = reader.state
    out = {x: "linked" for x in s.linked if x.startswith("incident/") and x != s.scope}
    if reader.index is None:
        return out
    declared = _when(s.created_at)
    rows = await reader.index.list_scopes(kind="incident", updated_since=iso(since), limit=CANDIDATES)
    for row in rows:
        if row.id == s.scope or row.id in out:
            continue
        shared = sorted(set(row.services) & set(s.services))
        at = _when(row.created_at)
        if shared:
            out[row.id] = f"service {shared[0]}"
        elif declared and at and abs(at - declared) <= CO_OCCURRING:
            out[row.id] = f"declared within {CO_OCCURRING.total_seconds() / 3600:g} h"
    return out


def _runs(scope: str, relation: str, entries: list[Entry], since: datetime) -> list[dict[str, Any]]:
    started: dict[str, Entry] = {}
    ended: dict[str, Entry] = {}
    undone: dict[str, Entry] = {}
    for e in entries:
        if isinstance(e.payload, ActionStarted):
            started[e.payload.run_id] = e
        elif isinstance(e.payload, ActionResult):
            ended[e.payload.run_id] = e  # oldest first: a reconciled result replaces the uncertain one
        elif isinstance(e.payload, EffectCompensated):
            undone[e.payload.original_run] = e
    out = []
    for run_id, st in started.items():
        res = ended.get(run_id)
        last = res or st
        if last.at < since or not isinstance(st.payload, ActionStarted):
            continue
        outcome: str = res.payload.outcome if res is not None and isinstance(res.payload, ActionResult) else "uncertain"
        if outcome == "applied" and run_id in undone:
            outcome, last = "compensated", undone[run_id]
        out.append(
            {
                "scope": scope,
                "relation": relation,
                "action": st.payload.action,
                "target": target_of(st.payload.params),
                "outcome": outcome if outcome in ("applied", "uncertain", "compensated") else "failed",
                "at": at_text(last.at),
                "ref": f"{scope}#{last.seq}",
            }
        )
    return out
