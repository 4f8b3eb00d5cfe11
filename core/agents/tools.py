"""The tools a model reasoner may call during a turn, with typed results.

Read tools are R1 (they only read the log and the index). Writing tools never write: they add an *intent* to the
turn's output (a hypothesis, a suggestion, an obligation, a proposal), which the runtime records after the turn
under a compare-and-set; a proposal goes to the action desk and parks for approval. Every result is typed —
``success``, ``no_data`` or ``error`` — and an error says precisely what was wrong and how to call the tool
correctly, so that the model can correct itself on the next step.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Literal

from core.agents.reasoner import HypothesisIntent, ObligationIntent, ProposalIntent, SuggestionIntent
from core.entries import Entry
from core.index import Index
from core.obligations import new_obligation_id
from core.state import ScopeState
from core.store import LogStore
from core.views import VIEW_NAMES, brief, change_json, clip, header, obligation_json

if TYPE_CHECKING:
    from core.agents.ports import ActionInfo
    from core.agents.reasoner import ViewReader

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
        "R1. Full-text search over other incidents' logs; returns the best matching incidents and why they matched.",
        _obj(
            {
                "query": {"type": "string", "description": "words to look for, e.g. 'payments 5xx connection pool'"},
                "limit": {"type": "integer", "minimum": 1, "maximum": 10},
            },
            ["query"],
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
        "record_hypothesis",
        "Record a hypothesis about the cause (an intent: recorded after the turn, marked as agent-inferred).",
        _obj(
            {
                "text": {"type": "string", "minLength": 1},
                "confidence": {"type": "number", "minimum": 0, "maximum": 1},
                "suspect_scope": {"type": "string", "description": "e.g. change/payments-v2.4.1"},
                "evidence_seqs": {"type": "array", "items": {"type": "integer", "minimum": 1}},
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


@dataclass
class Collected:
    """The intents the writing tools gathered during a turn."""

    hypotheses: list[HypothesisIntent] = field(default_factory=list)
    suggestions: list[SuggestionIntent] = field(default_factory=list)
    obligations: list[ObligationIntent] = field(default_factory=list)
    proposals: list[ProposalIntent] = field(default_factory=list)


class ToolBox:
    """The tools of one turn, bound to its scope, state and views. ``calls`` is the provenance of every call."""

    def __init__(
        self,
        *,
        store: LogStore,
        state: ScopeState,
        views: ViewReader,
        now: datetime,
        index: Index | None = None,
        catalog: list[ActionInfo] | None = None,
        change_window_hours: float = 6.0,
    ) -> None:
        self.store = store
        self.state = state
        self.scope = state.scope
        self.views = views
        self.now = now
        self.index = index
        self.catalog = catalog
        self.change_window_hours = change_window_hours
        self.collected = Collected()
        self.calls: list[dict[str, Any]] = []
        self._handlers: dict[str, Callable[[dict[str, Any]], Awaitable[ToolResult]]] = {
            "get_state": self._get_state,
            "read_view": self._read_view,
            "read_entries": self._read_entries,
            "search_similar_incidents": self._search,
            "list_recent_changes": self._changes,
            "record_hypothesis": self._hypothesis,
            "suggest": self._suggest,
            "open_obligation": self._obligation,
            "propose_action": self._propose,
        }

    def specs(self) -> list[ToolSpec]:
        return [s for s in SPECS if s.name != "search_similar_incidents" or self.index is not None]

    async def call(self, name: str, args: Any) -> ToolResult:
        handler = self._handlers.get(name)
        if handler is None:
            result = error(f"there is no tool named {name!r}; the tools are: {', '.join(s.name for s in self.specs())}")
        elif not isinstance(args, dict):
            result = error(f"{name}: the input must be a JSON object, got {type(args).__name__}")
        else:
            try:
                result = await handler(args)
            except _Bad as exc:
                result = error(f"{name}: {exc}")
        self.calls.append({"tool": name, "input": _short(args), "status": result.status})
        return result

    # -- read tools (R1) ---------------------------------------------------------------------------------------

    async def _get_state(self, args: dict[str, Any]) -> ToolResult:
        s = self.state
        return ok(
            {
                **header(s),
                "roles": {r: h.user_name or h.user_id for r, h in s.roles.items()},
                "firing_alerts": [a.title for a in s.firing_alerts][:20],
                "open_obligations": [obligation_json(o) for o in s.obligations.values()],
                "proposals": [
                    {"id": p.id, "action": p.action, "status": p.status, "obligation_id": p.obligation_id}
                    for p in s.proposals.values()
                ],
                "available_actions": None if self.catalog is None else [a.name for a in self.catalog],
            }
        )

    async def _read_view(self, args: dict[str, Any]) -> ToolResult:
        name = _str(args, "name", required=True)
        if name not in VIEW_NAMES:
            raise _Bad(f"`name` must be one of {', '.join(VIEW_NAMES)}, got {name!r}")
        obligation_id = _str(args, "obligation_id") or None
        if obligation_id and obligation_id not in self.state.obligations:
            open_ids = ", ".join(self.state.obligations) or "none"
            raise _Bad(f"no open obligation {obligation_id!r} (open obligations: {open_ids})")
        view = await self.views.view(name, obligation_id=obligation_id)
        return ok(json.loads(view.text))

    async def _read_entries(self, args: dict[str, Any]) -> ToolResult:
        seqs = args.get("seqs")
        last = self.state.version
        if (
            not isinstance(seqs, list)
            or not seqs
            or not all(isinstance(x, int) and not isinstance(x, bool) for x in seqs)
        ):
            raise _Bad(f"`seqs` must be a non-empty list of integers between 1 and {last}, got {seqs!r}")
        if len(seqs) > MAX_READ:
            raise _Bad(f"at most {MAX_READ} seqs per call, got {len(seqs)}; split the request")
        bad = [x for x in seqs if not 1 <= x <= last]
        if bad:
            raise _Bad(f"seq(s) {bad} do not exist; this incident's entries are numbered 1..{last}")
        entries = await self.store.read_seqs(self.scope, seqs)
        return ok([_full(e) for e in entries])

    async def _search(self, args: dict[str, Any]) -> ToolResult:
        if self.index is None:
            return no_data("search is not available in this process")
        query = _str(args, "query", required=True)
        limit = _int(args, "limit", default=5, low=1, high=10)
        hits = await self.index.search(query, limit=limit * 8, exclude_scope=self.scope)
        best: dict[str, dict[str, Any]] = {}
        for hit in hits:
            if not hit.scope.startswith("incident/"):
                continue
            item = best.setdefault(hit.scope, {"scope": hit.scope, "matches": []})
            if len(item["matches"]) < 3:
                item["matches"].append({"seq": hit.seq, "kind": hit.kind, "snippet": hit.snippet})
        if not best:
            return no_data(f"no other incident matches {query!r}")
        out = []
        for item in list(best.values())[:limit]:
            row = await self.index.get(item["scope"])
            if row is not None:
                item.update(title=row.title, status=row.status, created_at=row.created_at[:19])
            out.append(item)
        return ok(out)

    async def _changes(self, args: dict[str, Any]) -> ToolResult:
        if self.index is None:
            return no_data("the change index is not available in this process")
        service = _str(args, "service")
        hours = _num(args, "hours", default=self.change_window_hours, low=0.1, high=168)
        services = [service] if service else list(self.state.services)
        if not services:
            return no_data("the incident has no services yet; pass `service`")
        found = await self.index.changes_on(services, self.now - timedelta(hours=hours))
        if not found:
            return no_data(f"no change on {', '.join(services)} in the last {hours:g} hours")
        return ok([change_json(row, self.state.linked) for row, _at in found])

    # -- intent tools ------------------------------------------------------------------------------------------

    async def _hypothesis(self, args: dict[str, Any]) -> ToolResult:
        text = _str(args, "text", required=True)
        confidence = args.get("confidence")
        if confidence is not None and (
            not isinstance(confidence, int | float) or isinstance(confidence, bool) or not 0 <= confidence <= 1
        ):
            raise _Bad(f"`confidence` must be a number between 0 and 1, got {confidence!r}")
        suspect = _str(args, "suspect_scope")
        refs = self._refs(args)
        self.collected.hypotheses.append(
            HypothesisIntent(text, float(confidence) if confidence is not None else None, suspect, refs)
        )
        return ok("recorded after this turn as an agent-inferred hypothesis")

    async def _suggest(self, args: dict[str, Any]) -> ToolResult:
        text = _str(args, "text", required=True)
        action = _str(args, "action")
        if action not in ("", "resolve"):
            raise _Bad(f"`action` must be '' or 'resolve', got {action!r}; use propose_action for real actions")
        if action == "resolve" and self.state.status == "resolved":
            raise _Bad("the incident is already resolved")
        self.collected.suggestions.append(SuggestionIntent(text, action, _str(args, "rationale")))
        return ok("posted after this turn with Accept / Dismiss buttons")

    async def _obligation(self, args: dict[str, Any]) -> ToolResult:
        text = _str(args, "text", required=True)
        purpose = _str(args, "purpose", required=True)
        if purpose not in PURPOSES:
            raise _Bad(f"`purpose` must be one of {', '.join(PURPOSES)}, got {purpose!r}")
        action = _str(args, "action")
        if action and self.catalog is not None and not any(a.name == action for a in self.catalog):
            raise _Bad(f"action {action!r} is not available; available: {self._available()}")
        params = args.get("params") or {}
        if not isinstance(params, dict):
            raise _Bad("`params` must be a JSON object")
        conditions = args.get("conditions") or []
        if not isinstance(conditions, list) or not all(isinstance(c, str) for c in conditions):
            raise _Bad("`conditions` must be a list of strings")
        oid = new_obligation_id()
        self.collected.obligations.append(
            ObligationIntent(
                text=text,
                purpose=purpose,
                conditions=tuple(conditions),
                action=action,
                params=params,
                expected_outcome=_str(args, "expected_outcome"),
                refs=self._refs(args),
                obligation_id=oid,
            )
        )
        return ok({"obligation_id": oid, "note": "recorded after this turn; use this id with propose_action"})

    async def _propose(self, args: dict[str, Any]) -> ToolResult:
        action = _str(args, "action", required=True)
        if self.catalog is not None and not any(a.name == action for a in self.catalog):
            raise _Bad(f"action {action!r} is not available; available: {self._available()}")
        params = args.get("params")
        if not isinstance(params, dict):
            raise _Bad("`params` must be a JSON object (the action's arguments)")
        rationale = _str(args, "rationale", required=True)
        oid = _str(args, "obligation_id", required=True)
        pending = {o.obligation_id for o in self.collected.obligations}
        if oid not in self.state.obligations and oid not in pending:
            open_ids = ", ".join([*self.state.obligations, *pending]) or "none"
            raise _Bad(f"no open obligation {oid!r} (open: {open_ids}); open one first with open_obligation")
        if any(p.obligation_id == oid for p in self.state.proposals.values()) or any(
            p.obligation_id == oid for p in self.collected.proposals
        ):
            raise _Bad(f"obligation {oid} already has a pending proposal")
        self.collected.proposals.append(ProposalIntent(action, params, rationale, oid))
        return ok("handed to the action desk after this turn; it parks for human approval and does not run now")

    # -- helpers -----------------------------------------------------------------------------------------------

    def _available(self) -> str:
        return ", ".join(a.name for a in self.catalog or []) or "none"

    def _refs(self, args: dict[str, Any]) -> tuple[int, ...]:
        seqs = args.get("evidence_seqs") or []
        if not isinstance(seqs, list) or not all(isinstance(x, int) and not isinstance(x, bool) for x in seqs):
            raise _Bad("`evidence_seqs` must be a list of integers (entry seqs of this incident)")
        bad = [x for x in seqs if not 1 <= x <= self.state.version]
        if bad:
            raise _Bad(f"evidence seq(s) {bad} do not exist; entries are numbered 1..{self.state.version}")
        return tuple(sorted(set(seqs)))


class _Bad(Exception):
    """A tool input the model must correct (the message says how)."""


def _str(args: dict[str, Any], key: str, *, required: bool = False) -> str:
    value = args.get(key)
    if value is None or value == "":
        if required:
            raise _Bad(f"`{key}` is required")
        return ""
    if not isinstance(value, str):
        raise _Bad(f"`{key}` must be a string, got {type(value).__name__}")
    return value.strip()


def _int(args: dict[str, Any], key: str, *, default: int, low: int, high: int) -> int:
    value = args.get(key, default)
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise _Bad(f"`{key}` must be an integer between {low} and {high}, got {value!r}")
    return value


def _num(args: dict[str, Any], key: str, *, default: float, low: float, high: float) -> float:
    value = args.get(key, default)
    if not isinstance(value, int | float) or isinstance(value, bool) or not low <= value <= high:
        raise _Bad(f"`{key}` must be a number between {low:g} and {high:g}, got {value!r}")
    return float(value)


def _short(args: Any) -> Any:
    text = json.dumps(args, ensure_ascii=False, default=str)
    return args if len(text) <= 300 else clip(text, 300)


def _full(entry: Entry) -> dict[str, Any]:
    out = brief(entry, limit=400)
    payload = entry.payload.model_dump(mode="json")
    payload.pop("raw", None)
    text = json.dumps(payload, ensure_ascii=False, default=str)
    out["payload"] = payload if len(text) <= 1500 else {"truncated": clip(text, 1500)}
    return out
