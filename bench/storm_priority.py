"""What a person sees first in an alert storm: a real Alertmanager sends 500 alerts over 50 services to
`decklog serve`, which posts to a fake Slack paced as Slack paces (about one post a second per channel).

    .venv/bin/python bench/storm_priority.py [--rounds 3] [--services 50] [--per-service 10] [--tail 60]

Debian's ``prometheus-alertmanager`` (``make monitoring``) groups the alerts by (alertname, service) and sends its
webhook notifications to ``/alerts/alertmanager``. Services arrive one every ``--spacing`` seconds; each then
sends ``--per-service`` alerts over the next ``--spread`` seconds. One service in ten is ``critical`` (SEV1), one in
ten ``error`` (SEV2), the rest ``warning`` (SEV3). decklog runs with the shipped pacing (``pace_per_channel_s`` 1.0,
``header_update_interval_s`` 2.0) and every incident goes to the one alerts channel. The per-source storm limit is
raised so that every service opens its own incident (Alertmanager sends a group's notification every 2 s while it
changes: about 500 parts in a minute).

Reported per round:

- the baseline, in the same run: one SEV1 alert on a quiet server, from its ``declared`` entry to its header's
  ``chat.postMessage`` (and from the bench's post to Alertmanager, which adds Alertmanager's ``group_wait``);
- during the storm, the same latency for every incident's header, by severity: p50, p99, max, and the SEV1 p99 as
  a ratio to the quiet baseline;
- the Slack calls the storm caused until ``--tail`` seconds after its last alert: ``chat.postMessage`` (top level
  and in threads), ``chat.update``, and 429 answers.

Nothing here is asserted; the targets are in issue's table and docs/performance.md.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from decklog.adapters.local.slack import FakeSlack
from tests.fakes.slack_calls import CallLog, record_calls
from tests.helpers.monitoring import ALERTMANAGER, Alertmanager, firing, require_binary, webhook
from tests.helpers.serve import ALERT_TOKEN, BOT_TOKEN, start_serve

SEVERITY = {1: "critical", 2: "error", 3: "warning"}


def severity_of(service: int) -> int:
    """One service in ten is SEV1 (the 8th of each ten: they arrive while the queue of SEV3 headers is long)."""
    return 1 if service % 10 == 7 else 2 if service % 10 == 3 else 3


def config_file(directory: Path) -> Path:
    """The shipped configuration with Slack pacing on, and a per-source limit above the storm's notifications: every
    service is to get its own incident (at the default 120 parts a minute, the later services would join one "Alert
    storm" incident, whose one header is not what this bench measures)."""
    path = directory / "decklog.storm.toml"
    text = (ROOT / "bot" / "decklog.example.toml").read_text()
    path.write_text(re.sub(r"(?m)^rate_limit_per_minute = .*$", "rate_limit_per_minute = 100000", text))
    return path


def alert(service: int, n: int) -> dict[str, Any]:
    sev = severity_of(service)
    name = f"svc-{service:02d}"
    return firing(
        "HighErrorRate",
        annotations={
            "summary": f"{name}: 5xx ratio above 5% on pod {n}",
            "description": f"{name} pod {name}-{n:03d} answers 5xx to more than 5% of requests for 2 minutes.",
        },
        severity=SEVERITY[sev],
        service=name,
        pod=f"{name}-{n:03d}-7d9c8b6f5-x2kqz",
        namespace="prod",
        cluster="prod-eu-west-1",
    )


def declared_at(data: Path) -> dict[str, tuple[float, int]]:
    """scope → (wall time of its ``declared`` entry, its severity)."""
    out: dict[str, tuple[float, int]] = {}
    for path in sorted((data / "scopes").glob("*.db")):
        db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=10)
        try:
            row = db.execute("SELECT at, payload FROM entries WHERE kind = 'declared' ORDER BY seq LIMIT 1").fetchone()
            scope = db.execute("SELECT scope FROM state LIMIT 1").fetchone()
        except sqlite3.Error:
            continue
        finally:
            db.close()
        if row and scope:
            payload = json.loads(row[1])
            out[str(scope[0])] = (datetime.fromisoformat(row[0]).timestamp(), int(payload.get("severity") or 3))
    return out


