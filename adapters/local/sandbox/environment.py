"""What the sandbox sets up around the bot before the other parts read their settings.

It never touches the bot's settings: it is given what the operator set (``LocalWants``) and returns
``SettingsOverrides``, which the composition root applies (``settings.model_copy(update=overrides.update())``)
before it builds anything that reads them.

In sandbox mode (no ``SLACK_*`` credentials) there is nothing to point decklog at, so the sandbox brings it:

- a local :class:`~adapters.local.services.FakeDeployService` on loopback, with the deploy history and
  effects of the previous run restored (``DATA_DIR/sandbox/deploys.json``, see
  :mod:`adapters.local.sandbox.persistence`) or else seeded with a baseline ``payments`` deploy; when
  ``DECKLOG_DEPLOY_API_URL`` is unset, ``deploy_api_url`` becomes its base URL, so the example
  ``rollback_deploy`` action has a real executor (``<base>/rollback``, reconcile ``<base>/reconcile/<key>``);
- when ``DECKLOG_STATUSPAGE_API_URL`` is unset, a local
  :class:`~adapters.local.services.FakeStatuspage`, and ``statuspage_api_url`` becomes its
  page URL with the key as the URL's user part (``http://<key>@127.0.0.1:<port>/v1/pages/<page id>``): the
  form the ``statuspage`` executor reads without ``DECKLOG_STATUSPAGE_PAGE_ID``. The key is made per run,
  unless ``DECKLOG_STATUSPAGE_API_KEY`` is set (the example action's ``api_key`` reads it and it wins over the
  URL's), in which case the fake expects that one. Its incidents are not kept across restarts;
- when ``DECKLOG_ALERT_TOKEN`` is unset, a random token for this process only (``alert_token``), which
  the page's sample buttons send as ``Authorization: Bearer`` to ``/alerts/…`` and ``/changes/…``;
- when no approver is configured (``DECKLOG_APPROVERS`` and ``[approvals] approvers`` both empty), the sandbox's
  people (alice, bob, carol) as approvers, so a parked action can be approved from the page — but only while every
  executor URL points at a fake started here (``local_origins``): the composition root calls
  ``withdraw_approvers`` when one is real (an operator's ``DECKLOG_DEPLOY_API_URL``, even on loopback).

Values the operator set are never replaced. Everything here only ever points at loopback fakes.
"""

from __future__ import annotations

import logging
import os
import secrets
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from urllib.parse import quote, urlsplit

from pydantic import SecretStr

from decklog.adapters.local.sandbox.persistence import SandboxPersistence
from decklog.adapters.local.services import FakeDeployService, FakeStatuspage
from decklog.adapters.local.slack import FakeSlackWorkspace

log = logging.getLogger("decklog.sandbox")

SAMPLE_SERVICE = "payments"
STATUSPAGE_PAGE_ID = "sandboxpage1"
STATUSPAGE_KEY_ENV = "DECKLOG_STATUSPAGE_API_KEY"


@dataclass(frozen=True)
class LocalWants:
    """What the operator configured, as far as the sandbox cares (None / empty: unset)."""

    deploy_api_url: str | None = None
    statuspage_api_url: str | None = None
    alert_token: str | None = None
    approvers_configured: bool = False


