"""Prometheus Alertmanager webhook (``webhook_config``, payload version 4) → one ``AlertSignal`` per alert.

Payload (https://prometheus.io/docs/alerting/latest/configuration/#webhook_config)::

    {"version": "4", "groupKey": ..., "truncatedAlerts": 0, "status": "firing|resolved", "receiver": ...,
     "groupLabels": {...}, "commonLabels": {...}, "commonAnnotations": {...}, "externalURL": ...,
     "alerts": [{"status", "labels", "annotations", "startsAt", "endsAt", "generatorURL", "fingerprint"}]}

Mapping, per alert:

* ``fingerprint`` ← ``fingerprint``; when absent (Alertmanager < 0.19), Prometheus' own fingerprint of the
  labels, which is what a newer Alertmanager would have sent;
* ``status`` ← ``alerts[].status`` (else the group ``status``): ``firing`` | ``resolved``;
* ``title`` ← ``annotations.summary`` (its first line, unless that only names the state, as Grafana's
  ``**Firing**`` does) → ``labels.alertname`` → ``"Alert <fingerprint>"``;
* ``service`` ← ``labels.service`` → ``labels["service.name"]`` (OpenTelemetry) → ``labels.job`` →
  ``labels.app``;
* ``source_severity`` ← ``labels.severity``; ``summary`` ← ``annotations.description`` →
  ``annotations.message``;
* ``labels`` ← all labels; ``links`` ← ``generatorURL`` (Source; a relative one is resolved against
  ``externalURL``), ``annotations.runbook_url`` (Runbook), ``externalURL`` (Alertmanager); links without a host
  (``http://:9093``) are dropped;
* ``started_at`` ← ``startsAt``; ``ended_at`` ← ``endsAt`` for resolved alerts only (Go's zero time = not
  ended).

Per notification (the same on every alert of it):

* ``group`` ← ``receiver`` + ``groupKey`` → ``groupLabels`` → ``commonLabels`` (as ``labels:{"alertname":"X",...}``, sorted);
  the router puts one notification's group in one incident (split only by differing explicit ``service`` /
  ``service.name`` labels);
* ``group_title`` ← ``commonAnnotations.summary`` → the ``groupLabels`` values; ``left_out`` ←
  ``truncatedAlerts``; ``group_resolved`` ← the group ``status`` is ``resolved`` (and there is a group): with
  ``max_alerts``, Alertmanager sends only the first alerts of a resolved group and then forgets the group, so the
  status is the only word decklog gets about the others.

The group parser is shared with Grafana, whose unified-alerting webhook is the same shape plus a few fields.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Final

from decklog.adapters import payload as f
from decklog.core.signals import AlertSignal, PayloadError

SOURCE: Final = "alertmanager"

#: Per-alert extras of a payload flavour: ``(alert, its path) → (extra links, summary addendum)``.
Extras = Callable[[Mapping[str, object], str], tuple[list[tuple[str, str]], str]]

_STATUSES: Final = ("firing", "resolved")
#: Labels that name the service explicitly (a notification whose alerts differ in one is split by it).
SERVICE_LABELS: Final = ("service", "service.name")


def _group(top: Mapping[str, object]) -> tuple[str, str, int]:
    """A notification's group identity, title and left-out count: ``(group, group_title, left_out)``."""
    group_labels = f.str_map(top, "groupLabels", "")
    common = f.str_map(top, "commonLabels", "")
    annotations = f.str_map(top, "commonAnnotations", "", value_limit=f.SUMMARY_MAX)
    key = f.opt_str(top, "groupKey", "", 100_000)
    receiver = f.opt_str(top, "receiver", "", f.SHORT_MAX)
    if key:
        group = f"key:{receiver}:{key}"
    elif group_labels or common:
        chosen = group_labels or common
        group = "labels:" + json.dumps(dict(sorted(chosen.items())), ensure_ascii=False, separators=(",", ":"))
    else:
        group = ""
    group = f.bounded_id(group, 1000)
    shown = ", ".join(f"{k}={v}" for k, v in group_labels.items() if v)
    title = f.clean(f.first(annotations.get("summary", ""), shown), f.TITLE_MAX)
    left = top.get("truncatedAlerts")
    if left is None:
        left_out = 0
    elif isinstance(left, int) and not isinstance(left, bool) and 0 <= left < 10**9:
        left_out = left
    else:
        raise PayloadError("truncatedAlerts", f"expected a non-negative integer, got {f.json_type(left)}")
    return group, title, left_out


