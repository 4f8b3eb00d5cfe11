"""The composition root of ``decklog serve``: ``build(settings, config, parts=…)`` wires every part, once, in
data-dependency order, and returns ``Parts`` (every part built, typed; None for a part not selected).

1. the local world (sandbox mode only): the fake Slack; with the ``sandbox`` part, the fake services and the
   settings they fill, applied as ``settings.model_copy(update=…)`` before anything reads them;
2. the runtime (log store, index, scope service, dispatcher) and the outbound Slack half (client, sender);
3. the features: receivers, api, reports, agents, actions — each takes the typed pieces it uses (store, index,
   clock, alarm, config sections, the backend's ports…) and returns what it provides;
4. the inbound Slack half, with the ports the features built (ask, decide, export, compensate);
5. the sandbox page and the operations routes (health, metrics, sweeps).

The ``Runtime`` is this module's own bag: no part receives it. The doors are adapters (adapters/http: receivers,
REST API, metrics; adapters/slack: ``/slack/events``); this module only builds and plugs them.

``DecklogServer`` (bot.server) starts what ``Parts`` holds and stops it in reverse. Tests build a partial server
with ``parts={"receivers", …}``; the runtime, Slack and operations are always there.
"""

from __future__ import annotations

import logging
from collections.abc import Collection
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any, Literal

import aiohttp
from pydantic import SecretStr

from decklog.adapters.executors import build_executor
from decklog.adapters.executors.pagerduty import TYPE as PAGERDUTY
from decklog.adapters.executors.pagerduty import PagerDutyExecutor, PagingSender
from decklog.adapters.http.api import InsightsApi, ScopesApi
from decklog.adapters.http.api import routes as api_routes
from decklog.adapters.http.hosts import is_loopback_host
from decklog.adapters.http.metrics import ServerMetrics
from decklog.adapters.http.openapi import ApiDescription
from decklog.adapters.http.receipts import Receipts
from decklog.adapters.http.receivers import Receivers
from decklog.adapters.http.writes import ScopeWrites
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
from decklog.adapters.slack.export import SlackExport
from decklog.adapters.slack.ports import Oncall as SlackOncall
from decklog.adapters.slack.ports import SlackPorts
from decklog.adapters.webhooks.sender import Endpoint, WebhooksSender
from decklog.bot.actions import (
    Actions,
    build_actions,
    build_catalog,
    build_egress,
    build_policy,
    real_executor_hosts,
)
from decklog.bot.agents import DUE_POLL_S, TURN_LEASE_S, Agents, build_agents
from decklog.bot.config import AlertsConfig, ChangesConfig, DecklogConfig, load_config
from decklog.bot.oncall import Oncall, build_oncall
from decklog.bot.ops import ALERT_INBOX_JOB, Ops, build_ops, leased_jobs, lifecycle_policy
from decklog.bot.parts import Address, Job, Provides, Route, Stopper
from decklog.bot.runtime import Runtime
from decklog.bot.scheduler import SchedulerAlarm
from decklog.bot.settings import Settings, SettingsError, SlackMode
from decklog.bot.slack import SlackEndpoint, SlackIn, SlackOut, build_slack_in, build_slack_out, real_endpoint
from decklog.bot.topics import server_topic_kinds, unconfigured_topics
from decklog.bot.trackers import build_tracker, report_link
from decklog.core.actions import Catalog
from decklog.core.actions.desk import ActionDesk
from decklog.core.alarm import Alarm
from decklog.core.alerts import AlertPolicy, AlertRouter, AlertSummarizer
from decklog.core.alerts.intake import AlertIntake
from decklog.core.changes import ChangeLinkSender, ChangeService
from decklog.core.clock import Clock
from decklog.core.egress import EgressPolicy
from decklog.core.follow_ups import FollowUpCloser, FollowUpsSender
from decklog.core.outbox.dispatcher import Dispatcher
from decklog.core.outbox.sender import Sender
from decklog.core.outbox.unconfigured import NotConfigured
from decklog.core.reports import ReportTemplates
from decklog.core.service import ScopeService
from decklog.core.signals import AlertSignal
from decklog.core.store.ports import AlertInbox, ApiKeys, IndexPort, LogStore, RateCounter, RouteLocks

