"""The ``pagerduty:<routing key>`` target of an on-call level: hands the page off to PagerDuty (Events API v2
trigger through :class:`PagerDutyExecutor`, ``dedup_key`` = the incident's scope, so every level and repetition
that names PagerDuty folds into one PagerDuty incident, which the ``paging`` sender resolves with the incident)."""

from __future__ import annotations

import aiohttp

from decklog.adapters.executors.pagerduty import SEVERITIES, PagerDutyExecutor
from decklog.core.egress import EgressPolicy
from decklog.core.oncall.sender import Notice
from decklog.core.outbox.sender import PermanentFailure, RetryAfter


class PagerDutyHandoff:
    """``Notifier`` for method ``pagerduty`` (``Notice.target`` is the routing key)."""

    def __init__(self, session: aiohttp.ClientSession, *, url: str, egress: EgressPolicy | None = None) -> None:
        self.session = session
        self.url = url
        self.egress = egress

    async def notify(self, notice: Notice) -> None:
        executor = PagerDutyExecutor(self.session, url=self.url, routing_key=notice.target, egress=self.egress)
        severity = {1: "critical", 2: "error", 3: "warning"}.get(notice.severity or 1, "info")
        event = {
            "routing_key": notice.target,
            "event_action": "trigger",
            "dedup_key": notice.scope,
            "payload": {
                "summary": notice.text[:1024],
                "source": "decklog",
                "severity": severity if severity in SEVERITIES else "critical",
                "custom_details": {"scope": notice.scope, "page": notice.key},
            },
        }
        got = await executor.send(event)
        if got.outcome == "applied":
            return
        if got.status == 429:
            raise RetryAfter(5.0, "PagerDuty throttled the trigger")
        if got.outcome == "failed":
            raise PermanentFailure(f"PagerDuty refused the trigger: {got.error}")
        raise RuntimeError(f"PagerDuty trigger uncertain: {got.error}")  # retried: the dedup_key folds repeats
