"""The actions part: the action desk wired into ``decklog serve`` (``build_actions``).

It builds the catalog from ``[[actions]]`` in decklog.toml and the environment (``DECKLOG_DEPLOY_API_URL``,
``DECKLOG_STATUSPAGE_API_URL``; ``DECKLOG_EXECUTOR_TIMEOUT`` overrides every executor's timeout;
``DECKLOG_APPROVERS`` adds approvers), the executors (``adapters/executors``), and the desk; then it

- provides the ``actions`` outbox sender, which runs approved proposals (at-least-once delivery; fences and
  idempotency keys make that one effect) and, when no agents part verifies, the rule-based verification;
- keeps each proposal's Slack message in step with its outcome (an updater on the Slack sender);
- schedules the sweep (lease expiry, approval expiry, runs nobody is running, verifications that fell due);
- answers Approve / Deny / ``approve`` / ``deny`` / ``compensate`` (``Actions.slack``: the decide and compensate
  ports);
- gives the desk (``Actions.desk``) and ``Actions.catalog``, the agents' ``Proposer`` and action catalog.
"""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

import aiohttp

from decklog.adapters.executors.http import HttpExecutor
from decklog.adapters.executors.pagerduty import PagerDutyExecutor
from decklog.adapters.executors.statuspage import StatuspageExecutor
from decklog.adapters.slack import render
from decklog.adapters.slack.outcomes import SlackDesk
from decklog.bot.config import DecklogConfig, load_config
from decklog.bot.parts import Job, Provides
from decklog.bot.runtime import Runtime
from decklog.bot.settings import Settings, SettingsError, example_config_path
from decklog.core.actions import ActionDesk, ApproverPolicy, Catalog, Executor, ExecutorSpec
from decklog.core.agents.ports import ActionInfo as AgentActionInfo
from decklog.core.egress import EgressPolicy
from decklog.core.entries import (
    ActionResult,
    ActionStarted,
    Approval,
    Entry,
    ObligationOpened,
    Observation,
    ProposalClosed,
    ProposalMade,
)
from decklog.core.errors import DecklogError
from decklog.core.state import ScopeState
from decklog.core.store.ports import LogStore

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
        return Catalog.from_config(config.actions, env=env, timeout_override=settings.executor_timeout)
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
    urls += [u for spec in catalog if spec.available for u in (spec.executor.url, spec.executor.reconcile_url)]
    return EgressPolicy.configured(config.security.egress_allow, urls)


def real_executor_hosts(settings: Settings, config: DecklogConfig, local: Collection[str]) -> list[str]:
    """The ``host:port`` of every executor URL (url, reconcile_url of each available action) that is not in
    ``local``: the loopback fakes the sandbox started in this process. A loopback service the operator runs is real.
    The sandbox people never approve while this is not empty."""
    hosts: list[str] = []
    for spec in build_catalog(settings, config):
        if not spec.available:
            continue
        for url in (spec.executor.url, spec.executor.reconcile_url):
            where = origin_of(url) if url else None
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


def build_executor(spec: ExecutorSpec, session: aiohttp.ClientSession, egress: EgressPolicy | None = None) -> Executor:
    """The executor of one action; every call it makes goes through ``egress`` (None: its own URLs' hosts)."""
    if spec.type == "pagerduty":
        return PagerDutyExecutor(
            session, url=spec.url, routing_key=spec.routing_key, timeout=spec.timeout_s, egress=egress
        )
    if spec.type == "statuspage":
        return StatuspageExecutor(
            session, url=spec.url, page_id=spec.page_id, api_key=spec.api_key, timeout=spec.timeout_s, egress=egress
        )
    return HttpExecutor(
        session,
        url=spec.url,
        reconcile_url=spec.reconcile_url,
        timeout=spec.timeout_s,
        headers=spec.headers,
        egress=egress,
    )


