"""The tools' schemas as the model sees them (``SPECS``) and their typed results (``ToolResult``: success,
no_data or error). core/agents/tools.py runs them."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Literal

from decklog.core.views import VIEW_NAMES

ToolStatus = Literal["success", "no_data", "error"]
PURPOSES = ("task", "rollback", "verification", "follow_up", "compensation")
MAX_READ = 20
MAX_RESULT_BYTES = 8_000


@dataclass(frozen=True)
class ToolResult:
    status: ToolStatus
    data: Any = None
    error: str = ""

    @property
    def is_error(self) -> bool:
        return self.status == "error"

    def to_text(self) -> str:
        body: dict[str, Any] = {"status": self.status}
        if self.status == "error":
            body["error"] = self.error
        else:
            body["data"] = self.data
        text = json.dumps(body, ensure_ascii=False, separators=(",", ":"), default=str)
        if len(text.encode()) > MAX_RESULT_BYTES:
            text = text[: MAX_RESULT_BYTES - 60] + '…"} (truncated: ask for fewer items)'
        return text


def ok(data: Any) -> ToolResult:
    return ToolResult("success", data)


def no_data(message: str) -> ToolResult:
    return ToolResult("no_data", message)


def error(message: str) -> ToolResult:
    return ToolResult("error", error=message)


@dataclass(frozen=True)
class ToolSpec:
    name: str
    description: str
    input_schema: dict[str, Any]
    kind: Literal["read", "intent"]
    needs: str = ""  # "metrics" | "alerts" | "catalog": offered only when that source is configured

    def to_api(self) -> dict[str, Any]:
        return {"name": self.name, "description": self.description, "input_schema": self.input_schema}


def _obj(properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "required": required, "additionalProperties": False}


SPECS: tuple[ToolSpec, ...] = (
    ToolSpec(
        "get_state",
        "R1. The incident's current state: status, severity, services, roles, alerts, open obligations, proposals.",
        _obj({}, []),
        "read",
    ),
    ToolSpec(
        "read_view",
        "R1. A task-scoped view of this incident's log (triage, investigation, action, verification, joiner).",
        _obj(
            {
                "name": {"type": "string", "enum": list(VIEW_NAMES)},
                "obligation_id": {"type": "string", "description": "for action/verification: which obligation"},
            },
            ["name"],
        ),
        "read",
    ),
    ToolSpec(
        "read_entries",
        f"R1. Entries of this incident's log by seq (at most {MAX_READ}), with their full payloads.",
        _obj({"seqs": {"type": "array", "items": {"type": "integer", "minimum": 1}, "maxItems": MAX_READ}}, ["seqs"]),
        "read",
    ),
    ToolSpec(
        "search_similar_incidents",
        "R1. Past incidents like this one. Without `query`: those sharing this incident's signature (its alerting"
        " services, alert names and alert words), most similar first, with what matched. With `query`: a full-text"
        " search over other incidents' logs. Each result carries the cause people confirmed (or its resolution's"
        " summary) and the actions that fixed it (applied and verified).",
        _obj(
            {
                "query": {
                    "type": "string",
                    "description": "words to look for, e.g. 'payments 5xx connection pool' (omit: this incident's"
                    " signature)",
                },
                "limit": {"type": "integer", "minimum": 1, "maximum": 10},
            },
            [],
        ),
        "read",
    ),
    ToolSpec(
        "list_recent_changes",
        "R1. Deploys and other change scopes on a service (default: the incident's services) in the last hours.",
        _obj(
            {
                "service": {"type": "string"},
                "hours": {"type": "number", "minimum": 0.1, "maximum": 168},
            },
            [],
        ),
        "read",
    ),
    ToolSpec(
        "query_metrics",
        "R1. A PromQL query to Prometheus: instant (default) or a range over the last `minutes`. Each call is "
        "recorded as an observation; cite its `observation` number in record_hypothesis.",
        _obj(
            {
                "query": {"type": "string", "minLength": 1, "description": 'PromQL, e.g. up{service="payments"}'},
                "minutes": {"type": "number", "minimum": 1, "maximum": 1440, "description": "a range query"},
            },
            ["query"],
        ),
        "read",
        "metrics",
    ),
    ToolSpec(
        "list_firing_alerts",
        "R1. What fires or is silenced right now outside this incident: Alertmanager's alerts and silences, and "
        "Prometheus' pending and firing alerts.",
        _obj({}, []),
        "read",
        "alerts",
    ),
    ToolSpec(
        "get_service",
        "R1. A service in the catalog: owner, system, what it depends on (transitively), what depends on it, "
        "links and annotations.",
        _obj({"name": {"type": "string", "minLength": 1}}, ["name"]),
        "read",
        "catalog",
    ),
    ToolSpec(
        "check_service",
        "R1. The standard checks of a service in one call: error ratio and p99 latency against its baseline, up, "
        "restarts, CPU saturation, versions (each recorded as an observation).",
        _obj({"name": {"type": "string", "minLength": 1}}, ["name"]),
        "read",
        "metrics",
    ),
    ToolSpec(
        "record_hypothesis",
        "Record a hypothesis about the cause (an intent: recorded after the turn, marked as agent-inferred).",
        _obj(
            {
                "text": {"type": "string", "minLength": 1},
                "confidence": {"type": "number", "minimum": 0, "maximum": 1},
                "suspect_scope": {"type": "string", "description": "e.g. change/payments-v2.4.1"},
                "subject": {"type": "string", "description": "the service or change scope it names"},
                "rank": {"type": "integer", "minimum": 1, "description": "1 = the most likely cause"},
                "evidence_seqs": {"type": "array", "items": {"type": "integer", "minimum": 1}},
                "observations": {
                    "type": "array",
                    "items": {"type": "integer", "minimum": 0},
                    "description": "the `observation` numbers of this turn's reads it rests on",
                },
            },
            ["text"],
        ),
        "intent",
    ),
    ToolSpec(
        "suggest",
        "Suggest something to the responders (they Accept or Dismiss it). action='resolve' resolves on Accept.",
        _obj(
            {
                "text": {"type": "string", "minLength": 1},
                "action": {"type": "string", "enum": ["", "resolve"]},
                "rationale": {"type": "string"},
            },
            ["text"],
        ),
        "intent",
    ),
    ToolSpec(
        "open_obligation",
        "Record unfinished work that must survive this turn (e.g. roll back only if the safety conditions hold).",
        _obj(
            {
                "text": {"type": "string", "minLength": 1},
                "purpose": {"type": "string", "enum": list(PURPOSES)},
                "conditions": {"type": "array", "items": {"type": "string"}},
                "action": {"type": "string", "description": "an available action's name, if one would fulfil it"},
                "params": {"type": "object"},
                "expected_outcome": {"type": "string"},
                "evidence_seqs": {"type": "array", "items": {"type": "integer", "minimum": 1}},
            },
            ["text", "purpose"],
        ),
        "intent",
    ),
    ToolSpec(
        "propose_action",
        "Propose an available action for an open obligation. It parks for human approval; it never runs directly.",
        _obj(
            {
                "action": {"type": "string"},
                "params": {"type": "object"},
                "rationale": {"type": "string", "minLength": 1},
                "obligation_id": {"type": "string"},
            },
            ["action", "params", "rationale", "obligation_id"],
        ),
        "intent",
    ),
)
