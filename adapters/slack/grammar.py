"""The pieces of the ``/incident`` grammar, shared by the slash command and by @mentions in a thread. Pure.

The subcommands themselves (name, usage, arguments, scope, handler) are rows of one table,
``adapters.slack.subcommands.table``; this module holds what the rows are made of: the tokens, the scope rules
and one argument parser per subcommand (``list[str]`` in, ``dict[str, str]`` out, ``UsageError`` with a precise
reason otherwise).

Any token that looks like a scope id (``incident/payments-5xx``) names the scope; otherwise the scope comes from
the thread or dedicated channel, or the user is offered a picker of open incidents.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

from decklog.core.errors import InvalidInput
from decklog.core.service import parse_severity

SCOPE_TOKEN = re.compile(r"^(?:incident|change)/[A-Za-z0-9][A-Za-z0-9._-]*$")
USER_TOKEN = re.compile(r"^<@([UW][A-Z0-9]+)(?:\|([^>]*))?>$")
SEV_TOKEN = re.compile(r"^(?:sev|p)?([1-4])$", re.IGNORECASE)


@dataclass(frozen=True)
class Command:
    name: str
    scope: str | None = None
    args: dict[str, str] = field(default_factory=dict)
    raw: str = ""


class UsageError(InvalidInput):
    """The text does not parse; the message says what is wrong and the usage follows it."""


ArgParser = Callable[[list[str]], dict[str, str]]
ScopeRule = Callable[[list[str]], tuple[str | None, list[str]]]  # tokens → (scope, the other tokens)


def strip_mention(text: str, bot_user_id: str | None) -> str:
    """``"<@U0BOT> sev 1"`` → ``"sev 1"`` (only the bot's own mention is removed)."""
    text = text.strip()
    if bot_user_id:
        text = re.sub(rf"^\s*<@{re.escape(bot_user_id)}(?:\|[^>]*)?>[:,]?\s*", "", text)
    return text.strip()


# -- scope rules --------------------------------------------------------------------------------------------------


def no_scope(rest: list[str]) -> tuple[str | None, list[str]]:
    """Scope ids are ordinary words here (a title, a reason)."""
    return None, rest


def one_scope(rest: list[str]) -> tuple[str | None, list[str]]:
    """At most one scope id, anywhere in the line."""
    scopes = [t for t in rest if SCOPE_TOKEN.match(t)]
    if len(scopes) > 1:
        raise UsageError("more than one scope id given")
    if not scopes:
        return None, rest
    return scopes[0], [t for t in rest if t != scopes[0]]


def link_scopes(rest: list[str]) -> tuple[str | None, list[str]]:
    """``link <other> [scope]``: the first scope id is the one to link, a second one is the scope."""
    scopes = [t for t in rest if SCOPE_TOKEN.match(t)]
    if len(scopes) > 2:
        raise UsageError("more than one scope id given")
    if not scopes:
        raise UsageError("`link` needs the scope to link, e.g. `link change/r2026-09-19-4`")
    return (scopes[1] if len(scopes) == 2 else None), [scopes[0]]


# -- argument parsers ---------------------------------------------------------------------------------------------


def declare_args(rest: list[str]) -> dict[str, str]:
    channel = any(t.lower() in ("--channel", "channel") for t in rest[-2:])
    words = [t for t in rest if t.lower() not in ("--channel",)]
    severity = ""
    if words and SEV_TOKEN.match(words[-1]) and len(words) > 1:
        severity = str(parse_severity(words.pop()))
    return {"title": " ".join(words), "severity": severity, "channel": "yes" if channel else ""}


def status_args(rest: list[str]) -> dict[str, str]:
    return {"status": rest[0].lower()} if rest else {}


def sev_args(rest: list[str]) -> dict[str, str]:
    if len(rest) != 1 or not SEV_TOKEN.match(rest[0]):
        raise UsageError("`sev` takes one severity from 1 (worst) to 4, e.g. `sev 2`")
    return {"severity": str(parse_severity(rest[0]))}


def role_args(rest: list[str]) -> dict[str, str]:
    if len(rest) != 2:
        raise UsageError("`role` takes a role and a person, e.g. `role commander @alice`")
    user = USER_TOKEN.match(rest[1])
    if not user:
        raise UsageError(f"`{rest[1]}` is not a Slack mention; use `@name`")
    return {"role": rest[0].lower(), "user_id": user.group(1), "user_name": user.group(2) or ""}


def resolve_args(rest: list[str]) -> dict[str, str]:
    return {"summary": " ".join(rest)}


def timeline_args(rest: list[str]) -> dict[str, str]:
    if not rest:
        return {}
    if len(rest) == 1 and rest[0].isdigit():
        return {"limit": rest[0]}
    raise UsageError("`timeline` takes no arguments")


def link_args(rest: list[str]) -> dict[str, str]:
    return {"other": rest[0]}


def ask_args(rest: list[str]) -> dict[str, str]:
    if not rest:
        raise UsageError("`ask` needs a question, e.g. `ask what changed in the last hour?`")
    return {"question": " ".join(rest)}


def export_args(rest: list[str]) -> dict[str, str]:
    fmt = (rest[0].lower() if rest else "md").lstrip(".")
    if fmt not in ("md", "json", "html") or len(rest) > 1:
        raise UsageError("`export` takes one format: md, json or html")
    return {"format": fmt}


def decision_args(name: str) -> ArgParser:
    """``approve <id>`` / ``deny <id> [reason]``."""

    def parse(rest: list[str]) -> dict[str, str]:
        if not rest:
            raise UsageError(f"`{name}` needs a proposal id, e.g. `{name} p-3f2a`")
        return {"proposal_id": rest[0], "reason": " ".join(rest[1:])}

    return parse


def compensate_args(rest: list[str]) -> dict[str, str]:
    if len(rest) != 1:
        raise UsageError("`compensate` takes one run id, e.g. `compensate run-7c1e`")
    return {"run_id": rest[0]}


def no_args(name: str) -> ArgParser:
    def parse(rest: list[str]) -> dict[str, str]:
        if rest:
            raise UsageError(f"`{name}` takes no arguments")
        return {}

    return parse


# -- the typed record, actions on request, catch-up ---------------------------------------------------------------

PARAM_TOKEN = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)=(.*)$")


