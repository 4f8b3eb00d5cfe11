"""Alerts in the log: routing normalised ``AlertSignal``s to incidents, and summarising them for people.

- ``rules``: pure decisions (severity mapping, a notification's identity, the observation, the all-clear);
- ``router``: ``AlertRouter``, the application service (fingerprint → open incident, grouping window, storms);
- ``summary``: ``AlertSummarizer``, at most one summary observation a minute per incident.

Vendor payloads never get here: ``adapters/alerts`` turns them into ``core.signals.AlertSignal``.
"""

from decklog.core.alerts.caches import RateLimiter
from decklog.core.alerts.router import AlertRouter
from decklog.core.alerts.rules import (
    ALERTS_ACTOR,
    SUMMARY_SOURCE,
    AlertOutcome,
    AlertPolicy,
    append_alert,
    map_severity,
    notification_key,
)
from decklog.core.alerts.summary import AlertSummarizer, is_alert, summarise

__all__ = [
    "ALERTS_ACTOR",
    "SUMMARY_SOURCE",
    "AlertOutcome",
    "AlertPolicy",
    "AlertRouter",
    "AlertSummarizer",
    "RateLimiter",
    "append_alert",
    "is_alert",
    "map_severity",
    "notification_key",
    "summarise",
]
