"""The composition root of ``decklog serve``: ``build(settings, config, parts=…)`` wires every part, once, in
data-dependency order, and returns ``Parts`` (every part built, typed; None for a part not selected).

1. the local world (sandbox mode only): the fake Slack; with the ``sandbox`` part, the fake services and the
   settings they fill, applied as ``settings.model_copy(update=…)`` before anything reads them;
2. the runtime (log store, index, scope service, dispatcher) and the outbound Slack half (client, sender);
3. the features: receivers, api, reports, agents, actions — each takes what it needs and returns what it provides;
4. the inbound Slack half, with the ports the features built (ask, decide, export, compensate);
5. the sandbox page and the operations routes (health, metrics, sweeps).

``DecklogServer`` (bot.server) starts what ``Parts`` holds and stops it in reverse. Tests build a partial server
with ``parts={"receivers", …}``; the runtime, Slack and operations are always there.
"""

from __future__ import annotations

import logging
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Literal

import aiohttp

from decklog.adapters.executors.pagerduty import PagerDutyExecutor, PagingSender
from decklog.adapters.local.sandbox import (
    LocalPage,
    LocalSlack,
    LocalWants,
    LocalWorld,
    build_page,
    open_local_slack,
    open_world,
)
from decklog.adapters.slack.app import build_http_session
from decklog.adapters.slack.ports import SlackPorts
from decklog.bot.actions import Actions, build_actions, build_catalog, build_egress, build_executor, real_executor_hosts
from decklog.bot.agents import Agents, build_agents
from decklog.bot.api import build_api
from decklog.bot.config import DecklogConfig, load_config
from decklog.bot.metrics import ServerMetrics
from decklog.bot.ops import Ops, build_ops, leased_jobs
from decklog.bot.parts import Address, Provides, Route, Stopper
from decklog.bot.receivers import ReceiversPart, build_receivers
from decklog.bot.reports import SlackExport
from decklog.bot.runtime import Runtime
from decklog.bot.scheduler import SchedulerAlarm
from decklog.bot.settings import Settings, SettingsError, SlackMode, is_loopback_host
from decklog.bot.slack import SlackEndpoint, SlackIn, SlackOut, build_slack_in, build_slack_out, real_endpoint
from decklog.bot.trackers import build_tracker, report_link
from decklog.core.clock import Clock
from decklog.core.follow_ups import FollowUpsSender
from decklog.core.outbox.sender import Sender

log = logging.getLogger("decklog")

STOP_GRACE_S = 3.0
PartName = Literal["sandbox", "api", "receivers", "reports", "agents", "actions"]
ALL_PARTS: frozenset[PartName] = frozenset({"sandbox", "api", "receivers", "reports", "agents", "actions"})


@dataclass
class Parts:
    """Everything ``build`` made. ``provided`` is in build order; ``closers`` too (closed in reverse, last)."""

    settings: Settings
    """The settings in effect: the operator's, with the local world's overrides applied."""
    mode: SlackMode
    runtime: Runtime
    alarm: SchedulerAlarm
    metrics: ServerMetrics
    address: Address
    slack_out: SlackOut
    slack: SlackIn
    ops: Ops
    local_slack: LocalSlack | None = None
    world: LocalWorld | None = None
    page: LocalPage | None = None
    receivers: ReceiversPart | None = None
    agents: Agents | None = None
    actions: Actions | None = None
    provided: list[Provides] = field(default_factory=list)
    closers: list[Stopper] = field(default_factory=list)

    @property
    def routes(self) -> list[Route]:
        return [route for p in self.provided for route in p.routes]

    @property
    def config(self) -> DecklogConfig:
        return self.runtime.config


async def build(
    settings: Settings,
    config: DecklogConfig | None = None,
    *,
    mode: SlackMode,
    parts: Collection[PartName] = ALL_PARTS,
    clock: Clock | None = None,
) -> Parts:
    """Build and wire every selected part; on failure, close what was opened (in reverse) and raise."""
    alarm = SchedulerAlarm()
    alarm.start()
    closers: list[Stopper] = []
    try:
        return await _build(settings, config, alarm, mode=mode, parts=frozenset(parts), clock=clock, closers=closers)
    except BaseException:
        if alarm.shutdown not in closers:
            closers.append(alarm.shutdown)
        for close in reversed(closers):
            await close()
        raise


