"""Alert payload normalisers: real vendor fixtures, validation paths, fuzzing, signatures, the registry."""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import hmac
import json
import re
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from decklog.adapters import payload as fields
from decklog.adapters.alerts import (
    ALERT_SOURCES,
    AlertSource,
    alert_sources,
    alertmanager,
    datadog,
    generic,
    grafana,
    pagerduty,
)
from decklog.core.signals import AlertSignal, Link, PayloadError
from tests.helpers.payload_fuzz import WRONG_TYPES, collect_keys, paths, related, render
from tests.helpers.payload_fuzz import json_values as payload_json_values

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "alerts"


def load(source: str, name: str) -> Any:
    return json.loads((FIXTURES / source / name).read_text(encoding="utf-8"))


def utc(year: int, month: int, day: int, hour: int = 0, minute: int = 0, second: int = 0, micro: int = 0) -> datetime:
    return datetime(year, month, day, hour, minute, second, micro, tzinfo=UTC)


# ------------------------------------------------------------------------------------------------ expectations

AM_PROBE_LABELS = {
    "alertname": "ProbeFailure",
    "instance": "https://server.example.org",
    "job": "http_checks",
    "monitor": "master",
    "severity": "critical",
}
AM_PROBE = {
    "source": "alertmanager",
    "fingerprint": "1a30ba71cca2921f",
    "title": "BlackBox Probe Failure: https://server.example.org",
    "service": "http_checks",
    "source_severity": "critical",
    "summary": "Instance https://server.example.org has been down for over 5m. Job: http_checks",
    "labels": AM_PROBE_LABELS,
    "links": (
        Link(url="http://prometheus.example.org:9090/graph?g0.expr=probe_success+%3D%3D+0&g0.tab=1", title="Source"),
        Link(url="http://prometheus.example.org:9093", title="Alertmanager"),
    ),
    "started_at": utc(2023, 2, 6, 13, 8, 45, 828000),
}
PAYMENTS_LABELS = {
    "alertname": "PaymentsHigh5xxRate",
    "env": "prod",
    "service": "payments",
    "severity": "critical",
    "team": "payments",
}
AM_PAYMENTS = {
    "source": "alertmanager",
    "fingerprint": "78e60a486ed56dec",
    "title": "payments: elevated 5xx error rate",
    "service": "payments",
    "source_severity": "critical",
    "summary": "12.4% of POST /v1/charges requests returned 5xx over the last 5 minutes (SLO: 0.5%).",
    "labels": PAYMENTS_LABELS,
    "links": (
        Link(
            url="https://prometheus.example.com/graph?g0.expr=sum%28rate%28http_requests_total%7Bservice%3D%22"
            "payments%22%2Ccode%3D~%225..%22%7D%5B5m%5D%29%29+%2F+sum%28rate%28http_requests_total%7Bservice%3D"
            "%22payments%22%7D%5B5m%5D%29%29+%3E+0.05&g0.tab=1",
            title="Source",
        ),
        Link(url="https://runbooks.example.com/payments/high-5xx", title="Runbook"),
        Link(url="https://alertmanager.example.com", title="Alertmanager"),
    ),
    "started_at": utc(2026, 9, 19, 14, 6, 30, 512000),
}
GRAFANA_MEMORY_LINKS = (
    Link(url="https://play.grafana.org/alerting/1afz29v7z/edit", title="Source"),
    Link(url="https://myrunbook.com/runbook/1234", title="Runbook"),
    Link(
        url="https://play.grafana.org/alerting/silence/new?alertmanager=grafana&matchers=alertname%3DT2%2Cteam%3Dblue"
        "%2Czone%3Dus-1",
        title="Silence",
    ),
)
GRAFANA_MEMORY = {
    "source": "grafana",
    "fingerprint": "c6eadffa33fcdf37",
    "title": "This alert was triggered for zone us-1",
    "labels": {"alertname": "High memory usage", "team": "blue", "zone": "us-1"},
    "links": GRAFANA_MEMORY_LINKS,
    "started_at": utc(2021, 10, 12, 7, 51, 3, 157076),
}
PD_LABELS = {
    "urgency": "high",
    "priority": "P1",
    "incident_number": "2",
    "incident_key": "d3640fbd41094207a1c11e58e46b1662",
    "service_id": "PF9KMXH",
    "escalation_policy": "Default",
}
PD_INCIDENT = {
    "source": "pagerduty",
    "fingerprint": "PGR0VU2",
    "title": "A little bump in the road",
    "service": "API Service",
    "source_severity": "P1",
    "labels": PD_LABELS,
    "links": (
        Link(url="https://acme.pagerduty.com/incidents/PGR0VU2", title="PagerDuty incident"),
        Link(url="https://example.com", title="Conference bridge"),
    ),
    "started_at": utc(2020, 4, 9, 15, 16, 27),
}
DD_DOCS_LABELS = {
    "monitor": "",
    "name": "myService",
    "role": "computing-node",
    "availability-zone": "us-east-1a",
    "host": "my-host",
    "metric": "system.load.1",
    "monitor_id": "1234",
}
DD_PAYMENTS_LABELS = {
    "env": "prod",
    "monitor": "",
    "service": "payments",
    "team": "payments",
    "metric": "trace.http.request.errors",
    "monitor_id": "148275309",
}
DD_PAYMENTS = {
    "source": "datadog",
    "fingerprint": "b1f7c3e0a9d24c58e6f1a2b3c4d5e6f7",
    "title": "payments: elevated 5xx error rate",
    "service": "payments",
    "source_severity": "P1",
}
GENERIC_PAYMENTS = {
    "source": "generic",
    "fingerprint": "payments-5xx",
    "title": "payments: elevated 5xx error rate",
    "service": "payments",
    "source_severity": "critical",
    "labels": {"env": "prod", "team": "payments", "endpoint": "POST /v1/charges"},
    "started_at": utc(2026, 9, 19, 14, 6, 30),
}


def alertmonitor_icmp(status: str) -> list[AlertSignal]:
    """The three alerts of the matjaz99/alertmonitor capture: no fingerprint (derived from the labels), no
    service label (``job`` names the service), ``http://:9093`` dropped, nanoseconds cut to microseconds."""
    prints = {
        "172.29.254.30": "4a110cc8dbe76532",
        "172.29.254.50": "e92130f1a362a046",
        "172.29.254.66": "1e1c2fe4c8293484",
    }
    return [
        AlertSignal(
            source="alertmanager",
            fingerprint=fingerprint,
            status=status,
            title="ICMP ping failed",  # labels.summary is a label, not the summary annotation
            service="blackbox-icmp",
            source_severity="major",
            summary=f"{ip} does not reply to ICMP pings",
            labels={
                "alertname": "ICMP ping failed",
                "instance": ip,
                "job": "blackbox-icmp",
                "monitor": "monis",
                "severity": "major",
                "tags": "icmp, ping failed",
                "summary": f"No physical connection to {ip}",
            },
            links=(
                Link(
                    url="http://9ed35ff90bf8:9090/graph?g0.expr=probe_success%7Bjob%3D%22blackbox-icmp%22%7D+%3D%3D+0"
                    "&g0.tab=1",
                    title="Source",
                ),
            ),
            started_at=utc(2019, 9, 27, 16, 27, 56, 612666),
            ended_at=None,  # resolved, but the published body keeps Go's zero endsAt
        )
        for ip, fingerprint in prints.items()
    ]


