"""PagerDuty V3 webhook (webhook subscription) → ``AlertSignal`` for incident state changes.

Payload (https://developer.pagerduty.com/docs/webhooks/v3-overview/)::

    {"event": {"id", "event_type": "incident.triggered", "resource_type": "incident", "occurred_at",
               "agent": {...}|null, "client": {...}|null,
               "data": {"id", "type": "incident", "html_url", "number", "status", "incident_key",
               "created_at",
                        "title", "service": {"summary", "id", ...}, "assignees": [...],
                        "escalation_policy": {...}, "teams": [...], "priority": {"summary": "P1", ...}|null,
                        "urgency": "high"|"low", "conference_bridge": {...}|null, "resolve_reason": ...}}}

Event types and the resulting status:

* ``incident.triggered``, ``incident.unacknowledged``, ``incident.reopened`` → ``firing``;
* ``incident.acknowledged`` → ``acknowledged``; ``incident.resolved`` → ``resolved``;
* ``incident.escalated``, ``incident.reassigned``, ``incident.delegated``, ``incident.priority_updated`` →
  from ``data.status`` (``triggered`` → firing, ``acknowledged``, ``resolved``) — they carry the whole
  incident, and a priority change is a severity change;
* every other event type (``incident.annotated``, ``incident.responder.*``,
  ``incident.status_update_published``, ``service.*``, future ones) → ``[]``: not an error.

Mapping: ``fingerprint`` ← ``data.id`` (the incident id); ``title`` ← ``data.title``; ``service`` ←
``data.service.summary``; ``source_severity`` ← ``data.priority.summary`` (``P1``…) → ``data.urgency``;
``labels`` ← urgency, priority, incident_number, incident_key, service_id, escalation_policy; ``links`` ←
``html_url``, conference bridge URL; ``started_at`` ← ``data.created_at``; ``ended_at`` ←
``event.occurred_at`` when resolved; ``summary`` ← "Acknowledged by <agent>" and the like; ``event_id`` ←
``event.id`` (the same for PagerDuty's retries of one delivery); ``occurred_at`` ← ``event.occurred_at``.

Identity: ``group`` ← the incident id with ``vendor_incident`` set: a PagerDuty incident is one decklog incident,
and distinct PagerDuty incidents never merge (not even on one PagerDuty service). ``sets_severity`` when the
incident has a priority: PagerDuty's priority moves decklog's severity both ways (until a person sets it);
``reopened`` for ``incident.reopened``.

``verify_signature`` checks ``X-PagerDuty-Signature`` (``v1=<hex HMAC-SHA256 of the raw body>``, possibly
several, comma-separated, during secret rotation), in constant time.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping
from types import MappingProxyType
from typing import Final

from decklog.adapters import payload as f
from decklog.core.signals import AlertSignal, AlertStatus, PayloadError

SOURCE: Final = "pagerduty"
SIGNATURE_HEADER: Final = "X-PagerDuty-Signature"

_FIXED: Final[Mapping[str, AlertStatus]] = MappingProxyType(
    {
        "incident.triggered": "firing",
        "incident.unacknowledged": "firing",
        "incident.reopened": "firing",
        "incident.acknowledged": "acknowledged",
        "incident.resolved": "resolved",
    }
)
_FROM_DATA: Final = frozenset(
    {"incident.escalated", "incident.reassigned", "incident.delegated", "incident.priority_updated"}
)
_DATA_STATUS: Final[Mapping[str, AlertStatus]] = MappingProxyType(
    {
        "triggered": "firing",
        "acknowledged": "acknowledged",
        "resolved": "resolved",
    }
)
_VERB: Final[Mapping[str, str]] = MappingProxyType(
    {
        "incident.triggered": "Triggered",
        "incident.unacknowledged": "Unacknowledged",
        "incident.reopened": "Reopened",
        "incident.acknowledged": "Acknowledged",
        "incident.resolved": "Resolved",
        "incident.escalated": "Escalated",
        "incident.reassigned": "Reassigned",
        "incident.delegated": "Delegated",
        "incident.priority_updated": "Priority updated",
    }
)


def _reference_summary(obj: Mapping[str, object], key: str, path: str) -> str:
    """``obj[key].summary`` of a PagerDuty ``*_reference`` object (``null`` allowed)."""
    ref = f.opt_object(obj, key, path)
    return f.opt_str(ref, "summary", f.child(path, key)) if ref is not None else ""


def _status(event_type: str, data: Mapping[str, object], dpath: str) -> AlertStatus:
    """The alert status an event means: fixed by its type, else read from the incident's ``status``."""
    data_status = f.opt_str(data, "status", dpath, 50)
    if event_type in _FIXED:
        return _FIXED[event_type]
    if data_status in _DATA_STATUS:
        return _DATA_STATUS[data_status]
    if not data_status:
        raise PayloadError(f.child(dpath, "status"), f"is required for {event_type}")
    raise PayloadError(f.child(dpath, "status"), f"expected triggered, acknowledged or resolved, got {data_status!r}")


