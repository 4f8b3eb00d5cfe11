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
from pathlib import Path

from aiohttp import web

from decklog.adapters.http.metrics import CONTENT_TYPE, Live, ServerMetrics
from decklog.bot.config import RemindersConfig, SlackConfig
from decklog.bot.parts import Job, Provides, Route
from decklog.bot.settings import Settings, SlackMode
from decklog.bot.slack import SlackIn, SlackOut
from decklog.core.clock import Clock
from decklog.core.lifecycle import LifecycleJob
from decklog.core.outbox.dispatcher import Dispatcher
from decklog.core.outbox.sweeps import Sweeps
from decklog.core.reminders import DAY_S, LifecyclePolicy
from decklog.core.store.ports import AlertInbox, IndexPort, Leases, LogStore, StorageFactory

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
#: With replicas: how often a replica looks for cursors held by a replica that died (one query over the cursors
#: with running leases; core/store/postgres/liveness.py), so their deliveries move within seconds.
DEAD_HOLDERS_S = 0.5
#: On SQLite: how often the sweep's checkpoint is renewed (core/store/sqlite/sweep_checkpoint.py): the next boot
#: opens the scope files written since the last one, plus those it found pending.
CHECKPOINT_S = 60.0
#: On SQLite: how often the server looks for stored Slack requests it is not processing (those that
#: ``decklog doctor --retry`` queued again; pending requests of a previous process are replayed at boot).
INBOX_REPLAY_S = 5.0


@dataclass
class Ops:
    metrics: ServerMetrics
    provides: Provides
    lifecycle: LifecycleJob


def lifecycle_policy(settings: Settings, slack: SlackConfig, reminders: RemindersConfig) -> LifecyclePolicy:
    """``[slack] archive_after``/``archive_notice`` (``DECKLOG_ARCHIVE_AFTER`` wins) and ``[reminders]``."""
    after = settings.archive_after if settings.archive_after is not None else slack.archive_after
    return LifecyclePolicy(
        archive_after_s=after,
        archive_notice_s=slack.archive_notice,
        status_update_s=reminders.status_update_seconds(),
        follow_up_after_s=reminders.follow_ups_after_days * DAY_S,
    )


def build_ops(
    store: LogStore,
    index: IndexPort,
    clock: Clock,
    dispatcher: Dispatcher,
    storage: StorageFactory,
    out: SlackOut,
    slack: SlackIn,
    metrics: ServerMetrics,
    mode: SlackMode,
    *,
    data_dir: Path,
    lifecycle: LifecyclePolicy,
    alert_inbox: AlertInbox | None = None,
) -> Ops:
    """``storage``: its health (``/healthz``) and, with replicas, the cursor claims the sweeps read;
    ``alert_inbox``: the stored alert notifications, whose backlog ``/metrics`` shows."""
    started_at = time.time()
    sweeps = Sweeps(dispatcher, index, store)

    async def healthz(_request: web.Request) -> web.StreamResponse:
        checks = await health_checks(data_dir, index, storage, dispatcher)
        ok = all(v in ("writable", "alive") for v in checks.values())
        body = {
            "status": "ok" if ok else "unhealthy",
            "checks": checks,
            "slack": mode,
            "uptime_s": round(time.time() - started_at, 1),
        }
        return web.json_response(body, status=200 if ok else 503)

    async def scrape(_request: web.Request) -> web.StreamResponse:
        live = await read_live(store, index, dispatcher, out, slack, alert_inbox)
        await metrics.findings.refresh(store, index)  # queues what moved; counted in the background
        return web.Response(body=metrics.render(live), headers={"Content-Type": CONTENT_TYPE})

    job = LifecycleJob(store, index, clock, lifecycle)

    async def lifecycle_tick() -> None:
        await job.tick()

    cursors = storage.cursor_claims()
    every = SWEEP_S if cursors is not None else SQLITE_SWEEP_S
    jobs = [Job("sweep", every, sweeps.periodic), Job("lifecycle", LIFECYCLE_S, lifecycle_tick)]
    if cursors is not None:  # replicas: what a dead one acknowledged is done by the others
        shared = cursors

        async def take_over() -> None:
            await slack.intake.replay()
            await sweeps.pending(shared)

        jobs.append(Job("inbox-takeover", INBOX_TAKEOVER_S, take_over))

        async def dead_holders() -> None:
            await dispatcher.take_over_dead()

        jobs.append(Job("dead-holders", DEAD_HOLDERS_S, dead_holders))
    else:

        async def replay_requeued() -> None:
            await slack.intake.replay()

        jobs.append(Job("inbox-replay", INBOX_REPLAY_S, replay_requeued))
        jobs.append(Job("sweep-checkpoint", CHECKPOINT_S, sweeps.checkpoint))
    provides = Provides(
        routes=[Route("GET", "/healthz", healthz), Route("GET", "/metrics", scrape)],
        jobs=jobs,
        tasks=[sweeps.boot, lambda: metrics.findings.run(store, index)],
    )
    return Ops(metrics, provides, job)


#: Jobs every replica runs for itself (its own inbox leases, its own wake-ups); every other job runs on one replica
#: at a time, under a lease on the database clock.
ALERT_INBOX_JOB = "alerts:inbox"  # each replica renews its stored alert notifications and takes a dead one's
REPLICA_LOCAL_JOBS = frozenset({"inbox-takeover", "dead-holders", ALERT_INBOX_JOB})


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


async def health_checks(
    data_dir: Path, index: IndexPort, storage: StorageFactory, dispatcher: Dispatcher
) -> dict[str, str]:
    checks: dict[str, str] = {}
    probe = data_dir / f".healthz-{os.getpid()}"
    try:
        await asyncio.to_thread(probe.write_bytes, b"ok")
        await asyncio.to_thread(probe.unlink)
        checks["data_dir"] = "writable"
    except OSError as exc:
        checks["data_dir"] = f"not writable: {exc.strerror}"
    try:
        await index.ping()
        checks["index"] = "writable"
    except Exception as exc:
        checks["index"] = f"not writable: {exc}"
    checks.update(await storage.health())
    checks["dispatcher"] = "alive" if dispatcher.alive else "stopped"
    return checks


async def read_live(
    store: LogStore,
    index: IndexPort,
    dispatcher: Dispatcher,
    out: SlackOut,
    slack: SlackIn,
    alert_inbox: AlertInbox | None = None,
) -> Live:
    pending: dict[str, float] = {}
    parked: dict[str, float] = {}
    for row in await index.list_scopes(open_only=True, limit=None):  # every open scope: none left uncounted
        try:
            summary = await store.outbox_summary(row.id)
        except Exception:
            continue
        for topic, n in summary.pending.items():
            pending[topic] = pending.get(topic, 0) + n
        for topic, n in summary.parked.items():
            parked[topic] = parked.get(topic, 0) + n
    stats = dispatcher.stats
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
    if alert_inbox is not None:
        live.gauge(
            "decklog_alert_inbox_pending",
            "Alert notifications stored and answered 202 but not routed into incidents yet (the durable alert inbox)",
            float(await alert_inbox.pending_count()),
        )
    live.counter("decklog_appends_total", "Entries appended by this process", float(store.appended_total))
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
    live.gauge("decklog_open_scope_files", "Scope databases open right now", float(store.open_files))
    return live
