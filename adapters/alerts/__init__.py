"""Alert sources: one folder per vendor, each a pure function from a parsed JSON payload to ``AlertSignal``s.

``ALERT_SOURCES`` (built by ``alert_sources()``, read-only) maps the ``{source}`` of ``POST /alerts/{source}``
to an ``AlertSource``. A receiver does, in order::

    source = ALERT_SOURCES[name]                       # unknown name → 404
    if source.signature_header and secret configured:  # vendor signature (PagerDuty)
        if not source.verify(secret, raw_body, request.headers): → 401
    signals = source.parse(json.loads(raw_body))       # PayloadError → 400 {"error": str(exc)}

Sources without a vendor signature (``signature_header is None``) are authenticated by the route's shared
token (``DECKLOG_ALERT_TOKEN``); their ``verify`` always answers ``False``. Nothing here does I/O or keeps
state.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Final

from decklog.adapters.alerts import alertmanager, datadog, generic, grafana, pagerduty
from decklog.adapters.payload import header_value
from decklog.core.signals import AlertSignal

AlertParser = Callable[[object], list[AlertSignal]]
SignatureVerifier = Callable[[str, bytes, str | None], bool]


@dataclass(frozen=True, slots=True)
class AlertSource:
    """One alert integration: its route name, its parser and (where the vendor signs requests) its
    signature."""

    name: str
    parser: AlertParser
    signature_header: str | None = None
    signature_verifier: SignatureVerifier | None = None

    def parse(self, payload: object) -> list[AlertSignal]:
        """Parsed JSON → signals. Raises only ``PayloadError`` (its ``path`` names the bad field)."""
        return self.parser(payload)

    def verify(self, secret: str, raw_body: bytes, headers: Mapping[str, str]) -> bool:
        """True only when the vendor signature header is present and valid for ``raw_body`` (the exact bytes
        received). Always ``False`` for a source without its own signature scheme."""
        if self.signature_header is None or self.signature_verifier is None:
            return False
        return self.signature_verifier(secret, raw_body, header_value(headers, self.signature_header))


def alert_sources() -> Mapping[str, AlertSource]:
    """A fresh, read-only registry of every alert source, keyed by route name."""
    sources = (
        AlertSource(alertmanager.SOURCE, alertmanager.parse),
        AlertSource(grafana.SOURCE, grafana.parse),
        AlertSource(
            pagerduty.SOURCE,
            pagerduty.parse,
            signature_header=pagerduty.SIGNATURE_HEADER,
            signature_verifier=pagerduty.verify_signature,
        ),
        AlertSource(datadog.SOURCE, datadog.parse),
        AlertSource(generic.SOURCE, generic.parse),
    )
    return MappingProxyType({source.name: source for source in sources})


ALERT_SOURCES: Final[Mapping[str, AlertSource]] = alert_sources()

__all__ = ["ALERT_SOURCES", "AlertParser", "AlertSource", "SignatureVerifier", "alert_sources"]
