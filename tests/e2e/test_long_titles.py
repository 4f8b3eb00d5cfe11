"""A title over the limit (300 characters) is the caller's mistake, named as such in every door —
never "Something went wrong on our side" after retries, never ``internal error`` (exit 70). An alert's longer title
is cut to the limit instead (losing an alert is worse than a shortened title)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from tests.conftest import ServerFactory, eventually
from tests.e2e.test_alerts_e2e import alerts_server, generic, incidents, post
from tests.unit.test_cli import run

ALICE, GENERAL = "U0ALICE", "C0GENERAL"
LONG = "Checkout is failing for every customer in the EU region " * 7  # 392 characters


def test_the_cli_names_the_limit_in_one_line_and_writes_nothing(tmp_path: Path) -> None:
    data = tmp_path / "data"
    out = run(data, "declare", "--title", LONG)
    assert out.returncode == 2, (out.returncode, out.stderr)
    assert out.stderr.strip().splitlines() == [
        f"decklog: error: title: at most 300 characters (this one has {len(LONG.strip())})"
    ]
    assert "internal error" not in out.stderr and "Traceback" not in out.stderr
    listed = run(data, "scopes", "--json")
    assert listed.returncode == 0 and json.loads(listed.stdout) == [], listed.stdout


async def test_slack_answers_a_long_title_once_with_the_limit_and_no_retry(
    make_server: ServerFactory, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    server = await make_server(data_dir=data)
    fake = server.sandbox
    out = await fake.run_command(ALICE, GENERAL, f"declare {LONG}")
    assert out.status == 200

    def answers() -> list[str]:
        return [str(r.body.get("text", "")) for r in fake.server.responses if "300 characters" in str(r.body)]

    (answer,) = await eventually(answers, what="the answer naming the limit")
    assert answer.startswith(":warning:") and "title" in answer
    assert not [r for r in fake.server.responses if ":boom:" in str(r.body)]
    with sqlite3.connect(data / "inbox.db") as db:  # done on its first attempt: nothing was retried or parked
        assert db.execute("select done_at is not null, attempts, parked_at from inbox").fetchall() == [(1, 0, None)]
    assert not await server.runtime.store.scope_ids()

    # the declare form says it in the form, before anything is stored
    await fake.run_command(ALICE, GENERAL, "declare")
    modal = await eventually(lambda: fake.workspace.modals(ALICE), what="the declare modal")
    form = await fake.submit_view(ALICE, modal[-1].id, {"title": LONG})
    assert form.status == 200 and form.result == "errors"
    errors = json.loads(form.responses[0].body)["errors"]
    assert any("300 characters" in text for text in errors.values()), errors


async def test_an_alert_with_a_long_title_opens_an_incident_with_the_title_cut(make_server: ServerFactory) -> None:
    server = await alerts_server(make_server)
    status, answer = await post(server, "/alerts/generic?wait=5", generic(title=LONG))
    assert status in (200, 202), answer
    (scope,) = await eventually(lambda: incidents(server), what="the incident")
    title = (await server.runtime.store.get_state(scope)).title
    assert len(title) <= 300 and title.endswith("…") and LONG.startswith(title[:-1])


def test_any_field_out_of_bounds_in_the_cli_is_a_usage_error_not_an_internal_one(tmp_path: Path) -> None:
    out = run(tmp_path / "data", "declare", "--title", "Short", env={"DECKLOG_ACTOR": "a" * 250})
    assert out.returncode == 2, (out.returncode, out.stderr)
    (line,) = out.stderr.strip().splitlines()
    assert line.startswith("decklog: error: ") and "at most 200 characters" in line
