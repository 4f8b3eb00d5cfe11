"""A newcomer is never confused by decklog, through the real doors: ``make run`` and
``decklog serve`` as subprocesses, alerts over loopback HTTP, and the ``decklog`` CLI as a subprocess run from
another directory with only its environment.

- ``make run`` and the CLI read the same data out of the box, and every "nothing here" names where it looked;
- an unreachable ``DECKLOG_DATABASE_URL`` is one line naming the database (never its password), for every command;
- start-up says nothing at warning level about the example actions nor Bolt's token; ``doctor`` lists the actions;
- a mistyped subcommand gets one line naming the closest one;
- insights' MTTA and the report's first human response agree (one definition, one rounding);
- ``decklog timeline`` tells a firing alert from a resolved one, and one instance from another.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path

import aiohttp
import pytest

from decklog.bot.runtime import OUTBOX_TOPICS
from decklog.bot.server import DecklogServer
from decklog.core.clock import ManualClock, iso
from decklog.core.entries import Actor, NewEntry
from decklog.core.entries.oncall import Page
from decklog.core.oncall import desk
from decklog.core.oncall.setup import OncallConfig
from decklog.core.store.sqlite.log_store import SqliteLogStore
from tests.conftest import ServerFactory
from tests.helpers.serve import ROOT

VENV = Path(sys.executable).parent.parent
DECKLOG = VENV / "bin" / "decklog"
TOKEN = "newcomer-alert-token"


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DECKLOG_", "SLACK_", "ANTHROPIC_", "XDG_"))}
    env.update(extra)
    return env


def decklog(*args: str, env: dict[str, str], cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(DECKLOG), *args], cwd=str(cwd), env=env, capture_output=True, text=True, timeout=timeout)


class Started:
    """A process group we started (``make run`` or ``decklog serve``), its "serving on" URL and its stderr."""

    def __init__(self, argv: list[str], *, env: dict[str, str], cwd: Path, timeout: float = 120) -> None:
        self.stderr_path = cwd / f"stderr-{os.getpid()}-{id(self)}.log"
        self.proc = subprocess.Popen(
            argv,
            cwd=str(cwd),
            env=env,
            stdout=subprocess.PIPE,
            stderr=self.stderr_path.open("w"),
            text=True,
            start_new_session=True,
        )
        assert self.proc.stdout is not None
        timer = threading.Timer(timeout, self.kill)
        timer.start()
        try:
            self.url = ""
            for line in self.proc.stdout:
                found = re.search(r"serving on (http://\S+)", line)
                if found:
                    self.url = found.group(1)
                    break
        finally:
            timer.cancel()
        if not self.url:
            self.kill()
            raise AssertionError(f"{argv} did not start:\n{self.stderr()}")
        threading.Thread(target=self.proc.stdout.read, daemon=True).start()

    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")

    def stop(self) -> None:
        """SIGTERM to the group we started (make and its decklog), as Ctrl-C would; SIGKILL after 30 s."""
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(30)
        except ProcessLookupError:
            pass
        except subprocess.TimeoutExpired:
            self.kill()

    def kill(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait()


async def post_alert(url: str, body: dict[str, object], source: str = "generic") -> dict[str, object]:
    headers = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
    async with (
        aiohttp.ClientSession() as http,
        http.post(f"{url}/alerts/{source}?wait=10", data=json.dumps(body), headers=headers) as resp,
    ):
        assert resp.status in (200, 202), await resp.text()
        answer: dict[str, object] = await resp.json()
        return answer


# -- make run and the CLI agree ------------------------------------------------------------------------------------


async def test_make_run_and_the_cli_read_the_same_data_from_any_directory(tmp_path: Path) -> None:
    """``make run`` (the real target, run where a checkout's Makefile would be) serves the CLI's default data
    directory; ``decklog scopes`` from another directory, with no DECKLOG_DATA_DIR, lists what the sandbox did."""
    checkout, elsewhere, xdg = tmp_path / "checkout", tmp_path / "elsewhere", tmp_path / "xdg"
    checkout.mkdir()
    elsewhere.mkdir()
    env = clean_env(XDG_DATA_HOME=str(xdg), DECKLOG_PORT="0", DECKLOG_ALERT_TOKEN=TOKEN)
    env["DECKLOG_FIRST_TURN_DELAY"] = "3600"
    runtime = f"{VENV}/.runtime"  # `make run` would install the checkout into VENV first: here it is installed
    served = Started(
        ["make", "-s", "-f", str(ROOT / "Makefile"), f"VENV={VENV}", "-o", runtime, "run"], env=env, cwd=checkout
    )
    try:
        answer = await post_alert(served.url, {"title": "Disk full on db-1", "fingerprint": "disk-db-1"})
        assert answer["scopes"] == ["incident/disk-full-on-db-1"], answer
        cli_env = clean_env(XDG_DATA_HOME=str(xdg))
        scopes = decklog("scopes", env=cli_env, cwd=elsewhere)
        assert scopes.returncode == 0, scopes.stderr
        assert "incident/disk-full-on-db-1" in scopes.stdout, scopes.stdout
    finally:
        served.stop()
    default = xdg / "decklog"
    assert (default / "index.db").exists()
    assert (checkout / "data").resolve() == default.resolve()  # ./data (DESIGN §9) is that same directory


async def test_every_nothing_here_names_where_it_looked(tmp_path: Path, pg_url: str) -> None:
    empty = tmp_path / "empty-data"
    env = clean_env(DECKLOG_DATA_DIR=str(empty))
    for args in (("scopes",), ("doctor",), ("insights",)):
        out = decklog(*args, env=env, cwd=tmp_path)
        assert out.returncode == 0, out.stderr
        assert str(empty) in out.stdout, (args, out.stdout)
    assert "no scopes in" in decklog("scopes", env=env, cwd=tmp_path).stdout
    missing = decklog("timeline", "incident/absent", env=env, cwd=tmp_path)
    assert missing.returncode == 1 and str(empty) in missing.stderr

    env = clean_env(DECKLOG_DATABASE_URL=pg_url, DECKLOG_DATA_DIR=str(tmp_path / "unused"))
    shown = re.sub(r"//([^:@/]+):[^@/]*@", r"//\1@", pg_url).split("?")[0]  # without a password, if it had one
    out = decklog("scopes", env=env, cwd=tmp_path)
    assert out.returncode == 0 and f"no scopes in the database {shown}" in out.stdout, (out.stdout, out.stderr)
    missing = decklog("timeline", "incident/absent", env=env, cwd=tmp_path)
    assert missing.returncode == 1 and f"the database {shown}" in missing.stderr, missing.stderr


# -- an unreachable database ---------------------------------------------------------------------------------------


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


COMMANDS = [
    ("scopes",),
    ("scopes", "--json"),
    ("declare", "--title", "Payments 5xx"),
    ("append", "incident/x", "message", "--json", '{"text": "hi"}'),
    ("timeline", "incident/x"),
    ("export", "incident/x", "--format", "md"),
    ("state", "incident/x", "--json"),
    ("fork", "incident/x", "--at", "1"),
    ("verify", "incident/x"),
    ("verify", "--all"),
    ("doctor",),
    ("reindex",),
    ("insights",),
    ("serve",),
]


@pytest.mark.parametrize("args", COMMANDS, ids=lambda a: "-".join(a[:2]))
def test_an_unreachable_database_is_one_line_naming_it_without_its_password(
    tmp_path: Path, args: tuple[str, ...]
) -> None:
    port = closed_port()
    env = clean_env(DECKLOG_DATABASE_URL=f"postgresql://bob:s3cret-pw@127.0.0.1:{port}/decklog", DECKLOG_PORT="0")
    env["DECKLOG_DATA_DIR"] = str(tmp_path / "data")  # serve's sandbox keeps its workspace there
    out = decklog(*args, env=env, cwd=tmp_path)
    assert out.returncode not in (0, 70), (out.returncode, out.stderr)  # not "internal error" (70)
    said = out.stderr.splitlines()
    assert len(said) == 1, out.stderr  # serve too: nothing starts (nor logs) before the database answers
    assert said[0].startswith("decklog: ") and "internal error" not in said[0], said[0]
    assert f"postgresql://bob@127.0.0.1:{port}/decklog" in said[0] and "refused" in said[0].lower(), said[0]
    assert "s3cret-pw" not in out.stderr + out.stdout


def test_a_bad_migrate_target_is_named_as_such(tmp_path: Path) -> None:
    data = tmp_path / "data"
    env = clean_env(DECKLOG_DATA_DIR=str(data))
    assert decklog("declare", "--title", "Checkout slow", env=env, cwd=tmp_path).returncode == 0
    port = closed_port()
    out = decklog("migrate", "--to", f"postgresql://u:pw-x@127.0.0.1:{port}/db", env=env, cwd=tmp_path)
    assert out.returncode not in (0, 70) and len(out.stderr.splitlines()) == 1, out.stderr
    assert f"postgresql://u@127.0.0.1:{port}/db (--to)" in out.stderr and "pw-x" not in out.stderr


# -- start-up noise, did you mean ----------------------------------------------------------------------------------


def warnings_in(text: str) -> list[str]:
    return [line for line in text.splitlines() if " WARNING " in line or "will be unused" in line]


@pytest.mark.parametrize("mode", ["sandbox", "http"])
def test_serve_starts_without_warnings_about_example_actions_or_bolt(tmp_path: Path, mode: str) -> None:
    env = clean_env(DECKLOG_DATA_DIR=str(tmp_path / "data"), DECKLOG_PORT="0")
    if mode == "http":  # Slack is not called at start-up: a closed port is enough
        env.update(
            SLACK_BOT_TOKEN="xoxb-newcomer",
            SLACK_SIGNING_SECRET="newcomer-secret",
            DECKLOG_SLACK_API_URL=f"http://127.0.0.1:{closed_port()}/api/",
        )
    served = Started([str(DECKLOG), "serve"], env=env, cwd=tmp_path)
    served.stop()
    assert served.proc.returncode == 0, served.stderr()
    assert warnings_in(served.stderr()) == [], served.stderr()
    assert "page_oncall" in served.stderr()  # mentioned once, at info level
    assert sum("page_oncall" in line for line in served.stderr().splitlines()) == 1


def test_an_operators_own_action_without_its_executor_is_still_a_warning(tmp_path: Path) -> None:
    config = tmp_path / "decklog.toml"
    own = '\n[[actions]]\nname = "drain_node"\ndescription = "Drain a node"\nrisk = "R2"\n'
    own += '\n[actions.executor]\ntype = "http"\nurl = "${OUR_DRAIN_URL}"\n'
    config.write_text((ROOT / "bot" / "decklog.example.toml").read_text() + own)
    env = clean_env(DECKLOG_DATA_DIR=str(tmp_path / "data"), DECKLOG_PORT="0", DECKLOG_CONFIG=str(config))
    served = Started([str(DECKLOG), "serve"], env=env, cwd=tmp_path)
    served.stop()
    warned = warnings_in(served.stderr())
    assert len(warned) == 1 and "action drain_node is unavailable" in warned[0], served.stderr()
    out = decklog("doctor", env=env, cwd=tmp_path)
    assert "action drain_node: unavailable, never proposed" in out.stdout, out.stdout


def test_doctor_lists_the_actions_that_are_never_proposed(tmp_path: Path) -> None:
    out = decklog("doctor", env=clean_env(DECKLOG_DATA_DIR=str(tmp_path / "data")), cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "action page_oncall: unavailable, never proposed: DECKLOG_PAGERDUTY_ROUTING_KEY is not set" in out.stdout


def test_the_demo_prints_no_warning(tmp_path: Path) -> None:
    out = decklog("demo", "--data-dir", str(tmp_path / "story"), env=clean_env(), cwd=tmp_path, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert warnings_in(out.stdout + out.stderr) == []


@pytest.mark.parametrize(
    ("typed", "meant"), [("scopse", "scopes"), ("timelin", "timeline"), ("verfy", "verify"), ("exprot", "export")]
)
def test_a_mistyped_subcommand_names_the_closest_one(tmp_path: Path, typed: str, meant: str) -> None:
    out = decklog(typed, env=clean_env(DECKLOG_DATA_DIR=str(tmp_path / "data")), cwd=tmp_path)
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.splitlines() == [f"decklog: error: unknown command {typed!r}; did you mean `decklog {meant}`?"]
    assert not (tmp_path / "data").exists()


# -- MTTA in insights and in the report ----------------------------------------------------------------------------


async def test_insights_mtta_reads_as_the_reports_first_human_response(tmp_path: Path) -> None:
    """Alertmanager declares at 03:12:00; alice exports a report at +5 s (not a response), and answers at
    +19.7 s. Insights' MTTA and the report's "first human response" are the same entry, read the same way."""
    data = tmp_path / "data"
    start = datetime.now(UTC).replace(microsecond=0) - timedelta(hours=1)
    clock = ManualClock(start)
    store = SqliteLogStore(data, clock=clock, topics=OUTBOX_TOPICS)
    scope = "incident/payments-5xx"
    alice = Actor.human("U0ALICE", "alice")
    try:
        await store.append(
            scope, [NewEntry.make("declared", Actor.system("alertmanager"), {"title": "Payments 5xx"})], create=True
        )
        clock.advance(seconds=5)
        export = {"format": "md", "sha256": "0" * 64, "bytes": 1, "destination": "stdout"}
        await store.append(scope, [NewEntry.make("report_exported", alice, export)])
        clock.advance(seconds=14.7)
        await store.append(scope, [NewEntry.make("message", alice, {"text": "looking"})])
    finally:
        await store.close()

    env = clean_env(DECKLOG_DATA_DIR=str(data))
    assert decklog("reindex", env=env, cwd=tmp_path).returncode == 0  # written here, not through a running server
    insights = decklog("insights", env=env, cwd=tmp_path)
    assert insights.returncode == 0, insights.stderr
    mtta = re.search(r"MTTA (\S+) \(p90", insights.stdout)
    report = decklog("export", scope, "--format", "md", env=env, cwd=tmp_path)
    assert report.returncode == 0, report.stderr
    first = re.search(r"\| First human response \| [^|]+ \| (\S+) \|", report.stdout)
    assert mtta and first, (insights.stdout, report.stdout)
    assert mtta.group(1) == first.group(1) == "19s", (mtta.group(1), first.group(1))

    as_json = json.loads(decklog("insights", "--json", env=env, cwd=tmp_path).stdout)
    body = json.loads(decklog("export", scope, "--format", "json", env=env, cwd=tmp_path).stdout)
    milestone = next(m for m in body["milestones"] if m["name"] == "first_human_response")
    assert as_json["mtta_seconds"]["p50"] == milestone["since_declared_s"] == 19.7
    assert body["summary"]["mtta_from"] == "declaration" and body["summary"]["mtta_s"] == 19.7
    assert "MTTA 19s, from the declaration to the first human response." in report.stdout


async def test_a_paged_incidents_mtta_reads_the_same_in_its_report_and_in_insights(tmp_path: Path) -> None:
    """Alertmanager declares at 03:12:00; alice answers at +5 s and pages carol at +60 s; carol acknowledges the
    page 95.4 s later. Insights and the report both give MTTA 1m 35s (from the first page), and the report says so;
    its "first human response" stays alice's answer."""
    data = tmp_path / "data"
    start = datetime.now(UTC).replace(microsecond=0) - timedelta(hours=1)
    clock = ManualClock(start)
    store = SqliteLogStore(data, clock=clock, topics=OUTBOX_TOPICS)
    scope = "incident/payments-5xx"
    alice = Actor.human("U0ALICE", "alice")
    try:
        await store.append(
            scope, [NewEntry.make("declared", Actor.system("alertmanager"), {"title": "Payments 5xx"})], create=True
        )
        clock.advance(seconds=5)
        await store.append(scope, [NewEntry.make("message", alice, {"text": "looking"})])
        clock.advance(seconds=55)
        escalation = (await desk.page(store, scope, OncallConfig(), by="U0ALICE", user="U0CAROL")).entries[0]
        page = Page(  # what the on-call job appends when the escalation's first level is due
            escalation=escalation.seq, level=0, target="U0CAROL", method="slack", key=f"{scope}:page:0",
            due_at=iso(escalation.at), source="user:U0CAROL",
        )  # fmt: skip
        await store.append(scope, [NewEntry.make("page", Actor.system("oncall"), page, refs=(escalation.seq,))])
        clock.advance(seconds=95.4)
        await desk.acknowledge(store, scope, "U0CAROL")
    finally:
        await store.close()

    env = clean_env(DECKLOG_DATA_DIR=str(data))
    assert decklog("reindex", env=env, cwd=tmp_path).returncode == 0
    insights = decklog("insights", env=env, cwd=tmp_path)
    assert insights.returncode == 0, insights.stderr
    mtta = re.search(r"MTTA (\S+ ?\S*) \(p90", insights.stdout)
    report = decklog("export", scope, "--format", "md", env=env, cwd=tmp_path)
    assert report.returncode == 0, report.stderr
    said = re.search(r"MTTA (.+), from the first page to the first acknowledgement after it\.", report.stdout)
    first = re.search(r"\| First human response \| [^|]+ \| (\S+) \|", report.stdout)
    assert mtta and said and first, (insights.stdout, report.stdout)
    assert mtta.group(1) == said.group(1) == "1m 35s", (mtta.group(1), said.group(1))
    assert first.group(1) == "5s"  # the first human response is still a milestone of its own

    as_json = json.loads(decklog("insights", "--json", env=env, cwd=tmp_path).stdout)
    body = json.loads(decklog("export", scope, "--format", "json", env=env, cwd=tmp_path).stdout)
    assert body["summary"]["mtta_from"] == "page"
    assert as_json["mtta_seconds"]["p50"] == body["summary"]["mtta_s"] == 95.4


# -- the timeline tells alerts apart -------------------------------------------------------------------------------


def alertmanager_group(status: str, instances: list[str], resolved: tuple[str, ...] = ()) -> dict[str, object]:
    """A notification as Alertmanager sends it: the group's ``status`` is ``resolved`` only when all its alerts
    are; ``resolved`` names instances that resolved inside a group still firing."""
    common = {"alertname": "NodeDiskFull", "severity": "warning", "service": "storage", "job": "node"}
    alerts = [
        {
            "status": "resolved" if status == "resolved" or instance in resolved else "firing",
            "labels": {**common, "instance": instance, "mountpoint": "/var"},
            "annotations": {"summary": "Disk almost full"},
            "startsAt": "2026-12-01T03:12:00Z",
            "endsAt": "2026-12-01T03:20:00Z"
            if status == "resolved" or instance in resolved
            else "0001-01-01T00:00:00Z",
            "generatorURL": "http://prometheus:9090/graph",
            "fingerprint": f"fp-{instance}",
        }
        for instance in instances
    ]
    return {
        "version": "4",
        "groupKey": '{}:{alertname="NodeDiskFull"}',
        "truncatedAlerts": 0,
        "status": status,
        "receiver": "decklog",
        "groupLabels": {"alertname": "NodeDiskFull"},
        "commonLabels": {**common, "mountpoint": "/var"} if len(instances) > 1 else alerts[0]["labels"],
        "commonAnnotations": {"summary": "Disk almost full"},
        "externalURL": "http://alertmanager:9093",
        "alerts": alerts,
    }


async def test_the_timeline_tells_firing_from_resolved_and_one_instance_from_another(
    make_server: ServerFactory, tmp_path: Path
) -> None:
    server: DecklogServer = await make_server(alert_token=TOKEN)
    fired = await post_alert(server.url, alertmanager_group("firing", ["db-1:9100", "db-2:9100"]), "alertmanager")
    (scope,) = fired["scopes"]  # type: ignore[misc]
    await post_alert(
        server.url, alertmanager_group("firing", ["db-1:9100", "db-2:9100"], resolved=("db-1:9100",)), "alertmanager"
    )
    await server.runtime.dispatcher.idle()

    out = decklog("timeline", str(scope), env=clean_env(DECKLOG_DATA_DIR=str(server.settings.data_dir)), cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    alerts = [line.split("] ", 1)[1] for line in out.stdout.splitlines() if "Disk almost full" in line]
    alerts = [line for line in alerts if not line.startswith(("alertmanager declared", "Suggestion"))]
    assert alerts == [
        "Alert firing: Disk almost full {instance=db-1:9100, mountpoint=/var, job=node}",
        "Alert firing: Disk almost full {instance=db-2:9100, mountpoint=/var, job=node}",
        "Alert resolved: Disk almost full {instance=db-1:9100, mountpoint=/var, job=node}",
    ], out.stdout
