"""The actions part: the action desk wired into ``decklog serve`` (``build_actions``).

The root (bot/wiring.py) builds the catalog from ``[[actions]]`` in decklog.toml and the environment
(``build_catalog``: ``DECKLOG_DEPLOY_API_URL``, ``DECKLOG_STATUSPAGE_API_URL``, the PagerDuty key;
``DECKLOG_EXECUTOR_TIMEOUT`` overrides every executor's timeout), the egress allowlist and the approver policy
(``DECKLOG_APPROVERS`` adds approvers); ``build_actions`` then makes the executors (``adapters/executors``, by
type) and the desk, and

- provides the ``actions`` outbox sender (core/actions/sender.py), which runs approved proposals and, when no
  agents part verifies, the rule-based verification;
- keeps each proposal's Slack message in step with its outcome (adapters/slack/proposals.py, a Slack sender
  updater);
- schedules the sweep (lease expiry, approval expiry, runs nobody is running, verifications that fell due);
- answers Approve / Deny / ``approve`` / ``deny`` / ``compensate`` (``Actions.slack``: the decide and compensate
  ports);
- gives the desk (``Actions.desk``) and ``Actions.catalog``, the agents' ``Proposer`` and action catalog.
"""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

import aiohttp

from decklog.adapters.executors import EXECUTOR_TYPES, build_executor
from decklog.adapters.slack.outcomes import SlackDesk
from decklog.adapters.slack.proposals import ProposalMessages
from decklog.bot.config import ApprovalsConfig, DecklogConfig, ObligationsConfig, load_config
from decklog.bot.parts import Job, Provides
from decklog.bot.settings import Settings, SettingsError, example_config_path
from decklog.core.actions import ActionDesk, ApproverPolicy, Catalog, Executor
from decklog.core.actions.sender import ActionsSender
from decklog.core.agents.ports import ActionInfo as AgentActionInfo
from decklog.core.clock import Clock
from decklog.core.egress import EgressPolicy
from decklog.core.errors import DecklogError
from decklog.core.store.ports import IndexPort, Leases, LogStore

log = logging.getLogger("decklog.actions")


def build_catalog(settings: Settings, config: DecklogConfig) -> Catalog:
    """The catalog of this process: decklog.toml's actions with the environment (and settings) substituted."""
    env = dict(os.environ)
    env["DECKLOG_DEPLOY_API_URL"] = settings.deploy_api_url or ""
    env["DECKLOG_STATUSPAGE_API_URL"] = settings.statuspage_api_url or ""
    env["DECKLOG_PAGERDUTY_EVENTS_URL"] = settings.pagerduty_events_url
    key = settings.pagerduty_routing_key
    env["DECKLOG_PAGERDUTY_ROUTING_KEY"] = key.get_secret_value() if key is not None else ""
    try:
        return Catalog.from_config(
            config.actions, env=env, executors=EXECUTOR_TYPES, timeout_override=settings.executor_timeout
        )
    except DecklogError as exc:
        raise SettingsError(f"DECKLOG_CONFIG: {config.path}: {exc}") from None


def unavailable_actions(catalog: Catalog) -> list[tuple[str, str, bool]]:
    """(name, why, example) of each action that is never proposed here; ``example``: one of the shipped
    catalog's actions (the sandbox and a fresh install leave some of them without an executor)."""
    examples = shipped_action_names()
    return [(s.name, s.unavailable_reason, s.name in examples) for s in catalog if not s.available]


def report_unavailable(catalog: Catalog) -> None:
    """Say at start-up which actions will never be proposed: one quiet line for the shipped examples (their
    executors are optional; ``decklog doctor`` lists them), a warning for each of the operator's own."""
    found = unavailable_actions(catalog)
    for name, why, example in found:
        if not example:
            log.warning("action %s is unavailable: %s (it will not be proposed)", name, why)
    examples = [f"{name} ({why})" for name, why, example in found if example]
    if examples:
        log.info("actions: example actions without an executor, never proposed: %s", "; ".join(examples))


@functools.cache
def shipped_action_names() -> frozenset[str]:
    return frozenset(str(a.get("name", "")) for a in load_config(example_config_path()).actions)


def build_egress(settings: Settings, config: DecklogConfig, catalog: Catalog) -> EgressPolicy:
    """``[security] egress_allow``, or by default the hosts of the configured executor URLs (core/egress.py)."""
    urls = [settings.deploy_api_url or "", settings.statuspage_api_url or ""]
    urls += [url for spec in catalog if spec.available for url in spec.executor.urls]
    return EgressPolicy.configured(config.security.egress_allow, urls)


