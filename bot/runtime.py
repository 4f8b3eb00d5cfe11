"""The root's own bag: the storage core that every entry point needs, opened once and closed in reverse.

``Runtime.open`` builds, from the settings: the backend's factory (chosen once, core/store/backend.py), and from it
the log store and the index; the scope service; the dispatcher with the index sender. ``bot.wiring`` builds the
parts of ``decklog serve`` on top of it, handing each part the typed pieces it uses (never the ``Runtime``); the
CLI's commands open one for their own use. Nothing is built at import time.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from decklog.adapters.http.openapi import ApiDescription
from decklog.bot.config import DecklogConfig, load_config
from decklog.bot.settings import Settings, SettingsError
from decklog.core.agents.triggers import QUIET_KINDS
from decklog.core.alarm import Alarm, AsyncioAlarm
from decklog.core.clock import Clock, SystemClock
from decklog.core.entries import PAYLOADS
from decklog.core.index.sender import IndexSender
from decklog.core.outbox.dispatcher import Dispatcher, RetryPolicy
from decklog.core.reports import ReportTemplateError, ReportTemplates
from decklog.core.service import ScopeService
from decklog.core.store.backend import storage_for
from decklog.core.store.ports import ApiKeys, IndexPort, LogStore, StorageFactory

log = logging.getLogger(__name__)

# Every entry gets one outbox row per topic, unless the topic names the entry kinds it cares about
# (``TOPIC_KINDS``). The topics are fixed so that a CLI append and the server agree; a topic whose sender is not
# running in this process simply stays pending until one is. A sender that is not configured at all gets no rows
# from the server (bot/topics.py).
OUTBOX_TOPICS = ("index", "slack", "agents", "actions", "changes", "trackers", "paging", "webhooks", "oncall")
#: ``changes``: change <-> incident links, made when a change or an incident is declared (core.changes).
#: ``actions``: core.actions.sender.ActionsSender runs approved proposals and verifies on verification obligations
#: and resolved alerts; nothing else reaches it. ``agents``: core.agents.scheduler.AgentsSender arms turns for the
#: entries that warrant one (core.agents.triggers; an agent's own entries never do, except an obligation it opens)
#: and answers questions. ``index`` and ``slack`` take every kind (search; messages posted via the API/CLI).
#: ``trackers``: core.follow_ups.FollowUpsSender files each follow-up in GitHub Issues or Jira;
#: ``paging``: adapters.executors.pagerduty.PagingSender resolves a PagerDuty page when the incident resolves.
#: ``webhooks``: adapters.webhooks.sender.WebhooksSender posts each entry to the ``[[webhooks]]`` that want its kind.
#: ``oncall``: core.oncall.sender.OncallSender delivers each ``page`` (Slack DM, SMS, voice, email, PagerDuty).
#: Entries recorded before a filter existed keep their rows; a sender ignores what it does not act on.
TOPIC_KINDS: dict[str, tuple[str, ...]] = {
    "changes": ("declared",),
    "actions": ("proposal", "approval", "obligation_opened", "observation"),
    "agents": tuple(sorted((set(PAYLOADS) - QUIET_KINDS) | {"question"})),
    "trackers": ("follow_up",),
    "paging": ("status_changed",),
    "oncall": ("page", "oncall_handoff"),
}


def report_templates(config: DecklogConfig) -> ReportTemplates:
    """The report templates ``config`` asks for; a ``templates_dir`` that is not a directory stops start-up."""
    if not config.reports.templates_dir:
        return ReportTemplates()
    where = Path(config.reports.templates_dir).expanduser()
    if not where.is_absolute() and config.path:
        where = Path(config.path).parent / where
    try:
        return ReportTemplates(where)
    except ReportTemplateError as exc:
        raise SettingsError(f"DECKLOG_CONFIG: {config.path}: reports.templates_dir: {exc}") from None


@dataclass
class Runtime:
    settings: Settings
    config: DecklogConfig
    clock: Clock
    storage: StorageFactory
    store: LogStore
    index: IndexPort
    service: ScopeService
    dispatcher: Dispatcher
    alarm: Alarm
    reports: ReportTemplates = field(default_factory=ReportTemplates)  # compiled once; [reports] templates_dir
    api_keys: ApiKeys | None = None  # the REST API's tokens and idempotent replies
    description: ApiDescription = field(default_factory=ApiDescription)
    """The REST API's OpenAPI registry: every door that serves an /api route adds its operations here."""

    @classmethod
    async def open(
        cls,
        settings: Settings,
        *,
        config: DecklogConfig | None = None,
        clock: Clock | None = None,
        alarm: Alarm | None = None,
        retry: RetryPolicy | None = None,
        topic_kinds: Mapping[str, Sequence[str]] = TOPIC_KINDS,
    ) -> Runtime:
        """``topic_kinds``: which entry kinds get rows in which topics (``decklog serve`` gives a topic whose sender
        is not configured none: bot/topics.py; a command writes rows for every topic, since it cannot know)."""
        config = config or load_config(settings.resolved_config_path)
        reports = report_templates(config)
        clock = clock or SystemClock()
        data_dir = Path(settings.data_dir)
        data_dir.mkdir(parents=True, exist_ok=True)
        log_key = settings.log_key.get_secret_value() if settings.log_key else None
        storage = storage_for(database_url=settings.database_url, data_dir=data_dir, log_key=log_key)
        store = await storage.log_store(topics=OUTBOX_TOPICS, topic_kinds=topic_kinds, clock=clock)
        try:
            index = await storage.index()
        except BaseException:
            await store.close()
            await storage.close()
            raise
        alarm = alarm or AsyncioAlarm()
        dispatcher = Dispatcher(store, [], policy=retry, alarm=alarm, cursors=storage.cursor_claims())
        dispatcher.register(IndexSender(index, store))
        service = ScopeService(store, index, declarer_role=config.slack.declarer_role)
        api_keys = await storage.api_keys()
        return cls(settings, config, clock, storage, store, index, service, dispatcher, alarm, reports, api_keys)

    async def close(self) -> None:
        await self.dispatcher.stop()
        if self.api_keys is not None:
            await self.api_keys.close()
        await self.index.close()
        await self.store.close()
        await self.storage.close()