def ocean_elb(status: str, priority: str, event_id: str, occurred: datetime, summary: str = "") -> list[AlertSignal]:
    """The captured PagerDuty incident Q19Z7CCJDTBD40 (nudgebee's tests) and the events derived from it."""
    labels = {"urgency": "high", "priority": priority, "incident_number": "320681", "service_id": "PZ55WG8"}
    if not priority:
        del labels["priority"]
    return [
        AlertSignal(
            source="pagerduty",
            fingerprint="Q19Z7CCJDTBD40",
            status=status,
            title="ALARM: CRITICAL | AWS APP | ELB | mm-carrier-updates-worker-stg-al2-r2... in US East (N. Virginia)",
            service="Event_Catchall_ocean",
            source_severity=priority or "high",
            summary=summary,
            labels={**labels, "escalation_policy": "SRE-ISBU-Ocean"},
            links=(Link(url="https://example-inc.pagerduty.com/incidents/Q19Z7CCJDTBD40", title="PagerDuty incident"),),
            started_at=utc(2025, 8, 2, 15, 45, 53),
            ended_at=occurred if status == "resolved" else None,
            event_id=event_id,
            occurred_at=occurred,
        )
    ]


GRAFANA_CLOUD = "https://pytorchci.grafana.net"
GRAFANA_NODATA = AlertSignal(
    source="grafana",
    fingerprint="c50ae7bba42b3626",
    status="firing",
    title="TEST MODE: this is summary: Viable/strict is broken",
    summary="TEST MODE: You should have a description Fix HUD",  # valueString "": no Value line
    labels={
        "alertname": "DatasourceNoData",
        "datasource_uid": "grafanacloud-prom",
        "grafana_folder": "GrafanaCloud",
        "ref_id": "A",
        "rulename": "viable/strict is broken",
    },
    links=(
        Link(url=f"{GRAFANA_CLOUD}/alerting/grafana/eewi8oa4ccef4e/view?orgId=1", title="Source"),
        Link(url="https://hud.pytorch.org", title="Runbook"),
        Link(
            url=f"{GRAFANA_CLOUD}/alerting/silence/new?alertmanager=grafana&matcher=__alert_rule_uid__%3Deewi8oa4ccef4e"
            "&matcher=datasource_uid%3Dgrafanacloud-prom&matcher=ref_id%3DA&matcher=rulename%3Dviable%2Fstrict+is+broken"
            "&orgId=1",
            title="Silence",
        ),
        Link(
            url=f"{GRAFANA_CLOUD}/d/e9a2a2e9-66d8-4ae3-ac6a-db76ab17321c?from=1758039140000&orgId=1&to=1758042776758",
            title="Dashboard",
        ),
        Link(
            url=f"{GRAFANA_CLOUD}/d/e9a2a2e9-66d8-4ae3-ac6a-db76ab17321c?from=1758039140000&orgId=1&to=1758042776758"
            "&viewPanel=1",
            title="Panel",
        ),
    ),
    started_at=utc(2025, 9, 16, 17, 12, 20),
)
GRAFANA_TEST = AlertSignal(
    source="grafana",
    fingerprint="57c6d9296de2ad39",
    status="firing",
    title="Notification test",
    summary="Value: [ metric='foo' labels={instance=bar} value=10 ]",
    labels={"alertname": "TestAlert", "instance": "Grafana"},
    links=(
        Link(
            url="https://alertmanager-prod-us-west-0.grafana.net/alertmanager/alerting/silence/new?alertmanager=grafana"
            "&matcher=alertname%3DTestAlert&matcher=instance%3DGrafana",
            title="Silence",
        ),
    ),
    started_at=utc(2025, 9, 16, 17, 11, 19, 283071),
)


def grafana_webhook_alert(started_at: datetime | None) -> AlertSignal:
    """An alert of Grafana 8.2's documented body: its summary is Grafana's default message ("**Firing**", then the
    labels), so the alert name is the title."""
    return AlertSignal(
        source="grafana",
        fingerprint="929467973978d053",
        status="firing",
        title="WebhookAlert",
        summary="Value: [ var='A' labels={} value=1 ]",
        labels={"alertname": "WebhookAlert"},
        links=(
            Link(url="https://play.grafana.org/alerting/UID_WebhookAlert/edit", title="Source"),
            Link(
                url="https://play.grafana.org/alerting/silence/new?alertmanager=grafana&matchers=alertname%%3DWebhookAlert",
                title="Silence",
            ),
        ),
        started_at=started_at,
    )


