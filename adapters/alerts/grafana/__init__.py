"""Grafana unified alerting webhook receiver."""

from decklog.adapters.alerts.grafana.adapter import SOURCE, parse

__all__ = ["SOURCE", "parse"]
