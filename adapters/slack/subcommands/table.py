"""The ``/incident`` subcommands as one table: parsing, ``help`` and dispatch all come from its rows.

Adding a subcommand is one row here plus its handler (``handlers.py``) and, if it takes arguments, their parser
(``adapters.slack.grammar``). The rows' order is the order of ``help``; a row with ``same_line`` stays on the
help line of the row before it, and neighbouring rows with the same summary share one help item
(``approve <id>`` / ``deny <id> [reason]``).
"""

from __future__ import annotations

from dataclasses import dataclass

from decklog.adapters.slack import grammar, render
from decklog.adapters.slack.grammar import ArgParser, Command, ScopeRule, UsageError
from decklog.adapters.slack.render import Block
from decklog.adapters.slack.subcommands import handlers
from decklog.adapters.slack.subcommands import oncall as oncall_commands
from decklog.adapters.slack.subcommands.handlers import Call, Handler, Reply

HEAD = "*Usage:* `/incident <subcommand>` in a channel, or `@decklog <subcommand>` in an incident thread"
FOOT = "Outside an incident's thread or channel, add the scope: `/incident sev 1 incident/payments-5xx`."


@dataclass(frozen=True)
class Subcommand:
    name: str
    usage: str  # what follows the name's place in help, e.g. "sev <1-4>"
    summary: str  # "set the severity" ("" for none)
    args: ArgParser
    handler: Handler
    needs_scope: bool = False  # run in a scope: explicit, the thread's or channel's, else a picker
    scope_rule: ScopeRule | None = None  # how a scope id is found in the line (default: one_scope if needs_scope)
    aliases: tuple[str, ...] = ()
    same_line: bool = False

    def split_scope(self, rest: list[str]) -> tuple[str | None, list[str]]:
        rule = self.scope_rule or (grammar.one_scope if self.needs_scope else grammar.no_scope)
        return rule(rest)


async def show_help(_call: Call) -> Reply:
    return Reply("decklog commands", usage_blocks())