EXPECTED: dict[tuple[str, str], list[AlertSignal]] = {
    ("alertmanager", "alertmonitor_icmp_truncated.json"): alertmonitor_icmp("firing")[:2],
    ("grafana", "cloud_datasource_nodata.json"): [GRAFANA_NODATA],
    ("grafana", "cloud_test_notification.json"): [GRAFANA_TEST],
    ("grafana", "docs_v82_zero_startsat.json"): [
        grafana_webhook_alert(None),
        grafana_webhook_alert(utc(2021, 10, 11, 17, 38)),
    ],
    ("pagerduty", "ocean_elb_triggered.json"): ocean_elb(
        "firing", "", "01FVSY3TYZRNGRHL3BIQ1RTDG1", utc(2025, 8, 2, 15, 45, 53, 839000)
    ),
    ("pagerduty", "ocean_elb_priority_p1.json"): ocean_elb(
        "firing",
        "P1",
        "01FVSY5C2W8JQK0D3N7HXB4M6P",
        utc(2025, 8, 2, 15, 48, 10, 214000),
        "Priority updated by user@example.com",
    ),
    ("pagerduty", "ocean_elb_priority_p3.json"): ocean_elb(
        "firing",
        "P3",
        "01FVSY9R7T1ZV6E2K4QWN8C3JD",
        utc(2025, 8, 2, 15, 55, 41, 67000),
        "Priority updated by user@example.com",
    ),
    ("pagerduty", "ocean_elb_resolved.json"): ocean_elb(
        "resolved",
        "P3",
        "01FVSYH0B5XG2P9R6T3KDM7QWE",
        utc(2025, 8, 2, 16, 21, 2, 493000),
        "Resolved by user@example.com",
    ),
    ("pagerduty", "ocean_elb_reopened.json"): ocean_elb(
        "firing", "P3", "01FVT0A4N8QC5L2W7H9ZJ3XR6B", utc(2025, 8, 2, 17, 3, 27, 880000), "Reopened by user@example.com"
    ),
    ("pagerduty", "nginx_400s_resolved.json"): [
        AlertSignal(
            source="pagerduty",
            fingerprint="QEXAMPLE1",
            status="resolved",
            title="NGINXTooMany400s triggered on nudgebee-api-alerts",  # the trailing space is cleaned
            service="Test-Service",
            source_severity="high",
            summary="Resolved by Test User",
            labels={
                "urgency": "high",
                "incident_number": "29",
                "service_id": "PEXAMPLE",
                "escalation_policy": "Default",
            },
            links=(Link(url="https://example-inc.pagerduty.com/incidents/QEXAMPLE2", title="PagerDuty incident"),),
            started_at=utc(2025, 2, 12, 10, 15, 8),
            ended_at=utc(2025, 2, 15, 14, 42, 34, 992000),
            event_id="01EXAMPLE2AAAAAAAAAAAAAAAA",
            occurred_at=utc(2025, 2, 15, 14, 42, 34, 992000),
        )
    ],
    ("alertmanager", "alertmonitor_icmp_firing.json"): alertmonitor_icmp("firing"),
    ("alertmanager", "alertmonitor_icmp_resolved.json"): alertmonitor_icmp("resolved"),
    ("alertmanager", "probe_failure_firing.json"): [AlertSignal(**AM_PROBE, status="firing")],
    ("alertmanager", "probe_failure_resolved.json"): [
        AlertSignal(**AM_PROBE, status="resolved", ended_at=utc(2023, 2, 6, 13, 21, 15, 828000))
    ],
    ("alertmanager", "legacy_no_fingerprint.json"): [
        AlertSignal(
            source="alertmanager",
            fingerprint="4ca62d040e78b6d8",  # derived from the labels, as Alertmanager >= 0.19 would send
            status="firing",
            title="Test",
            service="prometheus24",
            summary="some description",
            labels={"alertname": "Test", "dc": "eu-west-1", "instance": "localhost:9090", "job": "prometheus24"},
            links=(
                Link(
                    url="http://example.com:9090/graph?g0.expr=go_memstats_alloc_bytes+%3E+0&g0.tab=1", title="Source"
                ),
                Link(url="http://example.com:9093", title="Alertmanager"),
            ),
            started_at=utc(2018, 8, 3, 7, 52, 26, 739266),  # +02:00 and nanoseconds
        )
    ],
    ("alertmanager", "payments_5xx_firing.json"): [AlertSignal(**AM_PAYMENTS, status="firing")],
    ("alertmanager", "payments_5xx_resolved.json"): [
        AlertSignal(**AM_PAYMENTS, status="resolved", ended_at=utc(2026, 9, 19, 14, 41, 0, 512000))
    ],
    ("grafana", "docs_example_firing.json"): [
        AlertSignal(
            **GRAFANA_MEMORY,
            status="firing",
            summary="The system has high memory usage\nValues: B=44.23943737541908, C=1",
        ),
        AlertSignal(
            source="grafana",
            fingerprint="bc97ff14869b13e3",
            status="firing",
            title="This alert was triggered for zone eu-1",
            summary="The system has high CPU usage\nValues: B=44.23943737541908, C=1",
            labels={"alertname": "High CPU usage", "team": "blue", "zone": "eu-1"},
            links=(
                Link(url="https://play.grafana.org/alerting/d1rdpdv7k/edit", title="Source"),
                Link(url="https://myrunbook.com/runbook/1234", title="Runbook"),
                Link(
                    url="https://play.grafana.org/alerting/silence/new?alertmanager=grafana&matchers=alertname%3DT1"
                    "%2Cteam%3Dblue%2Czone%3Deu-1",
                    title="Silence",
                ),
            ),
            started_at=utc(2021, 10, 12, 7, 56, 3, 157076),
        ),
    ],
    ("grafana", "docs_v9_valuestring.json"): [
        AlertSignal(
            **GRAFANA_MEMORY,
            status="firing",
            summary="The system has high memory usage\nValue: [ metric='' labels={} value=14151.331895396988 ]",
        )
    ],
    ("grafana", "docs_example_resolved.json"): [
        AlertSignal(
            **GRAFANA_MEMORY,
            status="resolved",
            summary="The system has high memory usage\nValues: B=12.5, C=0",
            ended_at=utc(2021, 10, 12, 8, 7, 3, 157076),
        )
    ],
    ("grafana", "payments_5xx_firing.json"): [
        AlertSignal(
            source="grafana",
            fingerprint="c53245106245b5e0",
            status="firing",
            title="payments: elevated 5xx error rate",
            service="payments",
            source_severity="critical",
            summary="payments is answering 12.4% of requests with 5xx (SLO: 0.5%).\nValues: A=0.124, B=1",
            labels={
                "alertname": "PaymentsHigh5xxRate",
                "grafana_folder": "Payments",
                "service": "payments",
                "severity": "critical",
                "team": "payments",
            },
            links=(
                Link(url="https://grafana.example.com/alerting/grafana/payments-5xx/view", title="Source"),
                Link(url="https://runbooks.example.com/payments/high-5xx", title="Runbook"),
                Link(
                    url="https://grafana.example.com/alerting/silence/new?alertmanager=grafana&matchers=alertname"
                    "%3DPaymentsHigh5xxRate%2Cservice%3Dpayments",
                    title="Silence",
                ),
                Link(url="https://grafana.example.com/d/payments-red?orgId=1", title="Dashboard"),
                Link(url="https://grafana.example.com/d/payments-red?orgId=1&viewPanel=4", title="Panel"),
            ),
            started_at=utc(2026, 9, 19, 14, 6, 30),
        )
    ],
    ("pagerduty", "incident_priority_updated.json"): [
        AlertSignal(
            **PD_INCIDENT,
            status="firing",
            summary="Priority updated by Tenex Engineer",
            event_id="5ac64822-4adc-4fda-ade0-410becf0de4f",
            occurred_at=utc(2020, 10, 2, 18, 45, 22, 169000),
        )
    ],
    ("pagerduty", "incident_triggered.json"): [
        AlertSignal(
            **{
                **PD_INCIDENT,
                "source_severity": "high",
                "labels": {k: v for k, v in PD_LABELS.items() if k != "priority"},
            },
            status="firing",
            summary="Triggered by API Service",
            event_id="01CXJ0UMXGNEHP3ZWQ9B3ZP5RA",
            occurred_at=utc(2020, 4, 9, 15, 16, 28, 233000),
        )
    ],
    ("pagerduty", "incident_acknowledged.json"): [
        AlertSignal(
            **PD_INCIDENT,
            status="acknowledged",
            summary="Acknowledged by Tenex Engineer",
            event_id="01CXJ0VK6ZZ5DG6Q9P8XB4KQ2E",
            occurred_at=utc(2020, 4, 9, 15, 19, 2, 516000),
        )
    ],
    ("pagerduty", "incident_resolved.json"): [
        AlertSignal(
            **PD_INCIDENT,
            status="resolved",
            summary="Resolved by Tenex Engineer",
            ended_at=utc(2020, 4, 9, 15, 48, 51, 77000),
            event_id="01CXJ12D7ZSE6Z9H5TQ8R3NXQW",
            occurred_at=utc(2020, 4, 9, 15, 48, 51, 77000),
        )
    ],
    ("pagerduty", "incident_annotated.json"): [],
    ("pagerduty", "service_updated.json"): [],
    ("pagerduty", "payments_5xx_triggered.json"): [
        AlertSignal(
            source="pagerduty",
            fingerprint="Q2P5X8M4K1RZ7B",
            status="firing",
            title="payments: elevated 5xx error rate",
            service="payments",
            source_severity="P1",
            summary="Triggered by payments",
            labels={
                "urgency": "high",
                "priority": "P1",
                "incident_number": "4211",
                "incident_key": "payments-high-5xx",
                "service_id": "PPAYM3N",
                "escalation_policy": "Payments",
            },
            links=(Link(url="https://acme.pagerduty.com/incidents/Q2P5X8M4K1RZ7B", title="PagerDuty incident"),),
            started_at=utc(2026, 9, 19, 14, 7, 2),
            event_id="01J8PAYMENTS5XXTRIGGERED00",
            occurred_at=utc(2026, 9, 19, 14, 7, 2, 418000),
        )
    ],
    ("datadog", "default_payload_relay.json"): [
        AlertSignal(
            source="datadog",
            fingerprint="monitor:18692904",
            status="firing",
            title="Host Cluster Alert",
            summary="@webhook-relay-test\n@webhook-relay-prod-demo\n@webhook-relay\n\nTest notification triggered by "
            "kenaz@puppet.com.\n\n\n\nThe monitor was last triggered at Wed Jun 03 2020 20:43:04 UTC.\n\n- - -\n\n"
            "[[Monitor Status](https://app.datadoghq.com/monitors#18692904?)] · "
            "[[Edit Monitor](https://app.datadoghq.com/monitors#18692904/edit)]",
            labels={"event_type": "service_check", "monitor_id": "18692904"},
            links=(
                Link(url="https://app.datadoghq.com/monitors#18692904?", title="Datadog"),
                Link(url="https://app.datadoghq.com/monitors#18692904/edit", title="Datadog"),
            ),
            started_at=utc(2020, 6, 3, 20, 43, 5),
            event_id="5485379890863845239",
            occurred_at=utc(2020, 6, 3, 20, 43, 5),
        )
    ],
    ("datadog", "docs_variables_triggered.json"): [
        AlertSignal(
            source="datadog",
            fingerprint="9bd4ac313a4d1e8fae2482df7b77628",
            status="firing",
            title="[Memory Alert]",
            source_severity="P1",
            summary="@webhook-url Sending to the webhook",
            labels={**DD_DOCS_LABELS, "transition": "Triggered", "alert_type": "error"},
            links=(
                Link(url="https://app.datadoghq.com/event/jump_to?event_id=123456", title="Datadog event"),
                Link(url="https://p.datadoghq.com/path-to-snapshot", title="Snapshot"),
            ),
            started_at=utc(2014, 7, 29, 19, 37, 52),
            event_id="1234567",
            occurred_at=utc(2014, 7, 29, 19, 37, 52),
        )
    ],
    ("datadog", "docs_variables_recovered.json"): [
        AlertSignal(
            source="datadog",
            fingerprint="9bd4ac313a4d1e8fae2482df7b77628",
            status="resolved",
            title="[Memory Alert]",
            source_severity="P1",
            summary="@webhook-url Sending to the webhook",
            labels={**DD_DOCS_LABELS, "transition": "Recovered", "alert_type": "success"},
            links=(Link(url="https://app.datadoghq.com/event/jump_to?event_id=123457", title="Datadog event"),),
            ended_at=utc(2014, 7, 29, 19, 52, 52),
            event_id="1234599",
            occurred_at=utc(2014, 7, 29, 19, 52, 52),
        )
    ],
    ("datadog", "payments_5xx_triggered.json"): [
        AlertSignal(
            **DD_PAYMENTS,
            status="firing",
            summary="The 5xx rate of payments is 12.4% (threshold 5%). Runbook: "
            "https://runbooks.example.com/payments/high-5xx @webhook-decklog",
            labels={**DD_PAYMENTS_LABELS, "transition": "Triggered", "alert_type": "error"},
            links=(
                Link(url="https://app.datadoghq.com/event/event?id=7716548234011234567", title="Datadog event"),
                Link(
                    url="https://p.datadoghq.com/snapshot/view/dd-snapshots-prod/org_11023/2026-09-19/payments-5xx.png",
                    title="Snapshot",
                ),
            ),
            started_at=utc(2026, 9, 19, 14, 6, 30),
            event_id="7716548234011234567",
            occurred_at=utc(2026, 9, 19, 14, 6, 30),
        )
    ],
    ("datadog", "payments_5xx_recovered.json"): [
        AlertSignal(
            **DD_PAYMENTS,
            status="resolved",
            summary="payments 5xx rate is back under 5%. @webhook-decklog",
            labels={**DD_PAYMENTS_LABELS, "transition": "Recovered", "alert_type": "success"},
            links=(Link(url="https://app.datadoghq.com/event/event?id=7716548234055599999", title="Datadog event"),),
            ended_at=utc(2026, 9, 19, 14, 41, 0),
            event_id="7716548234055599999",
            occurred_at=utc(2026, 9, 19, 14, 41, 0),
        )
    ],
    ("generic", "payments_5xx_firing.json"): [
        AlertSignal(
            **GENERIC_PAYMENTS,
            status="firing",
            summary="12.4% of POST /v1/charges requests returned 5xx over the last 5 minutes (SLO: 0.5%).",
            links=(
                Link(url="https://grafana.example.com/d/payments-red?orgId=1", title="Payments RED dashboard"),
                Link(url="https://runbooks.example.com/payments/high-5xx", title="Runbook"),
            ),
        )
    ],
    ("generic", "payments_5xx_resolved.json"): [
        AlertSignal(**GENERIC_PAYMENTS, status="resolved", ended_at=utc(2026, 9, 19, 14, 41, 0))
    ],
    ("generic", "minimal.json"): [
        AlertSignal(source="generic", fingerprint="backup-nightly", status="firing", title="Nightly backup did not run")
    ],
}