log = logging.getLogger("decklog")

STOP_GRACE_S = 3.0
ALERT_REPLAY_S = 3.0  # how often stored alert notifications not routed here are looked for
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
    oncall: Oncall | None = None
    provided: list[Provides] = field(default_factory=list)
    closers: list[Stopper] = field(default_factory=list)

    @property
    def routes(self) -> list[Route]:
        return [route for p in self.provided for route in p.routes]

    @property
    def config(self) -> DecklogConfig:
        return self.runtime.config

    def start_delivery(self) -> None:
        """Once the server listens: start the dispatcher, and refill the store's spare files."""
        self.runtime.dispatcher.start()
        self.runtime.store.refill_spares()


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
    unconfigured = unconfigured_topics(settings, config)  # their senders get no rows (bot/topics.py)
    rt = await Runtime.open(
        settings, config=config, clock=clock, alarm=alarm, topic_kinds=server_topic_kinds(unconfigured)
    )
    closers += [rt.close, alarm.shutdown]  # the alarm stops firing before the runtime closes
    metrics = ServerMetrics()
    rt.dispatcher.stats = metrics.delivery_stats()  # the same counts, plus the delivery-latency histogram
    endpoint = _endpoint(local_slack) if local_slack is not None else real_endpoint(settings, mode)
    out = build_slack_out(
        rt.store,
        rt.index,
        alarm,
        endpoint,
        mode,
        slack=config.slack,
        alerts_channel=settings.alerts_channel,
        pace_slots=rt.storage.pace_slots(),
        fence=rt.dispatcher,
        http=http,
    )
    alert_inbox = await rt.storage.alert_inbox()  # alert notifications stored before their 202
    closers.append(alert_inbox.close)
    # on-call first among the parts: its /api/oncall routes come before the REST API's catch-all 404
    oncall = build_oncall(
        rt.store,
        rt.index,
        rt.clock,
        settings=settings,
        config=config,
        client=out.client,
        http=http,
        alerts_channel=out.sender.alerts_channel,
        keys=rt.api_keys,
        description=rt.description,
    )
    provided.append(oncall.provides)
    features = _features(rt, out, parts, metrics, alert_inbox)
    features.hooks.oncall = SlackOncall(config.oncall, rt.clock)
    provided += features.provided
    address = Address()
    provided.append(_tracker_senders(rt, http, features, address, unconfigured))
    provided.append(build_webhooks(rt, http))
    inbox = await rt.storage.inbox()
    closers.append(inbox.close)
    slack = build_slack_in(rt.service, rt.store, rt.index, inbox, out, features.hooks, endpoint, mode)
    closers.append(_finish_work(slack))
    provided.append(slack.provides)
    page = _page(world, rt.service, settings.host, address, provided) if world is not None else None
    ops = build_ops(
        rt.store,
        rt.index,
        rt.clock,
        rt.dispatcher,
        rt.storage,
        out,
        slack,
        metrics,
        mode,
        data_dir=Path(settings.data_dir),
        lifecycle=lifecycle_policy(settings, config.slack, config.reminders),
        alert_inbox=alert_inbox,
    )
    provided.append(ops.provides)
    leased_jobs(rt.storage.leases(), rt.dispatcher.owner, provided)  # with replicas: one runs each periodic job
    _plug(rt.dispatcher, rt.store, out, provided)
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
        oncall=oncall,
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


