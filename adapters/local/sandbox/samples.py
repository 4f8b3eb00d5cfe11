"""The page's two sample buttons: an Alertmanager alert and a deploy, sent the way real senders send them.

The alert is a realistic Alertmanager webhook (v4) POSTed to the bot's own ``/alerts/alertmanager``; the deploy
is recorded in the local fake deploy service and announced to ``/changes/generic``. Both carry
``Authorization: Bearer <DECKLOG_ALERT_TOKEN>``. Nothing is called on core: the receivers are the product.

While a receiver route is not installed, the alert falls back to declaring the incident through the scope
service (and says so in its answer); the deploy is then kept in the deploy service only.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

import aiohttp

from decklog.adapters.local.sandbox.environment import SAMPLE_SERVICE
from decklog.adapters.local.services import FakeDeployService
from decklog.core.entries import Actor, NewEntry, Observation
from decklog.core.service import ScopeService

JSON = dict[str, Any]
ALERT_PATH = "/alerts/alertmanager"
CHANGE_PATH = "/changes/generic"

_LABELS = {
    "alertname": "PaymentsHigh5xxRate",
    "env": "prod",
    "service": SAMPLE_SERVICE,
    "severity": "critical",
    "team": "payments",
}
_SUMMARY = "payments: elevated 5xx error rate"
_DESCRIPTION = "12.4% of POST /v1/charges requests returned 5xx over the last 5 minutes (SLO: 0.5%)."
_RUNBOOK = "https://runbooks.example.com/payments/high-5xx"
_DEPLOY_NOTES = (
    ("Switch card tokenisation to the new PSP client", ["payments/psp/client.py", "payments/psp/tokenise.py"]),
    ("Lower PSP connect timeout to 800ms", ["config/payments/timeouts.yaml"]),
    ("Retry declined charges once with backoff", ["payments/charges/retry.py"]),
)


def installed(routes: set[str], path: str) -> bool:
    """Whether the bot routes ``path`` (``/alerts/alertmanager``): as ``/alerts/{source}`` or as itself."""
    return path in routes or path.rsplit("/", 1)[0] + "/{source}" in routes


def _iso(at: datetime) -> str:
    return at.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def alert_fingerprint() -> str:
    """Alertmanager's fingerprint is a hash of the label set: the same alert keeps it across repeats."""
    canon = json.dumps(sorted(_LABELS.items())).encode()
    return hashlib.sha256(canon).hexdigest()[:16]


def alertmanager_payload(status: Literal["firing", "resolved"], started: datetime, now: datetime) -> JSON:
    """One Alertmanager v4 webhook notification about the payments 5xx alert."""
    annotations = {"summary": _SUMMARY, "description": _DESCRIPTION, "runbook_url": _RUNBOOK}
    alert: JSON = {
        "status": status,
        "labels": dict(_LABELS),
        "annotations": annotations,
        "startsAt": _iso(started),
        "endsAt": _iso(now) if status == "resolved" else "0001-01-01T00:00:00Z",
        "generatorURL": "https://prometheus.example.com/graph?g0.expr=payments_5xx_ratio+%3E+0.05&g0.tab=1",
        "fingerprint": alert_fingerprint(),
    }
    return {
        "receiver": "decklog",
        "status": status,
        "alerts": [alert],
        "groupLabels": {"alertname": _LABELS["alertname"], "service": SAMPLE_SERVICE},
        "commonLabels": dict(_LABELS),
        "commonAnnotations": dict(annotations),
        "externalURL": "https://alertmanager.example.com",
        "version": "4",
        "groupKey": '{}/{service="payments"}:{alertname="PaymentsHigh5xxRate", service="payments"}',
        "truncatedAlerts": 0,
    }


def generic_change_payload(version: str, author: str, now: datetime, n: int) -> JSON:
    """decklog's generic change format (adapters/changes/generic/README.md) for one successful deploy."""
    message, paths = _DEPLOY_NOTES[(n - 1) % len(_DEPLOY_NOTES)]
    commit = hashlib.sha256(version.encode()).hexdigest()[:40]  # a made-up commit id
    return {
        "id": f"{SAMPLE_SERVICE}-{version}",
        "service": SAMPLE_SERVICE,
        "version": version,
        "environment": "production",
        "author": author,
        "status": "succeeded",
        "description": message,
        "link": f"https://ci.example.com/pipelines/{SAMPLE_SERVICE}/{8840 + n}",
        "at": _iso(now).replace(".000Z", "Z"),
        "commits": [
            {
                "id": commit,
                "message": message,
                "author": author,
                "url": f"https://git.example.com/acme/{SAMPLE_SERVICE}/commit/{commit}",
                "paths": paths,
            }
        ],
    }


