"""Every Slack identifier decklog registers: the command, action ids, view callback ids, event types.

``tests/unit/test_manifest.py`` checks that ``manifest.yml`` and the registered listeners agree with this module.
"""

from __future__ import annotations

from enum import StrEnum

COMMAND = "/incident"


class Action(StrEnum):
    SEVERITY = "incident_severity"  # static_select on the header
    RESOLVE = "incident_resolve"  # button on the header
    EXPORT = "incident_export"  # button on the header
    PICK_SCOPE = "incident_pick_scope"  # picker of open incidents (ephemeral), re-runs the command
    SUGGESTION_ACCEPT = "suggestion_accept"
    SUGGESTION_DISMISS = "suggestion_dismiss"
    PROPOSAL_APPROVE = "proposal_approve"
    PROPOSAL_DENY = "proposal_deny"
    HOME_OPEN = "home_open_incident"  # link buttons in App Home (acked, no effect)
    # answers to agent findings, and the "Record in incident…" message shortcut's kind buttons
    HYPOTHESIS_CONFIRM = "hypothesis_confirm"
    HYPOTHESIS_RULE_OUT = "hypothesis_rule_out"
    OBLIGATION_TAKE = "obligation_take"
    OBLIGATION_DONE = "obligation_done"
    # on each open obligation in the header, files it as a follow-up (value: <scope>|<obligation_id>)
    OBLIGATION_FOLLOW_UP = "obligation_follow_up"
    # the shortcut's kind buttons share one actions block, where Slack wants distinct action ids (invalid_blocks)
    RECORD_AS_GOAL = "record_as_goal"  # value: JSON {scope, kind, ts, text}
    RECORD_AS_CONSTRAINT = "record_as_constraint"
    RECORD_AS_DECISION = "record_as_decision"
    RECORD_AS_HYPOTHESIS = "record_as_hypothesis"
    # on-call pages (a DM to the person paged; value: <scope>|<escalation seq>)
    ONCALL_ACK = "oncall_ack"
    ONCALL_ESCALATE = "oncall_escalate"


RECORD_AS = {
    "goal": Action.RECORD_AS_GOAL,
    "constraint": Action.RECORD_AS_CONSTRAINT,
    "decision": Action.RECORD_AS_DECISION,
    "hypothesis": Action.RECORD_AS_HYPOTHESIS,
}


class Shortcut(StrEnum):
    RECORD = "record_in_incident"  # message shortcut "Record in incident…"


class View(StrEnum):
    DECLARE = "incident_declare"


class DeclareField(StrEnum):
    TITLE_BLOCK = "title"
    TITLE = "title_input"
    SEVERITY_BLOCK = "severity"
    SEVERITY = "severity_input"
    OPTIONS_BLOCK = "options"
    OPTIONS = "options_input"


# Manifest bot events → the OAuth scope each needs (Slack's documented requirements).
EVENT_SCOPES = {
    "app_mention": "app_mentions:read",
    "message.channels": "channels:history",
    "message.groups": "groups:history",
    "reaction_added": "reactions:read",
    "reaction_removed": "reactions:read",  # a 📌 or ✅/❌ taken back
    "pin_added": "pins:read",  # Slack's own pins become evidence, like 📌
    "pin_removed": "pins:read",
    "app_home_opened": None,  # needs no scope
}

# Web API methods decklog calls → the OAuth scope (or scopes) each needs.
METHOD_SCOPES: dict[str, str | tuple[str, ...] | None] = {
    "chat.postMessage": "chat:write",
    "chat.update": "chat:write",
    "chat.postEphemeral": "chat:write",
    "chat.getPermalink": None,
    "conversations.create": "channels:manage",
    "conversations.invite": "channels:manage",
    "conversations.archive": "channels:manage",  # archiving a resolved incident's channel (adapters/slack/sender.py)
    "conversations.list": "channels:read",
    # im:history: an on-call page DM reads its own history before posting (adapters/slack/oncall_dm.py)
    "conversations.history": ("channels:history", "im:history"),
    "conversations.replies": "channels:history",
    "conversations.open": "im:write",  # on-call pages as DMs (adapters/slack/oncall_dm.py)
    # the same method on a DM needs its own scope: a page's DM is looked for before it is posted again
    "conversations.history (im)": "im:history",
    "reactions.add": "reactions:write",
    "reactions.remove": "reactions:write",
    "users.info": "users:read",
    "views.open": None,
    "views.publish": None,
    "files.getUploadURLExternal": "files:write",
    "files.completeUploadExternal": "files:write",
    "files.upload_v2": "files:write",  # slack_sdk's helper over the two methods above
}

COMMAND_SCOPE = "commands"

PIN_REACTIONS = ("pushpin", "round_pushpin")
ACCEPT_REACTIONS = ("white_check_mark", "heavy_check_mark")
DISMISS_REACTIONS = ("x", "negative_squared_cross_mark")
WORKING_REACTION = "fire"
