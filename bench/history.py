"""History at any size: what boot, the first /metrics scrape, ``verify --all``, ``reindex``, ``doctor`` and
``scopes --json`` cost once a deployment holds N resolved incidents, and what each incident costs on disk.

The history is built THROUGH THE PRODUCT'S OWN CODE: an in-process ``DecklogServer`` (every part wired as
``decklog serve`` wires them, its Slack sender posting to a loopback FakeSlack) whose ``ScopeService`` declares
each incident in the alerts channel and records about 33 entries (alert observations, a commander, Slack messages
in the thread, hypotheses, decisions, a pin, a severity change, identified → mitigated → resolved), then lets every
sender deliver. ``verify --all`` must come out clean before anything is measured. Building is slow on a loaded
machine, so the history is built once per size into ``--cache`` (default ``bench/.history-cache/N``) and reused.

Measured on a copy of the cached history, each figure with its baseline from the same run:

* boot sweep: a restarted server's boot task (``Sweeps.boot``), from the start call, against the time until it
  listens (what ``/healthz`` waits for). Each round boots twice: the first boot on the copied history (as after an
  upgrade), then a restart, which is the figure;
* first ``/metrics`` scrape after that restart, against ``/healthz`` on the same server;
* ``verify --all``, ``reindex``, ``doctor`` as the CLI runs them (subprocesses): wall time and peak RSS, against
  a baseline process that only imports the CLI (memory) and one raw read of every scope file's entries (time);
* ``scopes --json``: how many of the N it lists (and whether it says so when it lists fewer);
* disk: bytes of the scope files per resolved incident.

    .venv/bin/python bench/history.py [--incidents 1000] [--rounds 3] [--cache DIR] [--rebuild]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import aiohttp

from decklog.adapters.local.slack import FakeSlack
from decklog.bot.settings import Settings
from decklog.core.entries import Actor
from tests.helpers.serve import APP_TOKEN, BOT_TOKEN, GENERAL, serve_env

SERVICES = ["payments", "search", "checkout", "auth", "api", "db", "cache", "queue"]
PEOPLE = [("U0ALICE", "alice"), ("U0BOB", "bob"), ("U0CAROL", "carol"), ("U0DAVE", "dave")]
MESSAGES = [
    "looking at the dashboards now",
    "error rate on {svc} went from 0.1% to 14% at the top of the hour",
    "nothing in the deploy log for {svc} in the last 2 hours",
    "p99 latency is 2.3 s, normally 180 ms",
    "the connection pool is saturated on {svc}-7 and {svc}-9",
    "restarting one pod to see if it clears",
    "restart helped for about 3 minutes, then back",
    "the upstream dependency's status page says degraded",
    "rolling back the config change from this morning",
    "rollback is out on 50% of hosts",
    "errors dropping on the rolled-back hosts",
    "rollback complete, error rate back to 0.2%",
    "keeping an eye on it for 15 minutes before resolving",
    "customer support reports fewer tickets",
    "I'll write up the timeline",
    "follow-up: alert on pool saturation, not only on errors",
    "all green for 20 minutes",
    "thanks all",
]


def actor(i: int) -> Actor:
    uid, name = PEOPLE[i % len(PEOPLE)]
    return Actor.human(uid, name)


async def one_incident(service: Any, i: int, rng: random.Random) -> int:
    """Declare and run one incident to resolution through ``ScopeService``; returns how many entries it has."""
    svc = rng.choice(SERVICES)
    who = actor(i)
    result = await service.declare(
        title=f"{svc}: elevated error rate ({i})",
        actor=who,
        severity=rng.choice([1, 2, 2, 3, 3, 3, 4]),
        services=[svc],
        via="slack",
        channel=GENERAL,
    )
    scope = str(result.state.scope)
    n = len(result.entries)
    ts0 = 1_760_000_000 + i * 100

    async def rec(kind: str, payload: dict[str, Any], by: Actor = who) -> None:
        nonlocal n
        n += len((await service.record(scope, kind, payload, by)).entries)

    for k in range(3):
        await rec(
            "observation",
            {
                "text": f"[FIRING] HighErrorRate {svc} instance {k}",
                "source": "alertmanager",
                "service": svc,
                "fingerprint": f"hist-{i}-{k}",
                "alert_status": "firing",
                "labels": {"alertname": "HighErrorRate", "service": svc, "severity": "page"},
            },
            Actor(type="system", id="alertmanager", name="alertmanager"),
        )
    await rec("role_assigned", {"role": "commander", "user_id": who.id, "user_name": who.name})
    for j, text in enumerate(MESSAGES):
        by = actor(i + j)
        await rec("message", {"text": text.format(svc=svc), "channel": GENERAL, "ts": f"{ts0 + j}.000100"}, by)
        if j == 5:
            await rec("hypothesis", {"text": f"the config change starved the {svc} connection pool"})
            await rec("severity_changed", {"severity": 2, "reason": "customers affected"})
        if j == 8:
            await rec("decision", {"text": "roll back the config change", "rationale": "it lines up with the start"})
            await n_status(service, scope, "identified", who)
            n += 1
        if j == 11:
            await rec("evidence", {"text": "error graph after rollback", "channel": GENERAL, "ts": f"{ts0 + j}.000100"})
            await n_status(service, scope, "mitigated", who)
            n += 1
        if j == 13:
            await rec("hypothesis", {"text": "pool size too small for the new retry policy"})
            await rec("decision", {"text": "raise the pool size in the follow-up"})
    await n_status(service, scope, "resolved", who, summary="config change rolled back; pool size follow-up")
    return n + 1


async def n_status(service: Any, scope: str, status: str, who: Actor, summary: str = "") -> None:
    await service.set_status(scope, status, who, summary=summary)


def settings_for(data_dir: Path, fake_url: str, work: Path) -> Settings:
    env = serve_env(data_dir, fake_url)
    env["DECKLOG_CONFIG"] = str(Path(env["DECKLOG_CONFIG"]))
    for k in [k for k in os.environ if k.startswith(("DECKLOG_", "SLACK_", "ANTHROPIC_"))]:
        del os.environ[k]
    os.environ.update({k: v for k, v in env.items() if k.startswith(("DECKLOG_", "SLACK_"))})
    return Settings()


async def build(data_dir: Path, n: int, *, concurrency: int = 6) -> None:
    from decklog.bot.server import DecklogServer

    rng = random.Random(36)
    async with FakeSlack(bot_token=BOT_TOKEN, app_token=APP_TOKEN) as fake:
        settings = settings_for(data_dir, fake.base_url, data_dir.parent)
        server = DecklogServer(settings)
        await server.start()
        try:
            service = server.runtime.service
            started = time.perf_counter()
            done = 0
            sem = asyncio.Semaphore(concurrency)

            async def one(i: int) -> None:
                nonlocal done
                async with sem:
                    await one_incident(service, i, random.Random(rng.random()))
                    done += 1
                    if done % 100 == 0:
                        print(f"  built {done}/{n} incidents ({time.perf_counter() - started:.0f} s)", flush=True)

            for block in range(0, n, 200):
                await asyncio.gather(*(one(i) for i in range(block, min(n, block + 200))))
                await server.runtime.dispatcher.idle(timeout=600)
            await server.runtime.dispatcher.idle(timeout=600)
            print(f"built {n} incidents in {time.perf_counter() - started:.0f} s")
        finally:
            await server.stop()


def measured(data_dir: Path, *args: str) -> tuple[float, int, int, str]:
    """One command in a fresh child that reports its own child's peak RSS (so that no earlier command's peak
    hides a smaller later one)."""
    code = (
        "import os,resource,subprocess,sys,time,json;"
        "t=time.perf_counter();"
        "p=subprocess.run(sys.argv[1:],capture_output=True,text=True);"
        "print(json.dumps([time.perf_counter()-t,resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss,"
        "p.returncode,p.stdout+p.stderr]))"
    )
    env = serve_env(data_dir, "http://127.0.0.1:9/")
    out = subprocess.run(
        [sys.executable, "-c", code, sys.executable, "-m", "decklog.bot.cli", *args],
        env=env,
        cwd=str(ROOT),
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    took, peak, rc, text = json.loads(out)
    return float(took), int(peak), int(rc), str(text)


def baseline_memory(data_dir: Path) -> int:
    code = (
        "import resource,subprocess,sys,json;"
        "subprocess.run(sys.argv[1:]);"
        "print(json.dumps(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss))"
    )
    env = serve_env(data_dir, "http://127.0.0.1:9/")
    out = subprocess.run(
        [sys.executable, "-c", code, sys.executable, "-c", "import decklog.bot.cli"],
        env=env,
        cwd=str(ROOT),
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return int(json.loads(out))


def raw_read(data_dir: Path) -> tuple[float, int]:
    """The least a full pass over history costs: every scope file's entries read once, nothing parsed."""
    started = time.perf_counter()
    rows = 0
    for path in sorted((data_dir / "scopes").glob("*.db")):
        with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as conn:
            for _ in conn.execute("SELECT seq, payload, hash FROM entries"):
                rows += 1
        conn.close()
    return time.perf_counter() - started, rows