def _page(world: LocalWorld, service: ScopeService, host: str, address: Address, provided: list[Provides]) -> LocalPage:
    """The sandbox page; its sample buttons go through the receivers when they are among ``provided``."""
    page = build_page(
        world,
        service=service,
        base_url=lambda: address.url,
        routes=lambda: {route.path for p in provided for route in p.routes},
        public=not is_loopback_host(host),  # only with DECKLOG_SANDBOX_PUBLIC=1 (check_sandbox_exposure)
    )
    provided.append(Provides(routes=[Route(m, p, h) for m, p, h in page.routes], drains=page.drains))
    return page


def _endpoint(local: LocalSlack) -> SlackEndpoint:
    return SlackEndpoint(local.token, local.base_url, local.signing_secret)


def _plug(dispatcher: Dispatcher, store: LogStore, out: SlackOut, provided: list[Provides]) -> None:
    """Senders (the Slack sender first: what the people in the channel wait for), updaters, store listeners."""
    dispatcher.register(out.sender, first=True)
    for p in provided:
        for sender in p.senders:
            dispatcher.register(sender)
        out.sender.updaters.extend(p.updaters)
        for listener in p.listeners:
            store.subscribe(listener)


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
    catalog: Catalog | None = None
    egress: EgressPolicy | None = None


def _features(
    rt: Runtime, out: SlackOut, parts: frozenset[PartName], metrics: ServerMetrics, alert_inbox: AlertInbox
) -> _Features:
    """The features, in data-dependency order; the Slack sender is the first sender (people wait for it)."""
    settings, config = rt.settings, rt.config
    hooks = SlackPorts()
    built = _Features(hooks, [])
    if "receivers" in parts:
        built.receivers = build_receivers(
            rt.store,
            rt.index,
            rt.service,
            rt.clock,
            rt.alarm,
            alerts=config.alerts,
            changes=config.changes,
            token=settings.alert_token,
            locks=rt.storage.route_locks(),
            rates=rt.storage.rate_counter(),
            inbox=alert_inbox,
            api_token=settings.api_token,
            description=rt.description,
        )
        built.provided.append(built.receivers.provides)
    api_part = "api" in parts  # built after the actions part: the writes propose and decide through its desk
    if "reports" in parts:
        hooks.export = SlackExport(rt.store, rt.reports)
    if "agents" in parts:
        built.agents = build_agents(
            rt.store,
            rt.index,
            rt.clock,
            rt.alarm,
            settings=settings,
            agents=config.agents,
            changes=config.changes,
            obligations=config.obligations,
            client=out.client,
            leases=rt.storage.leases(),
            due_turns=rt.storage.due_turns(  # replicas: one turn per due scope, due times in the database
                rt.alarm, rt.dispatcher.owner, max_wait=settings.turn_max_wait, lease_s=TURN_LEASE_S, poll_s=DUE_POLL_S
            ),
            owner=rt.dispatcher.owner,
            turn_seconds=metrics.turn_seconds,
            turns_waiting=metrics.turns_waiting,
            egress_allow=config.security.egress_allow,
        )
        hooks.ask, hooks.catchup = built.agents.ask, built.agents.catchup  # catchup: None without Claude
        built.provided.append(built.agents.provides)
    if "actions" in parts:
        built.catalog = build_catalog(settings, config)
        built.egress = build_egress(settings, config, built.catalog)
        built.actions = build_actions(
            rt.store,
            rt.index,
            rt.clock,
            catalog=built.catalog,
            egress=built.egress,
            policy=build_policy(settings, config),
            obligations=config.obligations,
            approvals=config.approvals,
            leases=rt.storage.leases(),  # with replicas, one run start per (action, target) across them
            verify_here=built.agents is None,
        )
        hooks.decide = built.actions.slack.decide
        hooks.compensate = built.actions.slack.compensate
        hooks.propose, hooks.actions = built.actions.slack.propose, built.actions.slack.actions  # run / actions
        built.provided.append(built.actions.provides)
        if built.agents is not None:  # the agents' proposals go to the desk (instead of suggestions)
            built.agents.turns.use_proposer(built.actions.desk)
            built.agents.turns.use_catalog(built.actions.catalog)
    if api_part and rt.api_keys is not None:  # Runtime.open always opens them
        built.provided.append(
            build_api(
                rt.store,
                rt.index,
                rt.clock,
                token=settings.api_token,
                templates=rt.reports,
                service=rt.service,
                keys=rt.api_keys,
                desk=built.actions.desk if built.actions is not None else None,
                description=rt.description,
            )
        )
    return built


