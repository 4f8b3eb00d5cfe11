"""Alert storm: 10,000 alerts over 50 fingerprints and 10 services, POSTed to ``decklog serve`` over loopback.

    .venv/bin/python bench/alerts.py [--alerts 10000] [--fingerprints 50] [--services 10] [--concurrency 32]
                                     [--rounds 1] [--quick]

The server runs in-process (sandbox mode: the fake Slack on loopback, every shipped feature) on the shipped
``decklog.example.toml``, so the Slack sender paces posts at one a second per channel as it would in production.
Alert ``k`` is the generic JSON of fingerprint ``k mod 50`` on service ``(k mod 50) mod 10``, with its own
``event_id`` (a real notification each, not a retry): the first 50 open 10 incidents (one per service) and
group 40 new fingerprints into them; the remaining 9,950 are repeats.

Measured:

- receiver throughput (alerts acknowledged per second, ``concurrency`` requests in flight) and request latency,
  against a baseline measured in the same round: the same requests to a no-op aiohttp handler that reads the body
  and answers 202 JSON (same client, same loop);
- the same storm against the storage floor (raw ``LogStore.append`` of the same observations) and two bounding
  receivers (bench/_receivers.py: parse, append, answer; and the same with requests merged per incident), which
  show how far a ratio to the floor can go for any receiver that answers each alert after it is durable;
- the server process's CPU time per alert (all its threads, the load generator excluded) against raw
  ``LogStore.append``'s per append: on a shared machine, less sensitive to other load than the rates;
- alert → Slack header latency (p50/p99) for the alerts that open incidents: from the request being sent to the
  fake Slack receiving ``chat.postMessage`` for that incident's header;
- Slack messages per alert once every alert is summarised: headers, alert summaries and anything else posted
  (context and agent messages from other features), and ``chat.update`` calls on headers. Target: one header
  per incident plus at most one summary a minute per incident, however large the storm.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import aiohttp

from bench._blast import TOKEN, Storm, baseline, blast_from_child, in_scratch
from bench._receivers import coalesce_baseline, persist_baseline, store_baseline
from bench._stats import Sample, fmt_ms, fmt_rate, fmt_ratio, markdown_table, median, note, percentile, verdict
from decklog.bot.config import load_config
from decklog.bot.server import DecklogServer, freeze_heap
from decklog.bot.settings import Settings, example_config_path
from decklog.core.alerts import SUMMARY_SOURCE
from tests.fakes.slack_calls import record_sandbox_calls, slack_calls

OPENING = 500  # the requests that open the storm's incidents (reported apart)


# -- decklog -----------------------------------------------------------------------------------------------------


@dataclass
class StormResult:
    sample: Sample
    incidents: int
    outcomes: dict[str, int]
    header_latencies: list[float]
    headers: int
    summaries: int
    summary_messages: int
    other_messages: int
    header_updates: int
    storm_minutes: float
    max_summaries_per_incident: int
    unsummarised: int
    loop_lags: list[float] = field(default_factory=list)
    routed_seconds: float = 0.0  # from the first request to the last alert routed into the log

    @property
    def routed_rate(self) -> float:
        return self.sample.ops / self.routed_seconds if self.routed_seconds > 0 else 0.0


LAG_TICK_S = 0.002


async def loop_lag(out: list[float]) -> None:
    """How late the event loop wakes a ``LAG_TICK_S`` sleep, again and again: its stalls, in seconds."""
    while True:
        started = time.perf_counter()
        await asyncio.sleep(LAG_TICK_S)
        out.append(time.perf_counter() - started - LAG_TICK_S)


async def decklog_storm(
    storm: Storm, concurrency: int, data_dir: Path, *, settle_timeout: float, pace: float | None
) -> StormResult:
    config = load_config(example_config_path())  # shipped: pacing 1 msg/s/channel, header 2 s
    if pace is not None:
        config = config.model_copy(update={"slack": config.slack.model_copy(update={"pace_per_channel_s": pace})})
    settings = Settings(data_dir=data_dir, host="127.0.0.1", port=0, alert_token=TOKEN)
    server = DecklogServer(settings, config=config, on_built=record_sandbox_calls)
    await server.start()
    freeze_heap()  # as `decklog serve` does after its start
    try:
        began, cpu = time.time(), time.process_time()
        lags: list[float] = []
        probe = asyncio.ensure_future(loop_lag(lags))
        try:
            result = await blast_from_child(server.url + "/alerts/generic", storm, concurrency)
            routed_at = await all_routed(server, settle_timeout)
            routed_seconds = routed_at - min(result.sent_at)  # the first request sent → the last alert routed
        finally:
            probe.cancel()
        cpu = time.process_time() - cpu  # this (server) process only: the load generator is a child
        bad = [s for s in result.statuses if s != 202]
        if bad:
            raise SystemExit(f"{len(bad)} requests were not accepted (first: {bad[0]})")
        outcomes: dict[str, int] = {}
        opened: dict[str, float] = {}  # incident → when its opening alert was sent
        for sent, answer in zip(result.sent_at, await routed_answers(server, result.answers), strict=True):
            for alert in answer["alerts"]:
                outcomes[alert["outcome"]] = outcomes.get(alert["outcome"], 0) + 1
                if alert["outcome"] == "new":
                    opened[alert["scope"]] = sent
        fake = server.sandbox.server
        store = server.runtime.store

        def header_calls() -> dict[str, float]:
            found: dict[str, float] = {}
            for call in slack_calls(fake).calls_to("chat.postMessage", ok=True):
                meta = (call.args.get("metadata") or {}).get("event_payload") or {}
                if meta.get("key") == "header":
                    found.setdefault(meta["scope"], call.at)
            return found

        async def unsummarised() -> int:
            total = 0
            for scope in opened:
                state = await store.get_state(scope)
                alerts = sum(a.count for a in state.alerts.values())
                covered = 0
                for e in await store.read(scope, kinds=("observation",)):
                    if _is_summary(e):
                        covered += e.payload.data["summary"]["alerts"]
                total += alerts - 1 - covered  # the opening alert is in the header
            return total

        async def summaries_in_log() -> int:
            found = 0
            for scope in opened:
                found += len([e for e in await store.read(scope, kinds=("observation",)) if _is_summary(e)])
            return found

        def summaries_posted() -> int:
            return len(
                [
                    c
                    for c in slack_calls(fake).calls_to("chat.postMessage", ok=True)
                    if str(c.args.get("text", "")).startswith("+") and " alert" in str(c.args.get("text", ""))
                ]
            )

        deadline = time.monotonic() + settle_timeout
        while time.monotonic() < deadline:  # until every alert is summarised and Slack has every summary
            if (
                len(header_calls()) == len(opened)
                and await unsummarised() == 0
                and summaries_posted() == await summaries_in_log()
            ):
                break
            await asyncio.sleep(0.25)
        storm_minutes = (time.time() - began) / 60
        headers = header_calls()
        summaries_per_scope = {
            scope: [e.seq for e in await store.read(scope, kinds=("observation",)) if _is_summary(e)]
            for scope in opened
        }
        posted_summaries = 0
        others = 0
        for call in slack_calls(fake).calls_to("chat.postMessage", ok=True):
            meta = (call.args.get("metadata") or {}).get("event_payload") or {}
            if meta.get("key") == "header":
                continue
            if meta.get("seq") in summaries_per_scope.get(meta.get("scope", ""), []):
                posted_summaries += 1
            else:
                others += 1
        header_ts = {
            (c.response.get("channel"), c.response.get("ts"))
            for c in slack_calls(fake).calls_to("chat.postMessage", ok=True)
            if ((c.args.get("metadata") or {}).get("event_payload") or {}).get("key") == "header"
        }
        updates = [
            c
            for c in slack_calls(fake).calls_to("chat.update")
            if (c.args.get("channel"), c.args.get("ts")) in header_ts
        ]
        return StormResult(
            sample=Sample(storm.alerts, result.seconds, result.latencies, cpu_seconds=cpu),
            incidents=len(opened),
            outcomes=outcomes,
            header_latencies=[headers[s] - opened[s] for s in opened if s in headers],
            headers=len(headers),
            summaries=sum(len(v) for v in summaries_per_scope.values()),
            summary_messages=posted_summaries,
            other_messages=others,
            header_updates=len(updates),
            storm_minutes=storm_minutes,
            max_summaries_per_incident=max((len(v) for v in summaries_per_scope.values()), default=0),
            unsummarised=await unsummarised(),
            loop_lags=lags,
            routed_seconds=routed_seconds,
        )
    finally:
        await server.stop()


async def all_routed(server: DecklogServer, timeout: float) -> float:
    """When (``time.time()``, as the load generator's ``sent_at``) every stored notification was routed (its
    receipt has its outcomes)."""
    part = server.parts.receivers
    assert part is not None
    inbox, intake = part.intake.inbox, part.intake
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if intake.waiting == 0 and await inbox.pending_count() == 0:
            break
        await asyncio.sleep(0.005)
    return time.time()


async def routed_answers(server: DecklogServer, answers: list[Any]) -> list[Any]:
    """Each 202's receipt → the alerts' outcomes, as the synchronous answer had them."""
    part = server.parts.receivers
    assert part is not None
    out = []
    for answer in answers:
        stored = await part.intake.receipt(answer["receipt"])
        if stored is None or stored.outcomes is None:
            raise SystemExit(f"receipt {answer['receipt']} was not routed")
        out.append({"alerts": stored.outcomes})
    return out


def _is_summary(entry: Any) -> bool:
    return bool(entry.payload.source == SUMMARY_SOURCE)


# -- one big notification -------------------------------------------------------------------------------------


def notification(n: int, run: int) -> bytes:
    """One Alertmanager notification of ``n`` alerts (one group, no service label), distinct per ``run``."""
    alerts = [
        {
            "status": "firing",
            "labels": {"alertname": "ProbeFailure", "instance": f"https://host-{k}.example.org", "run": str(run)},
            "annotations": {"summary": f"probe failing on host {k}"},
            "startsAt": "2026-09-19T14:06:30.000Z",
            "endsAt": "0001-01-01T00:00:00Z",
            "fingerprint": f"{run:04x}{k:012x}",
        }
        for k in range(n)
    ]
    body = {"version": "4", "groupKey": f'{{}}:{{alertname="ProbeFailure",run="{run}"}}', "truncatedAlerts": 0}
    body.update(status="firing", receiver="decklog", groupLabels={"alertname": "ProbeFailure"}, alerts=alerts)
    return json.dumps(body, separators=(",", ":")).encode()


async def big_notifications(
    n: int, runs: int, data_dir: Path, *, quiet: bool = False
) -> tuple[list[float], list[float], list[float]]:
    """Seconds to the 2xx (acked) of each of ``runs`` notifications of ``n`` alerts (each opens one incident), and
    to its alerts routed into the log (its receipt has their outcomes), posted back to back (the next once the
    previous one is routed); with ``quiet``, each is posted only once the previous one's outbox is delivered (so
    its own request does not share the loop with the delivery of the one before). Also: seconds from each routing
    until that notification's outbox rows are all delivered (``quiet`` only; else [])."""
    settings = Settings(data_dir=data_dir, host="127.0.0.1", port=0, alert_token=TOKEN)
    server = DecklogServer(settings, config=load_config(example_config_path()))
    await server.start()
    freeze_heap()  # as `decklog serve` does after its start
    out: list[float] = []
    routed: list[float] = []
    drains: list[float] = []
    headers = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
    store = server.runtime.store
    senders = list(server.runtime.dispatcher.senders)

    async def drained(scope: str) -> bool:
        for topic in senders:
            if await store.outbox_pending(scope, topic, limit=1):
                return False
        return True

    part = server.parts.receivers
    assert part is not None
    try:
        async with aiohttp.ClientSession() as http:
            for run in range(runs):
                body = notification(n, run)
                started = time.perf_counter()
                async with http.post(server.url + "/alerts/alertmanager", data=body, headers=headers) as response:
                    answer = await response.json()
                    if response.status != 202 or answer.get("accepted") != n:
                        raise SystemExit(f"notification {run}: {response.status} {answer}")
                answered = time.perf_counter()
                out.append(answered - started)
                deadline = time.monotonic() + 900
                while time.monotonic() < deadline:  # its alerts routed into the log (the receipt has them)
                    stored = await part.intake.receipt(answer["receipt"])
                    if stored is not None and stored.outcomes is not None:
                        break
                    await asyncio.sleep(0.005)
                routed_at = time.perf_counter()
                routed.append(routed_at - started)
                scopes = {o["scope"] for o in (stored.outcomes if stored and stored.outcomes else [])}
                if len(scopes) != 1:
                    raise SystemExit(f"notification {run}: routed to {sorted(scopes)}")
                if quiet:
                    deadline, scope = time.monotonic() + 120, next(iter(scopes))
                    while not await drained(scope) and time.monotonic() < deadline:
                        await asyncio.sleep(0.02)
                    drains.append(time.perf_counter() - routed_at)
    finally:
        await server.stop()
    return out, routed, drains


