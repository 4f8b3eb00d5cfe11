"""What the sandbox sets up around the bot before the other features read their settings.

In sandbox mode (no ``SLACK_*`` credentials) there is nothing to point decklog at, so the sandbox brings it:

- a local :class:`~adapters.executors.fake_services.FakeDeployService` on loopback, seeded with a baseline
  ``payments`` deploy; when ``DECKLOG_DEPLOY_API_URL`` is unset, ``settings.deploy_api_url`` becomes its base
  URL, so the example ``rollback_deploy`` action has a real executor (``<base>/rollback``, reconcile
  ``<base>/reconcile/<key>``);
- when ``DECKLOG_ALERT_TOKEN`` is unset, a random token for this process only (``settings.alert_token``), which
  the page's sample buttons send as ``Authorization: Bearer`` to ``/alerts/…`` and ``/changes/…``;
- when no approver is configured (``DECKLOG_APPROVERS`` and ``[approvals] approvers`` both empty), the sandbox's
  people (alice, bob, carol) as approvers, so a parked action can be approved from the page.

Values the operator set are never replaced. Everything here only ever points at loopback fakes.
"""

from __future__ import annotations

import logging
import secrets
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from pydantic import SecretStr

from adapters.executors.fake_services import FakeDeployService
from adapters.slack.fake import FakeSlackWorkspace
from bot.config import DecklogConfig
from bot.settings import Settings

log = logging.getLogger("decklog.sandbox")

SAMPLE_SERVICE = "payments"


@dataclass
class SandboxEnvironment:
    deploy: FakeDeployService
    deploy_url: str
    alert_token: str
    alert_token_generated: bool
    deploy_url_is_sandbox: bool
    approvers_filled: tuple[str, ...]

    async def stop(self) -> None:
        await self.deploy.stop()


def baseline_version(now: datetime) -> str:
    return f"v{(now - timedelta(days=1)):%Y.%m.%d}-1"


async def prepare(settings: Settings, config: DecklogConfig, workspace: FakeSlackWorkspace) -> SandboxEnvironment:
    """Start the fake deploy service and fill the unset settings it and the sample buttons need."""
    deploy = FakeDeployService(host="127.0.0.1")
    base_url = await deploy.start()
    now = datetime.now(UTC)
    deploy.record_deploy(
        SAMPLE_SERVICE,
        baseline_version(now),
        author="ci",
        commit=secrets.token_hex(20),
        at=(now - timedelta(days=1)).isoformat(timespec="seconds").replace("+00:00", "Z"),
    )
    deploy_url_is_sandbox = settings.deploy_api_url is None
    if deploy_url_is_sandbox:
        settings.deploy_api_url = base_url
    generated = settings.alert_token is None
    if generated:
        settings.alert_token = SecretStr(secrets.token_urlsafe(24))
    assert settings.alert_token is not None
    filled: tuple[str, ...] = ()
    if not settings.approver_ids and not config.approvals.approvers:
        filled = tuple(u.id for u in workspace.directory.users() if not u.is_bot)
        settings.approvers = ",".join(filled)
    log.info(
        "sandbox: fake deploy service on %s%s; alert token %s; approvers %s",
        base_url,
        "" if deploy_url_is_sandbox else f" (DECKLOG_DEPLOY_API_URL stays {settings.deploy_api_url})",
        "generated for this run" if generated else "from DECKLOG_ALERT_TOKEN",
        ", ".join(filled) if filled else "as configured",
    )
    return SandboxEnvironment(
        deploy=deploy,
        deploy_url=str(settings.deploy_api_url),
        alert_token=settings.alert_token.get_secret_value(),
        alert_token_generated=generated,
        deploy_url_is_sandbox=deploy_url_is_sandbox,
        approvers_filled=filled,
    )
