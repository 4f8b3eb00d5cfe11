"""The investigator against a real Prometheus (Debian's, 1 s scrape) scraping a shop of services whose faults the test
sets (tests/helpers/shop.py): eleven situations at once, each its own incident and its own services.

For each it checks (and prints, ``pytest -s``) the rank that the first hypothesis gave the true cause and the time
from the first alert's entry to that hypothesis' entry (the turn runs right after the alert here: in production
the first turn's delay, ``DECKLOG_FIRST_TURN_DELAY``, comes on top). Under ``CI=true`` a missing Prometheus fails.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from decklog.adapters.catalog.backstage import load_catalog
from decklog.adapters.monitoring.prometheus import PrometheusSource
from decklog.adapters.monitoring.reader import JsonReader
from decklog.core.agents import RuleBasedReasoner, TurnRuntime
from decklog.core.agents.answers import answer_finding
from decklog.core.changes.facts import change_scope
from decklog.core.changes.service import ChangeService
from decklog.core.clock import SystemClock
from decklog.core.entries import Actor, Entry, Hypothesis, NewEntry, Observation
from decklog.core.evidence.observer import EvidenceSources, Limits
from decklog.core.service import ScopeService
from decklog.core.signals import ChangeSignal
from decklog.core.store.sqlite.index import SqliteIndex
from decklog.core.store.sqlite.log_store import SqliteLogStore
from tests.helpers.monitoring import PROMETHEUS, Prometheus, require_binary
from tests.helpers.shop import Shop

ALERTS = Actor.system("alertmanager")
INVESTIGATOR = Actor.agent("investigator", "rule-based")
PERSON = Actor.human("U0ONCALL", "oncall")
DEPLOYER = Actor.system("generic")
WINDOW = "3s"
BASELINE = "20s"  # the same window 20 s earlier: before the faults, also when a loaded machine takes seconds per turn
BASELINE_S = 20.0  # healthy traffic before the faults
FAULT_S = 5.0  # faulty traffic before the alert


@dataclass
class Situation:
    key: str
    title: str
    deps: dict[str, list[str]]  # service → what it depends on (names without the key prefix)
    alerting: list[str]
    truth: list[str]  # subjects that are the cause ("change/…" or a service); empty: nothing should stand out
    fault: Callable[[Shop, Callable[[str], str]], None]
    changes: list[tuple[str, str, str]] = field(default_factory=list)  # (service, change scope, title) recorded
    decoys: list[str] = field(default_factory=list)  # subjects that must not rank first
    # (service, change id) a deployer reports as a day old, delivered just before the fault (a running version)
    old_changes: list[tuple[str, str]] = field(default_factory=list)
    # a past incident with the same alerts, whose cause people confirmed: this service
    past_cause: str = ""

    def name(self, service: str) -> str:
        return f"{self.key}-{service}"

    @property
    def services(self) -> list[str]:
        return sorted({*self.deps, *(d for ds in self.deps.values() for d in ds)})


def _set(**values: Any) -> Callable[[Shop, Callable[[str], str]], None]:
    """A fault: ``svc=dict(attr=value, ...)``; ``version`` deploys."""

    def apply(shop: Shop, name: Callable[[str], str]) -> None:
        for svc, attrs in values.items():
            target = shop[name(svc)]
            for attr, value in attrs.items():
                if attr == "version":
                    target.deploy(value)
                else:
                    setattr(target, attr, value)

    return apply


SITUATIONS = [
    Situation(
        "s1",
        "a bad deploy on a leaf service",
        {"web": ["cart"], "cart": []},
        alerting=["web"],
        truth=["change/s1-cart-v2"],
        fault=_set(cart={"version": "v2", "error_ratio": 0.4}, web={"error_ratio": 0.3}),
        changes=[("cart", "change/s1-cart-v2", "cart v2 deployed")],
    ),
    Situation(
        "s2",
        "a bad deploy on a dependency two levels down",
        {"web": ["api"], "api": ["ledger"], "ledger": []},
        alerting=["web"],
        truth=["change/s2-ledger-v2"],
        fault=_set(ledger={"version": "v2", "error_ratio": 0.5}, api={"error_ratio": 0.4}, web={"error_ratio": 0.3}),
        changes=[("ledger", "change/s2-ledger-v2", "ledger v2 deployed")],
    ),
    Situation(
        "s3",
        "a config change",
        {"web": ["pay"], "pay": []},
        alerting=["web"],
        truth=["change/s3-pay-config"],
        fault=_set(pay={"latency_s": 0.8, "error_ratio": 0.2}, web={"latency_s": 0.9}),
        changes=[("pay", "change/s3-pay-config", "pay config: pool size 50 → 5")],
    ),
    Situation(
        "s4",
        "a dependency that is down",
        {"web": ["api"], "api": ["db"], "db": []},
        alerting=["web"],
        truth=["s4-db"],
        fault=_set(db={"down": True}, api={"error_ratio": 0.6}, web={"error_ratio": 0.5}),
    ),
    Situation(
        "s5",
        "saturation",
        {"web": ["search"], "search": []},
        alerting=["web"],
        truth=["s5-search"],
        fault=_set(search={"cpu": 0.97, "latency_s": 0.7}, web={"latency_s": 0.8}),
    ),
    Situation(
        "s6",
        "a decoy deploy on an unrelated service",
        {"web": ["api", "reco"], "api": [], "reco": []},
        alerting=["web"],
        truth=["s6-api"],
        fault=_set(reco={"version": "v2"}, api={"error_ratio": 0.5}, web={"error_ratio": 0.3}),
        changes=[("reco", "change/s6-reco-v2", "reco v2 deployed")],
        decoys=["change/s6-reco-v2", "s6-reco"],
    ),
    Situation(
        "s7",
        "two unrelated faults at once",
        {"web": ["cart", "mail"], "cart": [], "mail": []},
        alerting=["cart", "mail"],
        truth=["change/s7-cart-v2", "s7-mail"],
        fault=_set(cart={"version": "v2", "error_ratio": 0.5}, mail={"down": True}),
        changes=[("cart", "change/s7-cart-v2", "cart v2 deployed")],
    ),
    Situation(
        "s9",
        "an old deploy reported late, then errors",
        {"web": ["api"], "api": []},
        alerting=["web"],
        truth=["s9-api"],
        fault=_set(api={"error_ratio": 0.5}, web={"error_ratio": 0.3}),
        old_changes=[("api", "s9-api-v1")],
        decoys=["change/s9-api-v1"],
    ),
    Situation(
        "s10",
        "two dependencies failing, and the last incident like it was one of them",
        {"web": ["api", "cache"], "api": [], "cache": []},
        alerting=["web"],
        truth=["s10-cache"],
        fault=_set(api={"error_ratio": 0.4}, cache={"error_ratio": 0.4}, web={"error_ratio": 0.3}),
        past_cause="cache",
        decoys=["s10-api"],
    ),
    Situation(
        "s11",
        "a memory leak",
        {"mail": []},
        alerting=["mail"],
        truth=["s11-mail"],
        fault=_set(mail={"memory_mb": 600.0}),
    ),
    Situation(
        "s8",
        "a healthy system with a flapping alert",
        {"web": ["api"], "api": []},
        alerting=["web"],
        truth=[],
        fault=_set(),
    ),
]


def catalog_yaml(situations: list[Situation]) -> str:
    """The situations' services as Backstage catalog entities (one multi-document file)."""
    docs = []
    for s in situations:
        for svc in s.services:
            deps = "".join(f"\n    - component:default/{s.name(d)}" for d in s.deps.get(svc, []))
            docs.append(
                "apiVersion: backstage.io/v1alpha1\nkind: Component\nmetadata:\n"
                f"  name: {s.name(svc)}\nspec:\n  type: service\n  lifecycle: production\n"
                f"  owner: group:default/team-{s.key}\n  system: shop" + (f"\n  dependsOn:{deps}" if deps else "")
            )
    return "\n---\n".join(docs) + "\n"