# -- main --------------------------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--alerts", type=int, default=10_000)
    parser.add_argument("--fingerprints", type=int, default=50)
    parser.add_argument("--services", type=int, default=10)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--settle-timeout", type=float, default=180.0)
    parser.add_argument("--quick", action="store_true", help="1,000 alerts")
    parser.add_argument(
        "--pace", type=float, default=None, help="seconds between posts per Slack channel (default: shipped, 1.0)"
    )
    parser.add_argument("--notification", type=int, default=0, help="instead: one notification of N alerts")
    args = parser.parse_args()
    if args.notification:
        for quiet in (False, True):
            data_dir = Path(tempfile.mkdtemp(prefix="decklog-bench-notification-"))
            try:
                times, routed, drains = asyncio.run(
                    big_notifications(args.notification, max(3, args.rounds), data_dir, quiet=quiet)
                )
            finally:
                shutil.rmtree(data_dir, ignore_errors=True)
            p50, p99 = percentile(times, 50), percentile(times, 99)
            r50, r99 = percentile(routed, 50), percentile(routed, 99)
            how = "each after the previous one's outbox was delivered" if quiet else "back to back"
            print(
                f"one notification of {args.notification:,} alerts, {len(times)} runs {how}: acked (2xx) p50 "
                f"{p50 * 1000:.0f} ms, p99 {p99 * 1000:.0f} ms ({verdict(p99 <= 0.5)}: target ≤ 500 ms); routed "
                f"p50 {r50 * 1000:.0f} ms, p99 {r99 * 1000:.0f} ms ({verdict(r99 <= 3.0)}: target ≤ 3 s), "
                f"{args.notification / r50:,.0f} alerts/s routed"
                + (f"; routed → outbox delivered p50 {percentile(drains, 50) * 1000:.0f} ms" if drains else "")
            )
        return
    storm = Storm(1_000 if args.quick else args.alerts, args.fingerprints, args.services)
    print(report(storm, args.concurrency, run_rounds(storm, args), pace=args.pace))