def _incident(event: Mapping[str, object], data: Mapping[str, object], dpath: str) -> dict[str, str]:
    """The incident's fields decklog keeps (labels and what the signal is built from), "" when absent."""
    number = f.opt_str(data, "number", dpath, 50, numbers=True)
    service_ref = f.opt_object(data, "service", dpath)
    spath = f.child(dpath, "service")
    got = {
        "number": number,
        "service": f.opt_str(service_ref, "summary", spath, f.SERVICE_MAX) if service_ref is not None else "",
        "service_id": f.opt_str(service_ref, "id", spath, f.SHORT_MAX) if service_ref is not None else "",
        "priority": _reference_summary(data, "priority", dpath),
        "urgency": f.opt_str(data, "urgency", dpath, 50),
    }
    bridge = f.opt_object(data, "conference_bridge", dpath)
    got["bridge_url"] = f.opt_url(bridge, "conference_url", f.child(dpath, "conference_bridge")) if bridge else ""
    got["agent"] = _reference_summary(event, "agent", "event")
    got["incident_key"] = f.opt_str(data, "incident_key", dpath, f.LABEL_VALUE_MAX)
    got["escalation_policy"] = _reference_summary(data, "escalation_policy", dpath)
    return got


def parse(payload: object) -> list[AlertSignal]:
    """A PagerDuty V3 webhook → ``[AlertSignal]`` for incident state events, ``[]`` for any other event."""
    top = f.root(payload)
    event = f.req_object(top, "event", "")
    event_type = f.req_str(event, "event_type", "event", 100)
    if event_type not in _FIXED and event_type not in _FROM_DATA:
        return []

    data = f.req_object(event, "data", "event")
    dpath = "event.data"
    data_type = f.opt_str(data, "type", dpath, 100)
    if data_type and data_type != "incident":
        raise PayloadError(f.child(dpath, "type"), f"expected 'incident' for {event_type}, got {data_type!r}")
    incident_id = f.bounded_id(f.req_str(data, "id", dpath, 100_000, numbers=True), f.FINGERPRINT_MAX)

    status = _status(event_type, data, dpath)
    got = _incident(event, data, dpath)
    number, priority, urgency, agent = got["number"], got["priority"], got["urgency"], got["agent"]
    labels = {
        "urgency": urgency,
        "priority": priority,
        "incident_number": number,
        "incident_key": got["incident_key"],
        "service_id": got["service_id"],
        "escalation_policy": got["escalation_policy"],
    }
    occurred_at = f.opt_time(event, "occurred_at", "event")
    title = f.opt_str(data, "title", dpath, f.TITLE_MAX)
    event_id = f.bounded_id(f.opt_str(event, "id", "event", 100_000, numbers=True), f.SHORT_MAX)
    return [
        f.build(
            AlertSignal,
            dpath,
            source=SOURCE,
            fingerprint=incident_id,
            status=status,
            title=f.clean(
                f.first(title, f"PagerDuty incident #{number}" if number else f"PagerDuty incident {incident_id}"),
                f.TITLE_MAX,
            ),
            service=got["service"],
            source_severity=f.first(priority, urgency),
            summary=f"{_VERB[event_type]} by {agent}" if agent else "",
            labels={key: value for key, value in labels.items() if value},
            links=f.links(
                (f.opt_url(data, "html_url", dpath), "PagerDuty incident"),
                (got["bridge_url"], "Conference bridge"),
            ),
            started_at=f.opt_time(data, "created_at", dpath),
            ended_at=occurred_at if status == "resolved" else None,
            event_id=event_id,
            occurred_at=occurred_at,
            group=f"pagerduty:{incident_id}",
            vendor_incident=True,
            sets_severity=bool(priority),
            reopened=event_type == "incident.reopened",
        )
    ]


def verify_signature(secret: str, raw_body: bytes, header_value: str | None) -> bool:
    """True when one of the ``v1=`` signatures in ``X-PagerDuty-Signature`` is the HMAC-SHA256 of ``raw_body``
    under ``secret``. An empty secret or a missing header never verifies."""
    if not secret or not header_value:
        return False
    expected = hmac.new(secret.encode("utf-8"), raw_body, hashlib.sha256).hexdigest().encode("ascii")
    matched = False
    for candidate in header_value.split(","):
        version, _, signature = candidate.strip().partition("=")
        if version.strip() != "v1":
            continue
        given = signature.strip().lower().encode("utf-8", "replace")
        # Compare every candidate (no early exit): timing reveals nothing about which one matched.
        matched |= hmac.compare_digest(expected, given)
    return matched