def disk(data_dir: Path) -> tuple[int, int]:
    files = list((data_dir / "scopes").glob("*.db*"))
    return sum(p.stat().st_size for p in files), len([p for p in files if p.suffix == ".db"])


async def restart(data_dir: Path) -> dict[str, float]:
    """A server restarted on the history: when it listens, when its boot sweep ends, its first /metrics scrape
    (after the sweep) and /healthz on the same server."""
    from decklog.bot.server import DecklogServer

    times: dict[str, float] = {}
    async with FakeSlack(bot_token=BOT_TOKEN, app_token=APP_TOKEN) as fake:
        settings = settings_for(data_dir, fake.base_url, data_dir.parent)
        boot_done = asyncio.Event()
        t0 = time.perf_counter()

        def on_built(parts: Any) -> None:
            for provided in parts.provided:
                provided.tasks = [_timed(task, boot_done) for task in provided.tasks]

        server = DecklogServer(settings, on_built=on_built)
        await server.start()
        times["listening"] = time.perf_counter() - t0
        try:
            await asyncio.wait_for(boot_done.wait(), timeout=900)
            times["boot_sweep"] = time.perf_counter() - t0
            async with aiohttp.ClientSession() as http:
                t = time.perf_counter()
                async with http.get(server.url + "/metrics", timeout=aiohttp.ClientTimeout(total=900)) as r:
                    await r.read()
                times["metrics_first"] = time.perf_counter() - t
                t = time.perf_counter()
                async with http.get(server.url + "/healthz") as r:
                    await r.read()
                times["healthz"] = time.perf_counter() - t
                t = time.perf_counter()
                async with http.get(server.url + "/metrics") as r:
                    await r.read()
                times["metrics_second"] = time.perf_counter() - t
        finally:
            await server.stop()
    return times


