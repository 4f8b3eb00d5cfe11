"""The operations part: ``GET /healthz``, ``GET /metrics``, the outbox sweeps (at boot, then every 3 s in one process
and 30 s where replicas hear each other's commits), the lifecycle job (every 30 s: channel archives and reminders
that have fallen due, core/lifecycle.py) and the inbox's replays (stored Slack requests queued again by
``decklog doctor --retry``, and with replicas a dead replica's)."""

from __future__ import annotations

import asyncio
import logging
import os
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from aiohttp import web

from decklog.bot.metrics import CONTENT_TYPE, Live, ServerMetrics
from decklog.bot.parts import Job, Provides, Route
from decklog.bot.runtime import Runtime
from decklog.bot.settings import SlackMode
from decklog.bot.slack import SlackIn, SlackOut
from decklog.core.clock import iso
from decklog.core.lifecycle import LifecycleJob
from decklog.core.reminders import DAY_S, LifecyclePolicy
from decklog.core.store.ports import CursorClaims, Leases

log = logging.getLogger("decklog")

SWEEP_S = 30.0
#: Where replicas do not hear each other's commits (SQLite) the sweep is the only way a running server learns of
#: another process's commits (``decklog declare`` or ``append`` beside it): one index query, then one outbox summary
#: per scope updated in the last minute.
SQLITE_SWEEP_S = 3.0
#: How often the due lifecycle items (archives, reminders) are looked for; their due times live in the log.
LIFECYCLE_S = 30.0
#: With replicas: how often a replica renews its inbox leases and takes over a dead replica's stored requests.
INBOX_TAKEOVER_S = 3.0
#: On SQLite: how often the server looks for stored Slack requests it is not processing (those that
#: ``decklog doctor --retry`` queued again; pending requests of a previous process are replayed at boot).
INBOX_REPLAY_S = 5.0


@dataclass
class Ops:
    metrics: ServerMetrics
    provides: Provides
    lifecycle: LifecycleJob


def lifecycle_policy(rt: Runtime) -> LifecyclePolicy:
    """``[slack] archive_after``/``archive_notice`` (``DECKLOG_ARCHIVE_AFTER`` wins) and ``[reminders]``."""
    slack, reminders = rt.config.slack, rt.config.reminders
    after = rt.settings.archive_after if rt.settings.archive_after is not None else slack.archive_after
    return LifecyclePolicy(
        archive_after_s=after,
        archive_notice_s=slack.archive_notice,
        status_update_s=reminders.status_update_seconds(),
        follow_up_after_s=reminders.follow_ups_after_days * DAY_S,
    )


class Sweeps:
    """Re-arm pending deliveries: every scope at boot, then the scopes another process (the CLI) touched."""

    def __init__(self, rt: Runtime) -> None:
        self.rt = rt
        self.last = 0.0

    async def boot(self) -> None:
        woken = await self.rt.dispatcher.sweep()
        log.info("boot sweep: %d scopes with pending deliveries", woken)
        self.last = time.time()

    async def pending(self, cursors: CursorClaims) -> None:
        """With replicas: wake every scope with rows waiting, whichever replica committed them (one query)."""
        await self.rt.dispatcher.sweep(await cursors.outbox_pending_scopes())

    async def periodic(self) -> None:
        since = iso(datetime.fromtimestamp(self.last - 60, UTC))
        recent = [r.id for r in await self.rt.index.list_scopes(updated_since=since, limit=None)]
        self.last = time.time()
        await self.rt.dispatcher.sweep(recent)


