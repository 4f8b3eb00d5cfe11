"""The experiment's action catalog, built from a scenario: every action its tools suggest or its world knows,
R2 (parked for the scripted approver), run by the ``http`` executor against the world on loopback.

The scenario's conditions are free text ("alert still firing"); each one that names a desk condition is mapped
to it (``CONDITIONS``), so that the runner re-checks it on current evidence before the call. Unmapped text is
still copied into the obligation and re-checked by the agent (an observation the judge reads). The desk's
``alert_still_firing`` reads the alerts on the action's ``service``: an action on a service that never alerts in
the scenario (a DNS revert for a storm on web, api, …) does not get it, since it could never hold there.
"""

from __future__ import annotations

from typing import Any

from decklog.adapters.executors import EXECUTOR_TYPES
from decklog.core.actions.catalog import Catalog
from decklog.core.actions.conditions import CONDITIONS
from research.experiment.scenario import Scenario

WORLD_URL = "DECKLOG_EXPERIMENT_WORLD_URL"
_ALIASES = {
    "alert still firing": "alert_still_firing",
    "no other run of this action in progress": "no_other_run_in_flight",
    "no other run in flight": "no_other_run_in_flight",
    "incident open": "incident_open",
}


def desk_condition(text: str) -> str:
    """The desk condition a free-text condition names, or ''."""
    words = " ".join(text.lower().replace("_", " ").split())
    name = _ALIASES.get(words, words.replace(" ", "_"))
    return name if name in CONDITIONS else ""


def _param_type(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    return "number" if isinstance(value, float) else "string"


def actions(scenario: Scenario) -> dict[str, dict[str, Any]]:
    """Action name → the parameters seen for it (name → type)."""
    refs = [dict(t.fix) for t in scenario.tools if t.fix]
    refs += [{"action": a.action, "params": a.params} for a in (*scenario.world.mitigations, *scenario.world.harmful)]
    out: dict[str, dict[str, Any]] = {}
    for ref in refs:
        params = out.setdefault(str(ref["action"]), {})
        for k, v in dict(ref.get("params") or {}).items():
            params[k] = _param_type(v)
    return out


def _conditions(scenario: Scenario, action: str) -> tuple[str, ...]:
    mapped = tuple(dict.fromkeys(c for c in map(desk_condition, scenario.invariants.conditions) if c))
    alerting = {s.service for s in scenario.timeline if s.type == "alert"}
    refs = [dict(t.fix) for t in scenario.tools if t.fix and t.fix.get("action") == action]
    refs += [{"params": a.params} for a in (*scenario.world.mitigations, *scenario.world.harmful) if a.action == action]
    services = {str(dict(r.get("params") or {}).get("service", "")) for r in refs} - {""}
    if services and not services & alerting:
        return tuple(c for c in mapped if c != "alert_still_firing")
    return mapped


def build(scenario: Scenario, world_url: str, *, timeout_s: float = 5.0) -> Catalog:
    raw = [
        {
            "name": name,
            "description": f"{name}, as the scenario's world knows it",
            "risk": "R2",
            "params": {k: {"type": t} for k, t in params.items()},
            "executor": {
                "type": "http",
                "url": f"${{{WORLD_URL}}}/act",
                "reconcile_url": f"${{{WORLD_URL}}}/reconcile",
                "timeout_s": timeout_s,
            },
            "safety_conditions": _conditions(scenario, name),
            "verify": "none",
        }
        for name, params in sorted(actions(scenario).items())
    ]
    return Catalog.from_config(raw, env={WORLD_URL: world_url}, executors=EXECUTOR_TYPES)
