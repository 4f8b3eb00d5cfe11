"""GitHub webhooks receiver: ``deployment_status`` and ``push`` (changes), ``issues`` (follow-ups closed or
reopened)."""

from decklog.adapters.changes.github.adapter import EVENT_HEADER, SIGNATURE_HEADER, SOURCE, parse, verify_signature
from decklog.adapters.changes.github.issues import ISSUES_EVENT, parse_issue

__all__ = ["EVENT_HEADER", "ISSUES_EVENT", "SIGNATURE_HEADER", "SOURCE", "parse", "parse_issue", "verify_signature"]
