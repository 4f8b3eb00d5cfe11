"""The mixed Slack + alert load of tests/helpers/mixed_load.py against several ``decklog serve`` replicas on one
PostgreSQL database, behind a round-robin load balancer (tests/helpers/balancer.py); one replica is SIGKILLed
while it holds delivery cursors, and the others must finish its work. Shared by
tests/reliability/test_replicas_crash.py and bench/failover.py.

Besides the load of ``CrashRun``, one alert in three is sent as two notifications of one new fingerprint to two
different replicas at the same moment (an HA pair of Alertmanagers): ``pairs`` counts what was acked, and
:meth:`ReplicaRun.pair_scopes` says which incidents got them (one each, or the routing is not consistent).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from .balancer import Balancer
from .log_view import Verdict, judge_log
from .mixed_load import SERVICES, CrashRun, Cycle, alert_payload
from .pg_view import cursors_held_by, linked_threads_pg, read_log_pg
from .serve import ALERT_TOKEN, SIGNING_SECRET, Served, start_serve


@dataclass
class Killed:
    served: Served
    at: float  # time.monotonic() of the SIGKILL
    held: list[tuple[str, str]]  # (scope, topic) cursors it held at that moment
    acked: int  # requests acked until then


@dataclass
class ReplicaRun(CrashRun):
    database_url: str = ""
    balancer: Balancer = field(default_factory=Balancer)
    live: list[Served] = field(default_factory=list)
    pairs: dict[str, int] = field(default_factory=dict)  # fingerprint → acked notifications of it (of 2)

    async def start_replicas(self, n: int) -> None:
        env = {"DECKLOG_DATABASE_URL": self.database_url}
        for i in range(n):  # each its own data directory: nothing is shared but the database
            data = self.data_dir.parent / f"replica{i}"
            served = await asyncio.to_thread(start_serve, data, self.fake.base_url, env=env)
            self.live.append(served)
            self.balancer.backends.append(served.url)
        self.fake.use_http(f"{self.balancer.url}/slack/events", SIGNING_SECRET)

    async def stop_all(self) -> None:
        for served in self.live:
            await asyncio.to_thread(served.stop)
        self.live.clear()

    async def load_and_kill(
        self, before: Callable[[], bool], after: Callable[[Killed], bool], *, victim: int = 1, timeout: float = 180
    ) -> Killed:
        """Run the load until ``before()`` holds, SIGKILL replica ``victim`` at a moment it holds a delivery
        cursor (looked for up to 20 s), keep the load on the others until ``after(killed)`` holds (both polled, within
        ``timeout`` seconds each)."""
        cycle = Cycle(len(self.cycles), socket=False)
        self.cycles.append(cycle)
        async with aiohttp.ClientSession() as http:
            tasks = [asyncio.create_task(self._worker(self.live[0], http, cycle, w)) for w in range(self.workers)]
            try:
                await _until(before, timeout, "the load before the kill")
                killed = await self._kill_holding(self.live[victim])
                await _until(lambda: after(killed), timeout, "the load after the kill")
            finally:
                for t in tasks:
                    t.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
        return killed

    async def _kill_holding(self, served: Served) -> Killed:
        deadline = time.monotonic() + 20
        held: list[tuple[str, str]] = []
        while not held and time.monotonic() < deadline:
            held = await asyncio.to_thread(cursors_held_by, self.database_url, served.pid)
            if not held:
                await asyncio.sleep(0.01)
        await asyncio.to_thread(served.kill)
        at = time.monotonic()
        self.balancer.remove(served.url)  # its health check fails
        self.live.remove(served)
        return Killed(served, at, held, self.acked.total)

    # -- reading the database instead of a data directory -----------------------------------------------------

    async def verdict(self) -> Verdict:
        log = await asyncio.to_thread(read_log_pg, self.database_url)
        return judge_log(log, self.fake, self.acked)

    async def threads(self) -> dict[str, str]:
        return await asyncio.to_thread(linked_threads_pg, self.database_url)

    async def wait_complete(self, timeout: float) -> Verdict:
        """As ``CrashRun.wait_complete``, polling less often: reading the whole database is not free."""
        deadline = time.monotonic() + timeout
        while True:
            verdict = await self.verdict()
            if verdict.complete or time.monotonic() > deadline:
                return verdict
            await asyncio.sleep(0.5)

    def alerts_url(self, served: Served) -> str:
        return self.balancer.url

    async def pair_scopes(self) -> dict[str, list[str]]:
        """Fingerprint of each pair → the scope of every firing observation of it."""
        log = await asyncio.to_thread(read_log_pg, self.database_url)
        out: dict[str, list[str]] = {fp: [] for fp in self.pairs}
        for scope, f in log.items():
            for r in f.rows:
                fp = r.payload.get("fingerprint")
                if r.kind == "observation" and fp in out and r.payload.get("alert_status") == "firing":
                    out[fp].append(scope)
        return out

    # -- the clients: one alert in three is a pair on two replicas at once ------------------------------------

    async def _alert(self, served: Served, http: aiohttp.ClientSession) -> bool:
        if self.rng.random() < 1 / 3 and len(self.live) >= 2:
            return await self._pair(http)
        return await super()._alert(served, http)

    async def _pair(self, http: aiohttp.ClientSession) -> bool:
        fingerprint = f"pair{self._next():06d}"
        service = self.rng.choice(SERVICES)
        targets = self.rng.sample(self.live, 2)
        bodies = [alert_payload(fingerprint, service) for _ in targets]
        bodies[1]["alerts"][0]["startsAt"] = "2026-09-19T14:06:31.512Z"  # the other manager's notification
        oks = await asyncio.gather(*(_post(http, t.url, b) for t, b in zip(targets, bodies, strict=True)))
        if any(oks):
            self.pairs[fingerprint] = sum(oks)
        return any(oks)


async def _until(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} did not get far enough in {timeout:.0f} s")
        await asyncio.sleep(0.1)


async def _post(http: aiohttp.ClientSession, base: str, body: dict[str, Any]) -> bool:
    try:
        async with http.post(
            f"{base}/alerts/alertmanager",
            json=body,
            headers={"Authorization": f"Bearer {ALERT_TOKEN}"},
            timeout=aiohttp.ClientTimeout(total=10),
        ) as resp:
            await resp.read()
            return 200 <= resp.status < 300
    except (aiohttp.ClientError, TimeoutError):
        return False