def record_args(kind: str) -> ArgParser:
    """``goal|constraint|decision|hypothesis <text>``."""

    def parse(rest: list[str]) -> dict[str, str]:
        if not rest:
            raise UsageError(f"`{kind}` needs a text, e.g. `{kind} {RECORD_EXAMPLES[kind]}`")
        return {"text": " ".join(rest)}

    return parse


RECORD_EXAMPLES = {
    "goal": "restore checkout above 99%",
    "constraint": "no deploys to payments without the commander",
    "decision": "roll back r41",
    "hypothesis": "the db pool change exhausts connections",
    "evidence": "pool at 100/100 on db-1 since 14:02",
    "obligation": "check the replica lag before failing over",
}


def run_args(rest: list[str]) -> dict[str, str]:
    """``run <action> [key=value …]``: the action's name, then its parameters (a value may hold spaces: words
    without ``=`` continue the previous value, so ``message=We are looking into it`` works)."""
    if not rest or "=" in rest[0]:
        raise UsageError("`run` needs an action, e.g. `run status_page_update status=investigating message=…`")
    out = {"action": rest[0]}
    last = ""
    for token in rest[1:]:
        m = PARAM_TOKEN.match(token)
        if m:
            last = m.group(1)
            if last == "action" or f"param.{last}" in out:
                raise UsageError(f"parameter `{last}` given twice")
            out[f"param.{last}"] = m.group(2)
        elif last:
            out[f"param.{last}"] += " " + token
        else:
            raise UsageError(f"`{token}` is not a parameter; write `name=value`")
    return out


def catchup_args(rest: list[str]) -> dict[str, str]:
    """``catchup``, and the mention phrase ``catch me up`` (``catch`` is an alias; ``me up`` is allowed)."""
    if rest and [t.lower() for t in rest] not in (["me", "up"], ["up"]):
        raise UsageError("`catchup` takes no arguments (or say `catch me up`)")
    return {}


# -- follow-ups in the team's tracker -----------------------------------------------------------------------------


def follow_up_args(rest: list[str]) -> dict[str, str]:
    """``follow-up <text> [@owner] [due YYYY-MM-DD]`` → text, owner, due (validated: a bad date is a usage error)."""
    from decklog.core.follow_ups import parse_follow_up

    try:
        p = parse_follow_up(" ".join(rest))
    except InvalidInput as exc:
        raise UsageError(str(exc)) from None
    return {"text": p.text, "owner": p.owner, "due": p.due}


def done_args(rest: list[str]) -> dict[str, str]:
    """``done <obligation id>``: close one open obligation."""
    if len(rest) != 1:
        raise UsageError("`done` takes one obligation id, e.g. `done ob-1a2b3c` (`obligations` lists them)")
    return {"obligation": rest[0]}


# -- search and handover -------------------------------------------------------------------------------------------


def search_args(rest: list[str]) -> dict[str, str]:
    words = " ".join(rest).strip()
    if not words:
        raise UsageError("`search` needs words to look for, e.g. `search payments 5xx`")
    if len(words) > 200:
        raise UsageError("`search` takes at most 200 characters")
    return {"words": words}


def handover_args(rest: list[str]) -> dict[str, str]:
    if len(rest) != 2:
        raise UsageError("`handover` takes a role and a person, e.g. `handover commander @bob`")
    user = USER_TOKEN.match(rest[1])
    if not user:
        raise UsageError(f"`{rest[1]}` is not a Slack mention; use `@name`")
    return {"role": rest[0].lower(), "user_id": user.group(1), "user_name": user.group(2) or ""}
