"""decklog's generic alert JSON receiver (schema in README.md)."""

from decklog.adapters.alerts.generic.adapter import SOURCE, STATUSES, parse

__all__ = ["SOURCE", "STATUSES", "parse"]
