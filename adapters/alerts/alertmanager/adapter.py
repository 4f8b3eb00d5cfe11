"""Prometheus Alertmanager webhook (``webhook_config``, payload version 4) → one ``AlertSignal`` per alert.

Payload (https://prometheus.io/docs/alerting/latest/configuration/#webhook_config)::

    {"version": "4", "groupKey": ..., "truncatedAlerts": 0, "status": "firing|resolved", "receiver": ...,
     "groupLabels": {...}, "commonLabels": {...}, "commonAnnotations": {...}, "externalURL": ...,
     "alerts": [{"status", "labels", "annotations", "startsAt", "endsAt", "generatorURL", "fingerprint"}]}

Mapping, per alert:

* ``fingerprint`` ← ``fingerprint``; when absent (Alertmanager < 0.19), Prometheus' own fingerprint of the
  labels, which is what a newer Alertmanager would have sent;
* ``status`` ← ``alerts[].status`` (else the group ``status``): ``firing`` | ``resolved``;
* ``title`` ← ``annotations.summary`` → ``labels.alertname`` → ``"Alert <fingerprint>"``;
* ``service`` ← ``labels.service`` → ``labels.job`` → ``labels.app``;
* ``source_severity`` ← ``labels.severity``; ``summary`` ← ``annotations.description`` →
  ``annotations.message``;
* ``labels`` ← all labels; ``links`` ← ``generatorURL`` (Source), ``annotations.runbook_url`` (Runbook),
  ``externalURL`` (Alertmanager);
* ``started_at`` ← ``startsAt``; ``ended_at`` ← ``endsAt`` for resolved alerts only (Go's zero time = not
  ended).

The group parser is shared with Grafana, whose unified-alerting webhook is the same shape plus a few fields.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Final

from adapters import payload_fields as f
from core.signals import AlertSignal, PayloadError

SOURCE: Final = "alertmanager"

#: Per-alert extras of a payload flavour: ``(alert, its path) → (extra links, summary addendum)``.
Extras = Callable[[Mapping[str, object], str], tuple[list[tuple[str, str]], str]]

_STATUSES: Final = ("firing", "resolved")


def _status(value: str, path: str) -> str:
    status = value.lower()
    if status not in _STATUSES:
        raise PayloadError(path, f"expected 'firing' or 'resolved', got {value!r}")
    return status


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
    group_status = _status(group_status_raw, "status") if group_status_raw else ""
    alerts = f.req_list(top, "alerts", "")
    external_url = f.opt_url(top, "externalURL", "") if group_link_title else ""

    signals: list[AlertSignal] = []
    for index, raw in enumerate(alerts):
        path = f.item("alerts", index)
        alert = f.as_object(raw, path)
        labels = f.str_map(alert, "labels", path)
        annotations = f.str_map(alert, "annotations", path, value_limit=f.SUMMARY_MAX)

        status_raw = f.opt_str(alert, "status", path, 20)
        if status_raw:
            status = _status(status_raw, f.child(path, "status"))
        elif group_status:
            status = group_status
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
        generator_url = f.opt_url(alert, "generatorURL", path)

        extra_links: list[tuple[str, str]] = []
        addendum = ""
        if extras is not None:
            extra_links, addendum = extras(alert, path)

        summary = f.first(annotations.get("description", ""), annotations.get("message", ""))
        if addendum:
            summary = f"{summary}\n{addendum}" if summary else addendum

        signals.append(
            f.build(
                AlertSignal,
                path,
                source=source,
                fingerprint=fingerprint,
                status=status,
                title=f.clean(
                    f.first(annotations.get("summary", ""), labels.get("alertname", ""), f"Alert {fingerprint}"),
                    f.TITLE_MAX,
                ),
                service=f.clean(
                    f.first(labels.get("service", ""), labels.get("job", ""), labels.get("app", "")),
                    f.SERVICE_MAX,
                ),
                source_severity=f.clean(labels.get("severity", ""), f.SHORT_MAX),
                summary=f.clean(summary, f.SUMMARY_MAX),
                labels=labels,
                links=f.links(
                    (generator_url, "Source"),
                    (annotations.get("runbook_url", ""), "Runbook"),
                    *extra_links,
                    (external_url, group_link_title or ""),
                ),
                started_at=started_at,
                ended_at=ends_at if status == "resolved" else None,
            )
        )
    return signals


def parse(payload: object) -> list[AlertSignal]:
    """An Alertmanager webhook notification → one ``AlertSignal`` per alert (``[]`` for an empty group)."""
    return parse_group(payload, source=SOURCE)
