"""decklog's generic change JSON receiver (schema in README.md)."""

from decklog.adapters.changes.generic.adapter import SOURCE, STATUSES, parse, slug

__all__ = ["SOURCE", "STATUSES", "parse", "slug"]