def headers(calls: CallLog, since: float) -> dict[str, float]:
    """scope → wall time its header's ``chat.postMessage`` was answered ok."""
    out: dict[str, float] = {}
    for c in calls.calls_to("chat.postMessage", ok=True):
        meta = c.args.get("metadata")
        if isinstance(meta, str):
            meta = json.loads(meta)
        meta = meta or {}
        if c.at >= since and meta.get("event_type") == "decklog_header":
            out.setdefault(str((meta.get("event_payload") or {}).get("scope")), c.at)
    return out


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


async def wait_for(what: str, check: Any, timeout: float) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        got = await asyncio.to_thread(check)
        if got:
            return got
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        await asyncio.sleep(0.2)


async def one_round(args: argparse.Namespace, binary: str, work: Path) -> dict[str, Any]:
    fake = FakeSlack(bot_token=BOT_TOKEN)
    calls = record_calls(fake)
    await fake.start()
    data = work / "data"
    served = await asyncio.to_thread(
        start_serve, data, fake.base_url, env={"DECKLOG_CONFIG": str(config_file(work)), "DECKLOG_LOG_LEVEL": "ERROR"}
    )
    route = webhook(served.url, ALERT_TOKEN, group_by=("alertname", "service"), group_wait="1s", group_interval="2s")
    am = await Alertmanager.start(work / "alertmanager", route, binary=binary)
    try:
        # the baseline: one SEV1 on a quiet server
        t0 = time.time()
        await am.post_alerts([firing("QuietCanary", severity="critical", service="canary")])
        quiet = await wait_for("the quiet header", lambda: headers(calls, t0), 60)
        [(quiet_scope, quiet_header)] = quiet.items()
        quiet_declared = (await asyncio.to_thread(declared_at, data))[quiet_scope][0]
        await asyncio.sleep(3)  # its header update and the like are not the storm's

        # the storm
        start = time.time()
        first_post: dict[str, float] = {}
        plan: list[tuple[float, int, int]] = []
        for s in range(args.services):
            arrive = s * args.spacing
            for n in range(args.per_service):
                plan.append((arrive + args.spread * n / max(1, args.per_service - 1) * (n > 0), s, n))
        plan.sort()
        i = 0
        while i < len(plan):
            now = time.time() - start
            due = []
            while i < len(plan) and plan[i][0] <= now:
                due.append(plan[i])
                i += 1
            if due:
                for _, s, _n in due:
                    first_post.setdefault(f"svc-{s:02d}", time.time())
                await am.post_alerts([alert(s, n) for _, s, n in due])
            await asyncio.sleep(0.1)
        last_alert = time.time()
        sent = len(plan)

        def all_headers() -> bool:
            return len(headers(calls, start)) >= int(args.services)

        await wait_for(f"{args.services} storm incidents' headers", all_headers, 600)
        settle = last_alert + args.tail
        await asyncio.sleep(max(0.0, settle - time.time()))
        posted = headers(calls, start)
        declared = await asyncio.to_thread(declared_at, data)
        storm_calls = [c for c in calls.calls if start <= c.at <= settle]
    finally:
        await am.stop()
        await asyncio.to_thread(served.stop)
        await fake.stop()

    by_sev: dict[int, list[float]] = {1: [], 2: [], 3: [], 4: []}
    e2e: dict[int, list[float]] = {1: [], 2: [], 3: [], 4: []}
    titles = {}
    for scope, (at, sev) in declared.items():
        if scope == quiet_scope or scope not in posted:
            continue
        by_sev.setdefault(sev, []).append(posted[scope] - at)
        titles[scope] = sev
    # end to end: from the bench's first post of the service's alert to Alertmanager
    service_of = await asyncio.to_thread(_services, data)
    for scope, service in service_of.items():
        if scope in posted and service in first_post and scope in titles:
            e2e[titles[scope]].append(posted[scope] - first_post[service])
    posts = [c for c in storm_calls if c.method == "chat.postMessage"]
    ok_posts = [c for c in posts if c.ok]
    return {
        "sent": sent,
        "storm_s": last_alert - start,
        "incidents": sum(len(v) for v in by_sev.values()),
        "quiet": quiet_header - quiet_declared,
        "quiet_e2e": quiet_header - t0,
        "lat": by_sev,
        "e2e": e2e,
        "posts_top": sum(1 for c in ok_posts if not c.args.get("thread_ts")),
        "posts_thread": sum(1 for c in ok_posts if c.args.get("thread_ts")),
        "updates": sum(1 for c in storm_calls if c.method == "chat.update" and c.ok),
        "limited": sum(1 for c in storm_calls if c.status == 429 or c.error == "ratelimited"),
        "kinds": _kinds(ok_posts),
    }