@dataclass
class Outcome:
    situation: Situation
    scope: str
    hypotheses: list[Entry]
    nothing: str
    ranks: dict[str, int | None]
    seconds_to_first: float | None
    turn_ms: int
    reads: int


async def _alerted(s: Situation, scope: str, service: ScopeService, store: SqliteLogStore, index: SqliteIndex) -> Entry:
    """``scope`` declared by its alerts (one per alerting service); the first alert's entry."""
    await service.declare(
        title=f"{s.title}: {', '.join(s.alerting)} alerting",
        scope=scope,
        severity=2,
        services=[s.name(a) for a in s.alerting],
        actor=ALERTS,
        via="alert",
    )
    first: Entry | None = None
    for n, svc in enumerate(s.alerting):
        payload = {
            "text": f"{s.name(svc)} HTTP 5xx or latency high",
            "source": "alertmanager",
            "service": s.name(svc),
            "fingerprint": f"fp-{scope}-{n}",
            "alert_status": "firing",
        }
        entry = (await store.append(scope, [NewEntry.make("observation", ALERTS, payload)])).entries[0]
        first = first or entry
    await index.apply(await store.get_state(scope), await store.read(scope))
    assert first is not None
    return first


async def _past_incident(s: Situation, service: ScopeService, store: SqliteLogStore, index: SqliteIndex) -> None:
    """An earlier incident with the same alerts: people confirmed that ``past_cause`` caused it, and resolved it."""
    scope = f"incident/{s.key}-past"
    await _alerted(s, scope, service, store, index)
    cause = s.name(s.past_cause)
    hypothesis = Hypothesis(text=f"suspect {cause}", subject=cause, rank=1, confidence=0.4)
    seq = (await store.append(scope, [NewEntry.make("hypothesis", INVESTIGATOR, hypothesis)])).entries[0].seq
    await answer_finding(store, scope, seq, "confirmed", PERSON, now=SystemClock().now())
    await service.resolve(scope, PERSON, summary=f"{cause} was failing; restarted it")
    await index.apply(await store.get_state(scope), await store.read(scope))