@dataclass(frozen=True)
class Sent:
    """What a sample button did, for the page to show."""

    status: int
    via: str
    body: Any = None
    note: str = ""

    def to_json(self) -> JSON:
        out: JSON = {"status": self.status, "via": self.via, "response": self.body}
        if self.note:
            out["note"] = self.note
        return out


class SampleSender:
    """Sends the sample alert and deploy to the bot's public receivers at ``base_url()``."""

    def __init__(
        self,
        *,
        base_url: Callable[[], str],
        token: str,
        routes: Callable[[], set[str]],
        deploy: FakeDeployService,
        service: ScopeService,
    ) -> None:
        self._base_url = base_url
        self._token = token
        self._routes = routes
        self._deploy = deploy
        self._service = service
        self._session: aiohttp.ClientSession | None = None
        # sample deploys made so far (a restored deploy history counts: versions go on from there)
        self._deploys = max(0, sum(d["kind"] == "deploy" for d in deploy.deploys(SAMPLE_SERVICE)) - 1)
        self._alert_started: datetime | None = None

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def alert(self, status: Literal["firing", "resolved"]) -> Sent:
        now = datetime.now(UTC)
        if status == "firing" and self._alert_started is None:
            self._alert_started = now
        payload = alertmanager_payload(status, self._alert_started or now, now)
        if status == "resolved":
            self._alert_started = None
        if installed(self._routes(), ALERT_PATH):
            return await self._post(ALERT_PATH, payload, query="?wait=5")  # the answer says where the alert went
        if status == "resolved":
            return Sent(501, "none", note="the alert receiver (/alerts/{source}) is not installed yet")
        return await self._alert_via_core(payload)

    async def deploy(self, author: str) -> Sent:
        self._deploys += 1
        now = datetime.now(UTC)
        version = f"v{now:%Y.%m.%d}-{self._deploys + 1}"
        known = {str(d["version"]) for d in self._deploy.deploys(SAMPLE_SERVICE)}
        while version in known:  # never reuse a version the (restored) history already has
            self._deploys += 1
            version = f"v{now:%Y.%m.%d}-{self._deploys + 1}"
        payload = generic_change_payload(version, author, now, self._deploys)
        record = self._deploy.record_deploy(
            SAMPLE_SERVICE, version, author=author, commit=payload["commits"][0]["id"], at=payload["at"]
        )
        if not installed(self._routes(), CHANGE_PATH):
            return Sent(
                201,
                "deploy service",
                record,
                note="the change receiver (/changes/{source}) is not installed yet: decklog was not told",
            )
        sent = await self._post(CHANGE_PATH, payload)
        return Sent(sent.status, sent.via, {"deploy": record, "decklog": sent.body}, sent.note)

    async def _post(self, path: str, payload: JSON, *, query: str = "") -> Sent:
        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10))
        headers = {"Authorization": f"Bearer {self._token}", "User-Agent": "decklog-sandbox/1"}
        async with self._session.post(self._base_url() + path + query, json=payload, headers=headers) as response:
            text = await response.text()
        try:
            body: Any = json.loads(text) if text.strip() else None
        except ValueError:
            body = text
        return Sent(response.status, path, body)

    async def _alert_via_core(self, payload: JSON) -> Sent:
        alert = payload["alerts"][0]
        labels, annotations = alert["labels"], alert["annotations"]
        actor = Actor.system("alertmanager")
        observation = Observation(
            text=annotations["summary"],
            source="alertmanager",
            service=labels["service"],
            fingerprint=alert["fingerprint"],
            alert_status="firing",
            labels=labels,
            links=(annotations["runbook_url"],),
        )
        result = await self._service.declare(
            title=annotations["summary"],
            severity=1,
            actor=actor,
            services=(labels["service"],),
            summary=annotations["description"],
            via="alert",
            idempotency_key=f"sandbox:alert:{alert['fingerprint']}:{alert['startsAt']}",
            then=[NewEntry.make("observation", actor, observation)],
        )
        return Sent(
            202,
            "core",
            {"scope": result.state.scope},
            note="the alert receiver (/alerts/{source}) is not installed yet: declared through the scope service",
        )
