"""``decklog state`` / ``fork`` / ``replay`` (docs/design.md §9): look at a scope as of any seq, copy it into a fork
that never reaches Slack or executors, and replay it with another reasoner to see what would have differed."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from decklog.adapters.local.slack import FakeSlack
from decklog.core.entries import Actor, Hypothesis, NewEntry
from decklog.core.state import fold_all
from decklog.core.store.sqlite.log_store import SqliteLogStore
from tests.conftest import eventually
from tests.fakes.slack_calls import record_calls, slack_calls
from tests.helpers.serve import BOT_TOKEN, serve_env, start_serve
from tests.unit.test_cli import run

AGENT_FREE = {"DECKLOG_FIRST_TURN_DELAY": "0.5", "DECKLOG_TURN_DEBOUNCE": "0.2"}


def _incident(data: Path, env: dict[str, str] | None = None, *, change: bool = False) -> str:
    if change:  # a recorded change on the service: the rules reasoner's turns then find it
        made = run(
            data, "declare", "--title", "checkout r1", "--scope", "change/checkout-r1", "--service", "checkout", env=env
        )
        assert made.returncode == 0, made.stderr
    out = run(data, "declare", "--title", "Checkout 5xx", "--severity", "2", "--service", "checkout", env=env)
    assert out.returncode == 0, out.stderr
    scope = out.stdout.splitlines()[0]
    for kind, payload in [
        ("observation", {"text": "5xx at 9% on checkout", "service": "checkout"}),
        ("message", {"text": "looking at the load balancer"}),
        ("goal", {"text": "error rate under 1%"}),
        ("message", {"text": "rolled nothing back yet"}),
    ]:
        done = run(data, "append", scope, kind, "--json", json.dumps(payload), env=env)
        assert done.returncode == 0, done.stderr
    return scope


def _timeline(data: Path, scope: str, env: dict[str, str] | None = None) -> list[dict[str, object]]:
    out = run(data, "timeline", scope, "--json", env=env)
    assert out.returncode == 0, out.stderr
    entries: list[dict[str, object]] = json.loads(out.stdout)
    return entries


def _check_fork(data: Path, scope: str, at: int, env: dict[str, str] | None = None, new: str = "") -> str:
    args = ["fork", scope, "--at", str(at), *(["--scope", new] if new else [])]
    out = run(data, *args, env=env)
    assert out.returncode == 0, out.stderr
    fork = out.stdout.splitlines()[0]
    assert fork == (new or f"{scope}-fork-1") or fork.startswith(f"{scope}-fork-")
    verified = run(data, "verify", fork, env=env)
    assert verified.returncode == 0, verified.stderr
    source, copied = _timeline(data, scope, env), _timeline(data, fork, env)
    assert len(copied) == at + 1
    assert [(e["kind"], e["text"], e["actor"], e["payload"], e["refs"], e["at"]) for e in copied[:at]] == [
        (e["kind"], e["text"], e["actor"], e["payload"], e["refs"], e["at"]) for e in source[:at]
    ]
    assert {e["id"] for e in copied}.isdisjoint({e["id"] for e in source})  # a new chain
    marker = copied[at]
    assert marker["kind"] == "forked" and marker["payload"] == {"source": scope, "seq": at}
    state = json.loads(run(data, "state", fork, "--json", env=env).stdout)
    assert state["forked_from"] == scope and state["forked_at"] == at
    return fork


def test_state_at_several_seqs_equals_the_fold(tmp_path: Path) -> None:
    data = tmp_path / "data"
    scope = _incident(data)
    entries = _timeline(data, scope)
    store_entries = asyncio.run(_read(data, scope))
    for at in (1, 2, 4, len(entries)):
        out = run(data, "state", scope, "--at", str(at), "--json")
        assert out.returncode == 0, out.stderr
        assert json.loads(out.stdout) == fold_all(scope, store_entries[:at]).to_json()
    whole = json.loads(run(data, "state", scope, "--json").stdout)
    assert whole["version"] == len(entries) and "forked_from" not in whole  # empty = absent (decision 47)
    for bad in ("0", "99", "x"):
        out = run(data, "state", scope, "--at", bad, "--json")
        assert out.returncode != 0 and len(out.stderr.strip().splitlines()) == 1, out.stderr
        assert "Traceback" not in out.stderr


async def _read(data: Path, scope: str) -> list[object]:
    store = SqliteLogStore(data)
    try:
        return list(await store.read(scope))
    finally:
        await store.close()


def test_fork_copies_verifies_marks_and_never_reuses_an_id(tmp_path: Path) -> None:
    data = tmp_path / "data"
    scope = _incident(data)
    first = _check_fork(data, scope, 3)
    assert first == f"{scope}-fork-1"
    second = _check_fork(data, scope, 5)
    assert second == f"{scope}-fork-2"
    _check_fork(data, scope, 2, new="incident/what-if")
    taken = run(data, "fork", scope, "--at", "2", "--scope", "incident/what-if")
    assert taken.returncode == 1 and "already exists" in taken.stderr
    for bad in (["--at", "0"], ["--at", "9"], []):
        out = run(data, "fork", scope, *bad)
        assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert run(data, "verify", "--all").returncode == 0


def test_replay_with_the_same_reasoner_shows_no_diff_and_another_reasoner_does(tmp_path: Path) -> None:
    data = tmp_path / "data"
    scope = _incident(data, AGENT_FREE, change=True)
    # The "original": the rules reasoner's turns over the recorded inputs (a replay writes them into a fork).
    made = run(data, "replay", scope, env=AGENT_FREE)
    assert made.returncode == 0, made.stderr
    original = made.stdout.splitlines()[0]
    assert any(e["actor"]["type"] == "agent" for e in _timeline(data, original, AGENT_FREE))  # type: ignore[index]
    again = run(data, "replay", original, "--fail-on-diff", env=AGENT_FREE)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "no difference in the agents' decisions" in again.stdout
    assert " 0 agent decisions originally" not in again.stdout  # there was something to regenerate
    assert run(data, "verify", again.stdout.splitlines()[0]).returncode == 0

    # An original whose agent entries another reasoner made: a hypothesis the rules never write.
    asyncio.run(_append_other_reasoner(data, original))
    diff = run(data, "replay", original, "--fail-on-diff", env=AGENT_FREE)
    assert diff.returncode == 1, diff.stdout + diff.stderr
    assert "- hypothesis | hypothesis (claude-next): the load balancer drops keep-alives" in diff.stdout
    assert "first divergence" in diff.stderr
    without_flag = run(data, "replay", original, env=AGENT_FREE)
    assert without_flag.returncode == 0 and "differences" in without_flag.stdout


async def _append_other_reasoner(data: Path, scope: str) -> None:
    store = SqliteLogStore(data)
    try:
        actor = Actor.agent("claude", "claude-next")
        await store.append(
            scope, [NewEntry.make("hypothesis", actor, Hypothesis(text="the load balancer drops keep-alives"))]
        )
    finally:
        await store.close()


def test_replay_reasoner_choices_fail_clearly_and_write_nothing(tmp_path: Path) -> None:
    data = tmp_path / "data"
    scope = _incident(data)
    before = sorted(p.name for p in (data / "scopes").iterdir())
    for choice, words in [("claude", "ANTHROPIC_API_KEY"), ("recorded:/nowhere", "rules or claude"), ("gpt", "rules")]:
        out = run(
            data, "replay", scope, "--reasoner", choice, env={"ANTHROPIC_API_KEY": ""} if choice == "claude" else None
        )
        assert out.returncode == 2 and words in out.stderr and len(out.stderr.strip().splitlines()) == 1, out.stderr
    out = run(data, "replay", scope, "--at", "99")
    assert out.returncode == 2 and "--at 99" in out.stderr
    assert sorted(p.name for p in (data / "scopes").iterdir()) == before


def test_the_same_commands_on_postgresql(tmp_path: Path, pg_url: str) -> None:
    env = {"DECKLOG_DATABASE_URL": pg_url, **AGENT_FREE}
    data = tmp_path / "pg-data"
    scope = _incident(data, env, change=True)
    out = run(data, "state", scope, "--at", "2", "--json", env=env)
    assert out.returncode == 0 and json.loads(out.stdout)["version"] == 2, out.stderr
    fork = run(data, "fork", scope, "--at", "3", env=env)
    assert fork.returncode == 0, fork.stderr
    forked = fork.stdout.splitlines()[0]
    copied = _timeline(data, forked, env)
    assert [e["kind"] for e in copied] == [e["kind"] for e in _timeline(data, scope, env)[:3]] + ["forked"]
    made = run(data, "replay", scope, env=env)
    assert made.returncode == 0, made.stderr
    again = run(data, "replay", made.stdout.splitlines()[0], "--fail-on-diff", env=env)
    assert again.returncode == 0, again.stdout + again.stderr
    assert not (data / "scopes").exists()


@pytest.mark.slow
async def test_a_running_server_never_delivers_a_fork_to_slack_or_executors(tmp_path: Path) -> None:
    data = tmp_path / "data"
    async with FakeSlack(bot_token=BOT_TOKEN) as fake:
        record_calls(fake)
        served = await asyncio.to_thread(start_serve, data, fake.base_url)
        try:
            env = {k: v for k, v in serve_env(data, fake.base_url).items() if k.startswith(("DECKLOG_", "SLACK_"))}
            scope = await asyncio.to_thread(_incident, data, env)
            # the source is delivered: its thread opens
            await eventually(lambda: _posted(fake, "Checkout 5xx") > 0, timeout=30, what="the source's thread")
            await eventually(lambda: _pending(data, scope, env) == 0, timeout=30, what="the source delivered")
            posts_before = _posted(fake, "")
            fork = await asyncio.to_thread(_check_fork, data, scope, 5, env)
            # an approved proposal in a fork would reach the actions sender: record one by hand
            approved = {
                "proposal_id": "p-zz9",
                "action": "rollback_deploy",
                "params": {},
                "risk": "R1",
                "status": "approved",
            }
            added = await asyncio.to_thread(
                run, data, "append", fork, "proposal", "--json", json.dumps(approved), env=env
            )
            assert added.returncode == 0, added.stderr
            await eventually(lambda: _pending(data, fork, env) == 0, timeout=60, what="the fork's rows done")
        finally:
            await asyncio.to_thread(served.stop)
        calls = json.dumps([c.args for c in slack_calls(fake).calls], ensure_ascii=False)
        # no second thread (a fork's copied declaration), nothing of the fork's own entries, no fork id
        tops = [c for c in slack_calls(fake).calls if c.method == "chat.postMessage" and not c.args.get("thread_ts")]
        assert sum("Checkout 5xx" in json.dumps(c.args) for c in tops) == 1, [c.args for c in tops]
        assert "p-zz9" not in calls and "forked from" not in calls
        assert fork not in calls  # not even as a "similar past incident" of its source (the context agent skips forks)
        assert not any(c.method == "conversations.create" for c in slack_calls(fake).calls)
        # nobody acted on the approved proposal or took a turn: the fork ends with it
        kinds = [e["kind"] for e in _timeline(data, fork, env)]
        assert kinds[-2:] == ["forked", "proposal"], kinds
        assert _posted(fake, "") >= posts_before


def _posted(fake: FakeSlack, text: str) -> int:
    return sum(1 for c in slack_calls(fake).calls if c.method == "chat.postMessage" and text in json.dumps(c.args))


def _pending(data: Path, scope: str, env: dict[str, str]) -> int:
    out = run(data, "doctor", env=env)
    return sum(
        int(line.split()[-1]) for line in out.stdout.splitlines() if line.startswith(f"{scope} ") and "pending" in line
    )
