"""A mixed Slack + alert load against ``decklog serve``, SIGKILLed at random moments: shared by
tests/reliability/test_crash_mixed.py and bench/crash.py.

Each cycle starts the server (HTTP, or Socket Mode on odd cycles when ``socket_every`` says so), runs ``workers``
concurrent clients that send signed slash commands (declare), thread messages into incidents the server has
linked, 📌 reactions on acked messages, severity picks on incident headers, and Alertmanager webhooks, then kills
the server with SIGKILL after a random time. Every request that got a 2xx (or a Socket Mode ack) is recorded in
:class:`Acked`; after the last cycle :meth:`CrashRun.settle` restarts the server once more and polls
:func:`judge` until every acked effect is there and the outbox is empty (or the deadline passes).
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from decklog.adapters.local.slack import FakeSlack
from decklog.adapters.slack.ids import Action

from .log_view import Acked, Verdict, judge, linked_threads
from .serve import ALERT_TOKEN, ALICE, BOB, GENERAL, ROOT, SIGNING_SECRET, Served, start_serve

FIXTURE = ROOT / "tests" / "fixtures" / "alerts" / "alertmanager" / "payments_5xx_firing.json"
SERVICES = ("payments", "search", "auth", "billing")


def alert_payload(fingerprint: str, service: str) -> dict[str, Any]:
    body: dict[str, Any] = json.loads(FIXTURE.read_text())
    alert = body["alerts"][0]
    alert["fingerprint"] = fingerprint
    alert["labels"] = {**alert["labels"], "service": service, "alertname": f"Crash{fingerprint}"}
    alert["startsAt"] = "2026-09-19T14:06:30.512Z"
    body["groupLabels"] = {"alertname": f"Crash{fingerprint}", "service": service}
    body["commonLabels"] = dict(alert["labels"])
    body["groupKey"] = f"{{}}:{{fingerprint={fingerprint!r}}}"
    return body


@dataclass
class Cycle:
    n: int
    socket: bool
    acked: int = 0
    sent: int = 0
    restart_to_delivered: float | None = None  # seconds from spawn until every earlier acked effect was there


@dataclass
class CrashRun:
    fake: FakeSlack
    data_dir: Path
    rng: random.Random
    workers: int = 6
    socket_every: int = 2  # every n-th cycle runs in Socket Mode (0: never)
    acked: Acked = field(default_factory=Acked)
    cycles: list[Cycle] = field(default_factory=list)
    _pinnable: list[tuple[str, str]] = field(default_factory=list)  # (ts, scope) of acked thread messages
    _serial: int = 0
    restarts_after_stop: int = 0  # settle: starts again because the stop itself committed (see ``settle``)

    # -- one kill cycle ---------------------------------------------------------------------------------------

    async def cycle(self, kill_after: float, *, settle_first: float | None = None) -> Cycle:
        n = len(self.cycles)
        socket = bool(self.socket_every) and n % self.socket_every == self.socket_every - 1
        cycle = Cycle(n, socket)
        self.cycles.append(cycle)
        served = await self.start(socket)
        try:
            if settle_first is not None:  # the bench: how long until everything acked so far is delivered
                verdict = await self.wait_complete(settle_first)
                cycle.restart_to_delivered = time.monotonic() - served.started_at if verdict.complete else None
            async with aiohttp.ClientSession() as http:
                tasks = [asyncio.create_task(self._worker(served, http, cycle, w)) for w in range(self.workers)]
                await asyncio.sleep(kill_after)
                await asyncio.to_thread(served.kill)
                for t in tasks:
                    t.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
        finally:
            await asyncio.to_thread(served.kill)
        return cycle

    async def start(self, socket: bool = False) -> Served:
        served = await asyncio.to_thread(start_serve, self.data_dir, self.fake.base_url, socket=socket)
        if socket:
            await self.fake.server.wait_socket_connected()
            await self.fake.use_socket_mode()
        else:
            self.fake.use_http(served.events_url, SIGNING_SECRET)
        return served

    async def wait_complete(self, timeout: float) -> Verdict:
        """Polls until every acked effect is in the log and Slack and the outbox is empty; the last verdict."""
        deadline = time.monotonic() + timeout
        while True:
            verdict = await self.verdict()
            if verdict.complete or time.monotonic() > deadline:
                return verdict
            await asyncio.sleep(0.1)

    async def settle(self, timeout: float = 60.0, *, restarts: int = 3) -> tuple[Verdict, Verdict, Served]:
        """The final restart: wait for everything, then stop the server (SIGTERM). Returns the verdict while it
        ran (complete, or what was still missing at ``timeout``; then its task dump is in ``stuck-dump.txt``), the
        verdict after it stopped, and the server.

        A stop may itself commit: an agent turn that was running is cancelled after its context agent appended
        an observation, which the next start delivers (bot/server.py stops the producers before the dispatcher,
        and a commit the cancelled turn made is not announced). So while the running verdict is complete and the
        stopped one is not, start again, at most ``restarts`` more times."""
        for _ in range(restarts + 1):
            served = await self.start(False)
            try:
                running = await self.wait_complete(timeout)
                if not running.complete:  # what the server is stuck on, next to its log (served.log)
                    dump = await asyncio.to_thread(served.dump)
                    (self.data_dir.parent / "stuck-dump.txt").write_text(dump)
            finally:
                await asyncio.to_thread(served.stop)
            stopped = await self.verdict()
            if not running.complete or stopped.complete:
                break
            self.restarts_after_stop += 1
        return running, stopped, served

    async def verdict(self) -> Verdict:
        return await asyncio.to_thread(judge, self.data_dir, self.fake, self.acked)

    async def threads(self) -> dict[str, str]:
        """Incident → thread ts of the incidents the server has linked (where the clients send messages)."""
        return await asyncio.to_thread(linked_threads, self.data_dir)

    def alerts_url(self, served: Served) -> str:
        return served.url

    # -- the clients ------------------------------------------------------------------------------------------

    async def _worker(self, served: Served, http: aiohttp.ClientSession, cycle: Cycle, w: int) -> None:
        threads = await self.threads()
        clicked: set[str] = set(self.acked.clicks)
        while True:
            roll = self.rng.random()
            cycle.sent += 1
            if w == 0:  # one client sends only webhooks: alerts wait behind Slack work, and must still be tried
                ok = await self._alert(served, http)
            elif roll < 0.1 or not threads:
                ok = await self._declare(cycle, w)
            elif roll < 0.55:
                ok = await self._message(threads)
            elif roll < 0.70 and self._pinnable:
                ok = await self._pin()
            elif roll < 0.80 and set(threads) - clicked:
                scope = self.rng.choice(sorted(set(threads) - clicked))
                clicked.add(scope)
                ok = await self._click(scope, threads[scope])
            else:
                ok = await self._alert(served, http)
            cycle.acked += ok
            if not ok:
                await asyncio.sleep(0.02)  # the server is going down: do not spin
            if self.rng.random() < 0.1:
                threads = await self.threads()

    def _next(self) -> int:
        self._serial += 1
        return self._serial

    async def _declare(self, cycle: Cycle, w: int) -> bool:
        title = f"Crash c{cycle.n} w{w} n{self._next()}"
        out = await self.fake.run_command(ALICE, GENERAL, f"declare {title} sev3")
        if out.status == 200:
            self.acked.declares.append(title)
            return True
        return False

    async def _message(self, threads: dict[str, str]) -> bool:
        scope = self.rng.choice(sorted(threads))
        out = await self.fake.post_message(BOB, GENERAL, f"note {self._next()} on {scope}", thread_ts=threads[scope])
        if out.responses and all(r.status == 200 for r in out.responses):
            self.acked.messages[f"slack:msg:{self._channel()}:{out.ts}"] = scope
            self._pinnable.append((out.ts, scope))
            return True
        return False

    async def _pin(self) -> bool:
        ts, scope = self._pinnable.pop(self.rng.randrange(len(self._pinnable)))
        out = await self.fake.add_reaction(ALICE, GENERAL, ts, "pushpin")
        if out.status == 200:
            self.acked.pins[f"slack:pin:{self._channel()}:{ts}"] = scope
            return True
        return False

    async def _click(self, scope: str, header_ts: str) -> bool:
        out = await self.fake.select_option(ALICE, GENERAL, header_ts, Action.SEVERITY, "2")
        if out.status == 200:
            self.acked.clicks[scope] = 2
            return True
        return False

    async def _alert(self, served: Served, http: aiohttp.ClientSession) -> bool:
        fingerprint = f"crash{self._next():06d}"
        body = alert_payload(fingerprint, self.rng.choice(SERVICES))
        try:
            async with http.post(
                f"{self.alerts_url(served)}/alerts/alertmanager",
                json=body,
                headers={"Authorization": f"Bearer {ALERT_TOKEN}"},
                timeout=aiohttp.ClientTimeout(total=10),
            ) as resp:
                await resp.read()
                ok = 200 <= resp.status < 300
        except (aiohttp.ClientError, TimeoutError):
            return False
        if ok:
            self.acked.alerts.append(fingerprint)
        return ok

    def _channel(self) -> str:
        return self.fake.workspace.channel(GENERAL).id