TABLE: tuple[Subcommand, ...] = (
    Subcommand(
        "declare",
        "declare <title> [sev1-4] [--channel]",
        "open an incident (no title: a form)",
        grammar.declare_args,
        handlers.declare,
        aliases=("new", "open"),
    ),
    Subcommand(
        "status",
        "status [investigating|identified|mitigated|monitoring]",
        "show or set the status",
        grammar.status_args,
        handlers.status,
        needs_scope=True,
    ),
    Subcommand(
        "sev", "sev <1-4>", "set the severity", grammar.sev_args, handlers.severity, True, aliases=("severity",)
    ),
    Subcommand(
        "role",
        "role <role> @user",
        "assign a role (commander, comms, ops, scribe)",
        grammar.role_args,
        handlers.role,
        True,
        same_line=True,
    ),
    Subcommand(
        "handover",
        "handover <role> @user",
        "hand a role over (they get the catch-up)",
        grammar.handover_args,
        handlers.handover,
        True,
        same_line=True,
    ),
    Subcommand(
        "resolve", "resolve [summary]", "resolve", grammar.resolve_args, handlers.resolve, True, aliases=("close",)
    ),
    Subcommand(
        "timeline", "timeline", "the last entries", grammar.timeline_args, handlers.timeline, True, same_line=True
    ),
    Subcommand(
        "list",
        "list",
        "open incidents",
        grammar.no_args("list"),
        handlers.open_incidents,
        aliases=("ls",),
        same_line=True,
    ),
    Subcommand(
        "search",
        "search <words>",
        "search past incidents (only you see it)",
        grammar.search_args,
        handlers.search,
        aliases=("find",),
        same_line=True,
    ),
    Subcommand(
        "link", "link <scope>", "link another scope", grammar.link_args, handlers.link, True, grammar.link_scopes
    ),
    Subcommand("ask", "ask <question>", "ask the agent", grammar.ask_args, handlers.ask, True, same_line=True),
    *(
        Subcommand(
            kind,
            f"{kind} <text>",
            "record the goal, a constraint, a decision or a hypothesis",
            grammar.record_args(kind),
            handlers.record,
            True,
        )
        for kind in handlers.RECORD_KINDS
    ),
    Subcommand(
        "evidence",
        "evidence <text>",
        "record evidence (as pinning a message does)",
        grammar.record_args("evidence"),
        handlers.evidence,
        True,
    ),
    Subcommand(
        "obligation",
        "obligation <text>",
        "open an obligation: work that must not be forgotten",
        grammar.record_args("obligation"),
        handlers.obligation,
        True,
    ),
    Subcommand(
        "follow-up",
        "follow-up <text> [@owner] [due YYYY-MM-DD]",
        "a follow-up, filed in the team's tracker",
        grammar.follow_up_args,
        handlers.follow_up,
        True,
        aliases=("followup",),
    ),
    Subcommand(
        "obligations",
        "obligations",
        "open obligations: close each one, or keep it as a follow-up",
        grammar.no_args("obligations"),
        handlers.obligations,
        True,
        aliases=("todo",),
    ),
    Subcommand(
        "done",
        "done <obligation>",
        "close an open obligation (`follow-up <obligation>` keeps it as a follow-up)",
        grammar.done_args,
        handlers.obligation_done,
        True,
        same_line=True,
    ),
    Subcommand(
        "run",
        "run <action> [key=value …]",
        "propose a catalog action",
        grammar.run_args,
        handlers.run_action,
        True,
    ),
    Subcommand(
        "actions", "actions", "the action catalog", grammar.no_args("actions"), handlers.list_actions, same_line=True
    ),
    Subcommand(
        "catchup",
        "catchup",
        "catch me up (only you see it)",
        grammar.catchup_args,
        handlers.catchup,
        True,
        aliases=("catch", "catch-up"),
        same_line=True,
    ),
    Subcommand("approve", "approve <id>", "decide a parked action", grammar.decision_args("approve"), handlers.decide),
    Subcommand("deny", "deny <id> [reason]", "decide a parked action", grammar.decision_args("deny"), handlers.decide),
    Subcommand(
        "compensate",
        "compensate <run>",
        "undo a run",
        grammar.compensate_args,
        handlers.compensate,
        True,
        same_line=True,
    ),
    Subcommand(
        "export",
        "export [md|json|html]",
        "upload the post-incident report",
        grammar.export_args,
        handlers.export,
        True,
    ),
    Subcommand(
        "oncall",
        "oncall [schedule]",
        "who is on call (`oncall override <schedule> @user 4h` covers a shift)",
        oncall_commands.oncall_args,
        oncall_commands.oncall,
    ),
    Subcommand(
        "page",
        "page [policy|@user]",
        "page someone now (no approval)",
        oncall_commands.page_args,
        oncall_commands.page,
        True,
        same_line=True,
    ),
    Subcommand(
        "ack",
        "ack",
        "acknowledge the page",
        oncall_commands.ack_args,
        oncall_commands.ack,
        True,
        aliases=("acknowledge",),
        same_line=True,
    ),
    Subcommand("help", "help", "", grammar.no_args("help"), show_help, aliases=("?",), same_line=True),
)

BY_NAME = {row.name: row for row in TABLE}
ALIASES = {alias: row.name for row in TABLE for alias in row.aliases}


def lookup(name: str) -> Subcommand | None:
    return BY_NAME.get(ALIASES.get(name, name))


def parse(text: str) -> Command:
    """Parse one command line (no text: ``help``). Raises ``UsageError`` with a precise reason."""
    raw = " ".join(text.split())
    tokens = raw.split(" ") if raw else []
    if not tokens:
        return Command("help", raw=raw)
    row = lookup(tokens[0].lower())
    if row is None:
        raise UsageError(f"unknown subcommand `{tokens[0]}`")
    scope, rest = row.split_scope(tokens[1:])
    return Command(row.name, scope=scope, args=row.args(rest), raw=raw)


def usage_text() -> str:
    """The help text: one bullet line per group of rows, in the table's order."""
    lines: list[list[str]] = []
    for i, row in enumerate(TABLE):
        merged = i > 0 and row.summary and TABLE[i - 1].summary == row.summary
        if merged:
            continue
        usages = [row.usage]
        for later in TABLE[i + 1 :]:
            if not row.summary or later.summary != row.summary:
                break
            usages.append(later.usage)
        item = " / ".join(f"`{u}`" for u in usages) + (f" — {row.summary}" if row.summary else "")
        if row.same_line and lines:
            lines[-1].append(item)
        else:
            lines.append([item])
    return "\n".join([HEAD, *("• " + "   • ".join(items) for items in lines), FOOT])


def usage_blocks(reason: str = "") -> list[Block]:
    """Help as blocks, after a warning that says what was wrong (a ``UsageError``), if any."""
    return render.usage(usage_text(), reason)