def real_executor_hosts(settings: Settings, config: DecklogConfig, local: Collection[str]) -> list[str]:
    """The ``host:port`` of every executor URL (those each available action calls) that is not in
    ``local``: the loopback fakes the sandbox started in this process. A loopback service the operator runs is real.
    The sandbox people never approve while this is not empty."""
    hosts: list[str] = []
    for spec in build_catalog(settings, config):
        if not spec.available:
            continue
        for url in spec.executor.urls:
            where = origin_of(url)
            if where is not None and where not in local and where not in hosts:
                hosts.append(where)
    return hosts


def origin_of(url: str) -> str | None:
    """``host:port`` of an http(s) URL (the default port filled in, no user part), or None."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return None
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        return None
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    return f"{host.lower()}:{port}"


def build_policy(settings: Settings, config: DecklogConfig) -> ApproverPolicy:
    a = config.approvals
    approvers = tuple(dict.fromkeys((*a.approvers, *settings.approver_ids)))
    return ApproverPolicy(
        approvers=approvers, groups=a.user_groups, r3_approvals=a.r3_approvals, expiry_minutes=a.expiry_minutes
    )


class AgentCatalog:
    """The desk's available actions in the shape the agents' ``ActionCatalogView`` port expects."""

    def __init__(self, desk: ActionDesk) -> None:
        self.desk = desk

    def available(self) -> list[AgentActionInfo]:
        return [
            AgentActionInfo(
                name=a.name,
                description=a.description,
                risk=a.risk,
                params_schema=a.params_schema,
                safety_conditions=a.safety_conditions,
            )
            for a in self.desk.available()
        ]


@dataclass
class Actions:
    desk: ActionDesk
    slack: SlackDesk
    """The desk's typed outcomes as the Slack user reads them: the ``decide`` and ``compensate`` ports."""
    catalog: AgentCatalog
    provides: Provides


def build_actions(
    store: LogStore,
    index: IndexPort,
    clock: Clock,
    *,
    catalog: Catalog,
    egress: EgressPolicy,
    policy: ApproverPolicy,
    obligations: ObligationsConfig,
    approvals: ApprovalsConfig,
    leases: Leases | None,
    verify_here: bool,
) -> Actions:
    """The desk: executors, the ``actions`` sender, proposal message updates, the sweep. ``leases``: with replicas,
    one run start per (action, target) across them.

    ``verify_here``: no agents part runs in this process, so the rules verify on new evidence."""
    log.info("actions: executors may call %s (%s)", egress.describe(), egress.origin)
    session = aiohttp.ClientSession()
    executors: Mapping[str, Executor] = {
        spec.name: build_executor(spec.executor, session, egress) for spec in catalog if spec.available
    }
    report_unavailable(catalog)
    desk = ActionDesk(
        store,
        index,
        catalog,
        executors,
        policy,
        clock=clock,
        lease_seconds=obligations.lease_seconds,
        leases=leases,
        # Slack user group ids (S…) as approvers need a GroupResolver over usergroups.users.list, which needs the
        # usergroups:read scope in manifest.yml first; until then only user ids and [approvals.user_groups] count.
    )
    sweep = Sweep(desk)
    expiry_s = approvals.expiry_minutes * 60
    provides = Provides(
        senders=[ActionsSender(desk, verify_here=verify_here)],
        updaters=[ProposalMessages(store)],
        jobs=[Job("actions:sweep", max(0.5, min(15.0, obligations.lease_seconds / 4, expiry_s / 10)), sweep)],
        tasks=[sweep],
        drains=[session.close],
    )
    return Actions(desk, SlackDesk(desk), AgentCatalog(desk), provides)


class Sweep:
    """Lease expiry, approval expiry, runs nobody is running, verifications that fell due."""

    def __init__(self, desk: ActionDesk) -> None:
        self.desk = desk

    async def __call__(self) -> None:
        try:
            report = await self.desk.sweep()
        except Exception:
            log.exception("actions: the sweep failed; the next one will try again")
            return
        if report.leases_expired or report.proposals_expired or report.runs or report.verifications:
            log.info(
                "actions sweep: %d leases expired, %d approvals expired, runs %s, verifications %s",
                report.leases_expired,
                report.proposals_expired,
                [(r.status, r.run_id) for r in report.runs],
                report.verifications,
            )