@dataclass
class ReceiversPart:
    receivers: Receivers
    provides: Provides
    intake: AlertIntake


def build_receivers(
    store: LogStore,
    index: IndexPort,
    service: ScopeService,
    clock: Clock,
    alarm: Alarm,
    *,
    alerts: AlertsConfig,
    changes: ChangesConfig,
    token: SecretStr | None,
    locks: RouteLocks | None,
    rates: RateCounter | None,
    inbox: AlertInbox,
    api_token: SecretStr | None = None,
    description: ApiDescription | None = None,
) -> ReceiversPart:
    """The webhook doors (adapters/http/receivers.py) over the alert router and the change service: their routes,
    the log listener (alert summaries), the change-link sender, the summary sweeps. ``token``:
    ``DECKLOG_ALERT_TOKEN``; ``locks`` and ``rates``: with replicas, alert routing and rates across them;
    ``inbox``: where alert notifications are stored before their 202 (routed behind it by ``AlertIntake``, whose
    receipts ``GET /api/alerts/receipts/{id}`` reads: the alert sender's token or the API's)."""
    policy = AlertPolicy.build(
        grouping_window_minutes=alerts.grouping_window_minutes,
        rate_limit_per_minute=alerts.rate_limit_per_minute,
        raw_evidence_bytes=alerts.raw_evidence_bytes,
        default_severity=alerts.default_severity,
        severity=alerts.severity,
    )
    router = AlertRouter(store, index, service, clock, policy, locks=locks, rates=rates)
    change_service = ChangeService(store, index, service, clock, link_window=timedelta(hours=changes.link_window_hours))
    summarizer = AlertSummarizer(store, alarm, clock=clock.now)
    parse = _StoredParse()
    intake = AlertIntake(inbox, router, parse)
    receivers = Receivers(
        token,
        index,
        router,
        change_service,
        summarizer,
        intake,
        max_bytes=alerts.max_payload_bytes,
        raw_bytes=alerts.raw_evidence_bytes,
        follow_ups=FollowUpCloser(store, index),
    )
    parse.receivers = receivers
    receipts = Receipts(intake, alert_token=token, api_token=api_token)
    if description is not None:
        receipts.describe(description)
    routes = [*receivers.routes(), *receipts.routes()]

    async def drain_alerts() -> None:
        await intake.drain(STOP_GRACE_S)

    async def prune_receipts() -> None:
        await inbox.prune()

    async def replay_alerts() -> None:
        await intake.replay()

    provides = Provides(
        routes=[Route(method, path, handler) for method, path, handler in routes],
        senders=[ChangeLinkSender(change_service, store, splits=router.splits)],
        listeners=[receivers.on_commit],
        jobs=[
            Job("alerts:summaries", 60.0, receivers.rearm),
            # stored notifications not routed here: a failed routing again, and with replicas a dead one's
            Job(ALERT_INBOX_JOB, ALERT_REPLAY_S, replay_alerts),
            Job("alerts:receipts-prune", 3600.0, prune_receipts),
        ],
        # routing state from the index and the scope states (the first alert waits for it); summaries due; the
        # routing task, which first replays what a crash left stored
        tasks=[router.warm, receivers.rearm, intake.run],
        drains=[drain_alerts],
    )
    return ReceiversPart(receivers, provides, intake)


