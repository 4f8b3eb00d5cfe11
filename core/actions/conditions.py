"""Safety conditions: named checks over a scope's recorded state and evidence, evaluated before anything runs.

Each condition first extracts its *inputs* (the recorded facts it depends on, and nothing time-dependent), then
judges them. The inputs of all of an action's conditions are hashed into the proposal's ``inputs_digest``: if the
scope records something that changes them between proposal and approval, the approval is void (drift), and the
difference is described from the inputs recorded with the proposal. The same checks run again, on current
evidence, right before the executor is called.

Conditions (``safety_conditions = [...]`` in decklog.toml):

- ``alert_still_firing`` — an alert on the action's ``service`` (any alert when there is no service) is firing.
- ``change_is_latest_on_service`` — the change to undo (``params.change``, else the latest change linked to the
  scope on that service) is the most recent change recorded on the service, and has not failed or been rolled
  back already.
- ``no_other_run_in_flight`` — no other run in the scope is running or has an uncertain outcome.
- ``incident_open`` — the scope is not resolved.
- ``not_run_in_related_incident`` — the action has not applied (or is not in flight, outcome still uncertain) on
  the same target in a related incident within the last 6 h (core/views/related.py: linked, sharing a service, or
  declared within the hour). One cause opens several incidents; this keeps a second one from applying the same
  mitigation again (a second "roll back one release" would roll back further). A run that a compensation undid
  does not count.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from decklog.core.entries import canonical_json
from decklog.core.state import ScopeState

Inputs = dict[str, Any]
RELATED_RUNS = "not_run_in_related_incident"  # the condition that reads other incidents' runs


@dataclass(frozen=True)
class ChangeFact:
    """A change scope as evidence: which services it touched, when decklog recorded it, and its status."""

    scope: str
    services: tuple[str, ...]
    created_at: str
    status: str = ""
    title: str = ""


@dataclass(frozen=True)
class RelatedRun:
    """A run of the same action on the same target in a related incident that applied or is still uncertain."""

    scope: str
    outcome: str
    at: str
    ref: str
    relation: str = ""


@dataclass(frozen=True)
class Evidence:
    """What the conditions may read besides the scope's own state (gathered outside the write transaction)."""

    changes: tuple[ChangeFact, ...] = ()
    related_runs: tuple[RelatedRun, ...] = ()


@dataclass(frozen=True)
class CheckResult:
    name: str
    ok: bool
    detail: str
    inputs: Inputs = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "ok": self.ok, "detail": self.detail, "inputs": self.inputs}


@dataclass(frozen=True)
class Condition:
    name: str
    description: str
    inputs: Callable[[ScopeState, Evidence, Mapping[str, Any]], Inputs]
    judge: Callable[[Inputs], tuple[bool, str]]


# -- alert_still_firing ------------------------------------------------------------------------------------------


def _alert_inputs(state: ScopeState, _evidence: Evidence, params: Mapping[str, Any]) -> Inputs:
    service = str(params.get("service") or "")
    alerts = sorted(
        [a.fingerprint, a.status, a.title[:120]]
        for a in state.alerts.values()
        if not service or not a.service or a.service == service
    )
    return {"service": service, "alerts": alerts}


def _alert_judge(inputs: Inputs) -> tuple[bool, str]:
    where = f" on {inputs['service']}" if inputs["service"] else ""
    firing = [a for a in inputs["alerts"] if a[1] != "resolved"]
    if firing:
        return True, f"{len(firing)} alert(s) firing{where}: {firing[0][2]}"
    if inputs["alerts"]:
        return False, f"every alert{where} has resolved"
    return False, f"no alert recorded{where}"


# -- change_is_latest_on_service ---------------------------------------------------------------------------------


def _change_inputs(state: ScopeState, evidence: Evidence, params: Mapping[str, Any]) -> Inputs:
    service = str(params.get("service") or "")
    target = str(params.get("change") or "")
    changes = sorted(
        (
            [c.scope, c.created_at, c.status]
            for c in evidence.changes
            if (service and service in c.services) or c.scope == target
        ),
        key=lambda c: (c[1], c[0]),
    )
    linked = sorted(s for s in state.linked if any(c[0] == s for c in changes))
    return {"service": service, "target": target, "changes": changes, "linked": linked}