async def _build(
    settings: Settings,
    config: DecklogConfig | None,
    alarm: SchedulerAlarm,
    *,
    mode: SlackMode,
    parts: frozenset[PartName],
    clock: Clock | None,
    closers: list[Stopper],
) -> Parts:
    config = config or load_config(settings.resolved_config_path)
    provided: list[Provides] = []
    local_slack, world = None, None
    if mode == "sandbox":
        settings, local_slack, world = await _local(settings, config, parts, closers, provided)
    http = build_http_session()
    closers.append(http.close)
    rt = await Runtime.open(settings, config=config, clock=clock, alarm=alarm)
    closers += [rt.close, alarm.shutdown]  # the alarm stops firing before the runtime closes
    metrics = ServerMetrics()
    rt.dispatcher.stats = metrics.delivery_stats()  # the same counts, plus the delivery-latency histogram
    endpoint = _endpoint(local_slack) if local_slack is not None else real_endpoint(settings, mode)
    out = build_slack_out(rt, endpoint, mode, http=http)
    features = _features(rt, out, parts, metrics)
    provided += features.provided
    address = Address()
    provided.append(_tracker_senders(rt, http, features, address))
    slack = await build_slack_in(rt, out, features.hooks, endpoint, mode)
    closers += [slack.inbox.close, _finish_work(slack)]
    provided.append(slack.provides)
    page = _page(world, rt, address, provided) if world is not None else None
    ops = build_ops(rt, out, slack, metrics, mode)
    provided.append(ops.provides)
    leased_jobs(rt.storage.leases(), rt.dispatcher.owner, provided)  # with replicas: one runs each periodic job
    _plug(rt, out, provided)
    return Parts(
        settings=settings,
        mode=mode,
        runtime=rt,
        alarm=alarm,
        metrics=metrics,
        address=address,
        slack_out=out,
        slack=slack,
        ops=ops,
        local_slack=local_slack,
        world=world,
        page=page,
        receivers=features.receivers,
        agents=features.agents,
        actions=features.actions,
        provided=provided,
        closers=closers,
    )


async def _local(
    settings: Settings,
    config: DecklogConfig,
    parts: frozenset[PartName],
    closers: list[Stopper],
    provided: list[Provides],
) -> tuple[Settings, LocalSlack, LocalWorld | None]:
    """Sandbox mode: the fake Slack; with the ``sandbox`` part, the fake services and the settings they fill."""
    check_sandbox_exposure(settings)
    local_slack = await open_local_slack()
    closers.append(local_slack.slack.stop)
    if "sandbox" not in parts:
        return settings, local_slack, None
    world = await open_world(local_slack.slack, _wants(settings, config), settings.data_dir)
    provided.append(Provides(drains=list(world.drains)))
    return _sandbox_settings(settings, config, world), local_slack, world


def check_sandbox_exposure(settings: Settings) -> None:
    """The sandbox page lets any visitor act as any person: it serves on a loopback ``DECKLOG_HOST`` only, unless
    the operator opts in with ``DECKLOG_SANDBOX_PUBLIC=1`` (then a loud warning)."""
    if is_loopback_host(settings.host):
        return
    if not settings.sandbox_public:
        raise SettingsError(
            f"DECKLOG_HOST={settings.host} is not a loopback address, and without Slack credentials decklog serves the "
            "sandbox, whose page lets anyone who reaches it act as any person. Set SLACK_BOT_TOKEN and "
            "SLACK_SIGNING_SECRET (or SLACK_APP_TOKEN with --socket-mode), use DECKLOG_HOST=127.0.0.1, or opt in "
            "with DECKLOG_SANDBOX_PUBLIC=1"
        )
    log.warning(
        "!!! DECKLOG_SANDBOX_PUBLIC=1: the sandbox page is served on %s (not loopback) WITHOUT authentication; anyone "
        "who can reach port %s can act as any sandbox person. Never expose it to a network you do not trust. !!!",
        settings.host,
        settings.port,
    )


def _sandbox_settings(settings: Settings, config: DecklogConfig, world: LocalWorld) -> Settings:
    """The operator's settings with the local world's overrides; the sandbox people are approvers only while every
    executor URL points at a fake the sandbox started itself (bot.actions.real_executor_hosts)."""
    settings = settings.model_copy(update=world.overrides.update())
    if not world.env.approvers_filled:
        return settings
    real = real_executor_hosts(settings, config, world.env.local_origins)
    if not real:
        return settings
    world.env.withdraw_approvers()
    log.warning(
        "sandbox: the sandbox people are NOT approvers, because executors call %s, which the sandbox did not start; "
        "set DECKLOG_APPROVERS (or [approvals] approvers) to approve actions",
        ", ".join(real),
    )
    return settings.model_copy(update={"approvers": ""})