@dataclass
class _StoredParse:
    """The alert intake's parser of stored notifications: the receivers' own (they are built after the intake)."""

    receivers: Receivers | None = None

    async def __call__(self, source: str, body: bytes) -> tuple[list[AlertSignal], dict[str, Any]]:
        if self.receivers is None:
            raise RuntimeError("the receivers are not built yet")
        return await self.receivers.parse_stored(source, body)


def build_api(
    store: LogStore,
    index: IndexPort,
    clock: Clock,
    *,
    token: SecretStr | None,
    templates: ReportTemplates,
    service: ScopeService,
    keys: ApiKeys,
    desk: ActionDesk | None,
    description: ApiDescription,
) -> Provides:
    """The REST API's routes (adapters/http/api.py, adapters/http/writes.py), each described in ``description``
    (``GET /api/openapi.json``). ``token``: ``DECKLOG_API_TOKEN`` (an admin token); ``keys``: the stored tokens and
    idempotent replies; ``desk``: proposals and approvals (None without the actions part)."""
    api = ScopesApi(store, index, token, templates=templates, keys=keys)
    writes = ScopeWrites(service, store, keys, desk)
    made = api_routes(api, InsightsApi(index, clock), writes=writes, description=description)
    return Provides(routes=[Route(m, p, h) for m, p, h in made])


def _tracker_senders(
    rt: Runtime, http: aiohttp.ClientSession, built: _Features, address: Address, unconfigured: dict[str, str]
) -> Provides:
    """The ``trackers`` sender (GitHub Issues or Jira, when configured) and the ``paging`` sender (when the catalog
    has an available ``pagerduty`` action). Either not configured (``unconfigured``): ``NotConfigured`` takes the
    rows written anyway (core/outbox/unconfigured.py)."""
    s = rt.settings
    senders: list[Sender] = [
        NotConfigured(topic, unconfigured[topic]) for topic in ("trackers", "paging") if topic in unconfigured
    ]
    tracker = build_tracker(s, http)
    if tracker is not None:
        senders.append(FollowUpsSender(rt.store, tracker, report_link(rt.config.reports.public_url, s, address)))
        log.info("follow-ups: filed in %s", tracker.name)
    if built.catalog is not None:
        paging = [spec for spec in built.catalog if spec.available and spec.executor.type == PAGERDUTY]
        if paging:
            executor = build_executor(paging[0].executor, http, built.egress)
            assert isinstance(executor, PagerDutyExecutor)
            senders.append(PagingSender(rt.store, executor, [spec.name for spec in paging]))
    return Provides(senders=senders)


def build_webhooks(rt: Runtime, http: aiohttp.ClientSession) -> Provides:
    """The ``webhooks`` sender over ``[[webhooks]]`` (adapters/webhooks/sender.py). Always registered, so that with
    no endpoint configured its outbox rows are simply done. Its egress allowlist: ``[security] egress_allow`` when
    set, else exactly the webhook URLs' hosts."""
    hooks = rt.config.webhooks
    endpoints = [Endpoint(h.key, h.url, h.secret, frozenset(h.kinds), h.timeout_s) for h in hooks]
    egress = EgressPolicy.configured(rt.config.security.egress_allow, [h.url for h in hooks])
    if endpoints:
        log.info(
            "webhooks: %s", ", ".join(f"{e.key} ({', '.join(sorted(e.kinds)) or 'every kind'})" for e in endpoints)
        )
    return Provides(senders=[WebhooksSender(rt.store, endpoints, http, egress, rt.clock)])


def _finish_work(slack: SlackIn) -> Stopper:
    async def finish() -> None:
        # What is unfinished stays in the inbox and is replayed at the next start; the grace only saves a replay.
        cancelled = await slack.deps.finish_work(STOP_GRACE_S)
        if cancelled:
            log.info("stopped with %d Slack requests unfinished; they stay in the inbox", cancelled)

    return finish
