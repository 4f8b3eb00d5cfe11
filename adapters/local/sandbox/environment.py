"""What the sandbox sets up around the bot before the other features read their settings.

In sandbox mode (no ``SLACK_*`` credentials) there is nothing to point decklog at, so the sandbox brings it:

- a local :class:`~adapters.local.services.FakeDeployService` on loopback, with the deploy history and
  effects of the previous run restored (``DATA_DIR/sandbox/deploys.json``, see
  :mod:`adapters.local.sandbox.persistence`) or else seeded with a baseline ``payments`` deploy; when
  ``DECKLOG_DEPLOY_API_URL`` is unset, ``settings.deploy_api_url`` becomes its base URL, so the example
  ``rollback_deploy`` action has a real executor (``<base>/rollback``, reconcile ``<base>/reconcile/<key>``);
- when ``DECKLOG_STATUSPAGE_API_URL`` is unset, a local
  :class:`~adapters.local.services.FakeStatuspage`, and ``settings.statuspage_api_url`` becomes its
  page URL with the key as the URL's user part (``http://<key>@127.0.0.1:<port>/v1/pages/<page id>``): the
  form the ``statuspage`` executor reads without ``DECKLOG_STATUSPAGE_PAGE_ID``. The key is made per run,
  unless ``DECKLOG_STATUSPAGE_API_KEY`` is set (the example action's ``api_key`` reads it and it wins over the
  URL's), in which case the fake expects that one. Its incidents are not kept across restarts;
- when ``DECKLOG_ALERT_TOKEN`` is unset, a random token for this process only (``settings.alert_token``), which
  the page's sample buttons send as ``Authorization: Bearer`` to ``/alerts/…`` and ``/changes/…``;
- when no approver is configured (``DECKLOG_APPROVERS`` and ``[approvals] approvers`` both empty), the sandbox's
  people (alice, bob, carol) as approvers, so a parked action can be approved from the page.

Values the operator set are never replaced. Everything here only ever points at loopback fakes.
"""

from __future__ import annotations

import logging
import os
import secrets
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from urllib.parse import quote

from pydantic import SecretStr

from adapters.local.sandbox.persistence import SandboxPersistence
from adapters.local.services import FakeDeployService, FakeStatuspage
from adapters.local.slack import FakeSlackWorkspace
from bot.config import DecklogConfig
from bot.settings import Settings

log = logging.getLogger("decklog.sandbox")

SAMPLE_SERVICE = "payments"
STATUSPAGE_PAGE_ID = "sandboxpage1"
STATUSPAGE_KEY_ENV = "DECKLOG_STATUSPAGE_API_KEY"


@dataclass
class SandboxEnvironment:
    deploy: FakeDeployService
    deploy_url: str
    alert_token: str
    alert_token_generated: bool
    deploy_url_is_sandbox: bool
    approvers_filled: tuple[str, ...]
    statuspage: FakeStatuspage | None = None
    """The local status page, when ``DECKLOG_STATUSPAGE_API_URL`` was unset (else None)."""
    deploys_restored: bool = False

    @property
    def statuspage_url(self) -> str | None:
        """The fake status page's URL without its key (safe to show), or None."""
        if self.statuspage is None:
            return None
        return f"{self.statuspage.base_url}/v1/pages/{self.statuspage.page_id}"

    async def stop(self) -> None:
        await self.deploy.stop()
        if self.statuspage is not None:
            await self.statuspage.stop()


def baseline_version(now: datetime) -> str:
    return f"v{(now - timedelta(days=1)):%Y.%m.%d}-1"


async def prepare(
    settings: Settings,
    config: DecklogConfig,
    workspace: FakeSlackWorkspace,
    *,
    persistence: SandboxPersistence | None = None,
) -> SandboxEnvironment:
    """Start the fake deploy service (restoring its last state through ``persistence``) and the fake status
    page, and fill the unset settings they and the sample buttons need."""
    deploy = FakeDeployService(host="127.0.0.1")
    restored = persistence is not None and persistence.restore_deploys(deploy)
    base_url = await deploy.start()
    if not restored or deploy.current_version(SAMPLE_SERVICE) is None:
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
    statuspage: FakeStatuspage | None = None
    if settings.statuspage_api_url is None:
        key = os.environ.get(STATUSPAGE_KEY_ENV, "").strip() or secrets.token_urlsafe(18)
        statuspage = FakeStatuspage(api_key=key, page_id=STATUSPAGE_PAGE_ID, host="127.0.0.1")
        try:
            page_root = await statuspage.start()
        except BaseException:
            await deploy.stop()
            raise
        # The key rides in the URL's user part: the statuspage executor takes it from there (token_urlsafe
        # gives URL-safe characters only; an operator's key is quoted).
        settings.statuspage_api_url = (
            f"http://{quote(key, safe='')}@{page_root.removeprefix('http://')}/v1/pages/{STATUSPAGE_PAGE_ID}"
        )
    generated = settings.alert_token is None
    if generated:
        settings.alert_token = SecretStr(secrets.token_urlsafe(24))
    assert settings.alert_token is not None
    filled: tuple[str, ...] = ()
    if not settings.approver_ids and not config.approvals.approvers:
        filled = tuple(u.id for u in workspace.directory.users() if not u.is_bot)
        settings.approvers = ",".join(filled)
    env = SandboxEnvironment(
        deploy=deploy,
        deploy_url=str(settings.deploy_api_url),
        alert_token=settings.alert_token.get_secret_value(),
        alert_token_generated=generated,
        deploy_url_is_sandbox=deploy_url_is_sandbox,
        approvers_filled=filled,
        statuspage=statuspage,
        deploys_restored=restored,
    )
    log.info(
        "sandbox: fake deploy service on %s%s%s; fake status page %s; alert token %s; approvers %s",
        base_url,
        " (history restored)" if restored else "",
        "" if deploy_url_is_sandbox else f" (DECKLOG_DEPLOY_API_URL stays {settings.deploy_api_url})",
        env.statuspage_url or "not started (DECKLOG_STATUSPAGE_API_URL is set)",
        "generated for this run" if generated else "from DECKLOG_ALERT_TOKEN",
        ", ".join(filled) if filled else "as configured",
    )
    return env
