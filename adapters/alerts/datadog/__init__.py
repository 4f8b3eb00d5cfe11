"""Datadog Webhooks integration receiver (decklog's recommended payload template)."""

from decklog.adapters.alerts.datadog.adapter import RECOMMENDED_PAYLOAD_TEMPLATE, SOURCE, parse

__all__ = ["RECOMMENDED_PAYLOAD_TEMPLATE", "SOURCE", "parse"]