def _change_judge(inputs: Inputs) -> tuple[bool, str]:
    service, target, changes = inputs["service"], inputs["target"], inputs["changes"]
    if not service:
        return False, "the action names no service"
    if not target:
        if not inputs["linked"]:
            return False, f"no change on {service} is linked to this scope"
        target = max(inputs["linked"], key=lambda s: next(c[1] for c in changes if c[0] == s))
    mine = next((c for c in changes if c[0] == target), None)
    if mine is None:
        return False, f"{target} is not a recorded change on {service}"
    latest = changes[-1]
    if latest[0] != target:
        return False, f"{target} is not the latest change on {service}: {latest[0]} came after it"
    if mine[2] in ("failed", "rolled_back"):
        return False, f"{target} is already {mine[2].replace('_', ' ')}"
    return True, f"{target} is the latest change on {service}"


# -- no_other_run_in_flight --------------------------------------------------------------------------------------


def _runs_inputs(state: ScopeState, _evidence: Evidence, _params: Mapping[str, Any]) -> Inputs:
    return {"runs": sorted([r.run_id, r.action, r.outcome] for r in state.runs.values())}


def _runs_judge(inputs: Inputs) -> tuple[bool, str]:
    runs = inputs["runs"]
    if runs:
        run_id, action, outcome = runs[0]
        return False, f"run {run_id} ({action}) is {outcome}"
    return True, "no other run is in flight"


# -- not_run_in_related_incident --------------------------------------------------------------------------------


def _related_inputs(_state: ScopeState, evidence: Evidence, _params: Mapping[str, Any]) -> Inputs:
    return {"runs": sorted([r.at, r.scope, r.outcome, r.ref, r.relation] for r in evidence.related_runs)}


def _related_judge(inputs: Inputs) -> tuple[bool, str]:
    runs = inputs["runs"]
    if not runs:
        return True, "not run on this target in a related incident"
    at, scope, outcome, ref, relation = runs[-1]
    more = f" (and {len(runs) - 1} more)" if len(runs) > 1 else ""
    why = f", related: {relation}" if relation else ""
    return False, f"already {outcome} in {scope} at {at} ({ref}{why}){more}"


# -- incident_open -----------------------------------------------------------------------------------------------


def _open_inputs(state: ScopeState, _evidence: Evidence, _params: Mapping[str, Any]) -> Inputs:
    return {"status": state.status}


def _open_judge(inputs: Inputs) -> tuple[bool, str]:
    if inputs["status"] == "resolved":
        return False, "the incident is resolved"
    return True, f"the incident is {inputs['status']}"


CONDITIONS: Mapping[str, Condition] = {
    c.name: c
    for c in (
        Condition("alert_still_firing", "an alert on the service is still firing", _alert_inputs, _alert_judge),
        Condition(
            "change_is_latest_on_service",
            "the change to undo is the latest on the service",
            _change_inputs,
            _change_judge,
        ),
        Condition("no_other_run_in_flight", "no other run is in flight", _runs_inputs, _runs_judge),
        Condition("incident_open", "the incident is not resolved", _open_inputs, _open_judge),
        Condition(
            RELATED_RUNS,
            "the action has not run on this target in a related incident",
            _related_inputs,
            _related_judge,
        ),
    )
}


def evaluate(
    names: Sequence[str], state: ScopeState, evidence: Evidence, params: Mapping[str, Any]
) -> list[CheckResult]:
    """Evaluate the named conditions (unknown names fail, they never pass silently)."""
    results = []
    for name in names:
        condition = CONDITIONS.get(name)
        if condition is None:
            results.append(CheckResult(name, False, f"unknown safety condition {name!r}"))
            continue
        inputs = condition.inputs(state, evidence, params)
        ok, detail = condition.judge(inputs)
        results.append(CheckResult(name, ok, detail, inputs))
    return results


def inputs_digest(results: Sequence[CheckResult]) -> str:
    """sha256 over every condition's inputs: what the drift check compares."""
    material = canonical_json({r.name: r.inputs for r in results})
    return "sha256:" + hashlib.sha256(material.encode("utf-8")).hexdigest()


def failing(results: Sequence[CheckResult]) -> list[CheckResult]:
    return [r for r in results if not r.ok]


def describe_drift(recorded: Sequence[Mapping[str, Any]], now: Sequence[CheckResult]) -> str:
    """What changed in the conditions' inputs since they were recorded with the proposal, in one line."""
    before = {str(c.get("name")): c for c in recorded}
    parts = []
    for result in now:
        old = before.get(result.name)
        if old is None or canonical_json(old.get("inputs")) != canonical_json(result.inputs):
            was = str(old.get("detail")) if old is not None else "not evaluated"
            parts.append(f"{result.name}: was “{was}”, now “{result.detail}”")
    return "; ".join(parts) or "the recorded evidence changed"
