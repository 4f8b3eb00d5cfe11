"""Datadog Webhooks integration → one ``AlertSignal``.

Datadog has no fixed webhook body: the user pastes a JSON template into the Webhooks integration tile and
Datadog substitutes its ``$VARIABLES`` (https://docs.datadoghq.com/integrations/webhooks/#variables). decklog
documents the template below (also in this folder's README); the parser reads the keys it defines.

Mapping:

* ``fingerprint`` ← ``aggreg_key`` ($AGGREG_KEY) → ``alert_id:scope`` → ``alert_id`` ($ALERT_ID,
  $ALERT_SCOPE);
* ``status`` ← ``transition`` ($ALERT_TRANSITION): ``Recovered`` → resolved; ``Triggered``, ``Re-Triggered``,
  ``Warn``, ``Re-Warn``, ``No Data``, ``Re-No Data``, ``Renotify`` and anything new → firing. Without a
  transition, ``alert_type`` ($ALERT_TYPE) ``success`` → resolved, else firing;
* ``title`` ← ``title`` ($EVENT_TITLE) → ``alert_title`` ($ALERT_TITLE), with Datadog's ``[Triggered on …]`` /
  ``[P1]`` prefixes removed;
* ``labels`` ← ``tags`` ($TAGS, ``"service:payments,env:prod"``) and ``scope`` ($ALERT_SCOPE) parsed as
  ``key:value`` (a bare tag becomes ``tag: ""``), plus ``host``, ``metric``, ``monitor_id``, ``transition``,
  ``alert_type`` unless a tag already has that name;
* ``service`` ← the ``service`` tag; ``source_severity`` ← ``priority`` ($ALERT_PRIORITY, ``P1``…);
* ``summary`` ← ``message`` ($TEXT_ONLY_MSG) → ``alert_status`` ($ALERT_STATUS);
* ``links`` ← ``link`` ($LINK), ``snapshot`` ($SNAPSHOT);
* ``date`` ($DATE, epoch milliseconds) → ``started_at`` when firing, ``ended_at`` when resolved, and
  ``occurred_at``;
* ``event_id`` ← ``id`` ($ID, the id of this notification: Datadog's retries of one delivery repeat it).

Datadog's *default* payload (no template pasted: ``body``, ``title``, ``event_type``, ``date``, ``last_updated``,
``org``, ``id``) is accepted too (Datadog does not retry a 4xx, so refusing it would lose the alert): the status
comes from the title's ``[Triggered]``/``[Recovered]`` marker, the fingerprint from the monitor id in the body's
links (else a hash of the stripped title and the event type), and the signal carries a one-time thread note
recommending the template.

A value still reading ``$SOME_VARIABLE`` (Datadog had nothing to substitute) counts as absent. Integers are
accepted where the template has quoted ids. ``Encode as form`` must stay unchecked (the body is JSON).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from typing import Final

from decklog.adapters import payload as f
from decklog.core.signals import AlertSignal, AlertStatus, PayloadError

SOURCE: Final = "datadog"

#: The JSON to paste into Datadog's Webhooks integration tile ("Payload"), using Datadog's documented
#: variables.
RECOMMENDED_PAYLOAD_TEMPLATE: Final = """\
{
  "id": "$ID",
  "alert_id": "$ALERT_ID",
  "aggreg_key": "$AGGREG_KEY",
  "alert_cycle_key": "$ALERT_CYCLE_KEY",
  "transition": "$ALERT_TRANSITION",
  "alert_type": "$ALERT_TYPE",
  "priority": "$ALERT_PRIORITY",
  "title": "$EVENT_TITLE",
  "alert_title": "$ALERT_TITLE",
  "alert_status": "$ALERT_STATUS",
  "message": "$TEXT_ONLY_MSG",
  "metric": "$ALERT_METRIC",
  "query": "$ALERT_QUERY",
  "scope": "$ALERT_SCOPE",
  "hostname": "$HOSTNAME",
  "tags": "$TAGS",
  "link": "$LINK",
  "snapshot": "$SNAPSHOT",
  "date": "$DATE",
  "last_updated": "$LAST_UPDATED",
  "org": {"id": "$ORG_ID", "name": "$ORG_NAME"}
}
"""

_UNFILLED = re.compile(r"\$[A-Z][A-Z0-9_]*(\[[^\]]*\])?")
_PREFIX = re.compile(
    r"\s*\[(?:P[0-9]|Triggered|Re-Triggered|Recovered|Warn|Re-Warn|No Data|Re-No Data|Renotify|Test[^\]]*)"
    r"(?: on [^\]]*)?\]\s*",
    re.IGNORECASE,
)
_RESOLVED_TRANSITIONS: Final = frozenset({"recovered"})


def _value(obj: Mapping[str, object], key: str, limit: int = f.SHORT_MAX) -> str:
    """A template value; an unsubstituted ``$VARIABLE`` counts as absent."""
    value = f.opt_str(obj, key, "", limit, numbers=True)
    return "" if _UNFILLED.fullmatch(value) else value


def _strip_prefixes(title: str) -> str:
    stripped = title
    for _ in range(4):
        match = _PREFIX.match(stripped)
        if match is None:
            break
        stripped = stripped[match.end() :]
    return stripped.strip() or title


def _tags(obj: Mapping[str, object], key: str) -> dict[str, str]:
    """``"a:b, c, d:e:f"`` (or ``["a:b", ...]``) → ``{"a": "b", "c": "", "d": "e:f"}``; repeated keys are
    joined
    with commas."""
    value = obj.get(key)
    if value is None:
        return {}
    if isinstance(value, str):
        if _UNFILLED.fullmatch(value.strip()):
            return {}
        parts: list[str] = value.split(",")
    elif isinstance(value, list | tuple):
        parts = []
        for index, entry in enumerate(value):
            if not isinstance(entry, str):
                raise PayloadError(f.item(key, index), f"expected a string, got {f.json_type(entry)}")
            parts.append(entry)
    else:
        raise PayloadError(key, f"expected a string of comma-separated tags, got {f.json_type(value)}")
    out: dict[str, str] = {}
    for part in parts:
        name, _, tag_value = part.strip().partition(":")
        name = f.clean(name, f.LABEL_KEY_MAX)
        if not name:
            continue
        tag_value = f.clean(tag_value, f.LABEL_VALUE_MAX)
        if name in out and tag_value and tag_value not in out[name].split(","):
            out[name] = f.clean(f"{out[name]},{tag_value}" if out[name] else tag_value, f.LABEL_VALUE_MAX)
        elif name not in out:
            if len(out) >= f.LABELS_MAX:
                break
            out[name] = tag_value
    return out


def _labels(top: Mapping[str, object], alert_id: str, transition: str, alert_type: str) -> dict[str, str]:
    """The alerting group's tags (multi-alert monitors), then the monitor's tags, then a few fields as labels."""
    labels = _tags(top, "scope")
    for name, value in _tags(top, "tags").items():
        if len(labels) < f.LABELS_MAX:
            labels.setdefault(name, value)
    for name, value in (
        ("host", _value(top, "hostname", f.LABEL_VALUE_MAX)),
        ("metric", _value(top, "metric", f.LABEL_VALUE_MAX)),
        ("monitor_id", alert_id),
        ("transition", transition),
        ("alert_type", alert_type),
    ):
        if value and len(labels) < f.LABELS_MAX:
            labels.setdefault(name, value)
    return labels


def parse(payload: object) -> list[AlertSignal]:
    """A Datadog webhook built from ``RECOMMENDED_PAYLOAD_TEMPLATE`` → ``[AlertSignal]``."""
    top = f.root(payload)
    alert_id = _value(top, "alert_id")
    scope = _value(top, "scope", f.LABEL_VALUE_MAX)
    aggreg_key = _value(top, "aggreg_key", 100_000)
    if aggreg_key:
        fingerprint = aggreg_key
    elif alert_id:
        fingerprint = f"{alert_id}:{scope}" if scope else alert_id
    elif _is_default_payload(top):
        return _parse_default(top)
    else:
        raise PayloadError("alert_id", "is required when aggreg_key is absent (set them to $ALERT_ID, $AGGREG_KEY)")
    fingerprint = f.bounded_id(fingerprint, f.FINGERPRINT_MAX)

    transition = _value(top, "transition", 50)
    alert_type = _value(top, "alert_type", 50)
    status: AlertStatus
    if transition:
        status = "resolved" if transition.lower() in _RESOLVED_TRANSITIONS else "firing"
    else:
        status = "resolved" if alert_type.lower() == "success" else "firing"
    labels = _labels(top, alert_id, transition, alert_type)
    event_id = _value(top, "id", 100_000)
    date_key = "date" if _value(top, "date", 100) else "last_updated"
    when = _value(top, date_key, 100)
    at = f.epoch_or_iso(when, date_key) if when else None
    raw_title = f.first(_value(top, "title", f.TITLE_MAX), _value(top, "alert_title", f.TITLE_MAX))
    title = _strip_prefixes(raw_title) if raw_title else f"Datadog monitor {alert_id or fingerprint}"

    return [
        f.build(
            AlertSignal,
            "",
            source=SOURCE,
            fingerprint=fingerprint,
            status=status,
            title=f.clean(title, f.TITLE_MAX),
            service=f.clean(labels.get("service", ""), f.SERVICE_MAX),
            source_severity=_value(top, "priority", 50),
            summary=f.first(_value(top, "message", f.SUMMARY_MAX), _value(top, "alert_status", f.SUMMARY_MAX)),
            labels=labels,
            links=f.links(
                (f.http_url(_value(top, "link", f.URL_MAX + 1)), "Datadog event"),
                (f.http_url(_value(top, "snapshot", f.URL_MAX + 1)), "Snapshot"),
            ),
            started_at=at if status == "firing" else None,
            ended_at=at if status == "resolved" else None,
            event_id=f.bounded_id(event_id, f.SHORT_MAX) if event_id else "",
            occurred_at=at,
            group=f.bounded_id(f"datadog:{alert_id}:{scope}" if alert_id else f"datadog:{fingerprint}", 1000),
            vendor_incident=True,
        )
    ]


#: The thread note for a Datadog webhook that still sends Datadog's default payload.
TEMPLATE_NOTE: Final = (
    "This Datadog webhook sends Datadog's default payload, so decklog cannot see the monitor's id, priority, "
    "tags or service. Paste decklog's recommended payload template (adapters/alerts/datadog/README.md) into the "
    "webhook's Payload box in Datadog's Webhooks integration."
)
_MONITOR = re.compile(r"/monitors[#/](\d+)")


def _is_default_payload(top: Mapping[str, object]) -> bool:
    """Datadog's default body (``body``, ``last_updated``, ``event_type``, ``title``, ``date``, ``org``, ``id``):
    what Datadog sends when nobody pasted a template."""
    return any(_value(top, k, f.SUMMARY_MAX) for k in ("body", "event_type", "last_updated"))


def _parse_default(top: Mapping[str, object]) -> list[AlertSignal]:
    """Datadog's default payload → one signal. The fingerprint is the monitor id found in the body's links
    (``/monitors#18692904``), else a hash of the title without its ``[Triggered]`` markers and the event type, so
    that a monitor's Triggered and Recovered notifications share it."""
    raw_title = _value(top, "title", f.TITLE_MAX)
    body = _value(top, "body", f.SUMMARY_MAX)
    event_type = _value(top, "event_type", 100)
    monitor = _MONITOR.search(body)
    title = _strip_prefixes(raw_title) if raw_title else f"Datadog {event_type or 'event'}"
    if monitor is not None:
        fingerprint = f"monitor:{monitor.group(1)}"
    else:
        material = [event_type, title] if raw_title else [event_type, body]
        digest = hashlib.sha256(json.dumps(material).encode("utf-8", "replace")).hexdigest()[:16]
        fingerprint = f"title:{digest}"
    resolved = bool(re.match(r"\s*\[Recovered", raw_title, re.IGNORECASE))
    status: AlertStatus = "resolved" if resolved else "firing"
    date_key = "date" if _value(top, "date", 100) else "last_updated"
    when = _value(top, date_key, 100)
    at = f.epoch_or_iso(when, date_key) if when else None
    event_id = _value(top, "id", 100_000)
    summary = body.replace("%%%", "").strip()
    labels = {"event_type": event_type} if event_type else {}
    if monitor is not None:
        labels["monitor_id"] = monitor.group(1)
    return [
        f.build(
            AlertSignal,
            "",
            source=SOURCE,
            fingerprint=fingerprint,
            status=status,
            title=f.clean(title, f.TITLE_MAX),
            summary=f.clean(summary, f.SUMMARY_MAX),
            labels=labels,
            links=f.links(*((url, "Datadog") for url in _URL.findall(body)[:2])),
            started_at=at if status == "firing" else None,
            ended_at=at if status == "resolved" else None,
            event_id=f.bounded_id(event_id, f.SHORT_MAX) if event_id else "",
            occurred_at=at,
            group=f"datadog:{fingerprint}",
            vendor_incident=True,
            note=TEMPLATE_NOTE,
            note_id="datadog:default-payload",
        )
    ]


_URL = re.compile(r"https?://[^\s()\[\]<>]+")
