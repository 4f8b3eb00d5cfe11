"""GitHub webhooks receiver: ``deployment_status`` and ``push``."""

from adapters.changes.github.adapter import EVENT_HEADER, SIGNATURE_HEADER, SOURCE, parse, verify_signature

__all__ = ["EVENT_HEADER", "SIGNATURE_HEADER", "SOURCE", "parse", "verify_signature"]