async def run_situation(
    s: Situation, runtime: TurnRuntime, service: ScopeService, store: SqliteLogStore, index: SqliteIndex
) -> Outcome:
    scope = f"incident/{s.key}"
    first_alert_at = (await _alerted(s, scope, service, store, index)).at
    result = await runtime.run_turn(scope)
    assert result.status == "recorded", result
    entries = await store.read(scope)
    hyps = [e for e in entries if isinstance(e.payload, Hypothesis)]
    nothing = next(
        (e.payload.text for e in entries if isinstance(e.payload, Observation) and e.payload.source == "investigator"),
        "",
    )
    ranks: dict[str, int | None] = {}
    for truth in [*s.truth, *s.decoys]:
        ranks[truth] = next(
            (h.payload.rank for h in hyps if isinstance(h.payload, Hypothesis) and h.payload.subject == truth), None
        )
    turn = next(e for e in reversed(entries) if e.kind == "agent_turn")
    reads = next((c["reads"] for c in turn.payload.tool_calls if c.get("tool") == "evidence"), 0)  # type: ignore[attr-defined]
    seconds = (hyps[0].at - first_alert_at).total_seconds() if hyps and first_alert_at else None
    return Outcome(s, scope, hyps, nothing, ranks, seconds, turn.payload.duration_ms, reads)  # type: ignore[attr-defined]


def table(outcomes: list[Outcome]) -> str:
    lines = [
        "| situation | true cause | rank of the true cause | alert → first hypothesis | reads | top hypothesis |",
        "|---|---|---|---|---|---|",
    ]
    for o in outcomes:
        truths = o.situation.truth or ["(nothing)"]
        rank = ", ".join(str(o.ranks.get(t)) for t in o.situation.truth) or (
            "none (correct)" if not o.hypotheses else "WRONG"
        )
        seconds = f"{o.seconds_to_first:.2f} s" if o.seconds_to_first is not None else "—"
        top = o.hypotheses[0].payload.text[:90] if o.hypotheses else o.nothing[:90]
        lines.append(f"| {o.situation.title} | {', '.join(truths)} | {rank} | {seconds} | {o.reads} | {top} |")
    lines.append("")
    for o in outcomes:
        for h in o.hypotheses:
            p = h.payload
            assert isinstance(p, Hypothesis)
            lines.append(f"{o.scope} #{p.rank} ({p.confidence}) refs {list(h.refs)}: {p.text}")
        if o.nothing:
            lines.append(f"{o.scope}: {o.nothing}")
    return "\n".join(lines)


