"""PagerDuty V3 webhook receiver."""

from decklog.adapters.alerts.pagerduty.adapter import SIGNATURE_HEADER, SOURCE, parse, verify_signature

__all__ = ["SIGNATURE_HEADER", "SOURCE", "parse", "verify_signature"]