@dataclass
class Rounds:
    """Each round's samples, one per case (the cases rotate their order from round to round)."""

    base: list[Sample] = field(default_factory=list)  # no-op aiohttp
    floor: list[Sample] = field(default_factory=list)  # raw LogStore.append
    ceiling: list[Sample] = field(default_factory=list)  # aiohttp + one append per alert
    coalesced: list[Sample] = field(default_factory=list)  # aiohttp + appends coalesced per incident
    per_append: list[float] = field(default_factory=list)  # the coalescing receiver's mean entries per append
    runs: list[StormResult] = field(default_factory=list)  # decklog


def run_rounds(storm: Storm, args: argparse.Namespace) -> Rounds:
    out = Rounds()
    cases = ["baseline", "store", "persist", "coalesce", "decklog"]
    for r in range(args.rounds):
        for case in cases[r % len(cases) :] + cases[: r % len(cases)]:
            if case == "baseline":
                out.base.append(asyncio.run(baseline(storm, args.concurrency)))
                note(f"round {r + 1}: no-op aiohttp {out.base[-1].rate:,.0f} req/s")
            elif case == "store":
                out.floor.append(in_scratch("store", lambda d: store_baseline(storm, args.concurrency, d)))
                note(f"round {r + 1}: raw LogStore.append {out.floor[-1].rate:,.0f} appends/s")
            elif case == "persist":
                out.ceiling.append(in_scratch("persist", lambda d: persist_baseline(storm, args.concurrency, d)))
                note(f"round {r + 1}: aiohttp + LogStore.append {out.ceiling[-1].rate:,.0f} alerts/s")
            elif case == "coalesce":
                sample, per_append = in_scratch("coalesce", lambda d: coalesce_baseline(storm, args.concurrency, d))
                out.coalesced.append(sample)
                out.per_append.append(per_append)
                note(f"round {r + 1}: aiohttp + coalesced appends {sample.rate:,.0f} alerts/s, {per_append:.2f}/append")
            else:
                res = in_scratch(
                    "alerts",
                    lambda d: decklog_storm(
                        storm, args.concurrency, d, settle_timeout=args.settle_timeout, pace=args.pace
                    ),
                )
                out.runs.append(res)
                note(f"round {r + 1}: decklog {res.sample.rate:,.0f} alerts/s, {res.incidents} incidents")
    return out


