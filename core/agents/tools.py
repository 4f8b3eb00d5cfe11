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
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from decklog.core.agents.investigator import Candidate, Investigator
from decklog.core.agents.past import lesson, similar_incidents
from decklog.core.agents.reasoner import (
    Collected,
    HypothesisIntent,
    ObligationIntent,
    ProposalIntent,
    SuggestionIntent,
    ViewReader,
)
from decklog.core.agents.tool_args import ToolInputError, full_entry, int_arg, num_arg, short_input, text_arg
from decklog.core.agents.tool_specs import (
    MAX_READ,
    PURPOSES,
    SPECS,
    ToolResult,
    ToolSpec,
    error,
    no_data,
    ok,
)
from decklog.core.evidence.observer import Evidence
from decklog.core.obligations import new_obligation_id
from decklog.core.state import ScopeState
from decklog.core.store.ports import IndexPort, LogStore
from decklog.core.views import VIEW_NAMES, change_json, header, obligation_json

if TYPE_CHECKING:
    from decklog.core.agents.ports import ActionInfo


def _alerts(alerts: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
    return [
        {
            "labels": a.get("labels", {}),
            "state": (a.get("status") or {}).get("state", "") or a.get("state", ""),
            "startsAt": a.get("startsAt") or a.get("activeAt", ""),
        }
        for a in (alerts or [])[:30]
    ]


def _silences(silences: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
    return [
        {
            "matchers": s.get("matchers", []),
            "state": (s.get("status") or {}).get("state", ""),
            "comment": s.get("comment", ""),
        }
        for s in (silences or [])[:20]
    ]


class ToolBox:
    """The tools of one turn, bound to its scope, state and views. ``calls`` is the provenance of every call."""

    def __init__(
        self,
        *,
        store: LogStore,
        state: ScopeState,
        views: ViewReader,
        now: datetime,
        index: IndexPort | None = None,
        catalog: list[ActionInfo] | None = None,
        change_window_hours: float = 6.0,
        evidence: Evidence | None = None,
    ) -> None:
        self.store = store
        self.state = state
        self.scope = state.scope
        self.views = views
        self.now = now
        self.index = index
        self.catalog = catalog
        self.change_window_hours = change_window_hours
        self.evidence = evidence
        self.collected = Collected()
        self.calls: list[dict[str, Any]] = []
        self._handlers: dict[str, Callable[[dict[str, Any]], Awaitable[ToolResult]]] = {
            "get_state": self._get_state,
            "read_view": self._read_view,
            "read_entries": self._read_entries,
            "search_similar_incidents": self._search,
            "list_recent_changes": self._changes,
            "query_metrics": self._query_metrics,
            "list_firing_alerts": self._firing,
            "get_service": self._service,
            "check_service": self._check_service,
            "record_hypothesis": self._hypothesis,
            "suggest": self._suggest,
            "open_obligation": self._obligation,
            "propose_action": self._propose,
        }

    def specs(self) -> list[ToolSpec]:
        return [s for s in SPECS if (s.name != "search_similar_incidents" or self.index is not None) and self._has(s)]

    def _has(self, spec: ToolSpec) -> bool:
        ev = self.evidence
        if not spec.needs:
            return True
        if ev is None:
            return False
        if spec.needs == "metrics":
            return ev.metrics is not None
        if spec.needs == "alerts":
            return ev.metrics is not None or ev.alerts is not None
        return bool(ev.sources.catalog)

    async def call(self, name: str, args: Any) -> ToolResult:
        handler = self._handlers.get(name)
        if handler is None:
            result = error(f"there is no tool named {name!r}; the tools are: {', '.join(s.name for s in self.specs())}")
        elif not isinstance(args, dict):
            result = error(f"{name}: the input must be a JSON object, got {type(args).__name__}")
        else:
            try:
                result = await handler(args)
            except ToolInputError as exc:
                result = error(f"{name}: {exc}")
        self.calls.append({"tool": name, "input": short_input(args), "status": result.status})
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
        name = text_arg(args, "name", required=True)
        if name not in VIEW_NAMES:
            raise ToolInputError(f"`name` must be one of {', '.join(VIEW_NAMES)}, got {name!r}")
        obligation_id = text_arg(args, "obligation_id") or None
        if obligation_id and obligation_id not in self.state.obligations:
            open_ids = ", ".join(self.state.obligations) or "none"
            raise ToolInputError(f"no open obligation {obligation_id!r} (open obligations: {open_ids})")
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
            raise ToolInputError(f"`seqs` must be a non-empty list of integers between 1 and {last}, got {seqs!r}")
        if len(seqs) > MAX_READ:
            raise ToolInputError(f"at most {MAX_READ} seqs per call, got {len(seqs)}; split the request")
        bad = [x for x in seqs if not 1 <= x <= last]
        if bad:
            raise ToolInputError(f"seq(s) {bad} do not exist; this incident's entries are numbered 1..{last}")
        entries = await self.store.read_seqs(self.scope, seqs)
        return ok([full_entry(e) for e in entries])

    async def _search(self, args: dict[str, Any]) -> ToolResult:
        if self.index is None:
            return no_data("search is not available in this process")
        query = text_arg(args, "query")
        limit = int_arg(args, "limit", default=5, low=1, high=10)
        if not query:  # this incident's signature: its alerting services, alert names and words
            found = await similar_incidents(self.store, self.index, self.state, limit=limit)
            if not found:
                return no_data("no past incident shares this incident's services, alert names or alert words")
            return ok([p.to_json() for p in found])
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
            taught = await lesson(self.store, item["scope"])
            item.update(
                cause=taught.cause,
                cause_from=taught.cause_from,
                fixed_by=[{"action": f.action, "target": f.target, "run_id": f.run_id} for f in taught.fixes],
            )
            out.append(item)
        return ok(out)

    async def _changes(self, args: dict[str, Any]) -> ToolResult:
        if self.index is None:
            return no_data("the change index is not available in this process")
        service = text_arg(args, "service")
        hours = num_arg(args, "hours", default=self.change_window_hours, low=0.1, high=168)
        services = [service] if service else list(self.state.services)
        if not services:
            return no_data("the incident has no services yet; pass `service`")
        found = await self.index.changes_on(services, self.now - timedelta(hours=hours))
        if not found:
            return no_data(f"no change on {', '.join(services)} in the last {hours:g} hours")
        return ok([change_json(row, self.state.linked) for row, _at in found])

    # -- outside read tools (R1; each read is recorded as an observation) ------------------------------------

    def _source(self, need: str) -> Evidence:
        spec = next(s for s in SPECS if s.needs == need)
        if self.evidence is None or not self._has(spec):
            raise ToolInputError(f"no {need} source is configured in this process; use the log's tools instead")
        return self.evidence

    async def _query_metrics(self, args: dict[str, Any]) -> ToolResult:
        ev = self._source("metrics")
        metrics = ev.metrics
        assert metrics is not None
        expr = text_arg(args, "query", required=True)
        minutes = args.get("minutes")
        if minutes is None:
            value, idx = await ev.read("prometheus", expr, lambda: metrics.query(expr), check="query")
        else:
            span = num_arg(args, "minutes", default=5, low=1, high=1440)
            start, step = self.now - timedelta(minutes=span), max(1.0, span * 60 / 120)
            value, idx = await ev.read(
                "prometheus",
                expr,
                lambda: metrics.query_range(expr, start=start, end=self.now, step_s=step),
                check="query_range",
            )
        return self._observed(ev, idx, value)

    async def _firing(self, args: dict[str, Any]) -> ToolResult:
        ev = self._source("alerts")
        out: dict[str, Any] = {}
        if ev.alerts is not None:
            am = ev.alerts
            alerts, i1 = await ev.read("alertmanager", "GET /api/v2/alerts", am.alerts, check="firing")
            silences, i2 = await ev.read("alertmanager", "GET /api/v2/silences", am.silences, check="silences")
            out["alertmanager"] = {"alerts": _alerts(alerts), "silences": _silences(silences), "observations": [i1, i2]}
        if ev.metrics is not None:
            prom = ev.metrics
            alerts, i3 = await ev.read("prometheus", "GET /api/v1/alerts", prom.alerts, check="alerts")
            out["prometheus"] = {"alerts": _alerts(alerts), "observation": i3}
        return ok(out)

    async def _service(self, args: dict[str, Any]) -> ToolResult:
        ev = self._source("catalog")
        name = text_arg(args, "name", required=True)
        comp = ev.catalog.get(name)
        if comp is None:
            known = ", ".join(sorted(ev.catalog.components)[:30])
            return no_data(f"no component {name!r} in the catalog (known: {known})")
        data = {
            **comp.to_json(),
            "depends_on_transitively": [{"name": n, "depth": d} for n, d in ev.catalog.dependencies(comp.name)],
            "dependents": ev.catalog.dependents(comp.name),
        }
        idx = ev.note("catalog", f"component {comp.name}", data, service=comp.name)
        return ok({**data, "observation": idx})

    async def _check_service(self, args: dict[str, Any]) -> ToolResult:
        ev = self._source("metrics")
        name = text_arg(args, "name", required=True)
        cand = Candidate(name, 0)
        await Investigator().check(self.now, ev, cand)
        return ok(
            {
                "service": name,
                "checks": [
                    {
                        "check": c.check,
                        "value": c.value,
                        "baseline": c.baseline,
                        "anomalous": c.anomalous,
                        "observation": c.obs,
                    }
                    for c in cand.checks
                ],
                "versions": cand.versions,
                "onset": cand.onset,
            }
        )

    @staticmethod
    def _observed(ev: Evidence, idx: int, value: Any) -> ToolResult:
        if idx < 0:
            return error(f"not read: {ev.exhausted()}; conclude from what you have")
        obs = ev.observations[idx]
        if obs.error:
            return error(f"{obs.source} could not answer: {obs.error} (observation {idx})")
        if not value:
            return no_data(f"the query answered no series (observation {idx})")
        return ok({"observation": idx, "result": value})

    # -- intent tools ------------------------------------------------------------------------------------------

    async def _hypothesis(self, args: dict[str, Any]) -> ToolResult:
        text = text_arg(args, "text", required=True)
        confidence = args.get("confidence")
        if confidence is not None and (
            not isinstance(confidence, int | float) or isinstance(confidence, bool) or not 0 <= confidence <= 1
        ):
            raise ToolInputError(f"`confidence` must be a number between 0 and 1, got {confidence!r}")
        suspect = text_arg(args, "suspect_scope")
        refs = self._refs(args)
        rank = args.get("rank", 0)
        if not isinstance(rank, int) or isinstance(rank, bool) or rank < 0:
            raise ToolInputError(f"`rank` must be a positive integer (1 = most likely), got {rank!r}")
        observed = args.get("observations") or []
        count = len(self.evidence.observations) if self.evidence is not None else 0
        if not isinstance(observed, list) or not all(isinstance(x, int) and 0 <= x < count for x in observed):
            raise ToolInputError(f"`observations` must list observation numbers of this turn's reads (0..{count - 1})")
        self.collected.hypotheses.append(
            HypothesisIntent(
                text,
                float(confidence) if confidence is not None else None,
                suspect,
                refs,
                subject=text_arg(args, "subject") or suspect,
                rank=rank,
                observations=tuple(observed),
            )
        )
        return ok("recorded after this turn as an agent-inferred hypothesis")

    async def _suggest(self, args: dict[str, Any]) -> ToolResult:
        text = text_arg(args, "text", required=True)
        action = text_arg(args, "action")
        if action not in ("", "resolve"):
            raise ToolInputError(
                f"`action` must be '' or 'resolve', got {action!r}; use propose_action for real actions"
            )
        if action == "resolve" and self.state.status == "resolved":
            raise ToolInputError("the incident is already resolved")
        self.collected.suggestions.append(SuggestionIntent(text, action, text_arg(args, "rationale")))
        return ok("posted after this turn with Accept / Dismiss buttons")

    async def _obligation(self, args: dict[str, Any]) -> ToolResult:
        text = text_arg(args, "text", required=True)
        purpose = text_arg(args, "purpose", required=True)
        if purpose not in PURPOSES:
            raise ToolInputError(f"`purpose` must be one of {', '.join(PURPOSES)}, got {purpose!r}")
        action = text_arg(args, "action")
        if action and self.catalog is not None and not any(a.name == action for a in self.catalog):
            raise ToolInputError(f"action {action!r} is not available; available: {self._available()}")
        params = args.get("params") or {}
        if not isinstance(params, dict):
            raise ToolInputError("`params` must be a JSON object")
        conditions = args.get("conditions") or []
        if not isinstance(conditions, list) or not all(isinstance(c, str) for c in conditions):
            raise ToolInputError("`conditions` must be a list of strings")
        oid = new_obligation_id()
        self.collected.obligations.append(
            ObligationIntent(
                text=text,
                purpose=purpose,
                conditions=tuple(conditions),
                action=action,
                params=params,
                expected_outcome=text_arg(args, "expected_outcome"),
                refs=self._refs(args),
                obligation_id=oid,
            )
        )
        return ok({"obligation_id": oid, "note": "recorded after this turn; use this id with propose_action"})

    async def _propose(self, args: dict[str, Any]) -> ToolResult:
        action = text_arg(args, "action", required=True)
        if self.catalog is not None and not any(a.name == action for a in self.catalog):
            raise ToolInputError(f"action {action!r} is not available; available: {self._available()}")
        params = args.get("params")
        if not isinstance(params, dict):
            raise ToolInputError("`params` must be a JSON object (the action's arguments)")
        rationale = text_arg(args, "rationale", required=True)
        oid = text_arg(args, "obligation_id", required=True)
        pending = {o.obligation_id for o in self.collected.obligations}
        if oid not in self.state.obligations and oid not in pending:
            open_ids = ", ".join([*self.state.obligations, *pending]) or "none"
            raise ToolInputError(f"no open obligation {oid!r} (open: {open_ids}); open one first with open_obligation")
        if any(p.obligation_id == oid for p in self.state.proposals.values()) or any(
            p.obligation_id == oid for p in self.collected.proposals
        ):
            raise ToolInputError(f"obligation {oid} already has a pending proposal")
        self.collected.proposals.append(ProposalIntent(action, params, rationale, oid))
        return ok("handed to the action desk after this turn; it parks for human approval and does not run now")

    # -- helpers -----------------------------------------------------------------------------------------------

    def _available(self) -> str:
        return ", ".join(a.name for a in self.catalog or []) or "none"

    def _refs(self, args: dict[str, Any]) -> tuple[int, ...]:
        seqs = args.get("evidence_seqs") or []
        if not isinstance(seqs, list) or not all(isinstance(x, int) and not isinstance(x, bool) for x in seqs):
            raise ToolInputError("`evidence_seqs` must be a list of integers (entry seqs of this incident)")
        bad = [x for x in seqs if not 1 <= x <= self.state.version]
        if bad:
            raise ToolInputError(f"evidence seq(s) {bad} do not exist; entries are numbered 1..{self.state.version}")
        return tuple(sorted(set(seqs)))