async def test_eleven_situations_rank_the_true_cause_first(tmp_path: Path) -> None:
    require_binary(PROMETHEUS)
    names = [s.name(svc) for s in SITUATIONS for svc in s.services]
    async with Shop(names) as shop:
        prometheus = await Prometheus.start(tmp_path / "prometheus", scrape=shop.scrape_configs())
        reader = JsonReader(prometheus.url, egress=None, timeout_s=5)
        store = SqliteLogStore(tmp_path / "data", topics=("index",), clock=SystemClock())
        index = SqliteIndex(tmp_path / "index.db", store.executor)
        await index.open()
        try:
            (tmp_path / "catalog").mkdir()
            (tmp_path / "catalog" / "catalog-info.yaml").write_text(catalog_yaml(SITUATIONS))
            catalog = load_catalog(tmp_path / "catalog")
            assert not catalog.problems and len(catalog) == len(names)
            sources = EvidenceSources(
                metrics=PrometheusSource(reader),
                catalog=catalog,
                limits=Limits(max_calls=120, max_seconds=20, call_timeout_s=5),
                window=WINDOW,
                baseline=BASELINE,
                lookback_s=60,
            )
            runtime = TurnRuntime(store, reasoner=RuleBasedReasoner(), index=index, evidence=sources)
            service = ScopeService(store, index)
            clock = SystemClock()
            changes = ChangeService(store, index, service, clock)
            await _wait_for_scrapes(prometheus, len(names))
            await asyncio.sleep(BASELINE_S)  # healthy traffic: the baseline the checks compare with
            for s in SITUATIONS:
                for svc, change, title in s.changes:
                    await service.declare(
                        title=title, scope=change, kind="change", services=[s.name(svc)], actor=DEPLOYER
                    )
                    await index.apply(await store.get_state(change), await store.read(change))
                if s.past_cause:
                    await _past_incident(s, service, store, index)
                for svc, change_id in s.old_changes:
                    signal = ChangeSignal(
                        source="generic", change_id=change_id, service=s.name(svc), at=clock.now() - timedelta(days=1)
                    )
                    await changes.record([signal])
                    scope = change_scope(change_id)
                    await index.apply(await store.get_state(scope), await store.read(scope))
                s.fault(shop, s.name)
            await asyncio.sleep(FAULT_S)
            outcomes = await asyncio.gather(*(run_situation(s, runtime, service, store, index) for s in SITUATIONS))
        finally:
            await index.close()
            await store.close()
            await reader.close()
            await prometheus.stop()
    printed = table(list(outcomes))
    print("\n" + printed)
    if path := os.environ.get("DECKLOG_DIAGNOSIS_TABLE"):
        Path(path).write_text(printed + "\n")
    for o in outcomes:
        s = o.situation
        if not s.truth:
            assert not o.hypotheses and o.nothing.startswith("Nothing stands out"), (s.title, printed)
            continue
        assert o.ranks[s.truth[0]] == 1, (s.title, printed)
        assert all(o.ranks.get(t) is not None for t in s.truth), (s.title, printed)
        assert all(o.ranks.get(d) != 1 for d in s.decoys), (s.title, printed)
        top = o.hypotheses[0]
        assert top.refs and isinstance(top.payload, Hypothesis) and 0 < (top.payload.confidence or 0) <= 0.95
        if s.past_cause:  # what ranked it first: the past incident's confirmed cause, cited
            cited = f"last time this was {s.name(s.past_cause)}: incident/{s.key}-past"
            assert isinstance(top.payload, Hypothesis) and cited in top.payload.text, (s.title, printed)


async def _wait_for_scrapes(prometheus: Prometheus, targets: int) -> None:
    """Until every service's target has been scraped once (``up`` exists for each)."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if len(await prometheus.query('up{job!="prometheus"}')) >= targets:
            return
        await asyncio.sleep(0.2)
    pytest.fail("Prometheus did not scrape every service within 30 s")
