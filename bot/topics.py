"""Which outbox topics get rows: a sender that is not configured gets none.

Every entry gets a row per topic of ``bot.runtime.OUTBOX_TOPICS`` (less the kinds a topic filters out,
``TOPIC_KINDS``). Three senders act only when configured: ``paging`` (a ``pagerduty`` action available in the
catalog, i.e. ``DECKLOG_PAGERDUTY_ROUTING_KEY``), ``trackers`` (GitHub Issues or Jira settings) and ``webhooks``
(``[[webhooks]]``). ``decklog serve`` gives a topic whose sender is not configured no rows at all
(``server_topic_kinds``: no kind feeds it), and registers ``NotConfigured`` for ``paging`` and ``trackers`` so that
rows written anyway (by an older version, or by a ``decklog`` command, which writes rows for every topic because
it cannot know the server's configuration) are done, not pending for ever; the webhooks sender is always there and
does the same with no endpoint. ``decklog doctor`` counts such rows in one line per topic instead of listing them.
See docs/decisions/0180-unconfigured-senders-get-no-rows.md.
"""

from __future__ import annotations

from decklog.adapters.executors.pagerduty import TYPE as PAGERDUTY
from decklog.bot.actions import build_catalog
from decklog.bot.config import DecklogConfig
from decklog.bot.runtime import TOPIC_KINDS
from decklog.bot.settings import Settings
from decklog.bot.trackers import tracker_name


def unconfigured_topics(settings: Settings, config: DecklogConfig) -> dict[str, str]:
    """The topics whose sender is not configured here, each with what would configure it."""
    out: dict[str, str] = {}
    catalog = build_catalog(settings, config)
    if not any(spec.available and spec.executor.type == PAGERDUTY for spec in catalog):
        out["paging"] = "no pagerduty action is available (DECKLOG_PAGERDUTY_ROUTING_KEY)"
    if tracker_name(settings) is None:
        out["trackers"] = "no tracker (DECKLOG_GITHUB_REPO and DECKLOG_GITHUB_TOKEN, or DECKLOG_JIRA_*)"
    if not config.webhooks:
        out["webhooks"] = "no [[webhooks]] in decklog.toml"
    return out


def server_topic_kinds(unconfigured: dict[str, str]) -> dict[str, tuple[str, ...]]:
    """``TOPIC_KINDS`` with no kind at all for each topic in ``unconfigured``: they get no rows."""
    return {**TOPIC_KINDS, **{topic: () for topic in unconfigured}}
