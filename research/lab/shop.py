"""The shop: every service of :mod:`research.lab.graph` on its own loopback port, in one asyncio process (the lab
runs on two shared cores), with its load generator, its fault switches and the control API decklog's executors
call.

``python -m research.lab.shop --seed N`` prints one JSON line once every port listens::

    {"services": {"frontend": 41234, ...}, "control": 41300, "lab": 41301}

Each service answers ``GET /`` by calling what it depends on over real HTTP (``graph.CALLS``), and serves
``GET /metrics`` from its own registry: ``http_requests_total{service,code}``,
``http_request_duration_seconds{service}`` (a histogram), ``app_build_info{service,version}``,
``process_cpu_seconds_total`` and ``process_resident_memory_bytes``. CPU and memory are modelled per service (all
of them share one real process): a request costs a little CPU, load beyond a service's capacity saturates it
(slower answers, then 503s), a CPU hog or a leak adds to them.

Two HTTP doors, on two ports:

- **control** (given to decklog, as its catalog actions' executor URLs): ``POST /actions/<name>`` speaks decklog's
  ``http`` executor protocol (``{action, params, scope, run_id, fence, idempotency_key}``; 2xx applied, 4xx
  refused) for ``rollback_deploy``, ``revert_config``, ``restart``, ``scale_up`` and ``flag_off``;
  ``GET /reconcile/<key>`` answers whether a run applied.
- **lab** (the lab's own, never handed to decklog): ``POST /faults`` / ``DELETE /faults/<id>`` switch a fault
  on and off, ``POST /deploy`` rolls a version out, ``GET /state`` shows faults, versions and applied actions.

What ends a fault is what would end it in production (``ENDS``): a rollback ends a bad deploy, a restart ends a
hung or failing process but not a bad version or a bad config, more replicas end a saturation.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import random
import sys
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from aiohttp import web
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from research.lab.graph import CALLS, FLAGS, OPTIONAL, SERVICES

KINDS = (
    "bad_deploy",
    "config_change",
    "latency",
    "errors",
    "down",
    "saturation",
    "dependency_timeout",
    "flag_on",
    "flood",
)
ACTIONS = ("rollback_deploy", "revert_config", "restart", "scale_up", "flag_off")
#: action → the fault kinds it ends on its target service.
ENDS: dict[str, frozenset[str]] = {
    "rollback_deploy": frozenset({"bad_deploy"}),
    "revert_config": frozenset({"config_change"}),
    "restart": frozenset({"latency", "errors", "down", "dependency_timeout", "saturation:memory"}),
    "scale_up": frozenset({"saturation:cpu", "saturation:memory"}),
    "flag_off": frozenset({"flag_on"}),
}
BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0)
CALL_TIMEOUT = 2.5  # s: a caller gives up on a dependency after this
BASE_LATENCY = 0.003  # s per request, before faults
CAPACITY_RPS = 25.0  # requests a replica serves per second before it saturates
LOAD_RPS = 3.0  # pages a second from the load generator
BASE_RSS = 120e6


@dataclass
class Fault:
    id: str
    kind: str
    target: str
    params: dict[str, Any]

    @property
    def effect(self) -> str:
        """What the fault does to its service: a bad deploy or a config change or a flag carries an effect."""
        if self.kind in ("bad_deploy", "config_change"):
            return str(self.params.get("effect", "errors"))
        if self.kind == "flag_on":
            return FLAGS[str(self.params["flag"])][1] if self.params.get("flag") in FLAGS else "errors"
        return self.kind

    @property
    def ended_by(self) -> str:
        """The key of ``ENDS`` this fault answers to (saturation also by its resource)."""
        if self.kind == "saturation":
            return f"saturation:{self.params.get('resource', 'cpu')}"
        return self.kind


@dataclass
class Service:
    name: str
    version: str = "v1.0.0"
    versions: list[str] = field(default_factory=list)
    replicas: int = 1
    port: int = 0
    runner: web.AppRunner | None = None
    site: web.TCPSite | None = None
    listening: bool = True
    cpu_seconds: float = 0.0
    rss: float = BASE_RSS
    arrivals: deque[float] = field(default_factory=deque)
    registry: CollectorRegistry = field(default_factory=CollectorRegistry)
    n: int = 0

    def __post_init__(self) -> None:
        r = self.registry
        self.requests = Counter("http_requests", "Requests served", ["service", "code"], registry=r)
        self.duration = Histogram(
            "http_request_duration_seconds", "Request duration", ["service"], buckets=BUCKETS, registry=r
        )
        self.build = Gauge("app_build_info", "The running build", ["service", "version"], registry=r)
        self.cpu = Counter("process_cpu", "CPU time (modelled per service)", unit="seconds", registry=r)
        self.memory = Gauge("process_resident_memory_bytes", "Resident memory (modelled)", registry=r)
        self.build.labels(self.name, self.version).set(1)
        self.versions.append(self.version)

    def set_version(self, version: str) -> None:
        self.build.remove(self.name, self.version)
        self.version = version
        self.versions.append(version)
        self.build.labels(self.name, version).set(1)

    def load(self, now: float) -> float:
        while self.arrivals and self.arrivals[0] < now - 1.0:
            self.arrivals.popleft()
        return float(len(self.arrivals))


class Shop:
    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.services = {name: Service(name) for name in SERVICES}
        self.faults: dict[str, Fault] = {}
        self.applied: dict[str, dict[str, Any]] = {}  # idempotency key → what the action did
        self.flood_rps = 0.0
        self._ids = itertools.count(1)
        self.http: aiohttp.ClientSession | None = None
        self.tasks: list[asyncio.Task[None]] = []

    # -- faults ---------------------------------------------------------------------------------------------

    def active(self, service: str, effect: str | None = None) -> list[Fault]:
        return [f for f in self.faults.values() if f.target == service and (effect is None or f.effect == effect)]

    def add_fault(self, kind: str, target: str, params: dict[str, Any]) -> Fault:
        if kind not in KINDS:
            raise ValueError(f"kind: unknown fault kind {kind!r}")
        if kind == "flag_on" and params.get("flag") in FLAGS:
            target = FLAGS[str(params["flag"])][0]
            params = {**FLAGS[str(params["flag"])][2], **params}
        if target not in self.services:
            raise ValueError(f"target: no service named {target!r}")
        fault = Fault(f"f{next(self._ids)}", kind, target, dict(params))
        self.faults[fault.id] = fault
        if fault.kind == "bad_deploy":
            self.services[target].set_version(str(params.get("version") or self._next_version(target)))
        self._apply_listening(target)
        return fault

    def remove_fault(self, fault_id: str) -> bool:
        fault = self.faults.pop(fault_id, None)
        if fault is not None:
            self._apply_listening(fault.target)
        return fault is not None

    def _next_version(self, service: str) -> str:
        major, minor, patch = (int(x) for x in self.services[service].version.lstrip("v").split(".")[:3])
        return f"v{major}.{minor}.{patch + 1}"

    def _apply_listening(self, service: str) -> None:
        want = not self.active(service, "down")
        svc = self.services[service]
        if want != svc.listening:
            svc.listening = want
            self.tasks.append(asyncio.ensure_future(self._listen(svc) if want else self._unlisten(svc)))

    async def _listen(self, svc: Service) -> None:
        assert svc.runner is not None
        for _ in range(50):  # the port was ours a moment ago; retry while the kernel lets go of it
            try:
                svc.site = web.TCPSite(svc.runner, "127.0.0.1", svc.port, reuse_address=True)
                await svc.site.start()
                return
            except OSError:
                await asyncio.sleep(0.1)

    async def _unlisten(self, svc: Service) -> None:
        if svc.site is not None:
            await svc.site.stop()
            svc.site = None

    # -- the control API's actions --------------------------------------------------------------------------

    def act(self, action: str, params: dict[str, Any]) -> dict[str, Any]:
        """Runs one catalog action; raises ValueError (a 4xx) when it cannot apply."""
        if action not in ACTIONS:
            raise ValueError(f"action: unknown action {action!r}")
        flag = str(params.get("flag", ""))
        service = str(params.get("service", "") or (FLAGS[flag][0] if flag in FLAGS else ""))
        if service not in self.services:
            raise ValueError(f"params.service: no service named {service!r}")
        svc = self.services[service]
        ended = [f for f in self.active(service) if f.ended_by in ENDS[action] or f.kind in ENDS[action]]
        if action == "flag_off" and flag:
            ended = [f for f in ended if f.params.get("flag") == flag]
        done: dict[str, Any] = {"action": action, "service": service}
        if action == "rollback_deploy":
            if len(svc.versions) < 2:
                raise ValueError(f"params.service: {service} has no previous version to roll back to")
            done["rolled_back_from"] = svc.version
            target = str(params.get("to_version") or svc.versions[-2])
            svc.set_version(target)
            done["version"] = target
        elif action == "scale_up":
            svc.replicas += 2
            done["replicas"] = svc.replicas
        elif action == "restart":
            svc.rss = BASE_RSS
        for fault in ended:
            self.faults.pop(fault.id, None)
            self._apply_listening(service)
        done["ended_faults"] = len(ended)
        return done

    # -- serving --------------------------------------------------------------------------------------------

    @staticmethod
    def _gone(svc: Service, request: web.Request) -> web.Response | None:
        """A service that is down also drops the keep-alive connections opened before it went down (closing the
        listening socket alone leaves them served)."""
        if svc.listening:
            return None
        if request.transport is not None:
            request.transport.close()
        return web.Response(status=503)

    async def handle(self, svc: Service, request: web.Request) -> web.Response:
        if (gone := self._gone(svc, request)) is not None:
            return gone
        start = time.monotonic()
        svc.n += 1
        svc.arrivals.append(start)
        svc.cpu_seconds += 0.002
        code = 200
        try:
            code = await self._serve(svc, request)
        finally:
            elapsed = time.monotonic() - start
            svc.requests.labels(svc.name, str(code)).inc()
            svc.duration.labels(svc.name).observe(elapsed)
        return web.Response(status=code, text="ok" if code == 200 else "error")

    async def _serve(self, svc: Service, request: web.Request) -> int:
        delay = BASE_LATENCY
        for fault in self.active(svc.name, "latency"):
            delay += float(fault.params.get("seconds", 1.0))
        utilisation = self.utilisation(svc, time.monotonic())
        if utilisation > 0.8:
            delay += min(1.5, 0.08 * (utilisation / 0.8) ** 4)
        await asyncio.sleep(delay)
        if utilisation > 1.3 and self.rng.random() < 0.4:
            return 503
        for fault in self.active(svc.name, "errors"):
            if self.rng.random() < float(fault.params.get("rate", 0.5)):
                return 500
        if request.query.get("page") == "home":  # the flood's homepage hits: served from the frontend alone
            return 200
        every, sometimes = CALLS.get(svc.name, ((), ()))
        calls = list(every) + (list(sometimes) if svc.n % 3 == 0 else [])
        if not calls:
            return 200
        results = await asyncio.gather(*(self.call(svc.name, dep) for dep in calls))
        failed = [dep for dep, ok in zip(calls, results, strict=True) if not ok and (svc.name, dep) not in OPTIONAL]
        return 500 if failed else 200

    def utilisation(self, svc: Service, now: float) -> float:
        hog = 0.9 if any(f.params.get("resource", "cpu") == "cpu" for f in self.active(svc.name, "saturation")) else 0
        return svc.load(now) / (CAPACITY_RPS * svc.replicas) + hog

    async def call(self, caller: str, dependency: str) -> bool:
        if any(f.params.get("dependency", dependency) == dependency for f in self.active(caller, "dependency_timeout")):
            await asyncio.sleep(CALL_TIMEOUT)  # the connection hangs until the caller's timeout
            return False
        assert self.http is not None
        url = f"http://127.0.0.1:{self.services[dependency].port}/"
        try:
            async with self.http.get(url, timeout=aiohttp.ClientTimeout(total=CALL_TIMEOUT)) as response:
                await response.read()
                return response.status < 500
        except (aiohttp.ClientError, TimeoutError, OSError):
            return False

    async def metrics(self, svc: Service, request: web.Request) -> web.Response:
        if (gone := self._gone(svc, request)) is not None:
            return gone
        svc.cpu.inc(0)
        return web.Response(body=generate_latest(svc.registry), headers={"Content-Type": CONTENT_TYPE_LATEST})

    # -- background -----------------------------------------------------------------------------------------

    async def tick(self) -> None:
        """Every 0.25 s: the modelled CPU and memory of each service."""
        last = time.monotonic()
        while True:
            await asyncio.sleep(0.25)
            now = time.monotonic()
            dt, last = now - last, now
            for svc in self.services.values():
                busy = min(float(svc.replicas), self.utilisation(svc, now) * svc.replicas)
                svc.cpu.inc(max(0.0, busy * dt - 0.0) + svc.cpu_seconds)
                svc.cpu_seconds = 0.0
                if self.active(svc.name, "saturation") and any(
                    f.params.get("resource") == "memory" for f in self.active(svc.name, "saturation")
                ):
                    svc.rss += 40e6 * dt
                svc.memory.set(svc.rss)

    async def load_generator(self) -> None:
        """Pages at ``LOAD_RPS`` (and the flood's homepage hits at its rate), each without waiting for the last."""
        assert self.http is not None
        pending: set[asyncio.Task[None]] = set()
        flood_credit = 0.0
        while True:
            await asyncio.sleep(1.0 / LOAD_RPS)
            pending.add(asyncio.ensure_future(self._page("")))
            flood = sum(float(f.params.get("rps", 40)) for f in self.faults.values() if f.effect == "flood")
            flood_credit += flood / LOAD_RPS
            while flood_credit >= 1.0:
                flood_credit -= 1.0
                pending.add(asyncio.ensure_future(self._page("home")))
            pending = {t for t in pending if not t.done()}

    async def _page(self, page: str) -> None:
        assert self.http is not None
        url = f"http://127.0.0.1:{self.services['frontend'].port}/" + (f"?page={page}" if page else "")
        with contextlib.suppress(aiohttp.ClientError, TimeoutError, OSError):
            async with self.http.get(url, timeout=aiohttp.ClientTimeout(total=5)) as response:
                await response.read()

    # -- HTTP doors -----------------------------------------------------------------------------------------

    def control_app(self) -> web.Application:
        app = web.Application()

        async def action(request: web.Request) -> web.Response:
            name = request.match_info["name"]
            try:
                body = await request.json()
            except ValueError:
                return web.json_response({"error": "the body must be JSON"}, status=400)
            key = request.headers.get("Idempotency-Key") or str(body.get("idempotency_key", ""))
            if key and key in self.applied:
                return web.json_response(self.applied[key])
            try:
                done = self.act(name, dict(body.get("params") or {}))
            except ValueError as exc:
                return web.json_response({"error": str(exc)}, status=422)
            done["at"] = time.time()
            done["scope"] = str(body.get("scope", ""))
            self.applied[key or f"k{len(self.applied)}"] = done
            return web.json_response(done)

        async def reconcile(request: web.Request) -> web.Response:
            done = self.applied.get(request.match_info["key"])
            if done is None:
                return web.json_response({"status": "not_applied"}, status=404)
            return web.json_response({"status": "applied", **done})

        app.router.add_post("/actions/{name}", action)
        app.router.add_get("/reconcile/{key}", reconcile)
        return app

    def lab_app(self) -> web.Application:
        app = web.Application()

        async def add(request: web.Request) -> web.Response:
            body = await request.json()
            try:
                fault = self.add_fault(
                    str(body.get("kind")), str(body.get("target", "")), dict(body.get("params") or {})
                )
            except ValueError as exc:
                return web.json_response({"error": str(exc)}, status=400)
            return web.json_response({"id": fault.id, "target": fault.target})

        async def remove(request: web.Request) -> web.Response:
            return web.json_response({"removed": self.remove_fault(request.match_info["id"])})

        async def deploy(request: web.Request) -> web.Response:
            body = await request.json()
            name = str(body.get("service", ""))
            if name not in self.services:
                return web.json_response({"error": f"service: no service named {name!r}"}, status=400)
            self.services[name].set_version(str(body.get("version") or self._next_version(name)))
            return web.json_response({"service": name, "version": self.services[name].version})

        async def state(_request: web.Request) -> web.Response:
            return web.json_response(
                {
                    "faults": [vars(f) for f in self.faults.values()],
                    "versions": {s.name: s.version for s in self.services.values()},
                    "replicas": {s.name: s.replicas for s in self.services.values()},
                    "applied": list(self.applied.values()),
                }
            )

        app.router.add_post("/faults", add)
        app.router.add_delete("/faults/{id}", remove)
        app.router.add_post("/deploy", deploy)
        app.router.add_get("/state", state)
        return app

    def service_app(self, svc: Service) -> web.Application:
        async def root(request: web.Request) -> web.Response:
            return await self.handle(svc, request)

        async def metrics(request: web.Request) -> web.Response:
            return await self.metrics(svc, request)

        app = web.Application()
        app.router.add_get("/", root)
        app.router.add_get("/metrics", metrics)
        return app

    async def start(self) -> dict[str, Any]:
        self.http = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=200))
        for svc in self.services.values():
            svc.runner = web.AppRunner(self.service_app(svc), access_log=None)
            await svc.runner.setup()
            svc.site = web.TCPSite(svc.runner, "127.0.0.1", 0, reuse_address=True)
            await svc.site.start()
            svc.port = svc.runner.addresses[0][1]
        ports: dict[str, Any] = {"services": {s.name: s.port for s in self.services.values()}}
        for door, app in (("control", self.control_app()), ("lab", self.lab_app())):
            runner = web.AppRunner(app, access_log=None)
            await runner.setup()
            await web.TCPSite(runner, "127.0.0.1", 0).start()
            ports[door] = runner.addresses[0][1]
        self.tasks += [asyncio.ensure_future(self.tick()), asyncio.ensure_future(self.load_generator())]
        return ports


async def _main(seed: int) -> None:
    shop = Shop(seed)
    ports = await shop.start()
    print(json.dumps(ports), flush=True)
    await asyncio.Event().wait()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m research.lab.shop")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_main(args.seed))
    return 0


if __name__ == "__main__":
    sys.exit(main())