def fixture_files() -> list[tuple[str, str]]:
    return sorted((path.parent.name, path.name) for path in FIXTURES.glob("*/*.json"))


def test_every_fixture_has_an_expectation_and_a_provenance_note() -> None:
    assert fixture_files() == sorted(EXPECTED)
    for source, name in fixture_files():
        notes = (FIXTURES / source / "SOURCES.md").read_text(encoding="utf-8")
        assert f"`{name}`" in notes, f"{source}/{name} is not described in SOURCES.md"


#: Per fixture, the notification-level fields (the same on each of its signals): group, vendor_incident,
#: group_title, left_out, sets_severity, reopened, note_id.
ALERTMONITOR_GROUP = (
    'key:alertmonitor_swarm:{}/{severity=~"^(?:^(critical|major|minor|warning|informational)$)$"}:'
    '{alertname="ICMP ping failed"}',
    False,
    "alertname=ICMP ping failed",
    0,
    False,
    False,
    "",
)
GROUPING: dict[tuple[str, str], tuple[str, bool, str, int, bool, bool, str]] = {
    ("alertmanager", "alertmonitor_icmp_firing.json"): ALERTMONITOR_GROUP,
    ("alertmanager", "alertmonitor_icmp_resolved.json"): ALERTMONITOR_GROUP,
    ("alertmanager", "legacy_no_fingerprint.json"): (
        'key:webhook:{}:{alertname="Test", job="prometheus24"}',
        False,
        "alertname=Test, job=prometheus24",
        0,
        False,
        False,
        "",
    ),
    ("alertmanager", "payments_5xx_firing.json"): (
        'key:decklog:{}/{service="payments"}:{alertname="PaymentsHigh5xxRate", service="payments"}',
        False,
        "payments: elevated 5xx error rate",
        0,
        False,
        False,
        "",
    ),
    ("alertmanager", "payments_5xx_resolved.json"): (
        'key:decklog:{}/{service="payments"}:{alertname="PaymentsHigh5xxRate", service="payments"}',
        False,
        "payments: elevated 5xx error rate",
        0,
        False,
        False,
        "",
    ),
    ("alertmanager", "probe_failure_firing.json"): (
        'key:sms:{}/{severity="critical"}:{alertname="ProbeFailure"}',
        False,
        "BlackBox Probe Failure: https://server.example.org",
        0,
        False,
        False,
        "",
    ),
    ("alertmanager", "probe_failure_resolved.json"): (
        'key:sms:{}/{severity="critical"}:{alertname="ProbeFailure"}',
        False,
        "BlackBox Probe Failure: https://server.example.org",
        0,
        False,
        False,
        "",
    ),
    ("datadog", "default_payload_relay.json"): (
        "datadog:monitor:18692904",
        True,
        "",
        0,
        False,
        False,
        "datadog:default-payload",
    ),
    ("datadog", "docs_variables_recovered.json"): (
        "datadog:1234:availability-zone:us-east-1a, role:computing-node",
        True,
        "",
        0,
        False,
        False,
        "",
    ),
    ("datadog", "docs_variables_triggered.json"): (
        "datadog:1234:availability-zone:us-east-1a, role:computing-node",
        True,
        "",
        0,
        False,
        False,
        "",
    ),
    ("datadog", "payments_5xx_recovered.json"): (
        "datadog:148275309:service:payments,env:prod",
        True,
        "",
        0,
        False,
        False,
        "",
    ),
    ("datadog", "payments_5xx_triggered.json"): (
        "datadog:148275309:service:payments,env:prod",
        True,
        "",
        0,
        False,
        False,
        "",
    ),
    ("generic", "minimal.json"): ("", False, "", 0, False, False, ""),
    ("generic", "payments_5xx_firing.json"): ("", False, "", 0, False, False, ""),
    ("generic", "payments_5xx_resolved.json"): ("", False, "", 0, False, False, ""),
    ("grafana", "docs_example_firing.json"): ("key:My Super Webhook:{}:{}", False, "", 0, False, False, ""),
    ("grafana", "docs_example_resolved.json"): (
        "key:My Super Webhook:{}:{}",
        False,
        "This alert was triggered for zone us-1",
        0,
        False,
        False,
        "",
    ),
    ("grafana", "docs_v9_valuestring.json"): ("key:My Super Webhook:{}:{}", False, "", 0, False, False, ""),
    ("grafana", "docs_v82_zero_startsat.json"): (
        'key:webhook_recv:{}/{alertname="WebhookAlert"}:{alertname="WebhookAlert"}',
        False,
        "alertname=WebhookAlert",
        0,
        False,
        False,
        "",
    ),
    ("grafana", "payments_5xx_firing.json"): (
        'key:decklog:{}/{service="payments"}:{alertname="PaymentsHigh5xxRate"}',
        False,
        "payments: elevated 5xx error rate",
        0,
        False,
        False,
        "",
    ),
    ("pagerduty", "incident_acknowledged.json"): ("pagerduty:PGR0VU2", True, "", 0, True, False, ""),
    ("pagerduty", "incident_priority_updated.json"): ("pagerduty:PGR0VU2", True, "", 0, True, False, ""),
    ("pagerduty", "incident_resolved.json"): ("pagerduty:PGR0VU2", True, "", 0, True, False, ""),
    ("pagerduty", "incident_triggered.json"): ("pagerduty:PGR0VU2", True, "", 0, False, False, ""),
    ("pagerduty", "payments_5xx_triggered.json"): ("pagerduty:Q2P5X8M4K1RZ7B", True, "", 0, True, False, ""),
    ("alertmanager", "alertmonitor_icmp_truncated.json"): (*ALERTMONITOR_GROUP[:3], 1, *ALERTMONITOR_GROUP[4:]),
    ("grafana", "cloud_datasource_nodata.json"): (
        'key:TEST AWS dev webhook alerting system:{}/{__grafana_autogenerated__="true"}/'
        '{__grafana_receiver__="TEST AWS dev webhook alerting system"}:'
        '{alertname="DatasourceNoData", grafana_folder="GrafanaCloud"}',
        False,
        "TEST MODE: this is summary: Viable/strict is broken",
        0,
        False,
        False,
        "",
    ),
    ("grafana", "cloud_test_notification.json"): (
        "key:test:test-57c6d9296de2ad39-1758042679",
        False,
        "Notification test",
        0,
        False,
        False,
        "",
    ),
    ("pagerduty", "ocean_elb_triggered.json"): ("pagerduty:Q19Z7CCJDTBD40", True, "", 0, False, False, ""),
    ("pagerduty", "ocean_elb_priority_p1.json"): ("pagerduty:Q19Z7CCJDTBD40", True, "", 0, True, False, ""),
    ("pagerduty", "ocean_elb_priority_p3.json"): ("pagerduty:Q19Z7CCJDTBD40", True, "", 0, True, False, ""),
    ("pagerduty", "ocean_elb_resolved.json"): ("pagerduty:Q19Z7CCJDTBD40", True, "", 0, True, False, ""),
    ("pagerduty", "ocean_elb_reopened.json"): ("pagerduty:Q19Z7CCJDTBD40", True, "", 0, True, True, ""),
    ("pagerduty", "nginx_400s_resolved.json"): ("pagerduty:QEXAMPLE1", True, "", 0, False, False, ""),
}
NOTIFICATION_FIELDS = ("group", "vendor_incident", "group_title", "left_out", "sets_severity", "reopened", "note_id")


