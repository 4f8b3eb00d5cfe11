"""The agents feature: debounced turns, the reasoner (Claude with a key, rules without), context agents, ask.

``build_agents(store, index, clock, alarm, …)`` builds a ``TurnRuntime`` from the config and settings and returns
``Agents``: the runtime (``turns``), its scheduler, the ``ask`` Slack port and what the root plugs in (the
``agents`` outbox sender that arms debounced turns, the re-arm of pending turns at boot, the stop of its turns).
The root plugs the action desk in with ``turns.use_proposer(...)`` / ``turns.use_catalog(...)``.

Where the backend shares due turns between replicas (PostgreSQL: core/store/postgres/due_turns.py), one replica runs
each due turn, and a dead replica's turn is taken over once its lease runs out. A reasoner's wake-up and the
questions to answer live in the same row (one turn at a time per scope, on one replica, after a restart too); in
one process (SQLite) a wake-up is the scope's ``agents``/``wake`` memo, re-armed at boot. The turn slots are shared
the same way where the backend has leases.

Outside read tools (core/evidence): ``DECKLOG_PROMETHEUS_URL``, ``DECKLOG_ALERTMANAGER_URL``, ``DECKLOG_CATALOG``
(``build_evidence``); without any, the investigator reads the log only.

Settings: ``DECKLOG_FIRST_TURN_DELAY`` / ``DECKLOG_TURN_DEBOUNCE`` win over ``[agents]`` in decklog.toml (default
15 s / 13 s); ``DECKLOG_TURN_MAX_WAIT`` (default 60 s) caps both; ``ANTHROPIC_API_KEY`` (and
``ANTHROPIC_BASE_URL``) select Claude. Progress (:fire:) goes through ``SlackProgress``, which is also a Slack
sender updater (it removes an ask's :fire: when the answer is delivered).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any

from prometheus_client import Gauge, Histogram
from slack_sdk.web.async_client import AsyncWebClient

from decklog.adapters.catalog.backstage import load_catalog
from decklog.adapters.monitoring.alertmanager import AlertmanagerSource
from decklog.adapters.monitoring.prometheus import PrometheusSource
from decklog.adapters.monitoring.reader import JsonReader
from decklog.adapters.slack.ask import SlackAsk
from decklog.adapters.slack.progress import SlackProgress
from decklog.bot.config import AgentsConfig, ChangesConfig, EvidenceConfig, ObligationsConfig
from decklog.bot.parts import Provides
from decklog.bot.settings import Settings
from decklog.core.agents import ContextAgents, Reasoner, RuleBasedReasoner, TurnResult, TurnRuntime, TurnScheduler
from decklog.core.agents.agents_sender import AgentsSender
from decklog.core.agents.catchup import ModelCatchUp
from decklog.core.agents.shared_slots import SharedSlots
from decklog.core.alarm import Alarm
from decklog.core.clock import Clock
from decklog.core.egress import EgressPolicy
from decklog.core.evidence.observer import EvidenceSources, Limits
from decklog.core.prompts import PromptLibrary
from decklog.core.store.ports import DueTurns, IndexPort, Leases, LogStore

log = logging.getLogger(__name__)

#: 15 s: the investigator's first hypothesis should come while the incident is young, and its checks take a
#: second; Alertmanager already holds a group's first notification for its group_wait (30 s by default), so the
#: alerts that fire together arrive together (docs/decisions/0155-first-turn-after-15-seconds.md).
DEFAULT_FIRST_TURN_DELAY = 15.0
DEFAULT_TURN_DEBOUNCE = 13.0
#: With replicas: how long a replica holds a due turn without renewing it (renewed every third of it while the
#: turn runs), and how often each replica looks for due turns (besides the due times it armed itself).
TURN_LEASE_S = 30.0
DUE_POLL_S = 1.0


def turn_delays(settings: Settings, config: AgentsConfig) -> tuple[float, float]:
    """(first turn delay, debounce): the environment when set, else decklog.toml, else 15 s and 13 s."""

    def pick(name: str, configured: float | None, default: float) -> float:
        if name in settings.model_fields_set:
            return float(getattr(settings, name))
        return configured if configured is not None else default

    return (
        pick("first_turn_delay", config.first_turn_delay, DEFAULT_FIRST_TURN_DELAY),
        pick("turn_debounce", config.turn_debounce, DEFAULT_TURN_DEBOUNCE),
    )


def build_reasoner(settings: Settings, config: AgentsConfig, *, max_retries: int = 2) -> Reasoner:
    if settings.anthropic_api_key is None:
        return RuleBasedReasoner(idle_nudge_minutes=config.idle_nudge_minutes, **config.rules.reasoner_args())
    from decklog.adapters.anthropic import ClaudeReasoner, build_client

    client = build_client(
        api_key=settings.anthropic_api_key.get_secret_value(),
        base_url=settings.anthropic_base_url,
        max_retries=max_retries,
        timeout=config.turn_timeout_s,
    )
    return ClaudeReasoner(
        client,
        prompts=PromptLibrary.shipped(),
        model=config.model,
        max_steps=config.max_steps,
        max_tokens=config.max_tokens,
        request_timeout=config.turn_timeout_s,
        input_usd_per_mtok=config.input_usd_per_mtok,
        output_usd_per_mtok=config.output_usd_per_mtok,
    )


def build_evidence(
    settings: Settings, config: EvidenceConfig, *, egress_allow: tuple[str, ...] | None = None
) -> tuple[EvidenceSources | None, list[JsonReader]]:
    """The outside read tools from ``DECKLOG_PROMETHEUS_URL``, ``DECKLOG_ALERTMANAGER_URL`` and ``DECKLOG_CATALOG``
    (None when none is set), and the HTTP readers to close at shutdown. The read tools pass ``[security]
    egress_allow`` when it is set, else the hosts of these two URLs. A catalog file that does not parse is named
    here (with its line) and the rest loads."""
    urls = [u for u in (settings.prometheus_url, settings.alertmanager_url) if u]
    egress = EgressPolicy.configured(egress_allow, urls)
    readers: list[JsonReader] = []
    limits = Limits(
        max_calls=config.max_reads,
        max_seconds=config.max_seconds,
        max_bytes=config.max_bytes,
        call_timeout_s=config.call_timeout_s,
    )
    metrics = alerts = catalog = None
    if settings.prometheus_url:
        basic = None
        if settings.prometheus_user:
            password = settings.prometheus_password.get_secret_value() if settings.prometheus_password else ""
            basic = (settings.prometheus_user, password)
        token = settings.prometheus_token.get_secret_value() if settings.prometheus_token else ""
        reader = JsonReader(
            settings.prometheus_url, egress=egress, bearer=token, basic=basic, timeout_s=config.call_timeout_s
        )
        readers.append(reader)
        metrics = PrometheusSource(reader)
    if settings.alertmanager_url:
        token = settings.alertmanager_token.get_secret_value() if settings.alertmanager_token else ""
        reader = JsonReader(settings.alertmanager_url, egress=egress, bearer=token, timeout_s=config.call_timeout_s)
        readers.append(reader)
        alerts = AlertmanagerSource(reader)
    if settings.catalog is not None:
        catalog = load_catalog(settings.catalog)
        for problem in catalog.problems:
            log.warning("catalog: %s (the rest of the catalog loads)", problem)
        log.info("catalog: %d components from %s", len(catalog), settings.catalog)
    sources = EvidenceSources(
        metrics=metrics,
        alerts=alerts,
        catalog=catalog,
        limits=limits,
        window=config.window,
        baseline=config.baseline,
        lookback_s=config.lookback_minutes * 60,
    )
    return (sources if sources.any else None), readers


@dataclass
class Agents:
    turns: TurnRuntime
    scheduler: TurnScheduler
    ask: SlackAsk
    provides: Provides
    catchup: ModelCatchUp | None = None  # with Claude, ``catch me up`` is a bounded summarising call


class TimedTurns(TurnRuntime):
    """The turn runtime, timing each turn into ``decklog_turn_seconds`` (by outcome)."""

    def __init__(self, *args: Any, histogram: Histogram, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._histogram = histogram

    async def run_turn(self, scope: str, *, trigger: str = "debounce", force: bool = False) -> TurnResult:
        started = time.perf_counter()
        outcome = "error"
        try:
            result = await super().run_turn(scope, trigger=trigger, force=force)
            outcome = result.status
            return result
        finally:
            self._histogram.labels(outcome=outcome).observe(time.perf_counter() - started)


def build_agents(
    store: LogStore,
    index: IndexPort,
    clock: Clock,
    alarm: Alarm,
    *,
    settings: Settings,
    agents: AgentsConfig,
    changes: ChangesConfig,
    obligations: ObligationsConfig,
    client: AsyncWebClient,
    leases: Leases | None,
    due_turns: DueTurns | None,
    owner: str,
    turn_seconds: Histogram,
    turns_waiting: Gauge,
    egress_allow: tuple[str, ...] | None = None,
) -> Agents:
    """The turn runtime and its debounced scheduler: the ``agents`` sender, the ``ask`` port, progress reactions.

    ``client``: the Slack Web API client (progress reactions). With replicas, ``leases`` count the concurrent turns
    across them and ``due_turns`` give each due scope to one of them; ``owner`` names this replica."""
    cfg = agents
    first_delay, debounce = turn_delays(settings, cfg)
    max_wait = settings.turn_max_wait
    progress = SlackProgress(client=client, store=store)
    reasoner = build_reasoner(settings, cfg)
    evidence, readers = build_evidence(settings, cfg.evidence, egress_allow=egress_allow)
    turns = TimedTurns(
        store,
        histogram=turn_seconds,
        reasoner=reasoner,
        clock=clock,
        index=index,
        budget=cfg.view_budget_bytes,
        timeout_s=cfg.turn_timeout_s,
        context=ContextAgents(store, index, clock=clock, link_window_hours=changes.link_window_hours),
        lease_seconds=obligations.lease_seconds,
        change_window_hours=changes.link_window_hours,
        progress=progress,
        max_concurrent=cfg.max_concurrent_turns,
        evidence=evidence,
    )
    turns_waiting.set_function(lambda: turns.slots.waiting)
    if leases is not None:  # replicas: the concurrent turns are counted across them
        turns.slots.share(SharedSlots(leases, cfg.max_concurrent_turns, owner))
    scheduler = TurnScheduler(
        turns,
        alarm,
        first_delay=first_delay,
        debounce=debounce,
        max_wait=max_wait,
        clock=clock,
        due_turns=due_turns,
    )
    provides = Provides(
        senders=[AgentsSender(scheduler)],
        updaters=[progress.on_delivered],
        tasks=[scheduler.arm_pending],
        drains=[scheduler.stop],
    )
    model_client = getattr(reasoner, "client", None)  # Claude's HTTP client (the rules have none)
    if model_client is not None:
        provides.drains.append(model_client.close)
    provides.drains.extend(reader.close for reader in readers)
    log.info(
        "agents: %s reasoner%s, first turn after %gs, debounce %gs, max wait %gs",
        reasoner.name,
        f" ({reasoner.model})" if reasoner.model else "",
        first_delay,
        debounce,
        max_wait,
    )
    catchup = None if model_client is None else build_catchup(store, clock, cfg, model_client, turns)
    return Agents(turns, scheduler, SlackAsk(runtime=turns, store=store), provides, catchup)


def build_catchup(store: LogStore, clock: Clock, cfg: AgentsConfig, client: Any, turns: TurnRuntime) -> ModelCatchUp:
    """``catch me up`` with Claude: one request over the joiner view, no tools, at most 600 output tokens, in one
    of the turn runtime's slots."""
    from decklog.adapters.anthropic.catchup import ClaudeSummariser

    summariser = ClaudeSummariser(
        client,
        prompts=PromptLibrary.shipped(),
        model=cfg.model,
        max_tokens=min(600, cfg.max_tokens),
        request_timeout=cfg.turn_timeout_s,
        input_usd_per_mtok=cfg.input_usd_per_mtok,
        output_usd_per_mtok=cfg.output_usd_per_mtok,
    )
    return ModelCatchUp(store, summariser, clock, budget=cfg.view_budget_bytes, slots=turns.slots)
