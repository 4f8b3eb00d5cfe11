"""The composition root: the one place where core and adapters are built and wired together.

``Runtime.open`` builds the storage core (log store, index, scope service, dispatcher with the index sender) that
every entry point needs; ``bot.server`` adds Slack, receivers, agents and actions on top before it starts the
dispatcher. Nothing is built at import time.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

from bot.backends import open_backend
from bot.config import DecklogConfig, load_config
from bot.reports import report_templates
from bot.settings import Settings
from core.agents.triggers import QUIET_KINDS
from core.alarm import Alarm, AsyncioAlarm
from core.clock import Clock, SystemClock
from core.entries import PAYLOADS
from core.index import Index
from core.index_sender import IndexSender
from core.outbox import Dispatcher, RetryPolicy
from core.reports import ReportTemplates
from core.service import ScopeService
from core.store import SqliteLogStore
from core.store.postgres import PostgresLogStore

log = logging.getLogger(__name__)

# Every entry gets one outbox row per topic, unless the topic names the entry kinds it cares about
# (``TOPIC_KINDS``). Both are fixed so that a CLI append and the server agree; a topic whose sender is not running
# in this process simply stays pending until one is.
OUTBOX_TOPICS = ("index", "slack", "agents", "actions", "changes", "trackers", "paging")
#: ``changes``: change <-> incident links, made when a change or an incident is declared (core.changes).
#: ``actions``: bot.actions.ActionsSender runs approved proposals and verifies on verification obligations and
#: resolved alerts; nothing else reaches it. ``agents``: core.agents.scheduler.AgentsSender arms turns for the
#: entries that warrant one (core.agents.triggers; an agent's own entries never do, except an obligation it opens)
#: and answers questions. ``index`` and ``slack`` take every kind (search; messages posted via the API/CLI).
#: ``trackers``: core.follow_ups.FollowUpsSender files each follow-up in GitHub Issues or Jira (issue 18);
#: ``paging``: adapters.executors.pagerduty.PagingSender resolves a PagerDuty page when the incident resolves.
#: Entries recorded before a filter existed keep their rows; a sender ignores what it does not act on.
TOPIC_KINDS: dict[str, tuple[str, ...]] = {
    "changes": ("declared",),
    "actions": ("proposal", "approval", "obligation_opened", "observation"),
    "agents": tuple(sorted((set(PAYLOADS) - QUIET_KINDS) | {"question"})),
    "trackers": ("follow_up",),
    "paging": ("status_changed",),
}


@dataclass
class Runtime:
    settings: Settings
    config: DecklogConfig
    clock: Clock
    store: SqliteLogStore | PostgresLogStore
    index: Index
    service: ScopeService
    dispatcher: Dispatcher
    alarm: Alarm
    reports: ReportTemplates = field(default_factory=ReportTemplates)  # compiled once; [reports] templates_dir

    @classmethod
    async def open(
        cls,
        settings: Settings,
        *,
        config: DecklogConfig | None = None,
        clock: Clock | None = None,
        alarm: Alarm | None = None,
        retry: RetryPolicy | None = None,
    ) -> Runtime:
        config = config or load_config(settings.resolved_config_path)
        reports = report_templates(config)
        clock = clock or SystemClock()
        data_dir = Path(settings.data_dir)
        data_dir.mkdir(parents=True, exist_ok=True)
        store, index = await open_backend(settings, data_dir, clock, topics=OUTBOX_TOPICS, topic_kinds=TOPIC_KINDS)
        alarm = alarm or AsyncioAlarm()
        dispatcher = Dispatcher(store, [], policy=retry, alarm=alarm)
        dispatcher.register(IndexSender(index, store))
        service = ScopeService(store, index, declarer_role=config.slack.declarer_role)
        return cls(settings, config, clock, store, index, service, dispatcher, alarm, reports)

    async def close(self) -> None:
        await self.dispatcher.stop()
        await self.index.close()
        await self.store.close()
