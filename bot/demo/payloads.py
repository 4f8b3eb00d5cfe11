"""What the demo story sends: the deploy (a generic change payload) and the Alertmanager webhook, firing and
resolved."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

__all__ = ["alert", "change"]


def _iso(at: datetime) -> str:
    return at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def change(at: datetime) -> dict[str, Any]:
    return {
        "id": "r2026-09-19-4",
        "service": "payments",
        "version": "r2026-09-19-4",
        "environment": "production",
        "author": "dev.kim",
        "status": "succeeded",
        "description": "Lower PSP connect timeout to 800ms",
        "link": "https://ci.example.com/pipelines/payments/8841",
        "at": _iso(at),
        "commits": [
            {
                "id": "9f1c2ab",
                "message": "Lower PSP connect timeout to 800ms",
                "author": "dev.kim",
                "paths": ["config/payments/timeouts.yaml"],
            }
        ],
    }


def alert(status: str, started: datetime) -> dict[str, Any]:
    labels = {"alertname": "Payments5xx", "service": "payments", "severity": "critical", "env": "prod"}
    annotations = {
        "summary": "Payments 5xx",
        "description": "12.4% of POST /v1/charges returned 5xx over 5 minutes (SLO 0.5%)",
    }
    return {
        "version": "4",
        "receiver": "decklog",
        "status": status,
        "groupKey": '{}:{alertname="Payments5xx"}',
        "groupLabels": {"alertname": "Payments5xx"},
        "commonLabels": labels,
        "commonAnnotations": annotations,
        "externalURL": "https://alertmanager.example.com",
        "alerts": [
            {
                "status": status,
                "labels": labels,
                "annotations": annotations,
                "startsAt": _iso(started),
                "endsAt": _iso(datetime.now(UTC)) if status == "resolved" else "0001-01-01T00:00:00Z",
                "generatorURL": "https://prometheus.example.com/graph?g0.expr=payments_5xx_ratio",
                "fingerprint": "demo-payments-5xx",
            }
        ],
    }
