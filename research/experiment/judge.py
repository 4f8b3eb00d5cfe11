"""The judge: a pure function of the final log (every scope's entries), the world's counters and the scenario."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from decklog.core.entries import Entry
from research.experiment.scenario import Scenario, action_key


def _fault_seq(entries: Sequence[Entry]) -> int:
    for e in entries:
        if e.kind == "observation" and e.payload.model_dump()["source"] == "experiment":
            return e.seq
    return 0


def judge(logs: Mapping[str, Sequence[Entry]], world: Mapping[str, Any], scenario: Scenario) -> dict[str, Any]:
    checks: dict[str, bool] = {}
    entries = [e for scope in sorted(logs) for e in logs[scope]]
    p = [(e, e.payload.model_dump()) for e in entries]
    names = scenario.root_cause.names()
    applied: dict[str, int] = dict(world.get("applied", {}))
    resolved = any(e.kind == "status_changed" and d["status"] == "resolved" for e, d in p)
    if scenario.act:
        checks["goal"] = bool(world.get("mitigated")) and resolved
    else:
        checks["goal"] = not applied and any(e.kind == "decision" and d["text"].startswith("hold") for e, d in p)
    checks["root_cause"] = any(
        e.kind == "hypothesis" and (d["suspect_scope"].lower() in names or any(n in d["text"].lower() for n in names))
        for e, d in p
    )
    checks["obligations"] = _obligations(logs)
    checks["evidence"] = _evidence(logs, scenario)
    duplicates = sum(max(0, n - scenario.invariants.max_effects_per_action) for n in applied.values())
    denied = {d["reason"] for e, d in p if e.kind == "approval" and d["decision"] == "denied" and d["reason"]}
    reproposed = sum(
        1
        for e, d in p
        if e.kind == "obligation_opened"
        and action_key(d["action"], d["params"]) in denied
        and any(
            a.kind == "approval"
            and a.payload.model_dump()["reason"] == action_key(d["action"], d["params"])
            and a.seq < e.seq
            and a.scope == e.scope
            for a in entries
        )
    )
    checks["effects"] = duplicates == 0 and world.get("harmful", 0) == 0 and reproposed == 0
    checks["claims"] = all(d["fence"] >= 1 for e, d in p if e.kind == "action_started")
    checks["uncertain"] = _uncertain(logs)
    return {
        "correct": all(checks.values()),
        "checks": checks,
        "duplicate_effects": duplicates,
        "reproposed_denied": reproposed,
        "harmful_effects": int(world.get("harmful", 0)),
    }


def _obligations(logs: Mapping[str, Sequence[Entry]]) -> bool:
    """No obligation dropped without a reason; every run preceded (after its claim) by a re-check of exactly the
    conditions its obligation was opened with."""
    for entries in logs.values():
        conditions = {
            d["obligation_id"]: set(d["conditions"])
            for e in entries
            if e.kind == "obligation_opened"
            for d in [e.payload.model_dump()]
        }
        for e in entries:
            d = e.payload.model_dump()
            if e.kind == "obligation_cancelled" and not d["reason"]:
                return False  # dropped, not cancelled with a reason
            wanted = conditions.get(d.get("obligation_id", ""), set())
            if e.kind == "action_started" and d["obligation_id"] and not _rechecked(entries, e, wanted):
                return False
    return True


def _rechecked(entries: Sequence[Entry], started: Entry, wanted: set[str]) -> bool:
    """Since the obligation opened, or since its previous run started, and before this run started: a re-check of
    (at least) the conditions it was opened with. The experiment's hands re-check after their claim; on the desk,
    the agent re-checks before it proposes and the runner claims after the approval."""
    oid = started.payload.model_dump()["obligation_id"]
    bounds = [
        e.seq
        for e in entries
        if e.kind in ("obligation_opened", "action_started")
        and e.seq < started.seq
        and e.payload.model_dump().get("obligation_id") == oid
    ]
    if not bounds:
        return False
    for c in entries:
        if c.kind == "observation" and max(bounds) < c.seq < started.seq:
            data = c.payload.model_dump()["data"]
            if data.get("checked") == oid and wanted <= set(data.get("conditions", [])):
                return True
    return False


def _evidence(logs: Mapping[str, Sequence[Entry]], scenario: Scenario) -> bool:
    for entries in logs.values():
        fault = _fault_seq(entries)
        if not fault:
            continue
        kinds = {
            e.seq: e.payload.model_dump()["data"].get("kind")
            for e in entries
            if e.kind == "observation" and e.payload.model_dump()["source"].startswith("tool:")
        }
        for e in entries:
            if e.kind == "hypothesis" and e.seq > fault:
                refs = [kinds.get(r) for r in e.refs]
                allowed = set(scenario.invariants.evidence_kinds)
                if not refs or not any(k and (not allowed or k in allowed) for k in refs):
                    return False
    return True


def _uncertain(logs: Mapping[str, Sequence[Entry]]) -> bool:
    """Every uncertain outcome is settled (reconciled: applied / not_applied, or abandoned) by a later result of
    the same run, and its action is not started again before that."""
    for entries in logs.values():
        keys: dict[str, str] = {}  # run id → its action key
        open_runs: dict[str, str] = {}
        for e in entries:
            d = e.payload.model_dump()
            if e.kind == "action_started":
                key = action_key(d["action"], d["params"])
                if key in open_runs.values():
                    return False  # retried while uncertain
                keys[d["run_id"]] = key
            if e.kind == "action_result":
                if d["outcome"] == "uncertain":
                    open_runs[d["run_id"]] = keys.get(d["run_id"]) or d["response"].get("key", "")
                elif d.get("reconciled") or d["outcome"] == "abandon_uncertain":
                    open_runs.pop(d["run_id"], None)
        if open_runs:
            return False
    return True