@dataclass(frozen=True)
class SettingsOverrides:
    """The settings the sandbox fills (None: left as the operator set it)."""

    deploy_api_url: str | None = None
    statuspage_api_url: str | None = None
    alert_token: str | None = None
    approvers: str | None = None

    def update(self) -> dict[str, object]:
        """For ``Settings.model_copy(update=…)``: the filled fields only, the token as a secret."""
        out: dict[str, object] = {}
        for name in ("deploy_api_url", "statuspage_api_url", "approvers"):
            value = getattr(self, name)
            if value is not None:
                out[name] = value
        if self.alert_token is not None:
            out["alert_token"] = SecretStr(self.alert_token)
        return out


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
    overrides: SettingsOverrides = SettingsOverrides()

    @property
    def statuspage_url(self) -> str | None:
        """The fake status page's URL without its key (safe to show), or None."""
        if self.statuspage is None:
            return None
        return f"{self.statuspage.base_url}/v1/pages/{self.statuspage.page_id}"

    @property
    def local_origins(self) -> frozenset[str]:
        """``host:port`` of the fakes this sandbox started (what an executor URL may point at for the sandbox
        people to be approvers)."""
        urls = [self.deploy.base_url] + ([self.statuspage.base_url] if self.statuspage is not None else [])
        return frozenset(_origin(u) for u in urls)

    def withdraw_approvers(self) -> None:
        """An executor URL is real (not one of this sandbox's fakes): the sandbox people are not approvers."""
        self.approvers_filled = ()
        self.overrides = replace(self.overrides, approvers=None)

    async def stop(self) -> None:
        await self.deploy.stop()
        if self.statuspage is not None:
            await self.statuspage.stop()


def _origin(url: str) -> str:
    parts = urlsplit(url)
    return f"{(parts.hostname or '').lower()}:{parts.port}"


def baseline_version(now: datetime) -> str:
    return f"v{(now - timedelta(days=1)):%Y.%m.%d}-1"


async def prepare(
    wants: LocalWants,
    workspace: FakeSlackWorkspace,
    *,
    persistence: SandboxPersistence | None = None,
) -> SandboxEnvironment:
    """Start the fake deploy service (restoring its last state through ``persistence``) and the fake status
    page; return them with the settings overrides they and the sample buttons need."""
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
    statuspage: FakeStatuspage | None = None
    statuspage_url: str | None = None
    if wants.statuspage_api_url is None:
        try:
            statuspage, statuspage_url = await _start_statuspage()
        except BaseException:
            await deploy.stop()
            raise
    token = wants.alert_token or secrets.token_urlsafe(24)
    filled: tuple[str, ...] = ()
    if not wants.approvers_configured:
        filled = tuple(u.id for u in workspace.directory.users() if not u.is_bot)
    overrides = SettingsOverrides(
        deploy_api_url=base_url if wants.deploy_api_url is None else None,
        statuspage_api_url=statuspage_url,
        alert_token=None if wants.alert_token else token,
        approvers=",".join(filled) if filled else None,
    )
    env = SandboxEnvironment(
        deploy=deploy,
        deploy_url=wants.deploy_api_url or base_url,
        alert_token=token,
        alert_token_generated=not wants.alert_token,
        deploy_url_is_sandbox=wants.deploy_api_url is None,
        approvers_filled=filled,
        statuspage=statuspage,
        deploys_restored=restored,
        overrides=overrides,
    )
    log.info(
        "sandbox: fake deploy service on %s%s%s; fake status page %s; alert token %s; approvers %s",
        base_url,
        " (history restored)" if restored else "",
        "" if env.deploy_url_is_sandbox else f" (DECKLOG_DEPLOY_API_URL stays {wants.deploy_api_url})",
        env.statuspage_url or "not started (DECKLOG_STATUSPAGE_API_URL is set)",
        "generated for this run" if env.alert_token_generated else "from DECKLOG_ALERT_TOKEN",
        ", ".join(filled) if filled else "as configured",
    )
    return env


async def _start_statuspage() -> tuple[FakeStatuspage, str]:
    key = os.environ.get(STATUSPAGE_KEY_ENV, "").strip() or secrets.token_urlsafe(18)
    statuspage = FakeStatuspage(api_key=key, page_id=STATUSPAGE_PAGE_ID, host="127.0.0.1")
    page_root = await statuspage.start()
    # The key rides in the URL's user part: the statuspage executor takes it from there (token_urlsafe gives
    # URL-safe characters only; an operator's key is quoted).
    url = f"http://{quote(key, safe='')}@{page_root.removeprefix('http://')}/v1/pages/{STATUSPAGE_PAGE_ID}"
    return statuspage, url