def _status(value: str, path: str) -> str:
    status = value.lower()
    if status not in _STATUSES:
        raise PayloadError(path, f"expected 'firing' or 'resolved', got {value!r}")
    return status


@dataclass(frozen=True)
class _Notification:
    """What every alert of one notification shares."""

    source: str
    status: str  # the group's status ("" when absent)
    base_url: str  # externalURL: relative generatorURLs resolve against it
    external_link: tuple[str, str]  # (url, title) of the notification's own link, or ("", "")
    group: str
    group_title: str
    left_out: int
    extras: Extras | None


def parse_group(
    payload: object,
    *,
    source: str,
    extras: Extras | None = None,
    group_link_title: str | None = "Alertmanager",
) -> list[AlertSignal]:
    """Parse an Alertmanager-shaped notification (a group of alerts)."""
    top = f.root(payload)
    group_status_raw = f.opt_str(top, "status", "", 20)
    alerts = f.req_list(top, "alerts", "")
    base_url = f.opt_url(top, "externalURL", "")
    group, group_title, left_out = _group(top)
    shared = _Notification(
        source=source,
        status=_status(group_status_raw, "status") if group_status_raw else "",
        base_url=base_url,
        external_link=(base_url, group_link_title) if group_link_title else ("", ""),
        group=group,
        group_title=group_title,
        left_out=left_out,
        extras=extras,
    )
    return [_alert(raw, f.item("alerts", index), shared) for index, raw in enumerate(alerts)]


def _alert(raw: object, path: str, shared: _Notification) -> AlertSignal:
    alert = f.as_object(raw, path)
    labels = f.str_map(alert, "labels", path)
    annotations = f.str_map(alert, "annotations", path, value_limit=f.SUMMARY_MAX)
    status_raw = f.opt_str(alert, "status", path, 20)
    if status_raw:
        status = _status(status_raw, f.child(path, "status"))
    elif shared.status:
        status = shared.status
    else:
        raise PayloadError(f.child(path, "status"), "is required")
    fingerprint = f.opt_str(alert, "fingerprint", path, 100_000)
    if not fingerprint:
        if not labels:
            raise PayloadError(f.child(path, "fingerprint"), "is required when the alert has no labels")
        fingerprint = f.labels_fingerprint(labels)
    fingerprint = f.bounded_id(fingerprint, f.FINGERPRINT_MAX)
    started_at = f.opt_time(alert, "startsAt", path)
    ends_at = f.opt_time(alert, "endsAt", path)
    generator_url = f.resolve_url(f.opt_str(alert, "generatorURL", path, f.URL_MAX + 1), shared.base_url)
    extra_links, addendum = shared.extras(alert, path) if shared.extras is not None else ([], "")
    summary = f.first(annotations.get("description", ""), annotations.get("message", ""))
    if addendum:
        summary = f"{summary}\n{addendum}" if summary else addendum
    service = f.first(*(labels.get(name, "") for name in SERVICE_LABELS), labels.get("job", ""), labels.get("app", ""))
    return f.build(
        AlertSignal,
        path,
        source=shared.source,
        fingerprint=fingerprint,
        status=status,
        title=f.clean(
            f.first(f.headline(annotations.get("summary", "")), labels.get("alertname", ""), f"Alert {fingerprint}"),
            f.TITLE_MAX,
        ),
        service=f.clean(service, f.SERVICE_MAX),
        source_severity=f.clean(labels.get("severity", ""), f.SHORT_MAX),
        summary=f.clean(summary, f.SUMMARY_MAX),
        labels=labels,
        links=f.links(
            (generator_url, "Source"),
            (annotations.get("runbook_url", ""), "Runbook"),
            *extra_links,
            shared.external_link,
        ),
        started_at=started_at,
        ended_at=ends_at if status == "resolved" else None,
        group=shared.group,
        group_title=shared.group_title,
        left_out=shared.left_out,
        group_resolved=bool(shared.group) and shared.status == "resolved",
    )


def parse(payload: object) -> list[AlertSignal]:
    """An Alertmanager webhook notification → one ``AlertSignal`` per alert (``[]`` for an empty group)."""
    return parse_group(payload, source=SOURCE)
