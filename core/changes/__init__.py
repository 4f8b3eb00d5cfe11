"""Changes in the log: each deploy or push is a ``change/<id>`` scope, linked to the incidents it may have caused.

``service.py`` records changes and links them to incidents (``ChangeService``), ``facts.py`` holds what a change is
made of in the log (pure functions), and ``links.py`` is the ``changes`` outbox sender that makes the links a
declaration implies (``ChangeLinkSender``). The rest of decklog imports these names from ``core.changes``."""

from decklog.core.changes.facts import (
    CHANGES_ACTOR,
    ChangeFacts,
    ChangeOutcome,
    alert_started,
    change_key,
    change_observation,
    change_scope,
    change_text,
    change_title,
    evidence_text,
    incident_alert_time,
    short_version,
    touched_paths,
)
from decklog.core.changes.links import ChangeLinkSender
from decklog.core.changes.service import ChangeService

__all__ = [
    "CHANGES_ACTOR",
    "ChangeFacts",
    "ChangeLinkSender",
    "ChangeOutcome",
    "ChangeService",
    "alert_started",
    "change_key",
    "change_observation",
    "change_scope",
    "change_text",
    "change_title",
    "evidence_text",
    "incident_alert_time",
    "short_version",
    "touched_paths",
]
