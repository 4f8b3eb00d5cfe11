"""The scripted policy: a deterministic reasoner whose answers depend only on what it is shown (the view text).

It names a root cause only when supporting evidence is in the view, copies conditions from the obligation it sees,
and re-proposes a denied action when the denial is not visible — so lossy context is measurably wrong.
The same function answers in process and behind the fake Anthropic server (``research/experiment/http_model.py``).
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

from decklog.core.views import finding_text, target_of

SYSTEM = (
    "You coordinate one incident. Lines: TOOLS, EVIDENCE, HYPOTHESIS, OBLIGATION, DENIED, APPLIED, UNCERTAIN, "
    "NOT_APPLIED, RELATED, NOTED, ALERT, HOLD, RESOLVED, CONDITIONS, LOG. Answer one JSON object with any of: call "
    "(tool names), hypothesis {entity, evidence}, open {action, params, conditions}, propose {obligation_id, "
    "conditions}, cancel {obligation_id, reason}, finding (text), reconcile (run keys), hold (bool), resolve (bool). "
    "Name a root cause only from evidence you can see; never run again what a related incident applied."
)

MUTATIONS = ("drop_obligations", "repropose_denied", "no_claim", "skip_conditions")


def _fields(line: str) -> dict[str, str]:
    out = {}
    for part in line.split("\t")[1:]:
        key, _, value = part.partition("=")
        out[key] = value
    return out


def parse_view(view: str) -> dict[str, list[dict[str, str]]]:
    seen: dict[str, list[dict[str, str]]] = {}
    for line in view.splitlines():
        head = line.split("\t", 1)[0]
        if head.isupper():
            seen.setdefault(head, []).append(_fields(line))
    return seen


def _unsettled(v: dict[str, list[dict[str, str]]]) -> list[str]:
    """The keys of uncertain effects with no settled line (applied, not applied, abandoned) in view; a lost
    response names no key, and is settled by a settled line of the same action."""
    done = v.get("APPLIED", []) + v.get("ABANDONED", []) + v.get("NOT_APPLIED", [])
    settled, actions = {a["key"] for a in done}, {a.get("action", "") for a in done}
    return [
        u["key"]
        for u in v.get("UNCERTAIN", [])
        if (u["key"] not in settled if u["key"] else u.get("action", "") not in actions)
    ]


def _elsewhere(v: dict[str, list[dict[str, str]]]) -> dict[str, dict[str, str]]:
    """action key → the newest related incident's run of it that applied (RELATED lines: the views' section)."""
    return {r["key"]: r for r in v.get("RELATED", []) if r.get("outcome") == "applied"}


def _siblings(v: dict[str, list[dict[str, str]]]) -> dict[str, dict[str, str]]:
    """action key → a sibling incident's run of it that applied: the APPLIED lines that name another incident
    (the orchestrator's transcript carries every incident's results; the cold views list them as RELATED)."""
    return {a["key"]: a for a in v.get("APPLIED", []) if a.get("scope")}


def _finding(r: dict[str, str]) -> str:
    action, _, target = r["key"].partition("(")
    item = {"action": action, "target": target.removesuffix(")"), **{k: r.get(k, "") for k in ("scope", "at", "ref")}}
    return finding_text({**item, "relation": r.get("relation", "")})


def _obligation(
    ob: dict[str, str], elsewhere: dict[str, dict[str, str]], siblings: dict[str, dict[str, str]], mutation: str
) -> dict[str, Any]:
    """An open obligation: propose it (re-checking its conditions), or cancel it, citing the related incident's
    run, when its action already applied on its target there (a RELATED line, or a sibling's APPLIED line)."""
    if ob.get("status") != "open":
        return {}
    key = f"{ob.get('action', '')}({target_of(json.loads(ob.get('params') or '{}'))})"
    if key in elsewhere:
        return {"cancel": {"obligation_id": ob["id"], "reason": _finding(elsewhere[key])}}
    if key in siblings:
        reason = f"already applied: {key} in {siblings[key]['scope']}; not proposing it again"
        return {"cancel": {"obligation_id": ob["id"], "reason": reason}}
    conditions = ob.get("conditions", "").split("|")
    if mutation == "skip_conditions":  # re-checks only the first condition it was given
        conditions = conditions[:1]
    return {"propose": {"obligation_id": ob["id"], "conditions": conditions}}


def decide(view: str, mutation: str = "") -> dict[str, Any]:
    v = parse_view(view)
    tools = [t for f in v.get("TOOLS", []) for t in f.get("names", "").split(",") if t]
    evidence = v.get("EVIDENCE", [])
    called = {e["tool"] for e in evidence}
    missing = [t for t in tools if t not in called]
    if missing:
        return {"call": missing}
    out: dict[str, Any] = {}
    suspects = Counter(e["suspect"] for e in evidence if e.get("suspect"))
    if suspects and not v.get("HYPOTHESIS"):
        entity = suspects.most_common(1)[0][0]
        out["hypothesis"] = {"entity": entity, "evidence": [int(e["seq"]) for e in evidence if e["suspect"] == entity]}
    uncertain = _unsettled(v)
    if uncertain:
        out["reconcile"] = uncertain
        return out
    firing = [a for a in v.get("ALERT", []) if a.get("status") == "firing"]
    holds = any(e.get("hold") == "1" for e in evidence)
    applied = {a["key"] for a in v.get("APPLIED", [])}
    if holds:
        if not v.get("HOLD"):
            out["hold"] = True
        elif not firing and not v.get("RESOLVED"):
            out["resolve"] = True
        return out
    obligations = v.get("OBLIGATION", [])
    if mutation == "drop_obligations" and obligations:
        out["drop"] = [o["id"] for o in obligations]
        return out
    elsewhere = _elsewhere(v)
    if obligations:
        return {**out, **_obligation(obligations[0], elsewhere, _siblings(v), mutation)}
    denied = {d["key"] for d in v.get("DENIED", [])} if mutation != "repropose_denied" else set()
    done = sorted({e["key"] for e in evidence if e.get("key") in elsewhere})  # the fix ran in a related incident
    noted = {n["key"] for n in v.get("NOTED", [])}
    if [k for k in done if k not in noted]:
        out["finding"] = _finding(elsewhere[next(k for k in done if k not in noted)])
    applied |= set(done)
    if applied and not firing:
        if not v.get("RESOLVED"):
            out["resolve"] = True
        return out
    if applied:
        return out
    conditions = [c for f in v.get("CONDITIONS", []) for c in f.get("list", "").split("|") if c]
    for e in evidence:
        fix = json.loads(e.get("fix") or "{}")
        if fix and e.get("key") not in denied:
            out["open"] = {"action": fix["action"], "params": fix.get("params", {}), "conditions": conditions}
            break
    return out
