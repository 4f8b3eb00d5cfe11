"""Block Kit rendering: pure functions from core data (state, entries, index rows) to Slack message payloads.

Nothing here does I/O. The sender decides *when* to post; this package decides *what it looks like*:
``blocks`` (the shared pieces), ``header``, ``replies`` (one renderer per entry kind, in a table),
``proposals``, ``modals`` (help, the scope picker, the declare form) and ``home`` (App Home).
"""

from decklog.adapters.slack.render.blocks import (
    SEV_EMOJI,
    STATUS_EMOJI,
    Block,
    Outgoing,
    button,
    context,
    date,
    esc,
    section,
    severity_label,
    severity_options,
)
from decklog.adapters.slack.render.header import CONSTRAINTS_SHOWN, header
from decklog.adapters.slack.render.home import home_view
from decklog.adapters.slack.render.modals import declare_modal, picker, usage
from decklog.adapters.slack.render.proposals import proposal_message, proposal_outcome
from decklog.adapters.slack.render.replies import REPLIES, entry_reply

__all__ = [
    "CONSTRAINTS_SHOWN",
    "REPLIES",
    "SEV_EMOJI",
    "STATUS_EMOJI",
    "Block",
    "Outgoing",
    "button",
    "context",
    "date",
    "declare_modal",
    "entry_reply",
    "esc",
    "header",
    "home_view",
    "picker",
    "proposal_message",
    "proposal_outcome",
    "section",
    "severity_label",
    "severity_options",
    "usage",
]