def build_policy(settings: Settings, config: DecklogConfig) -> ApproverPolicy:
    a = config.approvals
    approvers = tuple(dict.fromkeys((*a.approvers, *settings.approver_ids)))
    return ApproverPolicy(
        approvers=approvers, groups=a.user_groups, r3_approvals=a.r3_approvals, expiry_minutes=a.expiry_minutes
    )


class ActionsSender:
    """Outbox topic ``actions``: runs what was approved; verifies by the rules when nothing else does."""

    name = "actions"
    batch_size = 32

    def __init__(self, desk: ActionDesk, *, verify_here: bool) -> None:
        self.desk = desk
        self.verify_here = verify_here
        """The rule-based verifier acts on new evidence unless the agents part does verification turns."""

    async def deliver(self, scope: str, entries: Sequence[Entry]) -> None:
        verify = False
        for entry in entries:
            p = entry.payload
            if (isinstance(p, ProposalMade) and p.status == "approved") or (
                isinstance(p, Approval) and p.decision == "approved"
            ):
                await self._run(scope, p.proposal_id, entry.seq)
            elif (isinstance(p, ObligationOpened) and p.purpose == "verification") or (
                isinstance(p, Observation) and p.alert_status == "resolved"
            ):
                verify = True
        if verify and self.verify_here:
            for line in await self.desk.verify(scope):
                log.info("actions: verified %s %s", scope, line)

    async def _run(self, scope: str, proposal_id: str, seq: int) -> None:
        try:
            report = await self.desk.execute(scope, proposal_id, receipt=f"outbox:{scope}#{seq}")
        except DecklogError as exc:
            log.info("actions: %s %s could not run: %s", scope, proposal_id, exc)
            return
        if report.status != "not_runnable":
            log.info("actions: %s %s → %s %s %s", scope, proposal_id, report.status, report.run_id, report.detail)


class ProposalMessages:
    """Keeps a proposal's Slack message in step with what happened to it (an updater of the Slack sender)."""

    KINDS = ("proposal", "approval", "proposal_closed", "action_started", "action_result")

    def __init__(self, store: LogStore) -> None:
        self.store = store

    async def __call__(self, scope: str, entry: Entry, state: ScopeState) -> list[tuple[int, render.Outgoing]]:
        p = entry.payload
        if not isinstance(p, Approval | ProposalClosed | ActionStarted | ActionResult):
            return []
        entries = await self.store.read(scope, kinds=self.KINDS)
        if isinstance(p, ActionResult):
            pid = next(
                (
                    e.payload.proposal_id
                    for e in entries
                    if isinstance(e.payload, ActionStarted) and e.payload.run_id == p.run_id
                ),
                "",
            )
        else:
            pid = p.proposal_id
        made = next((e for e in entries if isinstance(e.payload, ProposalMade) and e.payload.proposal_id == pid), None)
        if made is None or not isinstance(made.payload, ProposalMade):
            return []
        return [(made.seq, proposal_rendering(made, entries, state))]


