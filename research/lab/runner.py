"""Runs cases in lab worlds, ``jobs`` at a time, and writes ``results.jsonl`` and ``table.md``.

One run: start a world, let the shop's traffic settle (``WARMUP`` s), play the scenario's decoys and faults at
their ``at``, and every second let the scripted person look at the proposals and record what Alertmanager holds.
The run ends at ``duration``, or earlier once every fault is over and no alert has fired for ``QUIET`` s (a fault
that never alerted waits ``duration``). Then the judge reads decklog's incidents through its API.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

from research.lab import monitoring
from research.lab.judge import AlertLog, count_bot_messages, parse_at, score
from research.lab.person import Person
from research.lab.scenario import Case, Skipped
from research.lab.table import render
from research.lab.world import World

WARMUP = 12.0  # s: the rates over ten seconds need a window of traffic before a fault
SETTLE_MAX = 60.0  # s: how long after the warm-up a world may take to fall quiet (a loaded machine alerts on start)
QUIET = 6.0  # s without a firing alert, after every fault ended, ends a run early


async def _all_entries(world: World, scope: str) -> list[dict[str, Any]]:
    entries: list[dict[str, Any]] = []
    after = 0
    while True:
        page = await world.get(f"/api/scopes/{scope}/timeline", after=str(after), limit="500")
        entries += page["entries"]
        if page.get("next") is None:
            return entries
        after = int(page["next"])


async def _settle(world: World, person: Person) -> bool:
    """Waits until Alertmanager holds no alert and the person has resolved every incident the warm-up opened, for at
    most ``SETTLE_MAX`` s; True when the world never fell quiet."""
    assert world.alertmanager is not None
    deadline = time.monotonic() + SETTLE_MAX
    while time.monotonic() < deadline:
        firing = await monitoring.firing(world.alertmanager)
        left = await person.tidy()
        if not firing and not left:
            return False
        await asyncio.sleep(1.0)
    return True


async def run_one(case: Case, seed: int, directory: Path, log: Any = None) -> dict[str, Any]:
    world = World(directory, seed)
    alerts = AlertLog()
    try:
        await world.start()
        await asyncio.sleep(WARMUP)
        person = Person(world)
        noisy = await _settle(world, person)
        start = time.time()
        plan = sorted(
            [(s.at, "decoy", i, s) for i, s in enumerate(case.scenario.decoys)]
            + [(s.at, "fault", i, s) for i, s in enumerate(case.scenario.faults)],
            key=lambda x: (x[0], x[1]),
        )
        quiet_since: float | None = None
        while True:
            now = time.time()
            elapsed = now - start
            while plan and plan[0][0] <= elapsed:
                _at, what, i, step = plan.pop(0)
                await (world.decoy(i, step) if what == "decoy" else world.inject(i, step))
            assert world.alertmanager is not None
            alerts.record(await monitoring.firing(world.alertmanager), now)
            await person.step()
            if alerts.firing_now:
                quiet_since = None
            elif quiet_since is None:
                quiet_since = now
            if elapsed >= case.scenario.duration:
                break
            settled = not plan and alerts.first and quiet_since is not None and now - quiet_since >= QUIET
            if settled and not (await world.shop_state())["faults"]:
                break
            await asyncio.sleep(max(0.0, 1.0 - (time.time() - now)))
        listed = await world.get("/api/scopes", kind="incident", limit="500")
        # incidents from the warm-up (a loaded machine's noise, resolved by the person before the start) are not the run's
        incidents = [i for i in listed["scopes"] if parse_at(i["created_at"]) >= start]
        entries = [e for row in incidents for e in await _all_entries(world, row["id"])]
        messages = count_bot_messages((await world.get("/sandbox/state")).get("channels", []))
        row = score(
            scenario=case.scenario.name,
            seed=seed,
            truth=case.truth,
            incidents=incidents,
            entries=entries,
            alerts=alerts,
            changes=world.changes,
            slack_messages=messages,
        )
        row["run_s"] = round(time.time() - start, 1)
        row["noisy_start"] = noisy
        row["run_dir"] = str(directory)
        return row
    finally:
        await world.stop()


async def run_all(
    cases: list[Case], skipped: list[Skipped], *, seeds: int, jobs: int, out: Path, quiet: bool = False
) -> list[dict[str, Any]]:
    out.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    gate = asyncio.Semaphore(max(1, jobs))
    rows: list[dict[str, Any]] = []
    results = out / "results.jsonl"
    results.write_text("")

    async def one(number: int, case: Case, seed: int) -> None:
        async with gate:
            # an opaque name: decklog is handed paths under it, and a scenario's name can say what is wrong
            directory = out / "runs" / f"run-{number:03d}"
            try:
                row = await run_one(case, seed, directory)
            except Exception as exc:  # a world that broke is a failed run, reported, not a crash of the suite
                row = {"scenario": case.scenario.name, "source": case.truth.source, "seed": seed, "error": str(exc)}
            rows.append(row)
            with results.open("a") as f:
                f.write(json.dumps(row) + "\n")
            if not quiet:
                rank = row.get("correct_rank")
                print(
                    f"{case.scenario.name} s{seed}: first={row.get('first_hypothesis')} rank={rank} "
                    f"ran={row.get('actions_run')} mitigated={row.get('mitigated')} {row.get('error', '')}",
                    flush=True,
                )

    plan = [(case, seed) for case in cases for seed in range(seeds)]
    await asyncio.gather(*(one(n, case, seed) for n, (case, seed) in enumerate(plan, 1)))
    wall = time.monotonic() - started
    scored = [r for r in rows if "error" not in r]
    broken = [
        Skipped(name=r["scenario"], source=r["source"], reason=f"the run failed: {r['error']}")
        for r in rows
        if "error" in r
    ]
    (out / "table.md").write_text(render(scored, [*skipped, *broken], wall_s=wall))
    (out / "skipped.json").write_text(json.dumps([s.model_dump() for s in skipped], indent=1))
    return rows
