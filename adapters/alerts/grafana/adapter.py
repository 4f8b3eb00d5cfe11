"""Grafana unified alerting webhook contact point → ``AlertSignal`` per alert.

The payload is Alertmanager's (Grafana runs an embedded Alertmanager) plus ``orgId``, ``title``, ``state``,
``message`` at the top, and ``silenceURL``, ``dashboardURL``, ``panelURL``, ``imageURL``, ``values`` (Grafana
≥ 9.5) or ``valueString`` (earlier) on each alert. See
https://grafana.com/docs/grafana/latest/alerting/configure-notifications/manage-contact-points/integrations/webhook-notifier/

Mapping is Alertmanager's (see ``adapters.alerts.alertmanager``), plus:

* ``links`` also get ``silenceURL`` (Silence), ``dashboardURL`` (Dashboard), ``panelURL`` (Panel),
  ``imageURL`` (Image); ``externalURL`` is not linked (the Grafana root; the alert's own links are better);
* the evaluated values are appended to ``summary``: ``Values: B=44.2, C=1`` or ``Value: <valueString>``.

Legacy (pre-unified) Grafana alert webhooks (``ruleName``/``evalMatches``, no ``alerts``) are rejected with a
``PayloadError`` on ``alerts``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from decklog.adapters import payload as f
from decklog.adapters.alerts.alertmanager.adapter import parse_group
from decklog.core.signals import AlertSignal, PayloadError

SOURCE: Final = "grafana"


def _values(alert: Mapping[str, object], path: str) -> str:
    values = f.opt_object(alert, "values", path)
    if values:
        where = f.child(path, "values")
        shown = [
            f"{f.clean(str(key), f.LABEL_KEY_MAX)}={f.scalar_text(value, f.child(where, key), 100)}"
            for key, value in values.items()
            if value is not None
        ]
        return f.clean("Values: " + ", ".join(shown), f.SUMMARY_MAX) if shown else ""
    value_string = f.opt_str(alert, "valueString", path, 1000)
    return f"Value: {value_string}" if value_string else ""


def _extras(alert: Mapping[str, object], path: str) -> tuple[list[tuple[str, str]], str]:
    found = [
        (f.opt_url(alert, key, path), title)
        for key, title in (
            ("silenceURL", "Silence"),
            ("dashboardURL", "Dashboard"),
            ("panelURL", "Panel"),
            ("imageURL", "Image"),
        )
    ]
    return found, _values(alert, path)


def parse(payload: object) -> list[AlertSignal]:
    """A Grafana webhook notification → one ``AlertSignal`` per alert (``[]`` for an empty group)."""
    top = f.root(payload)
    if top.get("alerts") is None and ("ruleName" in top or "evalMatches" in top):
        raise PayloadError("alerts", "is required (legacy Grafana alerting payloads are not supported)")
    return parse_group(top, source=SOURCE, extras=_extras, group_link_title=None)