def report(storm: Storm, concurrency: int, rounds: Rounds, *, pace: float | None = None) -> str:
    base, floor, runs = rounds.base, rounds.floor, rounds.runs
    last = runs[-1]
    rate = median([r.sample.rate for r in runs])
    base_rate = median([b.rate for b in base])
    ratio = median([r.sample.rate / b.rate for r, b in zip(runs, base, strict=True) if b.rate > 0])
    req_p50 = median([r.sample.percentile_ms(50) for r in runs])
    req_p99 = median([r.sample.percentile_ms(99) for r in runs])
    base_p50 = median([b.percentile_ms(50) for b in base])
    base_p99 = median([b.percentile_ms(99) for b in base])
    head_p50 = median([percentile(r.header_latencies, 50) * 1000 for r in runs])
    head_p99 = median([percentile(r.header_latencies, 99) * 1000 for r in runs])
    messages = last.headers + last.summary_messages + last.other_messages
    allowed = last.incidents * (1 + math.ceil(max(last.storm_minutes, 1.0)))
    alert_messages = last.headers + last.summary_messages
    target_ok = (
        last.headers == last.incidents
        and last.max_summaries_per_incident <= math.ceil(max(last.storm_minutes, 1.0))
        and last.unsummarised == 0
    )
    floor_rate = median([f.rate for f in floor])
    floor_ratio = median([r.sample.rate / f.rate for r, f in zip(runs, floor, strict=True) if f.rate > 0])
    routed_rate = median([r.routed_rate for r in runs])
    routed_ratio = median([r.routed_rate / f.rate for r, f in zip(runs, floor, strict=True) if f.rate > 0])
    cpu_us = median([r.sample.cpu_us_per_op for r in runs])
    steady_p99 = median([percentile(r.sample.latencies[OPENING:], 99) * 1000 for r in runs])
    lag_max = median([max(r.loop_lags, default=0.0) * 1000 for r in runs])
    stalls = sum(1 for lag in last.loop_lags if lag > 0.05)
    floor_cpu_us = median([f.cpu_us_per_op for f in floor])
    rows = [
        [
            "receiver throughput",
            f"{fmt_rate(rate)} alerts/s",
            f"{fmt_rate(base_rate)} req/s",
            fmt_ratio(ratio),
            "baseline: the same requests to a no-op aiohttp handler",
        ],
        [
            "alerts acked/s vs the storage floor",
            f"{fmt_rate(rate)} alerts/s",
            f"{fmt_rate(floor_rate)} appends/s",
            fmt_ratio(floor_ratio),
            "2xx once the notification is durable; baseline: raw LogStore.append of the same observations (no "
            f"HTTP, routing or dispatch). Target ≥ 0.6×: {verdict(floor_ratio >= 0.6)}",
        ],
        [
            "alerts routed/s vs the storage floor",
            f"{fmt_rate(routed_rate)} alerts/s",
            f"{fmt_rate(floor_rate)} appends/s",
            fmt_ratio(routed_ratio),
            f"first request → every alert's outcome in the log (receipts complete). Target ≥ 0.5×: "
            f"{verdict(routed_ratio >= 0.5)}",
        ],
        *_ceiling_rows(rounds),
        [
            "server CPU per alert",
            f"{cpu_us:,.0f} µs",
            f"{floor_cpu_us:,.0f} µs",
            fmt_ratio(cpu_us / floor_cpu_us),
            "process CPU (all threads) while the requests ran, per alert; baseline: per raw append. Less "
            "sensitive than rates to other load on a shared machine",
        ],
        [
            "request latency p50",
            f"{fmt_ms(req_p50)} ms",
            f"{fmt_ms(base_p50)} ms",
            fmt_ratio(req_p50 / base_p50),
            "baseline: no-op aiohttp",
        ],
        ["request latency p99", f"{fmt_ms(req_p99)} ms", f"{fmt_ms(base_p99)} ms", fmt_ratio(req_p99 / base_p99), ""],
        [
            f"… p99 after the first {OPENING:,}",
            f"{fmt_ms(steady_p99)} ms",
            "",
            "",
            f"the first {OPENING:,} requests open the incidents (declarations under their services' locks)",
        ],
        [
            "event loop stalls",
            f"max {fmt_ms(lag_max)} ms",
            "",
            "",
            f"{stalls} over 50 ms while the requests ran ({LAG_TICK_S * 1000:g} ms sleeps woken late)",
        ],
        ["alert → Slack header p50", f"{fmt_ms(head_p50)} ms", "", "", f"{last.incidents} incidents"],
        [
            "alert → Slack header p99",
            f"{fmt_ms(head_p99)} ms",
            "",
            "",
            f"Slack pacing: {1.0 if pace is None else pace:g} s between posts per channel (one alerts channel)",
        ],
        [
            "Slack messages per alert",
            f"{messages / storm.alerts:.4f}",
            "",
            "",
            f"{last.headers} headers + {last.summary_messages} summaries + {last.other_messages} other "
            f"(context/agents) for {storm.alerts:,} alerts",
        ],
        [
            "alert messages per incident",
            f"{alert_messages / max(last.incidents, 1):.1f}",
            "",
            "",
            f"target ≤ {allowed // max(last.incidents, 1)} (1 header + ≤1 summary/min over "
            f"{last.storm_minutes:.1f} min): {verdict(target_ok)}",
        ],
        ["header updates (chat.update)", str(last.header_updates), "", "", "coalesced: ≤ 1 per 2 s per incident"],
    ]
    outcome_text = ", ".join(f"{k} {v:,}" for k, v in sorted(last.outcomes.items()))
    return (
        f"Alert storm: {storm.alerts:,} alerts, {storm.fingerprints} fingerprints, {storm.services} services, "
        f"{concurrency} in flight, {len(runs)} round(s); outcomes: {outcome_text}; "
        f"{last.summaries} summaries, {last.unsummarised} alerts unsummarised\n\n"
        + markdown_table(["measure", "decklog", "baseline", "ratio", "note"], rows)
    )