def _alert_only(signal: AlertSignal) -> AlertSignal:
    defaults = AlertSignal(source="x", fingerprint="x", status="firing", title="x")
    return signal.model_copy(update={k: getattr(defaults, k) for k in (*NOTIFICATION_FIELDS, "note", "group_resolved")})


@pytest.mark.parametrize(("source", "name"), sorted(EXPECTED))
def test_fixture_parses_to_the_expected_signals(source: str, name: str) -> None:
    payload = load(source, name)
    original = copy.deepcopy(payload)
    signals = ALERT_SOURCES[source].parse(payload)
    assert [_alert_only(s) for s in signals] == EXPECTED[(source, name)]
    for signal in signals:
        assert tuple(getattr(signal, k) for k in NOTIFICATION_FIELDS) == GROUPING[(source, name)]
    assert payload == original  # parsers are pure
    for signal in signals:
        assert signal.source == source
        for stamp in (signal.started_at, signal.ended_at):
            assert stamp is None or stamp.utcoffset() == UTC.utcoffset(None)


def test_demo_fixtures_agree_on_the_payments_service() -> None:
    for source, name in EXPECTED:
        if name.startswith("payments_"):
            assert [s.service for s in EXPECTED[(source, name)]] == ["payments"], (source, name)


# ------------------------------------------------------------------------------------------------ malformed


def edit(payload: Any, path: tuple[str | int, ...], value: Any = ...) -> Any:
    """A deep copy of ``payload`` with ``path`` set to ``value`` (or deleted when ``value`` is omitted)."""
    out = copy.deepcopy(payload)
    node = out
    for key in path[:-1]:
        node = node[key]
    if value is ...:
        del node[path[-1]]
    else:
        node[path[-1]] = value
    return out


def three_alerts(source: str, name: str) -> Any:
    payload = load(source, name)
    payload["alerts"] = [copy.deepcopy(payload["alerts"][0]) for _ in range(3)]
    return payload


AM = load("alertmanager", "payments_5xx_firing.json")
GF = load("grafana", "docs_example_firing.json")
PD = load("pagerduty", "incident_triggered.json")
DD = load("datadog", "payments_5xx_triggered.json")
GN = load("generic", "payments_5xx_firing.json")