def _page(world: LocalWorld, rt: Runtime, address: Address, provided: list[Provides]) -> LocalPage:
    """The sandbox page; its sample buttons go through the receivers when they are among ``provided``."""
    page = build_page(
        world,
        service=rt.service,
        base_url=lambda: address.url,
        routes=lambda: {route.path for p in provided for route in p.routes},
        public=not is_loopback_host(rt.settings.host),  # only with DECKLOG_SANDBOX_PUBLIC=1 (check_sandbox_exposure)
    )
    provided.append(Provides(routes=[Route(m, p, h) for m, p, h in page.routes], drains=page.drains))
    return page


def _endpoint(local: LocalSlack) -> SlackEndpoint:
    return SlackEndpoint(local.token, local.base_url, local.signing_secret)


def _plug(rt: Runtime, out: SlackOut, provided: list[Provides]) -> None:
    """Senders (the Slack sender first: what the people in the channel wait for), updaters, store listeners."""
    rt.dispatcher.register(out.sender, first=True)
    for p in provided:
        for sender in p.senders:
            rt.dispatcher.register(sender)
        out.sender.updaters.extend(p.updaters)
        for listener in p.listeners:
            rt.store.subscribe(listener)


def _wants(settings: Settings, config: DecklogConfig) -> LocalWants:
    token = settings.alert_token.get_secret_value() if settings.alert_token is not None else None
    return LocalWants(
        deploy_api_url=settings.deploy_api_url,
        statuspage_api_url=settings.statuspage_api_url,
        alert_token=token or None,
        approvers_configured=bool(settings.approver_ids or config.approvals.approvers),
    )


@dataclass
class _Features:
    hooks: SlackPorts
    provided: list[Provides]
    receivers: ReceiversPart | None = None
    agents: Agents | None = None
    actions: Actions | None = None


def _features(rt: Runtime, out: SlackOut, parts: frozenset[PartName], metrics: ServerMetrics) -> _Features:
    """The features, in data-dependency order; the Slack sender is the first sender (people wait for it)."""
    hooks = SlackPorts()
    built = _Features(hooks, [])
    if "receivers" in parts:
        built.receivers = build_receivers(rt)
        built.provided.append(built.receivers.provides)
    if "api" in parts:
        built.provided.append(build_api(rt))
    if "reports" in parts:
        hooks.export = SlackExport(rt)
    if "agents" in parts:
        built.agents = build_agents(rt, out, turn_seconds=metrics.turn_seconds, turns_waiting=metrics.turns_waiting)
        hooks.ask, hooks.catchup = built.agents.ask, built.agents.catchup  # catchup: None without Claude
        built.provided.append(built.agents.provides)
    if "actions" in parts:
        built.actions = build_actions(rt, verify_here=built.agents is None)
        hooks.decide = built.actions.slack.decide
        hooks.compensate = built.actions.slack.compensate
        hooks.propose, hooks.actions = built.actions.slack.propose, built.actions.slack.actions  # run / actions
        built.provided.append(built.actions.provides)
        if built.agents is not None:  # the agents' proposals go to the desk (instead of suggestions)
            built.agents.turns.use_proposer(built.actions.desk)
            built.agents.turns.use_catalog(built.actions.catalog)
    return built


def _tracker_senders(rt: Runtime, http: aiohttp.ClientSession, built: _Features, address: Address) -> Provides:
    """Issue 18: the ``trackers`` sender (GitHub Issues or Jira, when configured) and the ``paging`` sender
    (when the catalog has an available ``pagerduty`` action)."""
    s = rt.settings
    senders: list[Sender] = []
    tracker = build_tracker(s, http)
    if tracker is not None:
        senders.append(FollowUpsSender(rt.store, tracker, report_link(rt.config.reports.public_url, s, address)))
        log.info("follow-ups: filed in %s", tracker.name)
    if built.actions is not None:
        catalog = build_catalog(s, rt.config)
        paging = [spec for spec in catalog if spec.available and spec.executor.type == "pagerduty"]
        if paging:
            egress = build_egress(s, rt.config, catalog)
            executor = build_executor(paging[0].executor, http, egress)
            assert isinstance(executor, PagerDutyExecutor)
            senders.append(PagingSender(rt.store, executor, [spec.name for spec in paging]))
    return Provides(senders=senders)


def _finish_work(slack: SlackIn) -> Stopper:
    async def finish() -> None:
        # What is unfinished stays in the inbox and is replayed at the next start; the grace only saves a replay.
        cancelled = await slack.deps.finish_work(STOP_GRACE_S)
        if cancelled:
            log.info("stopped with %d Slack requests unfinished; they stay in the inbox", cancelled)

    return finish
