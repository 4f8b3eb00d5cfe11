"""The /incident subcommand table (parsing, help, dispatch) and the Slack listener middleware, without a server."""

from __future__ import annotations

from typing import Any

import pytest

from decklog.adapters.slack import middleware
from decklog.adapters.slack.grammar import UsageError
from decklog.adapters.slack.ports import Where
from decklog.adapters.slack.request import ACTOR, FAILED, KEY, WHERE
from decklog.adapters.slack.subcommands import TABLE, lookup, parse, usage_text
from decklog.core.entries import Actor

HELP = """*Usage:* `/incident <subcommand>` in a channel, or `@decklog <subcommand>` in an incident thread
• `declare <title> [sev1-4] [--channel]` — open an incident (no title: a form)
• `status [investigating|identified|mitigated|monitoring]` — show or set the status
• `sev <1-4>` — set the severity   • `role <role> @user` — assign a role (commander, comms, ops, scribe)   • `handover <role> @user` — hand a role over (they get the catch-up)
• `resolve [summary]` — resolve   • `timeline` — the last entries   • `list` — open incidents   • `search <words>` — search past incidents (only you see it)
• `link <scope>` — link another scope   • `ask <question>` — ask the agent
• `goal <text>` / `constraint <text>` / `decision <text>` / `hypothesis <text>` — record the goal, a constraint, a decision or a hypothesis
• `evidence <text>` — record evidence (as pinning a message does)
• `obligation <text>` — open an obligation: work that must not be forgotten
• `follow-up <text> [@owner] [due YYYY-MM-DD]` — a follow-up, filed in the team's tracker
• `obligations` — open obligations: close each one, or keep it as a follow-up   • `done <obligation>` — close an open obligation (`follow-up <obligation>` keeps it as a follow-up)
• `run <action> [key=value …]` — propose a catalog action   • `actions` — the action catalog   • `catchup` — catch me up (only you see it)
• `approve <id>` / `deny <id> [reason]` — decide a parked action   • `compensate <run>` — undo a run
• `export [md|json|html]` — upload the post-incident report
• `oncall [schedule]` — who is on call (`oncall override <schedule> @user 4h` covers a shift)   • `page [policy|@user]` — page someone now (no approval)   • `ack` — acknowledge the page   • `help`
Outside an incident's thread or channel, add the scope: `/incident sev 1 incident/payments-5xx`."""


def test_help_is_generated_from_the_table_and_reads_as_before() -> None:
    assert usage_text() == HELP
    for row in TABLE:
        assert f"`{row.usage}`" in usage_text()


def test_issue_15_rows_parse_the_typed_record_run_and_catch_me_up() -> None:
    cmd = parse("goal restore checkout above 99% incident/payments-5xx")
    assert (cmd.name, cmd.scope, cmd.args) == ("goal", "incident/payments-5xx", {"text": "restore checkout above 99%"})
    assert parse("decision roll back r41").args == {"text": "roll back r41"}
    run = parse("run status_page_update status=investigating message=We are on it")
    assert run.args == {
        "action": "status_page_update",
        "param.status": "investigating",
        "param.message": "We are on it",
    }
    assert parse("catch me up").name == "catchup" and parse("catchup").name == "catchup"
    assert parse("actions").name == "actions"
    with pytest.raises(UsageError, match="`hypothesis` needs a text"):
        parse("hypothesis")
    with pytest.raises(UsageError, match="not a parameter"):
        parse("run status_page_update investigating")
    with pytest.raises(UsageError, match="given twice"):
        parse("run x a=1 a=2")


def test_every_row_and_alias_parses_to_its_name() -> None:
    assert parse("").name == "help"
    assert parse("severity 2").name == "sev" and parse("ls").name == "list" and parse("close").name == "resolve"
    assert lookup("new") is lookup("declare") and lookup("nope") is None
    with pytest.raises(UsageError, match="unknown subcommand `frob`"):
        parse("frob")


def test_scope_rules_come_from_the_row() -> None:
    assert parse("sev 1 incident/pay-5xx").scope == "incident/pay-5xx"
    assert parse("declare incident/x is down").scope is None  # a title, not a scope
    linked = parse("link change/r1 incident/pay")
    assert (linked.scope, linked.args) == ("incident/pay", {"other": "change/r1"})
    with pytest.raises(UsageError, match="more than one scope id"):
        parse("status incident/a incident/b")
    assert all(row.needs_scope for row in TABLE if row.name in ("status", "sev", "role", "link", "export"))
    assert not any(row.needs_scope for row in TABLE if row.name in ("declare", "list", "help", "approve", "deny"))


class Context(dict[str, Any]):
    pass


async def _run(mw: Any, body: dict[str, Any]) -> tuple[Context, list[str]]:
    context, ran = Context(), []

    async def next_() -> None:
        ran.append("next")

    await mw(body=body, respond=None, client=None, context=context, next=next_)
    return context, ran


class People:
    def __init__(self, fail: bool = False) -> None:
        self.fail = fail
        self.counts: dict[str, int] = {}

    def count(self, name: str) -> None:
        self.counts[name] = self.counts.get(name, 0) + 1

    async def human(self, user_id: str, fallback: str = "") -> Actor:
        if self.fail:
            raise RuntimeError("users.info is down")
        return Actor.human(user_id, fallback or user_id)


async def test_command_middleware_fills_the_context_with_the_exact_key() -> None:
    deps: Any = People()
    body = {"user_id": "U1", "user_name": "alice", "channel_id": "C1", "trigger_id": "t.1", "text": "sev 1"}
    context, ran = await _run(middleware.command_context(deps), body)
    assert context[KEY] == "slack:cmd:t.1" and context[WHERE] == Where(channel="C1", user="U1")
    assert context[ACTOR] == Actor.human("U1", "alice") and ran == ["next"]
    await _run(middleware.counted(deps, "commands"), body)
    assert deps.counts == {"commands": 1}


async def test_action_key_and_a_failing_lookup_is_handed_to_the_listener() -> None:
    body = {
        "user": {"id": "U2", "username": "bob"},
        "channel": {"id": "C9"},
        "message": {"ts": "5.5", "thread_ts": "1.1"},
        "actions": [{"action_id": "incident_resolve", "action_ts": "7.7"}],
    }
    context, _ = await _run(middleware.action_context(People()), body)  # type: ignore[arg-type]
    assert context[KEY] == "slack:act:7.7:U2:incident_resolve"
    assert context[WHERE] == Where(channel="C9", user="U2", thread_ts="1.1", message_ts="5.5")
    failed, ran = await _run(middleware.action_context(People(fail=True)), body)  # type: ignore[arg-type]
    assert isinstance(failed[FAILED], RuntimeError) and ran == ["next"]  # run_work raises it, Bolt sees no gap