def proposal_rendering(made: Entry, entries: Sequence[Entry], state: ScopeState) -> render.Outgoing:
    """The proposal's message as of now: still parked (with buttons), or its outcome and its runs."""
    prop = made.payload
    assert isinstance(prop, ProposalMade)
    pid = prop.proposal_id
    approvals = [e.payload for e in entries if isinstance(e.payload, Approval) and e.payload.proposal_id == pid]
    closed = [e.payload for e in entries if isinstance(e.payload, ProposalClosed) and e.payload.proposal_id == pid]
    runs = [e.payload for e in entries if isinstance(e.payload, ActionStarted) and e.payload.proposal_id == pid]
    run_ids = {r.run_id for r in runs}
    results = [e.payload for e in entries if isinstance(e.payload, ActionResult) and e.payload.run_id in run_ids]
    yes = [a for a in approvals if a.decision == "approved"]
    details = [f":white_check_mark: approved by <@{a.approver}>" for a in yes]
    for run in runs:
        details.append(f":gear: run `{run.run_id}` under fence {run.fence} (key `{run.idempotency_key}`)")
    for res in results:
        digest = f" · effect `{res.effect_digest[:19]}…`" if res.effect_digest else ""
        why = f": {render.esc(res.error[:200])}" if res.error else ""
        details.append(f"run `{res.run_id}` *{res.outcome}*{' (reconciled)' if res.reconciled else ''}{digest}{why}")
    who = ", ".join(f"<@{a.approver}>" for a in yes)
    current = state.proposals.get(pid)
    if not closed and not results and current is not None and current.status == "waiting_for_approval":
        out = render.proposal_message(prop, state, made)
        if yes:
            extra = render.context(f"Approved so far by {who} ({len(yes)} of {prop.approvals_required})")
            out = render.Outgoing(out.text, [*out.blocks[:-1], extra, out.blocks[-1]])
        return out
    denied = next((a for a in approvals if a.decision == "denied"), None)
    if closed:
        c = closed[-1]
        outcome = {"expired": "Expired", "voided": "Void", "superseded": "Superseded", "withdrawn": "Withdrawn"}[
            c.outcome
        ]
        return render.proposal_outcome(
            prop, f"{outcome}: {c.reason}" if c.reason else outcome, "", details=tuple(details)
        )
    if denied is not None:
        reason = f" — {denied.reason}" if denied.reason else ""
        return render.proposal_outcome(prop, f"Denied{reason}", f"<@{denied.approver}>", details=tuple(details))
    final = results[-1].outcome if results else ""
    outcome = {
        "": "Approved — running" if runs else "Approved — starting",
        "applied": "Approved and applied",
        "refused": "Approved — refused by the target; nothing changed",
        "failed": "Approved — the target could not be reached; nothing changed",
        "not_applied": "Approved — not applied",
        "skipped": "Approved — not run: the safety conditions no longer held",
        "uncertain": "Approved — outcome uncertain; asking the target",
        "abandon_uncertain": "Approved — outcome unknown (recorded as an open question; not retried)",
    }.get(final, f"Approved — {final}")
    if prop.risk == "R1":
        outcome = outcome.replace("Approved and applied", "Applied").replace("Approved — ", "")
    return render.proposal_outcome(prop, outcome, who, details=tuple(details))


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


def build_actions(rt: Runtime, *, verify_here: bool) -> Actions:
    """The desk: catalog, executors, the ``actions`` sender, proposal message updates, the sweep.

    ``verify_here``: no agents part runs in this process, so the rules verify on new evidence."""
    catalog = build_catalog(rt.settings, rt.config)
    egress = build_egress(rt.settings, rt.config, catalog)
    log.info("actions: executors may call %s (%s)", egress.describe(), egress.origin)
    session = aiohttp.ClientSession()
    executors: Mapping[str, Executor] = {
        spec.name: build_executor(spec.executor, session, egress) for spec in catalog if spec.available
    }
    report_unavailable(catalog)
    desk = ActionDesk(
        rt.store,
        rt.index,
        catalog,
        executors,
        build_policy(rt.settings, rt.config),
        clock=rt.clock,
        lease_seconds=rt.config.obligations.lease_seconds,
        leases=rt.storage.leases(),  # with replicas, one run start per (action, target) across them
        # Slack user group ids (S…) as approvers need a GroupResolver over usergroups.users.list, which needs the
        # usergroups:read scope in manifest.yml first; until then only user ids and [approvals.user_groups] count.
    )
    sweep = Sweep(desk)
    lease = rt.config.obligations.lease_seconds
    expiry_s = rt.config.approvals.expiry_minutes * 60
    provides = Provides(
        senders=[ActionsSender(desk, verify_here=verify_here)],
        updaters=[ProposalMessages(rt.store)],
        jobs=[Job("actions:sweep", max(0.5, min(15.0, lease / 4, expiry_s / 10)), sweep)],
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
