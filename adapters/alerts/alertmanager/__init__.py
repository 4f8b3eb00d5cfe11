"""Prometheus Alertmanager webhook receiver (payload version 4)."""

from decklog.adapters.alerts.alertmanager.adapter import SOURCE, parse, parse_group

__all__ = ["SOURCE", "parse", "parse_group"]
