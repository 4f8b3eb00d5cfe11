"""The ``/incident`` grammar, shared by the slash command and by @mentions in a thread. Pure: text in, command out.

    declare <title> [sev1-4] [--channel]     status [investigating|identified|mitigated|monitoring]
    sev <1-4>                                 role <role> @user
    resolve [summary]                         timeline
    list                                      link <scope>
    ask <question>                            export [md|json|html]
    approve <id>                              deny <id> [reason]
    compensate <run>                          help

Any token that looks like a scope id (``incident/payments-5xx``) names the scope; otherwise the scope comes from
the thread or dedicated channel, or the user is offered a picker of open incidents.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from core.errors import InvalidInput
from core.service import parse_severity

SCOPE_TOKEN = re.compile(r"^(?:incident|change)/[A-Za-z0-9][A-Za-z0-9._-]*$")
USER_TOKEN = re.compile(r"^<@([UW][A-Z0-9]+)(?:\|([^>]*))?>$")
SEV_TOKEN = re.compile(r"^(?:sev|p)?([1-4])$", re.IGNORECASE)

USAGE = """*Usage:* `/incident <subcommand>` in a channel, or `@decklog <subcommand>` in an incident thread
• `declare <title> [sev1-4] [--channel]` — open an incident (no title: a form)
• `status [investigating|identified|mitigated|monitoring]` — show or set the status
• `sev <1-4>` — set the severity   • `role <role> @user` — assign a role (commander, comms, ops, scribe)
• `resolve [summary]` — resolve   • `timeline` — the last entries   • `list` — open incidents
• `link <scope>` — link another scope   • `ask <question>` — ask the agent
• `approve <id>` / `deny <id> [reason]` — decide a parked action   • `compensate <run>` — undo a run
• `export [md|json|html]` — upload the post-incident report   • `help`
Outside an incident's thread or channel, add the scope: `/incident sev 1 incident/payments-5xx`."""

SUBCOMMANDS = (
    "declare",
    "status",
    "sev",
    "role",
    "resolve",
    "timeline",
    "list",
    "link",
    "ask",
    "export",
    "approve",
    "deny",
    "compensate",
    "help",
)
ALIASES = {"severity": "sev", "new": "declare", "open": "declare", "close": "resolve", "ls": "list", "?": "help"}
NEEDS_SCOPE = ("status", "sev", "role", "resolve", "timeline", "link", "ask", "export", "compensate")


@dataclass(frozen=True)
class Command:
    name: str
    scope: str | None = None
    args: dict[str, str] = field(default_factory=dict)
    raw: str = ""


class UsageError(InvalidInput):
    """The text does not parse; the message says what is wrong and the usage follows it."""


def strip_mention(text: str, bot_user_id: str | None) -> str:
    """``"<@U0BOT> sev 1"`` → ``"sev 1"`` (only the bot's own mention is removed)."""
    text = text.strip()
    if bot_user_id:
        text = re.sub(rf"^\s*<@{re.escape(bot_user_id)}(?:\|[^>]*)?>[:,]?\s*", "", text)
    return text.strip()


def parse(text: str) -> Command:
    """Parse one command line. Raises ``UsageError`` with a precise reason."""
    raw = " ".join(text.split())
    tokens = raw.split(" ") if raw else []
    if not tokens:
        return Command("help", raw=raw)
    head = tokens[0].lower()
    name = ALIASES.get(head, head)
    if name not in SUBCOMMANDS:
        raise UsageError(f"unknown subcommand `{tokens[0]}`")
    rest = tokens[1:]
    scope = None
    if name not in ("declare", "list", "help", "approve", "deny"):
        scopes = [t for t in rest if SCOPE_TOKEN.match(t)]
        if len(scopes) > (1 if name != "link" else 2):
            raise UsageError("more than one scope id given")
        if name == "link":
            if not scopes:
                raise UsageError("`link` needs the scope to link, e.g. `link change/r2026-09-19-4`")
            other = scopes[0]
            scope = scopes[1] if len(scopes) == 2 else None
            return Command("link", scope=scope, args={"other": other}, raw=raw)
        if scopes:
            scope = scopes[0]
            rest = [t for t in rest if t != scope]
    return Command(name, scope=scope, args=_args(name, rest), raw=raw)


def _args(name: str, rest: list[str]) -> dict[str, str]:
    text = " ".join(rest)
    if name == "declare":
        channel = any(t.lower() in ("--channel", "channel") for t in rest[-2:])
        words = [t for t in rest if t.lower() not in ("--channel",)]
        severity = ""
        if words and SEV_TOKEN.match(words[-1]) and len(words) > 1:
            severity = str(parse_severity(words.pop()))
        return {"title": " ".join(words), "severity": severity, "channel": "yes" if channel else ""}
    if name == "sev":
        if len(rest) != 1 or not SEV_TOKEN.match(rest[0]):
            raise UsageError("`sev` takes one severity from 1 (worst) to 4, e.g. `sev 2`")
        return {"severity": str(parse_severity(rest[0]))}
    if name == "status":
        return {"status": rest[0].lower()} if rest else {}
    if name == "role":
        if len(rest) != 2:
            raise UsageError("`role` takes a role and a person, e.g. `role commander @alice`")
        user = USER_TOKEN.match(rest[1])
        if not user:
            raise UsageError(f"`{rest[1]}` is not a Slack mention; use `@name`")
        return {"role": rest[0].lower(), "user_id": user.group(1), "user_name": user.group(2) or ""}
    if name in ("resolve",):
        return {"summary": text}
    if name == "ask":
        if not text:
            raise UsageError("`ask` needs a question, e.g. `ask what changed in the last hour?`")
        return {"question": text}
    if name == "export":
        fmt = (rest[0].lower() if rest else "md").lstrip(".")
        if fmt not in ("md", "json", "html") or len(rest) > 1:
            raise UsageError("`export` takes one format: md, json or html")
        return {"format": fmt}
    if name in ("approve", "deny"):
        if not rest:
            raise UsageError(f"`{name}` needs a proposal id, e.g. `{name} p-3f2a`")
        return {"proposal_id": rest[0], "reason": " ".join(rest[1:])}
    if name == "compensate":
        if len(rest) != 1:
            raise UsageError("`compensate` takes one run id, e.g. `compensate run-7c1e`")
        return {"run_id": rest[0]}
    if rest and name in ("timeline", "list", "help"):
        if name == "timeline" and len(rest) == 1 and rest[0].isdigit():
            return {"limit": rest[0]}
        raise UsageError(f"`{name}` takes no arguments")
    return {}