def _kinds(posts: list[Any]) -> dict[str, int]:
    """What the posts were: headers, alert summaries, storm digests, other thread replies."""
    out: dict[str, int] = {}
    for c in posts:
        meta = c.args.get("metadata")
        if isinstance(meta, str):
            meta = json.loads(meta)
        event = (meta or {}).get("event_type", "none")
        text = str(c.args.get("text") or "")
        kind = event
        if event == "decklog_entry":
            kind = "alert summary" if re.search(r"alerts? in the last", text) else "reply: " + text[:24]
        out[kind] = out.get(kind, 0) + 1
    return dict(sorted(out.items(), key=lambda kv: -kv[1])[:8])


def _services(data: Path) -> dict[str, str]:
    """scope → the service label of the alert that opened it."""
    out: dict[str, str] = {}
    for path in sorted((data / "scopes").glob("*.db")):
        db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=10)
        try:
            scope = db.execute("SELECT scope FROM state LIMIT 1").fetchone()
            row = db.execute("SELECT payload FROM entries WHERE kind = 'observation' ORDER BY seq LIMIT 1").fetchone()
        except sqlite3.Error:
            continue
        finally:
            db.close()
        if scope and row:
            payload = json.loads(row[0])
            labels = payload.get("labels") or (payload.get("data") or {}).get("labels") or {}
            service = labels.get("service")
            if service:
                out[str(scope[0])] = str(service)
    return out


def line(name: str, values: list[float]) -> str:
    if not values:
        return f"  {name:<28} –"
    return (
        f"  {name:<28} n={len(values):>3}  p50 {statistics.median(values):6.2f} s  p99 {pct(values, 0.99):6.2f} s"
        f"  max {max(values):6.2f} s"
    )


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--services", type=int, default=50)
    ap.add_argument("--per-service", type=int, default=10)
    ap.add_argument("--spacing", type=float, default=0.4, help="seconds between two services' first alerts")
    ap.add_argument("--spread", type=float, default=30.0, help="seconds over which a service's alerts arrive")
    ap.add_argument("--tail", type=float, default=60.0, help="seconds after the last alert that still count")
    args = ap.parse_args()
    binary = require_binary(ALERTMANAGER)
    results = []
    for r in range(args.rounds):
        work = Path(tempfile.mkdtemp(prefix="decklog-storm-"))
        try:
            res = await one_round(args, binary, work)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        results.append(res)
        sev1 = res["lat"][1]
        print(
            f"round {r + 1}: {res['sent']} alerts over {res['storm_s']:.1f} s → {res['incidents']} incidents;"
            f" quiet SEV1 header {res['quiet']:.2f} s after its declaration ({res['quiet_e2e']:.2f} s after the post"
            " to Alertmanager)"
        )
        for sev in (1, 2, 3):
            print(line(f"SEV{sev} header after declared", res["lat"][sev]))
        print(line("SEV1 header after AM post", res["e2e"][1]))
        print(line("all headers after declared", [v for vs in res["lat"].values() for v in vs]))
        ratio = pct(sev1, 0.99) / res["quiet"] if res["quiet"] > 0 else float("nan")
        print(f"  SEV1 p99 ÷ quiet baseline: {ratio:.1f}×")
        total = res["posts_top"] + res["posts_thread"]
        print(
            f"  Slack: {total} posts ({res['posts_top']} top level, {res['posts_thread']} in threads),"
            f" {res['updates']} chat.update, {res['limited']} answered 429, until {args.tail:.0f} s after the last"
            f" alert; posts by kind {res['kinds']}"
        )
        sys.stdout.flush()
    if len(results) > 1:
        p99s = [pct(r["lat"][1], 0.99) for r in results]
        posts = [r["posts_top"] + r["posts_thread"] for r in results]
        print(
            f"median of {len(results)} rounds: SEV1 header p99 {statistics.median(p99s):.2f} s"
            f" (rounds {', '.join(f'{p:.2f}' for p in p99s)}); Slack posts {statistics.median(posts):.0f}"
            f" (rounds {', '.join(str(p) for p in posts)}) for {results[0]['incidents']} incidents"
        )


if __name__ == "__main__":
    asyncio.run(main())
