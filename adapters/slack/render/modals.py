"""Ephemeral helpers and the declare modal: help, the scope picker, the declare form."""

from __future__ import annotations

from typing import Any

from decklog.adapters.slack.ids import Action, DeclareField, View
from decklog.adapters.slack.render.blocks import Block, esc, section, severity_options
from decklog.core.store.ports import ScopeRow


def usage(text: str, reason: str = "") -> list[Block]:
    """The help ``text`` (``adapters.slack.subcommands.usage_text``), after a warning saying what was wrong."""
    blocks = [section(f":warning: {esc(reason)}")] if reason else []
    return [*blocks, section(text)]


def picker(rows: list[ScopeRow], command_text: str) -> list[Block]:
    """Which incident? An ephemeral select of open incidents that re-runs the command with the choice."""
    if not rows:
        return [section("There is no open incident. `/incident declare <title>` opens one.")]
    options = [
        {
            "text": {"type": "plain_text", "text": f"{r.title[:60]} ({r.id})"[:75]},
            "value": f"{r.id} {command_text}"[:150],
        }
        for r in rows[:100]
    ]
    return [
        {
            "type": "section",
            "text": {"type": "mrkdwn", "text": f"Which incident is `{esc(command_text)}` for?"},
            "accessory": {
                "type": "static_select",
                "action_id": Action.PICK_SCOPE,
                "placeholder": {"type": "plain_text", "text": "Open incidents"},
                "options": options,
            },
        }
    ]


def declare_modal(channel_id: str, title: str = "") -> dict[str, Any]:
    return {
        "type": "modal",
        "callback_id": View.DECLARE,
        "private_metadata": channel_id,
        "title": {"type": "plain_text", "text": "Declare an incident"},
        "submit": {"type": "plain_text", "text": "Declare"},
        "close": {"type": "plain_text", "text": "Cancel"},
        "blocks": [_title_input(title), _severity_input(), _options_input()],
    }


def _title_input(title: str) -> Block:
    return {
        "type": "input",
        "block_id": DeclareField.TITLE_BLOCK,
        "label": {"type": "plain_text", "text": "What is happening?"},
        "element": {
            "type": "plain_text_input",
            "action_id": DeclareField.TITLE,
            "initial_value": title,
            "max_length": 150,
            "placeholder": {"type": "plain_text", "text": "Elevated 5xx on payments"},
        },
    }


def _severity_input() -> Block:
    return {
        "type": "input",
        "block_id": DeclareField.SEVERITY_BLOCK,
        "optional": True,
        "label": {"type": "plain_text", "text": "Severity"},
        "element": {"type": "static_select", "action_id": DeclareField.SEVERITY, "options": severity_options()},
    }


def _options_input() -> Block:
    return {
        "type": "input",
        "block_id": DeclareField.OPTIONS_BLOCK,
        "optional": True,
        "label": {"type": "plain_text", "text": "Options"},
        "element": {
            "type": "checkboxes",
            "action_id": DeclareField.OPTIONS,
            "options": [
                {
                    "text": {"type": "plain_text", "text": "Create a dedicated channel"},
                    "value": "dedicated_channel",
                }
            ],
        },
    }