MALFORMED: list[tuple[str, Any, str, str]] = [
    # (source, payload, expected path, expected message fragment)
    *[
        (name, [], "", "expected a JSON object")
        for name in ("alertmanager", "grafana", "pagerduty", "datadog", "generic")
    ],
    *[
        (name, "x", "", "expected a JSON object")
        for name in ("alertmanager", "grafana", "pagerduty", "datadog", "generic")
    ],
    ("alertmanager", {}, "alerts", "is required"),
    ("alertmanager", edit(AM, ("alerts",), {"0": {}}), "alerts", "expected an array, got object"),
    ("alertmanager", edit(AM, ("alerts", 0), "oops"), "alerts[0]", "expected an object, got string"),
    (
        "alertmanager",
        edit(three_alerts("alertmanager", "payments_5xx_firing.json"), ("alerts", 2, "labels", "severity"), {"x": 1}),
        "alerts[2].labels.severity",
        "expected a string, got object",
    ),
    ("alertmanager", edit(AM, ("alerts", 0, "labels"), ["a"]), "alerts[0].labels", "expected an object, got array"),
    ("alertmanager", edit(AM, ("alerts", 0, "status"), "pending"), "alerts[0].status", "expected 'firing' or"),
    ("alertmanager", edit(AM, ("status",), 3), "status", "expected a string, got number"),
    (
        "alertmanager",
        edit(edit(AM, ("alerts", 0, "status")), ("status",)),
        "alerts[0].status",
        "is required",
    ),
    (
        "alertmanager",
        edit(edit(AM, ("alerts", 0, "fingerprint")), ("alerts", 0, "labels"), {}),
        "alerts[0].fingerprint",
        "is required when the alert has no labels",
    ),
    ("alertmanager", edit(AM, ("alerts", 0, "startsAt"), "yesterday"), "alerts[0].startsAt", "ISO 8601"),
    ("alertmanager", edit(AM, ("alerts", 0, "startsAt"), 1700000000), "alerts[0].startsAt", "got number"),
    ("alertmanager", edit(AM, ("alerts", 0, "endsAt"), "2026-02-30T00:00:00Z"), "alerts[0].endsAt", "invalid"),
    (
        "alertmanager",
        edit(AM, ("alerts", 0, "labels", "odd key"), []),
        'alerts[0].labels["odd key"]',
        "expected a string, got array",
    ),
    ("grafana", {"ruleName": "x", "evalMatches": []}, "alerts", "legacy Grafana"),
    ("grafana", edit(GF, ("alerts", 1, "values"), [1, 2]), "alerts[1].values", "expected an object, got array"),
    ("grafana", edit(GF, ("alerts", 1, "values", "B"), {}), "alerts[1].values.B", "expected a string, got object"),
    ("grafana", edit(GF, ("alerts", 0, "silenceURL"), 7), "alerts[0].silenceURL", "expected a string, got number"),
    ("pagerduty", {}, "event", "is required"),
    ("pagerduty", {"event": []}, "event", "expected an object, got array"),
    ("pagerduty", edit(PD, ("event", "event_type")), "event.event_type", "is required"),
    ("pagerduty", edit(PD, ("event", "data")), "event.data", "is required"),
    ("pagerduty", edit(PD, ("event", "data", "id")), "event.data.id", "is required"),
    ("pagerduty", edit(PD, ("event", "data", "id"), ""), "event.data.id", "must not be empty"),
    ("pagerduty", edit(PD, ("event", "data", "id"), ["P1"]), "event.data.id", "got array"),
    ("pagerduty", edit(PD, ("event", "data", "type"), "incident_note"), "event.data.type", "expected 'incident'"),
    ("pagerduty", edit(PD, ("event", "data", "service"), "API"), "event.data.service", "expected an object"),
    ("pagerduty", edit(PD, ("event", "data", "priority"), {"summary": 1}), "event.data.priority.summary", "string"),
    ("pagerduty", edit(PD, ("event", "occurred_at"), "soon"), "event.occurred_at", "ISO 8601"),
    (
        "pagerduty",
        edit(edit(PD, ("event", "event_type"), "incident.escalated"), ("event", "data", "status")),
        "event.data.status",
        "is required for incident.escalated",
    ),
    ("datadog", {"title": "x"}, "alert_id", "is required when aggreg_key is absent"),
    ("datadog", json.loads(datadog.RECOMMENDED_PAYLOAD_TEMPLATE), "alert_id", "is required"),
    ("datadog", edit(DD, ("tags",), {"service": "payments"}), "tags", "comma-separated tags"),
    ("datadog", edit(DD, ("tags",), ["service:payments", 3]), "tags[1]", "expected a string, got number"),
    ("datadog", edit(DD, ("date",), "last tuesday"), "date", "ISO 8601"),
    ("datadog", edit(DD, ("date",), "99999999999999999999999"), "date", "out of range"),
    ("datadog", edit(DD, ("alert_id",), [1]), "alert_id", "expected a string or an integer, got array"),
    ("generic", {"fingerprint": "x"}, "title", "is required"),
    ("generic", {"title": "  ", "fingerprint": "x"}, "title", "must not be empty"),
    ("generic", {"title": "x"}, "fingerprint", "is required"),
    ("generic", edit(GN, ("status",), "open"), "status", "expected one of firing, acknowledged, resolved"),
    ("generic", edit(GN, ("labels",), "env=prod"), "labels", "expected an object, got string"),
    ("generic", edit(GN, ("labels", "env"), ["prod"]), "labels.env", "expected a string, got array"),
    ("generic", edit(GN, ("links",), {"url": "https://x"}), "links", "expected an array, got object"),
    ("generic", edit(GN, ("links", 1, "url")), "links[1].url", "is required"),
    ("generic", edit(GN, ("links", 1, "url"), "javascript:alert(1)"), "links[1].url", "http:// or https://"),
    ("generic", edit(GN, ("links", 0, "url"), "https://x/" + "a" * 3000), "links[0].url", "longer than 2048"),
    ("generic", edit(GN, ("started_at",), "19/09/2026 14:06"), "started_at", "expected an ISO 8601 timestamp"),
    ("generic", edit(GN, ("started_at",), "2026-09-19T25:00:00Z"), "started_at", "invalid date or time"),
    ("generic", edit(GN, ("started_at",), "2026-09-19T10:00:00+25:00"), "started_at", "invalid UTC offset"),
    ("generic", edit(GN, ("severity",), {"level": 1}), "severity", "expected a string or an integer"),
]


@pytest.mark.parametrize(("source", "payload", "path", "message"), MALFORMED)
def test_malformed_payloads_name_the_field(source: str, payload: Any, path: str, message: str) -> None:
    with pytest.raises(PayloadError) as caught:
        ALERT_SOURCES[source].parse(payload)
    assert caught.value.path == path
    assert message in caught.value.message
    assert str(caught.value) == (f"{path}: {caught.value.message}" if path else caught.value.message)


# ------------------------------------------------------------------------------------------------ behaviour


def test_go_zero_time_and_timestamp_forms() -> None:
    assert fields.parse_iso("0001-01-01T00:00:00Z", "t") is None
    assert fields.parse_iso("", "t") is None
    assert fields.parse_iso("2018-08-03T09:52:26.739266876+02:00", "t") == utc(2018, 8, 3, 7, 52, 26, 739266)
    assert fields.parse_iso("2026-09-19T14:06:30z", "t") == utc(2026, 9, 19, 14, 6, 30)
    assert fields.parse_iso("2026-09-19 14:06:30-0130", "t") == utc(2026, 9, 19, 15, 36, 30)
    assert fields.parse_iso("2026-09-19T14:06:30", "t") == utc(2026, 9, 19, 14, 6, 30)  # no offset: UTC
    assert fields.parse_iso("2026-09-19", "t") == utc(2026, 9, 19)
    assert fields.parse_iso("2016-12-31T23:59:60Z", "t") == utc(2016, 12, 31, 23, 59, 59)  # leap second
    with pytest.raises(PayloadError, match="t: invalid date or time"):  # past year 9999 in UTC: no OverflowError
        fields.parse_iso("9999-12-31T23:30:00-01:00", "t")


def test_firing_alerts_never_carry_an_end_time() -> None:
    payload = edit(AM, ("alerts", 0, "endsAt"), "2026-09-19T14:10:00Z")  # Prometheus' expected-resolve time
    assert alertmanager.parse(payload)[0].ended_at is None


def test_group_status_is_used_when_an_alert_has_none() -> None:
    payload = edit(edit(AM, ("alerts", 0, "status")), ("status",), "resolved")
    assert alertmanager.parse(payload)[0].status == "resolved"


def test_title_falls_back_to_alertname_then_fingerprint() -> None:
    no_summary = edit(AM, ("alerts", 0, "annotations", "summary"))
    assert alertmanager.parse(no_summary)[0].title == "PaymentsHigh5xxRate"
    bare = edit(edit(no_summary, ("alerts", 0, "labels", "alertname")), ("alerts", 0, "annotations"), None)
    assert alertmanager.parse(bare)[0].title == "Alert 78e60a486ed56dec"


def test_service_comes_from_service_then_job_then_app() -> None:
    labels = {"alertname": "X", "job": "api", "app": "web"}
    assert alertmanager.parse(edit(AM, ("alerts", 0, "labels"), labels))[0].service == "api"
    assert alertmanager.parse(edit(AM, ("alerts", 0, "labels"), {"app": "web"}))[0].service == "web"


def test_empty_group_is_an_empty_list() -> None:
    assert alertmanager.parse(edit(AM, ("alerts",), [])) == []
    assert grafana.parse(edit(GF, ("alerts",), [])) == []