def build_ops(rt: Runtime, out: SlackOut, slack: SlackIn, metrics: ServerMetrics, mode: SlackMode) -> Ops:
    started_at = time.time()
    sweeps = Sweeps(rt)

    async def healthz(_request: web.Request) -> web.StreamResponse:
        checks = await health_checks(rt)
        ok = all(v in ("writable", "alive") for v in checks.values())
        body = {
            "status": "ok" if ok else "unhealthy",
            "checks": checks,
            "slack": mode,
            "uptime_s": round(time.time() - started_at, 1),
        }
        return web.json_response(body, status=200 if ok else 503)

    async def scrape(_request: web.Request) -> web.StreamResponse:
        live = await read_live(rt, out, slack)
        await metrics.findings.refresh(rt.store, rt.index)  # decklog_findings_total, cached per scope version
        return web.Response(body=metrics.render(live), headers={"Content-Type": CONTENT_TYPE})

    lifecycle = LifecycleJob(rt.store, rt.index, rt.clock, lifecycle_policy(rt))

    async def lifecycle_tick() -> None:
        await lifecycle.tick()

    cursors = rt.storage.cursor_claims()
    every = SWEEP_S if cursors is not None else SQLITE_SWEEP_S
    jobs = [Job("sweep", every, sweeps.periodic), Job("lifecycle", LIFECYCLE_S, lifecycle_tick)]
    if cursors is not None:  # replicas: what a dead one acknowledged is done by the others
        shared = cursors

        async def take_over() -> None:
            await slack.intake.replay()
            await sweeps.pending(shared)

        jobs.append(Job("inbox-takeover", INBOX_TAKEOVER_S, take_over))
    else:

        async def replay_requeued() -> None:
            await slack.intake.replay()

        jobs.append(Job("inbox-replay", INBOX_REPLAY_S, replay_requeued))
    provides = Provides(
        routes=[Route("GET", "/healthz", healthz), Route("GET", "/metrics", scrape)],
        jobs=jobs,
        tasks=[sweeps.boot],
    )
    return Ops(metrics, provides, lifecycle)


#: Jobs every replica runs for itself (its own inbox leases, its own wake-ups); every other job runs on one replica
#: at a time, under a lease on the database clock.
REPLICA_LOCAL_JOBS = frozenset({"inbox-takeover"})


def leased_jobs(leases: Leases | None, owner: str, provided: list[Provides]) -> None:
    """With replicas (the backend's ``leases``): wrap each periodic job so that one replica runs it per period
    (sweeps, summaries, reminders, prunes). The lease lasts a little over two periods, so a dead holder's job moves
    to another replica. ``owner`` names this replica."""
    if leases is None:
        return
    for p in provided:
        p.jobs = [j if j.name in REPLICA_LOCAL_JOBS else _leased(leases, owner, j) for j in p.jobs]


def _leased(leases: Leases, owner: str, job: Job) -> Job:
    async def run() -> None:
        if await leases.try_lease(f"job:{job.name}", owner, lease_s=job.every_s * 2.5):
            await job.run()

    return Job(job.name, job.every_s, run)


async def health_checks(rt: Runtime) -> dict[str, str]:
    checks: dict[str, str] = {}
    probe = Path(rt.settings.data_dir) / f".healthz-{os.getpid()}"
    try:
        await asyncio.to_thread(probe.write_bytes, b"ok")
        await asyncio.to_thread(probe.unlink)
        checks["data_dir"] = "writable"
    except OSError as exc:
        checks["data_dir"] = f"not writable: {exc.strerror}"
    try:
        await rt.index.ping()
        checks["index"] = "writable"
    except Exception as exc:
        checks["index"] = f"not writable: {exc}"
    checks.update(await rt.storage.health())
    checks["dispatcher"] = "alive" if rt.dispatcher.alive else "stopped"
    return checks


