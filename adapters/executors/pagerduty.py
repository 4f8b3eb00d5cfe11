"""The ``pagerduty`` executor (PagerDuty Events API v2) and the ``paging`` sender that resolves what it paged.

``POST <events url>`` (``https://events.pagerduty.com/v2/enqueue`` by default) with JSON ``{routing_key,
event_action: "trigger", dedup_key: <scope>, payload: {summary, source, severity, custom_details}}``; the routing
key authenticates (no header). 202 ``{"status": "success", "message": "Event processed", "dedup_key"}`` = applied;
400 ``{"status": "invalid event", "errors": [...]}`` = refused; 429 (rate limited), 5xx or a lost connection =
uncertain. The scope is the ``dedup_key``, so a retried or reconciled trigger never pages twice: PagerDuty folds
every trigger with an open alert's key into that alert. ``reconcile`` therefore re-sends the trigger.

When the incident resolves (a ``status_changed`` to ``resolved``: the ``paging`` outbox topic), :class:`PagingSender`
sends ``event_action: "resolve"`` with the same ``dedup_key`` if a ``pagerduty`` action was applied in the scope.

Every request goes through the egress allowlist first (``core.egress.check``): a refused host gets nothing sent.
Parameters (``[actions.params]``): ``summary`` (the page's text), optional ``severity`` (critical | error |
warning | info).
"""

from __future__ import annotations

import json
from collections.abc import Collection, Sequence
from typing import Any

import aiohttp

from decklog.adapters.executors.http import egress_refused, exchange, outcome_of, parse_body, reason_of
from decklog.adapters.executors.options import ExecutorOptions
from decklog.core.actions.executor import ExecutionOutcome, ExecutionRequest, ReconcileOutcome
from decklog.core.egress import EgressPolicy, check
from decklog.core.entries import ActionResult, Entry, StatusChanged
from decklog.core.outbox.sender import PermanentFailure, RetryAfter
from decklog.core.store.ports import LogStore

TYPE = "pagerduty"
SEVERITIES = ("critical", "error", "warning", "info")


class PagerDutyOptions(ExecutorOptions):
    """``[actions.executor]`` of ``type = "pagerduty"``: ``url`` (the Events API v2 enqueue URL) and
    ``routing_key`` (the integration key; the action is unavailable while it is unset)."""

    NEEDS = ("url", "routing_key")

    routing_key: str = ""


def build(
    options: PagerDutyOptions, session: aiohttp.ClientSession, timeout: float, egress: EgressPolicy | None
) -> PagerDutyExecutor:
    return PagerDutyExecutor(session, url=options.url, routing_key=options.routing_key, timeout=timeout, egress=egress)


def trigger_event(routing_key: str, request: ExecutionRequest) -> dict[str, Any]:
    p = request.params
    severity = str(p.get("severity") or "critical")
    return {
        "routing_key": routing_key,
        "event_action": "trigger",
        "dedup_key": request.scope,
        "payload": {
            "summary": str(p.get("summary") or f"decklog incident {request.scope}")[:1024],
            "source": "decklog",
            "severity": severity if severity in SEVERITIES else "critical",
            "custom_details": {"scope": request.scope, "run_id": request.run_id, "fence": request.fence},
        },
    }


class PagerDutyExecutor:
    kind = TYPE

    def __init__(
        self,
        session: aiohttp.ClientSession,
        *,
        url: str,
        routing_key: str,
        timeout: float = 10.0,
        egress: EgressPolicy | None = None,
    ) -> None:
        self.session = session
        self.url = url
        self.routing_key = routing_key
        self.timeout = timeout
        self.egress = egress or EgressPolicy.from_urls([url])

    @property
    def can_reconcile(self) -> bool:
        return True

    async def send(self, event: dict[str, Any]) -> ExecutionOutcome:
        refusal = check(self.egress, self.url)
        if refusal is not None:
            return egress_refused(refusal)
        body = json.dumps(event, separators=(",", ":")).encode()
        headers = {"Content-Type": "application/json"}
        answer = await exchange(self.session, "POST", self.url, data=body, headers=headers, timeout=self.timeout)
        if isinstance(answer, ExecutionOutcome):
            return answer
        status, raw = answer
        if status == 429:  # throttled: the event was not accepted, but a retry (same dedup_key) is what helps
            return ExecutionOutcome("uncertain", status, parse_body(raw), error=reason_of(parse_body(raw), status))
        return outcome_of(status, raw)

    async def execute(self, request: ExecutionRequest) -> ExecutionOutcome:
        return await self.send(trigger_event(self.routing_key, request))

    async def reconcile(self, request: ExecutionRequest) -> ReconcileOutcome:
        """Re-send the trigger: idempotent by ``dedup_key`` (it cannot page twice), and its answer is definite."""
        got = await self.send(trigger_event(self.routing_key, request))
        if got.outcome == "applied":
            return ReconcileOutcome("applied", got.response, got.effect_digest)
        return ReconcileOutcome("unknown", got.response, error=got.error or "the trigger was not accepted")

    async def resolve(self, scope: str) -> ExecutionOutcome:
        return await self.send({"routing_key": self.routing_key, "event_action": "resolve", "dedup_key": scope})


class PagingSender:
    """Outbox topic ``paging`` (``status_changed`` entries): resolves the page when the incident resolves."""

    name = "paging"
    batch_size = 16

    def __init__(self, store: LogStore, executor: PagerDutyExecutor, actions: Collection[str]) -> None:
        self.store = store
        self.executor = executor
        self.actions = frozenset(actions)  # the catalog's actions whose executor is ``pagerduty``

    async def deliver(self, scope: str, entries: Sequence[Entry]) -> None:
        if not any(isinstance(e.payload, StatusChanged) and e.payload.status == "resolved" for e in entries):
            return
        results = await self.store.read(scope, kinds=("action_result",))
        paged = any(
            isinstance(r.payload, ActionResult) and r.payload.outcome == "applied" and r.payload.action in self.actions
            for r in results
        )
        if not paged:
            return
        got = await self.executor.resolve(scope)
        if got.outcome == "applied":
            return
        if got.status == 429:
            raise RetryAfter(30.0, "PagerDuty rate limited the resolve")
        if got.outcome == "refused" or "egress_refused" in got.response:
            raise PermanentFailure(f"PagerDuty resolve: {got.error}")
        raise RuntimeError(f"PagerDuty resolve: {got.error}")
