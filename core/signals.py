"""Normalised inbound signals: what an alert or change receiver hands to core.

Every alert source (Alertmanager, Grafana, PagerDuty, Datadog, generic) and every change source (GitHub, generic)
has an adapter under ``adapters/`` that turns its payload into these models. Core never sees a vendor payload
except as opaque, size-capped evidence (``raw``).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

AlertStatus = Literal["firing", "acknowledged", "resolved"]


class Link(BaseModel):
    model_config = ConfigDict(frozen=True)

    url: str
    title: str = ""


class AlertSignal(BaseModel):
    """One alert instance, as a source reported it.

    ``fingerprint`` identifies the alert across repeats (the source's own where it has one). ``source_severity``
    is the source's own word or number ("critical", "P1", "2"); core maps it to 1–4 through ``decklog.toml``.
    """

    model_config = ConfigDict(frozen=True)

    source: str
    fingerprint: str = Field(min_length=1, max_length=512)
    status: AlertStatus
    title: str = Field(min_length=1, max_length=500)
    service: str = Field(default="", max_length=200)
    source_severity: str = ""
    summary: str = ""
    labels: dict[str, str] = Field(default_factory=dict)
    links: tuple[Link, ...] = ()
    started_at: datetime | None = None
    ended_at: datetime | None = None
    # The source's own id of this notification (PagerDuty ``event.id``, Datadog ``$ID``, generic ``event_id``): a
    # vendor's retry of one delivery carries the same id, a new notification a new one. "" when the source has none.
    event_id: str = Field(default="", max_length=200)
    # When the source says the reported state change happened (PagerDuty ``event.occurred_at``, Datadog ``$DATE``).
    occurred_at: datetime | None = None
    # The source's own grouping: the alerts of one notification that share ``group`` go to one incident, and later
    # notifications with the same ``group`` join it while it is open (Alertmanager/Grafana ``groupKey``, else
    # their ``groupLabels``/``commonLabels``; a PagerDuty incident id; a Datadog monitor id). "" = none.
    group: str = Field(default="", max_length=1000)
    # ``group`` is the vendor's own incident (PagerDuty, Datadog): distinct ones never merge by service.
    vendor_incident: bool = False
    # A title for the group's incident when it holds several alerts (``commonAnnotations.summary``, Grafana's
    # ``title``, ``groupLabels``); "" = the first alert's title.
    group_title: str = Field(default="", max_length=500)
    # Alerts of this notification the sender left out (Alertmanager/Grafana ``truncatedAlerts``).
    left_out: int = Field(default=0, ge=0)
    # The notification says its whole ``group`` resolved (Alertmanager/Grafana group-level ``status: resolved``):
    # every alert of the group resolves, also those the sender left out of it (``max_alerts``).
    group_resolved: bool = False
    # The source's priority is authoritative in both directions (PagerDuty priority), not only upwards.
    sets_severity: bool = False
    # The vendor reopened this incident (PagerDuty ``incident.reopened``).
    reopened: bool = False
    # A one-time note for the incident's thread about how the source is set up ("" = none), keyed by ``note_id``.
    note: str = Field(default="", max_length=1000)
    note_id: str = Field(default="", max_length=100)


class Commit(BaseModel):
    model_config = ConfigDict(frozen=True)

    id: str
    message: str = ""
    author: str = ""
    url: str = ""
    paths: tuple[str, ...] = ()


ChangeKind = Literal["deploy", "config", "flag"]
CHANGE_KINDS: tuple[ChangeKind, ...] = ("deploy", "config", "flag")


class ChangeSignal(BaseModel):
    """One change to a service (a deploy, a push to a deployed branch, a config push, a feature flag flip).
    ``kind`` says which, so that the action that undoes it can be chosen (a rollback, a config revert, a flag
    turned off); ``flag`` names the feature flag of a ``flag`` change."""

    model_config = ConfigDict(frozen=True)

    source: str
    change_id: str = Field(min_length=1, max_length=200)
    service: str = Field(min_length=1, max_length=200)
    version: str = ""
    environment: str = ""
    author: str = ""
    status: Literal["started", "succeeded", "failed", "pushed"] = "succeeded"
    commits: tuple[Commit, ...] = ()
    link: str = ""
    description: str = ""
    at: datetime | None = None
    repository: str = ""  # e.g. ``acme/payments`` (GitHub's ``repository.full_name``)
    ref: str = ""  # the git ref deployed or pushed (``refs/heads/main``, ``v2026.09.19-4``)
    kind: ChangeKind = "deploy"
    flag: str = Field("", max_length=200)


class PayloadError(ValueError):
    """A payload is malformed. ``path`` names the offending field (``alerts[0].labels``); HTTP answers 400."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(f"{path}: {message}" if path else message)
        self.path = path
        self.message = message


def truncate_raw(raw: Any, limit: int = 16_384) -> dict[str, Any]:
    """Keep a vendor payload as evidence, capped in size: ``{"json": ...}`` or ``{"truncated": "<prefix>"}``."""
    import json

    text = json.dumps(raw, sort_keys=True, separators=(",", ":"), default=str)
    if len(text) <= limit:
        return {"json": raw}
    return {"truncated": text[:limit], "bytes": len(text)}