async def read_live(rt: Runtime, out: SlackOut, slack: SlackIn) -> Live:
    pending: dict[str, float] = {}
    parked: dict[str, float] = {}
    for row in await rt.index.list_scopes(open_only=True, limit=2000):
        try:
            summary = await rt.store.outbox_summary(row.id)
        except Exception:
            continue
        for topic, n in summary.pending.items():
            pending[topic] = pending.get(topic, 0) + n
        for topic, n in summary.parked.items():
            parked[topic] = parked.get(topic, 0) + n
    stats = rt.dispatcher.stats
    inbox = slack.inbox.stats
    live = Live()
    live.by_label(
        "counter",
        "decklog_slack_listener_calls_total",
        "Slack listener invocations by family",
        "family",
        {k: float(v) for k, v in slack.counters.items()},
    )
    live.gauge(
        "decklog_slack_work_in_flight",
        "Acknowledged Slack requests whose work has not finished (waiting for a slot or running)",
        float(slack.deps.work_in_flight),
    )
    live.counter(
        "decklog_inbox_persisted_total", "Slack requests stored in the inbox before their ack", inbox.persisted
    )
    live.counter(
        "decklog_inbox_duplicates_total",
        "Slack requests whose key was already in the inbox (retries, duplicates): acked, not processed",
        inbox.duplicates,
    )
    live.counter(
        "decklog_inbox_fsyncs_total",
        "Durable inbox commits (one fsync each; concurrent requests share one)",
        inbox.fsyncs,
    )
    live.gauge("decklog_inbox_pending", "Stored Slack requests not done yet", float(await slack.inbox.pending_count()))
    live.gauge(
        "decklog_inbox_parked",
        "Slack requests given up after their attempts (`decklog doctor` lists them, `doctor --retry` requeues them)",
        float(await slack.inbox.parked_count()),
    )
    live.counter("decklog_appends_total", "Entries appended by this process", float(rt.store.appended_total))
    live.by_label(
        "gauge", "decklog_outbox_pending", "Outbox rows waiting for delivery (open scopes)", "sender", pending
    )
    live.by_label(
        "gauge", "decklog_outbox_parked", "Outbox rows parked after their retry budget (open scopes)", "sender", parked
    )
    live.counter("decklog_deliveries_total", "Outbox deliveries", float(stats.delivered))
    live.counter("decklog_delivery_failures_total", "Failed delivery attempts", float(stats.failures))
    live.counter(
        "decklog_delivery_rate_limited_total", "Deliveries postponed by a rate limit", float(stats.rate_limited)
    )
    live.counter("decklog_slack_posts_total", "Messages posted to Slack", float(out.sender.stats.posts))
    live.counter("decklog_slack_updates_total", "Header updates (chat.update)", float(out.sender.stats.updates))
    live.gauge("decklog_open_scope_files", "Scope databases open right now", float(rt.store.open_files))
    return live


# -- decklog doctor: the Slack inbox --------------------------------------------------------------------------------


async def doctor_inbox(rt: Runtime, *, retry: bool) -> list[str]:
    """``decklog doctor``'s lines about the Slack inbox: each parked request with its error, the counts, and with
    ``retry`` the parked requests queued again (a running server replays them: ``inbox-replay``/``inbox-takeover``).
    Storage without an inbox yet (a SQLite data directory without ``inbox.db``: no Slack request ever stored) is
    left alone."""
    if not rt.storage.inbox_exists():
        return ["inbox: 0 pending, 0 parked Slack requests"]
    inbox = await rt.storage.inbox()
    try:
        lines = []
        parked = await inbox.parked()
        for p in parked:
            received = datetime.fromtimestamp(p.received_at, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
            lines.append(
                f"inbox  PARKED  {p.key} ({describe_request(p.body)}, received {received}) after {p.attempts} "
                f"attempts: {p.error}"
            )
        lines.append(f"inbox: {await inbox.pending_count()} pending, {len(parked)} parked Slack requests")
        if retry and parked:
            queued = await inbox.retry_parked()
            lines.append(
                f"{queued} parked Slack requests queued again; a running `decklog serve` replays them within "
                "seconds (or at its next start)"
            )
        return lines
    finally:
        await inbox.close()


def describe_request(body: dict[str, object]) -> str:
    """A stored Slack request in a few words: ``event_callback/message``, ``/incident sev 2``, ``block_actions``."""
    event = body.get("event")
    if body.get("type") == "event_callback" and isinstance(event, dict):
        return f"event_callback/{str(event.get('type', '?'))[:40]}"
    if "command" in body:
        return f"{str(body.get('command'))[:20]} {str(body.get('text', ''))[:60]}".strip()
    return str(body.get("type") or "request")[:40]