def _ceiling_rows(rounds: Rounds) -> list[list[str]]:
    """The bounding receivers against the floor, and decklog against the one-append ceiling (per round, medians)."""
    floor, runs = rounds.floor, rounds.runs
    floor_rate = f"{fmt_rate(median([f.rate for f in floor]))} appends/s"
    rows: list[list[str]] = []
    for name, samples, what in (
        (
            "… ceiling: aiohttp + one append per alert",
            rounds.ceiling,
            "a handler that parses the alert, appends it and answers its seq",
        ),
        (
            "… ceiling, appends coalesced per incident",
            rounds.coalesced,
            f"the same, with requests for one incident merged into one append, "
            f"{median(rounds.per_append or [0.0]):.2f} alerts per append",
        ),
    ):
        if not samples:
            continue
        of_floor = median([c.rate / f.rate for c, f in zip(samples, floor, strict=True) if f.rate > 0])
        rows.append(
            [
                name,
                f"{fmt_rate(median([c.rate for c in samples]))} alerts/s",
                floor_rate,
                fmt_ratio(of_floor),
                f"{what}: {median([c.cpu_us_per_op for c in samples]):,.0f} µs of CPU per alert, request p99 "
                f"{fmt_ms(median([c.percentile_ms(99) for c in samples]))} ms; its rate ÷ the floor",
            ]
        )
    if rounds.ceiling:
        rate = median([c.rate for c in rounds.ceiling])
        rows.append(
            [
                "… decklog vs the one-append ceiling",
                f"{fmt_rate(median([r.sample.rate for r in runs]))} alerts/s",
                f"{fmt_rate(rate)} alerts/s",
                fmt_ratio(median([r.sample.rate / c.rate for r, c in zip(runs, rounds.ceiling, strict=True)])),
                "what routing, dedup, the index, the answer and the dispatcher cost on top",
            ]
        )
    return rows


if __name__ == "__main__":
    main()