def test_prometheus_fingerprint_matches_prometheus_common_test_vectors() -> None:
    # prometheus/common model/signature_test.go TestMetricToFingerprint
    assert fields.labels_fingerprint({}) == f"{14695981039346656037:016x}"
    assert fields.labels_fingerprint({"name": "garland, briggs", "fear": "love is not enough"}) == (
        f"{5799056148416392346:016x}"
    )


def test_long_strings_are_capped_not_rejected() -> None:
    payload = edit(GN, ("title",), "  " + "t" * 600 + "  ")
    payload = edit(payload, ("service",), "s" * 300)
    payload = edit(payload, ("summary",), "x" * 10_000)
    payload = edit(payload, ("labels",), {f"k{i}": "v" * 5000 for i in range(150)})
    signal = generic.parse(payload)[0]
    assert len(signal.title) == 500 and signal.title.endswith("…") and signal.title.startswith("ttt")
    assert len(signal.service) == 200
    assert len(signal.summary) == 4000
    assert len(signal.labels) == 100 and all(len(value) == 1000 for value in signal.labels.values())


def test_long_fingerprints_keep_their_identity() -> None:
    one = generic.parse(edit(GN, ("fingerprint",), "f" * 600 + "1"))[0].fingerprint
    two = generic.parse(edit(GN, ("fingerprint",), "f" * 600 + "2"))[0].fingerprint
    assert one != two and one.startswith("sha256:") and len(one) == 71
    assert generic.parse(edit(GN, ("fingerprint",), 42))[0].fingerprint == "42"


def test_label_values_that_are_numbers_or_booleans_become_text_and_nulls_are_dropped() -> None:
    payload = edit(GN, ("labels",), {"port": 8080, "ratio": 0.5, "canary": True, "gone": None, "": "x"})
    assert generic.parse(payload)[0].labels == {"port": "8080", "ratio": "0.5", "canary": "true"}


def test_strings_with_lone_surrogates_are_repaired() -> None:
    signal = generic.parse(edit(GN, ("title",), "bad \ud800 title"))[0]
    assert signal.title == "bad ? title"
    signal.model_dump_json()  # encodable


def test_vendor_links_that_are_not_http_are_dropped() -> None:
    payload = edit(AM, ("alerts", 0, "generatorURL"), "javascript:alert(1)")
    payload = edit(payload, ("alerts", 0, "annotations", "runbook_url"), "https://x/" + "a" * 3000)
    assert [link.title for link in alertmanager.parse(payload)[0].links] == ["Alertmanager"]


def test_generic_status_is_case_insensitive_and_defaults_to_firing() -> None:
    assert generic.parse(edit(GN, ("status",), "Resolved"))[0].status == "resolved"
    assert generic.parse(edit(GN, ("status",), None))[0].status == "firing"


def test_extra_fields_are_ignored() -> None:
    assert (
        generic.parse({**GN, "whatever": {"deep": [1, 2, {"x": None}]}})
        == EXPECTED[("generic", "payments_5xx_firing.json")]
    )


@pytest.mark.parametrize(
    ("event_type", "data_status", "expected"),
    [
        ("incident.triggered", "triggered", "firing"),
        ("incident.unacknowledged", "triggered", "firing"),
        ("incident.reopened", "triggered", "firing"),
        ("incident.acknowledged", "acknowledged", "acknowledged"),
        ("incident.resolved", "resolved", "resolved"),
        ("incident.escalated", "acknowledged", "acknowledged"),
        ("incident.reassigned", "triggered", "firing"),
        ("incident.delegated", "triggered", "firing"),
        ("incident.priority_updated", "resolved", "resolved"),
    ],
)
def test_pagerduty_incident_events(event_type: str, data_status: str, expected: str) -> None:
    payload = edit(edit(PD, ("event", "event_type"), event_type), ("event", "data", "status"), data_status)
    (signal,) = pagerduty.parse(payload)
    assert signal.status == expected
    assert signal.fingerprint == "PGR0VU2"


@pytest.mark.parametrize(
    "event_type",
    [
        "incident.annotated",
        "incident.responder.added",
        "incident.responder.replied",
        "incident.status_update_published",
        "incident.workflow.started",
        "service.created",
        "pagey.ping",
    ],
)
def test_pagerduty_other_events_are_not_errors(event_type: str) -> None:
    assert pagerduty.parse({"event": {"event_type": event_type, "data": {"anything": [1]}}}) == []


def test_pagerduty_title_falls_back_to_the_incident_number() -> None:
    assert pagerduty.parse(edit(PD, ("event", "data", "title"), None))[0].title == "PagerDuty incident #2"


@pytest.mark.parametrize(
    ("transition", "alert_type", "expected"),
    [
        ("Triggered", "error", "firing"),
        ("Re-Triggered", "error", "firing"),
        ("Warn", "warning", "firing"),
        ("Re-Warn", "warning", "firing"),
        ("No Data", "error", "firing"),
        ("Re-No Data", "error", "firing"),
        ("Renotify", "error", "firing"),
        ("Recovered", "success", "resolved"),
        ("recovered", "success", "resolved"),
        ("Something New", "info", "firing"),
        ("$ALERT_TRANSITION", "success", "resolved"),
        (None, "success", "resolved"),
        (None, None, "firing"),
    ],
)
def test_datadog_transitions(transition: str | None, alert_type: str | None, expected: str) -> None:
    payload = edit(edit(DD, ("transition",), transition), ("alert_type",), alert_type)
    assert datadog.parse(payload)[0].status == expected


def test_datadog_tags_scope_and_fallbacks() -> None:
    payload = {
        "alert_id": 148275309,
        "scope": "service:checkout",
        "tags": ["service:payments", "team:a", "team:b", "url:https://x:8080/y", "bare"],
        "date": 1789826790,
        "title": "[P2] [Re-Triggered on {service:checkout}] checkout slow",
    }
    (signal,) = datadog.parse(payload)
    assert signal.fingerprint == "148275309:service:checkout"
    assert signal.service == "checkout"  # the scope (the alerting group) wins over monitor tags
    assert signal.labels == {
        "service": "checkout",
        "team": "a,b",
        "url": "https://x:8080/y",
        "bare": "",
        "monitor_id": "148275309",
    }
    assert signal.title == "checkout slow"
    assert signal.started_at == utc(2026, 9, 19, 14, 6, 30)  # epoch seconds accepted too
    assert datadog.parse({"alert_id": "7", "date": "2026-09-19T14:06:30Z"})[0].title == "Datadog monitor 7"


def test_datadog_template_is_documented_and_uses_only_documented_variables() -> None:
    readme = (Path(datadog.__file__).parent / "README.md").read_text(encoding="utf-8")
    block = re.search(r"```json\n(.*?)```", readme, re.S)
    assert block is not None
    assert block.group(1) == datadog.RECOMMENDED_PAYLOAD_TEMPLATE
    template = json.loads(datadog.RECOMMENDED_PAYLOAD_TEMPLATE)
    documented = {  # https://docs.datadoghq.com/integrations/webhooks/#variables
        "$AGGREG_KEY", "$ALERT_CYCLE_KEY", "$ALERT_ID", "$ALERT_METRIC", "$ALERT_PRIORITY", "$ALERT_QUERY",
        "$ALERT_SCOPE", "$ALERT_STATUS", "$ALERT_TITLE", "$ALERT_TRANSITION", "$ALERT_TYPE", "$DATE", "$EMAIL",
        "$EVENT_MSG", "$EVENT_TITLE", "$EVENT_TYPE", "$HOSTNAME", "$ID", "$LAST_UPDATED", "$LINK", "$ORG_ID",
        "$ORG_NAME", "$PRIORITY", "$SNAPSHOT", "$TAGS", "$TEXT_ONLY_MSG", "$USER", "$USERNAME",
    }  # fmt: skip
    used = set(re.findall(r"\$[A-Z_]+", datadog.RECOMMENDED_PAYLOAD_TEMPLATE))
    assert used <= documented
    assert {"$AGGREG_KEY", "$ALERT_ID", "$ALERT_TRANSITION", "$TAGS", "$DATE", "$EVENT_TITLE"} <= used
    assert isinstance(template, dict)


