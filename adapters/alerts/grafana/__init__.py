"""Grafana unified alerting webhook receiver."""

from adapters.alerts.grafana.adapter import SOURCE, parse

__all__ = ["SOURCE", "parse"]
