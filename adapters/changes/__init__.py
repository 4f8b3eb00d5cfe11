"""Change sources: deploys and pushes, one folder per integration, each a pure function to ``ChangeSignal``s.

``CHANGE_SOURCES`` (built by ``change_sources()``, read-only) maps the ``{source}`` of ``POST
/changes/{source}`` to a ``ChangeSource``. A receiver does, in order::

    source = CHANGE_SOURCES[name]                                   # unknown name → 404
    if source.signature_header and secret configured:               # vendor signature (GitHub)
        if not source.verify(secret, raw_body, request.headers): → 401
    signals = source.parse_request(json.loads(raw_body), request.headers)   # PayloadError → 400

``parse_request`` reads the event type from ``event_header`` (GitHub's ``X-GitHub-Event``) when the source has
one; ``parse(payload, event_type)`` takes it explicitly. Sources without a vendor signature are authenticated
by the route's shared token (``DECKLOG_ALERT_TOKEN``); their ``verify`` always answers ``False``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Final

from decklog.adapters.changes import generic, github
from decklog.adapters.payload import header_value
from decklog.core.signals import ChangeSignal

ChangeParser = Callable[[object, str | None], list[ChangeSignal]]
SignatureVerifier = Callable[[str, bytes, str | None], bool]


def _generic(payload: object, event_type: str | None) -> list[ChangeSignal]:
    """The generic source has no event types: one body = one change."""
    return generic.parse(payload)


@dataclass(frozen=True, slots=True)
class ChangeSource:
    """One change integration: its route name, its parser, the header naming the event type (if any) and the
    vendor signature (if any)."""

    name: str
    parser: ChangeParser
    event_header: str | None = None
    signature_header: str | None = None
    signature_verifier: SignatureVerifier | None = None

    def parse(self, payload: object, event_type: str | None = None) -> list[ChangeSignal]:
        """Parsed JSON (+ the event type, for sources that have one) → signals. Raises only
        ``PayloadError``."""
        return self.parser(payload, event_type)

    def parse_request(self, payload: object, headers: Mapping[str, str]) -> list[ChangeSignal]:
        """Like ``parse``, taking the event type from the request headers."""
        event_type = header_value(headers, self.event_header) if self.event_header else None
        return self.parser(payload, event_type)

    def verify(self, secret: str, raw_body: bytes, headers: Mapping[str, str]) -> bool:
        """True only when the vendor signature header is present and valid for ``raw_body`` (the exact bytes
        received). Always ``False`` for a source without its own signature scheme."""
        if self.signature_header is None or self.signature_verifier is None:
            return False
        return self.signature_verifier(secret, raw_body, header_value(headers, self.signature_header))


def change_sources() -> Mapping[str, ChangeSource]:
    """A fresh, read-only registry of every change source, keyed by route name."""
    sources = (
        ChangeSource(
            github.SOURCE,
            github.parse,
            event_header=github.EVENT_HEADER,
            signature_header=github.SIGNATURE_HEADER,
            signature_verifier=github.verify_signature,
        ),
        ChangeSource(generic.SOURCE, _generic),
    )
    return MappingProxyType({source.name: source for source in sources})


CHANGE_SOURCES: Final[Mapping[str, ChangeSource]] = change_sources()

__all__ = ["CHANGE_SOURCES", "ChangeParser", "ChangeSource", "SignatureVerifier", "change_sources"]