def test_generic_readme_documents_every_field() -> None:
    readme = (Path(generic.__file__).parent / "README.md").read_text(encoding="utf-8")
    for name in ("title", "fingerprint", "status", "severity", "service", "summary", "labels", "links",
                 "started_at", "ended_at"):  # fmt: skip
        assert f"| `{name}` |" in readme


# ------------------------------------------------------------------------------------------------ signatures


def pd_sign(secret: str, body: bytes) -> str:
    return "v1=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


BODY = json.dumps(load("pagerduty", "incident_triggered.json")).encode()


def test_pagerduty_signature_good_bad_missing() -> None:
    good = pd_sign("s3cret", BODY)
    assert pagerduty.verify_signature("s3cret", BODY, good)
    assert pagerduty.verify_signature("s3cret", BODY, good.upper().replace("V1=", "v1="))
    assert pagerduty.verify_signature("s3cret", BODY, f"{pd_sign('old', BODY)}, {good}")  # secret rotation
    assert pagerduty.verify_signature("s3cret", BODY, f"{good},v1=00")
    assert not pagerduty.verify_signature("s3cret", BODY, pd_sign("other", BODY))
    assert not pagerduty.verify_signature("s3cret", BODY + b" ", good)
    assert not pagerduty.verify_signature("s3cret", BODY, good.replace("v1=", "v0="))
    assert not pagerduty.verify_signature("s3cret", BODY, good[3:])  # no version prefix
    assert not pagerduty.verify_signature("s3cret", BODY, "")
    assert not pagerduty.verify_signature("s3cret", BODY, None)
    assert not pagerduty.verify_signature("", BODY, pd_sign("", BODY))  # an empty secret never verifies
    assert not pagerduty.verify_signature("s3cret", BODY, "v1=ünïcödé,v1=\x00")


def test_registry_verify_reads_the_header_case_insensitively() -> None:
    source = ALERT_SOURCES["pagerduty"]
    assert source.signature_header == "X-PagerDuty-Signature"
    signature = pd_sign("s3cret", BODY)
    assert source.verify("s3cret", BODY, {"X-PagerDuty-Signature": signature})
    assert source.verify("s3cret", BODY, {"x-pagerduty-signature": signature})
    assert not source.verify("s3cret", BODY, {"X-Other": signature})
    assert not source.verify("s3cret", BODY, {})
    for name in ("alertmanager", "grafana", "datadog", "generic"):
        assert ALERT_SOURCES[name].signature_header is None
        assert not ALERT_SOURCES[name].verify("s3cret", BODY, {"X-PagerDuty-Signature": signature})


@given(secret=st.text(), body=st.binary(), header=st.text())
def test_signature_verification_never_raises(secret: str, body: bytes, header: str) -> None:
    assert pagerduty.verify_signature(secret, body, header) in (True, False)


# ------------------------------------------------------------------------------------------------ registry


def test_registry_is_read_only_and_rebuilt_fresh() -> None:
    assert set(ALERT_SOURCES) == {"alertmanager", "grafana", "pagerduty", "datadog", "generic"}
    assert all(isinstance(source, AlertSource) and source.name == name for name, source in ALERT_SOURCES.items())
    with pytest.raises(TypeError):
        ALERT_SOURCES["x"] = ALERT_SOURCES["generic"]  # type: ignore[index]
    with pytest.raises(dataclasses.FrozenInstanceError):
        ALERT_SOURCES["generic"].name = "y"  # type: ignore[misc]
    again = alert_sources()
    assert again is not ALERT_SOURCES and dict(again) == dict(ALERT_SOURCES)


# ------------------------------------------------------------------------------------------------ fuzzing


ALL_FIXTURES = [(source, load(source, name)) for source, name in sorted(EXPECTED)]
KNOWN_KEYS = sorted(set().union(*(collect_keys(payload, set()) for _, payload in ALL_FIXTURES)))
KNOWN_STRINGS = [
    "firing", "resolved", "acknowledged", "incident.triggered", "incident.resolved", "incident.escalated",
    "incident", "triggered", "Recovered", "Triggered", "success", "0001-01-01T00:00:00Z",
    "2026-09-19T14:06:30Z", "1789826790000", "https://example.com/x", "$ALERT_ID", "service:payments,env:prod",
]  # fmt: skip

json_values = payload_json_values(KNOWN_KEYS, KNOWN_STRINGS)


def call(source: str, payload: object) -> list[AlertSignal]:
    try:
        signals = ALERT_SOURCES[source].parse(payload)
    except PayloadError as exc:
        assert isinstance(exc.path, str) and isinstance(exc.message, str) and exc.message
        assert "could not be normalised" not in exc.message  # the adapter bounded every field itself
        str(exc).encode("utf-8")  # safe to put in a JSON error response
        raise
    assert isinstance(signals, list) and all(isinstance(s, AlertSignal) for s in signals)
    for signal in signals:
        signal.model_dump_json()  # serialisable (no surrogates, no odd types)
    return signals


FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@FUZZ
@given(source=st.sampled_from(sorted(ALERT_SOURCES)), payload=json_values)
def test_fuzz_arbitrary_json_raises_only_payload_error(source: str, payload: object) -> None:
    try:
        call(source, payload)
    except PayloadError:
        pass


@FUZZ
@given(
    source=st.sampled_from(sorted(ALERT_SOURCES)),
    payload=st.dictionaries(st.sampled_from(KNOWN_KEYS), json_values, max_size=8),
)
def test_fuzz_objects_with_vendor_keys_raise_only_payload_error(source: str, payload: object) -> None:
    try:
        call(source, payload)
    except PayloadError:
        pass


@st.composite
def mutations(draw: Callable[..., Any]) -> tuple[str, Any, str, bool]:
    source, payload = draw(st.sampled_from(ALL_FIXTURES))
    candidates = list(paths(payload))
    path = draw(st.sampled_from(candidates))
    mutated = copy.deepcopy(payload)
    node = mutated
    for key in path[:-1]:
        node = node[key]
    operation = draw(st.sampled_from(["delete", "wrong type", "any value"]))
    replacement: Any = None
    if operation == "delete":
        del node[path[-1]]
    else:
        replacement = draw(WRONG_TYPES if operation == "wrong type" else json_values)
        node[path[-1]] = replacement
    # a string can change meaning (e.g. another event type) and fail elsewhere; anything else fails in place
    return source, mutated, render(path), not isinstance(replacement, str)


@settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=mutations())
def test_fuzz_mutated_real_fixtures_raise_only_payload_error_at_the_mutated_field(
    case: tuple[str, Any, str, bool],
) -> None:
    source, payload, mutated_path, in_place = case
    try:
        call(source, payload)
    except PayloadError as exc:
        if in_place:
            assert related(exc.path, mutated_path), (exc.path, mutated_path)


def test_a_summary_gives_its_first_line_as_the_title_unless_that_only_names_the_state() -> None:
    from decklog.adapters.payload import headline

    assert headline("p99 latency above 2 s\nsince 03:10") == "p99 latency above 2 s"
    assert headline("Firing rate of retries is high") == "Firing rate of retries is high"
    for banner in ("**Firing**\n\nLabels:\n - alertname = X", "[FIRING:2]", "**Resolved**", "  \n"):
        assert headline(banner) == ""