def _timed(task: Any, done: asyncio.Event) -> Any:
    name = getattr(task, "__qualname__", "")

    async def run() -> None:
        try:
            await task()
        finally:
            if "boot" in name:
                done.set()

    return run


def verify_clean(data_dir: Path) -> None:
    _took, _peak, rc, text = measured(data_dir, "verify", "--all")
    if rc != 0:
        raise SystemExit(f"verify --all is not clean on the built history:\n{text[-3000:]}")
    print(f"verify --all clean ({text.strip().splitlines()[-1]})")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--incidents", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--cache", type=Path, default=None, help="where the built history is kept (per size)")
    parser.add_argument("--rebuild", action="store_true", help="build the history again even if cached")
    parser.add_argument("--build-only", action="store_true")
    a = parser.parse_args()
    n = a.incidents
    cache = (a.cache or ROOT / "bench" / ".history-cache") / str(n)
    built = cache / "data"
    if a.rebuild and cache.exists():
        shutil.rmtree(cache)
    if not (cache / "BUILT").exists():
        shutil.rmtree(cache, ignore_errors=True)
        built.mkdir(parents=True)
        print(f"building {n} incidents into {built} (once; reused after)")
        asyncio.run(build(built, n))
        verify_clean(built)
        (cache / "BUILT").write_text(str(n))
    if a.build_only:
        return 0
    size, files = disk(built)
    print(f"\nhistory: {files} scope files, {n} incidents")
    print(f"  disk per resolved incident        {size / n / 1024:.1f} KB  (target <= 30 KB)")
    rows: dict[str, list[float]] = {}
    for r in range(a.rounds):
        with tempfile.TemporaryDirectory(prefix="decklog-history-") as tmp:
            data = Path(tmp) / "data"
            shutil.copytree(built, data)
            first = asyncio.run(restart(data))  # the first boot on this history (after an upgrade, too)
            t = asyncio.run(restart(data))  # a restart: what a deployment does every day
            raw_s, raw_rows = raw_read(data)
            base_kb = baseline_memory(data)
            v_s, v_kb, v_rc, v_out = measured(data, "verify", "--all")
            ri_s, ri_kb, ri_rc, ri_out = measured(data, "reindex")
            d_s, d_kb, d_rc, d_out = measured(data, "doctor")
            s_s, _s_kb, s_rc, s_out = measured(data, "scopes", "--json")
            try:
                listed = len(json.loads(s_out[: s_out.rindex("]") + 1]))
            except ValueError:
                listed = -1
            if v_rc or ri_rc or d_rc or s_rc:
                print(f"  a command failed: verify {v_rc} reindex {ri_rc} doctor {d_rc} scopes {s_rc}")
                print(v_out[-800:], ri_out[-800:], d_out[-800:], s_out[-800:], sep="\n")
            sample = {
                "first_boot_sweep_s": first["boot_sweep"],
                "listening_s": t["listening"],
                "boot_sweep_s": t["boot_sweep"],
                "metrics_first_s": t["metrics_first"],
                "metrics_second_s": t["metrics_second"],
                "healthz_s": t["healthz"],
                "raw_read_s": raw_s,
                "baseline_mb": base_kb / 1024,
                "verify_s": v_s,
                "verify_mb": v_kb / 1024,
                "reindex_s": ri_s,
                "reindex_mb": ri_kb / 1024,
                "doctor_s": d_s,
                "doctor_mb": d_kb / 1024,
                "doctor_lines": float(len(d_out.strip().splitlines())),
                "scopes_listed": float(listed),
                "scopes_s": s_s,
            }
            print(f"round {r}: " + ", ".join(f"{k} {v:.2f}" for k, v in sample.items()), flush=True)
            for k, v in sample.items():
                rows.setdefault(k, []).append(v)
            last_scopes_tail = s_out.strip().splitlines()[-1:] if s_out.strip() else []
    med = {k: sorted(v)[len(v) // 2] for k, v in rows.items()}
    print(f"\nhistory of {n} resolved incidents (medians of {a.rounds} rounds; raw read: {raw_rows} entries)")
    print(
        f"  boot sweep ends            {med['boot_sweep_s']:.2f} s after start; listening at "
        f"{med['listening_s']:.2f} s  (ratio {med['boot_sweep_s'] / med['listening_s']:.1f}x; target <= 2 s)"
    )
    print(f"  (the first boot ever on this history, e.g. right after an upgrade: {med['first_boot_sweep_s']:.2f} s)")
    print(
        f"  first /metrics scrape      {med['metrics_first_s']:.3f} s; /healthz {med['healthz_s']:.3f} s; second "
        f"scrape {med['metrics_second_s']:.3f} s  (target <= 1 s)"
    )
    print(
        f"  verify --all               {med['verify_s']:.1f} s, peak {med['verify_mb']:.0f} MB  (an import-only "
        f"process: {med['baseline_mb']:.0f} MB; target <= 300 MB)"
    )
    print(
        f"  reindex                    {med['reindex_s']:.1f} s, peak {med['reindex_mb']:.0f} MB  (raw read of "
        f"every entry: {med['raw_read_s']:.2f} s, ratio {med['reindex_s'] / med['raw_read_s']:.0f}x)"
    )
    print(
        f"  doctor                     {med['doctor_s']:.1f} s, peak {med['doctor_mb']:.0f} MB, "
        f"{med['doctor_lines']:.0f} lines"
    )
    print(
        f"  scopes --json              lists {med['scopes_listed']:.0f} of {n}  ({med['scopes_s']:.1f} s)"
        + (
            f"; says: {last_scopes_tail[0][:100]}"
            if last_scopes_tail and not last_scopes_tail[0].startswith("]")
            else ""
        )
    )
    print(f"  disk per resolved incident {size / n / 1024:.1f} KB  (target <= 30 KB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
