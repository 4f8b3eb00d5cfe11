"""The agents feature: debounced turns, the reasoner (Claude with a key, rules without), context agents, ask.

``agents_feature(server)`` builds a ``TurnRuntime`` from the server's runtime, config and settings, registers the
``agents`` outbox sender (it arms debounced turns), re-arms pending turns from the log at boot, sets
``server.hooks.ask``, and stops its turns on shutdown. Other features reach the runtime as
``server.web[AGENTS]`` — the action desk plugs itself in with ``runtime.use_proposer(...)`` /
``runtime.use_catalog(...)``.

Settings: ``DECKLOG_FIRST_TURN_DELAY`` / ``DECKLOG_TURN_DEBOUNCE`` win over ``[agents]`` in decklog.toml (default
60 s / 13 s); ``DECKLOG_TURN_MAX_WAIT`` (default 60 s) caps both; ``ANTHROPIC_API_KEY`` (and
``ANTHROPIC_BASE_URL``) select Claude. Progress (:fire:) goes through ``SlackProgress``, which is also a Slack
sender updater (it removes an ask's :fire: when the answer is delivered).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from aiohttp import web

from adapters.slack.ask import SlackAsk
from adapters.slack.progress import SlackProgress
from bot.settings import Settings, project_root
from core.agents import ContextAgents, Reasoner, RuleBasedReasoner, TurnRuntime, TurnScheduler
from core.agents.scheduler import AgentsSender
from core.prompts import PromptLibrary

if TYPE_CHECKING:
    from bot.config import AgentsConfig
    from bot.server import DecklogServer

log = logging.getLogger(__name__)

AGENTS = web.AppKey("decklog.agents", TurnRuntime)
SCHEDULER = web.AppKey("decklog.agents.scheduler", TurnScheduler)
DEFAULT_FIRST_TURN_DELAY = 60.0
DEFAULT_TURN_DEBOUNCE = 13.0


def turn_delays(settings: Settings, config: AgentsConfig) -> tuple[float, float]:
    """(first turn delay, debounce): the environment when set, else decklog.toml, else 60 s and 13 s."""

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
    from adapters.anthropic import ClaudeReasoner, build_client

    client = build_client(
        api_key=settings.anthropic_api_key.get_secret_value(),
        base_url=settings.anthropic_base_url,
        max_retries=max_retries,
        timeout=config.turn_timeout_s,
    )
    return ClaudeReasoner(
        client,
        prompts=PromptLibrary(project_root() / "prompts"),
        model=config.model,
        max_steps=config.max_steps,
        max_tokens=config.max_tokens,
        request_timeout=config.turn_timeout_s,
        input_usd_per_mtok=config.input_usd_per_mtok,
        output_usd_per_mtok=config.output_usd_per_mtok,
    )


async def agents_feature(server: DecklogServer) -> None:
    rt = server.runtime
    cfg = rt.config.agents
    first_delay, debounce = turn_delays(server.settings, cfg)
    max_wait = server.settings.turn_max_wait
    progress = SlackProgress(client=server.slack_client, store=rt.store)
    server.slack_sender.updaters.append(progress.on_delivered)
    reasoner = build_reasoner(server.settings, cfg)
    runtime = TurnRuntime(
        rt.store,
        reasoner=reasoner,
        clock=rt.clock,
        index=rt.index,
        budget=cfg.view_budget_bytes,
        timeout_s=cfg.turn_timeout_s,
        context=ContextAgents(
            rt.store, rt.index, clock=rt.clock, link_window_hours=rt.config.changes.link_window_hours
        ),
        lease_seconds=rt.config.obligations.lease_seconds,
        change_window_hours=rt.config.changes.link_window_hours,
        progress=progress,
    )
    scheduler = TurnScheduler(
        runtime, rt.alarm, first_delay=first_delay, debounce=debounce, max_wait=max_wait, clock=rt.clock
    )
    rt.dispatcher.register(AgentsSender(scheduler))
    server.web[AGENTS] = runtime
    server.web[SCHEDULER] = scheduler
    server.hooks.ask = SlackAsk(runtime=runtime, store=rt.store)
    server.on_stop(scheduler.stop)
    client = getattr(reasoner, "client", None)
    if client is not None:
        server.on_stop(client.close)
    server.spawn(scheduler.arm_pending())
    log.info(
        "agents: %s reasoner%s, first turn after %gs, debounce %gs, max wait %gs",
        reasoner.name,
        f" ({reasoner.model})" if reasoner.model else "",
        first_delay,
        debounce,
        max_wait,
    )
