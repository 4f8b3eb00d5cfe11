"""The rule-based investigator: which service or change most likely caused the alerts, from evidence it reads.

**Candidates** are the alerting services, what they depend on in the service catalog (transitively, at most
``max_depth`` levels and ``max_candidates`` services), the dependencies of an anomalous candidate that this
breadth left out (followed one level at a time below the anomaly, at most ``max_followed`` more: ``_follow``), and
the changes on any of them (decklog's change scopes, and a ``*_build_info`` version that changed).

**Checks** (each one PromQL query through ``Evidence``, core/evidence/queries.py): the error ratio and the p99
latency against the same service's own baseline (the ``baseline`` span before the window), ``up``, restarts,
CPU saturation, resident memory against its lowest over the lookback, and the versions its build-info metric reported. The baseline of a check is the same query over
the same window, ``baseline`` earlier (``offset``). An anomalous check gets one range query for its
onset (the first step at which it crossed). Alertmanager says what else fires.

**Ranking**, each rule a named piece of evidence with its weight (the confidence is their sum, capped; no
constant stands for it):

- an anomaly on the candidate (``ANOMALY``);
- topology: the deepest anomalous dependency explains the anomalous services above it (``DEEPEST``); a candidate
  whose own dependency is anomalous is explained by it (``EXPLAINED``, negative);
- onset order: the earliest anomalous onset (``EARLIEST``);
- a change on the candidate shortly before the onset (``CHANGE``, the subject then is the change), weighing more
  the closer it landed to the onset, and shared when several changes on it fall in that span;
- past incidents (core/agents/past.py, matched by service, alert names and words): one with the same signature
  on the candidate, the same alert on the same service (``PAST``), and one whose confirmed cause or verified fix
  named the candidate — "last time this was X, fixed by Y" (``PAST_CAUSE``); both weighed by that incident's
  similarity;
- a firing alert on the candidate itself (``ALERTING``).

Without any metrics source the anomaly and onset rules have nothing to read, and the investigator falls back on
what the log holds: a change linked to an alerting service (``CHANGE``, and ``LEAD`` in proportion to how little
it landed before the incident, within the hour). When nothing stands out it says so, naming what it checked.
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

from decklog.core.agents.past import PastIncident, similar_incidents
from decklog.core.agents.reasoner import TurnInput
from decklog.core.changes.facts import change_kind
from decklog.core.clock import parse_iso
from decklog.core.errors import NotFound
from decklog.core.evidence.observer import Evidence
from decklog.core.evidence.queries import ServiceQueries

ANOMALY = 0.3
DEEPEST = 0.2
EXPLAINED = -0.2
EARLIEST = 0.1
CHANGE = 0.25
LEAD = 0.15
PAST = 0.1
PAST_CAUSE = 0.2
PAST_LIMIT = 5  # past incidents kept per turn
ALERTING = 0.05
CONFIDENCE_CAP = 0.95
#: Thresholds of the checks: an error ratio is anomalous at 5 % and twice (+2 points) its baseline; a p99 latency
#: at 250 ms and twice its baseline; CPU at 0.8 core.
ERROR_RATIO_MIN = 0.05
LATENCY_MIN_S = 0.25
SATURATION_MIN = 0.8
#: Memory is anomalous at 1.5 × its baseline and at least 100 MB more (a leak, not noise).
MEMORY_GROWTH = 1.5
MEMORY_MIN_GROWTH_BYTES = 100e6
READS_PER_CANDIDATE = 12  # one candidate's checks: 11 reads at most (``check``), and one to spare
READS_AFTER_CHECKS = 3  # changes (the index), other firing alerts, past incidents
CHANGE_BEFORE_ONSET_S = 1800.0  # a change counts as "just before" when it landed at most this long before the onset


def _when(text: str) -> datetime | None:
    try:
        return parse_iso(text) if text else None
    except ValueError:
        return None


def _memory_grew(value: float | None, baseline: float | None) -> bool:
    if value is None or not baseline:
        return False
    return value >= MEMORY_GROWTH * baseline and value - baseline >= MEMORY_MIN_GROWTH_BYTES


def _closeness(lead_s: float | None) -> float:
    """1 for a change at the onset, down to 0.5 for one ``CHANGE_BEFORE_ONSET_S`` before it (undated: 0.5)."""
    if lead_s is None:
        return 0.5
    return 1 - 0.5 * min(max(lead_s, 0.0), CHANGE_BEFORE_ONSET_S) / CHANGE_BEFORE_ONSET_S


def _lesson_text(past: PastIncident) -> str:
    """``incident/x (similarity 80 %): “db pool exhausted”, fixed by restart(service=cart)``."""
    text = f"{past.scope} (similarity {past.similarity:.0%})"
    if past.lesson.cause:
        text += f": “{past.lesson.cause[:120]}”"
    if past.lesson.fixes:
        text += ", fixed by " + ", ".join(f.describe() for f in past.lesson.fixes[:2])
    return text


def _scalar(vector: list[dict[str, Any]] | None) -> float | None:
    """The one value of an instant vector (None when empty or NaN)."""
    for sample in vector or []:
        try:
            value = float(sample["value"][1])
        except (KeyError, IndexError, TypeError, ValueError):
            continue
        if not math.isnan(value) and not math.isinf(value):
            return value
    return None


@dataclass
class Check:
    check: str
    value: float | None
    baseline: float | None = None
    anomalous: bool = False
    obs: int = -1
    expr: str = ""

    def describe(self) -> str:
        if self.value is None:
            return f"{self.check}: no data"
        shown = f"{self.value:.1%}" if self.check == "error_ratio" else f"{self.value:.3g}"
        if self.check == "latency_p99":
            shown = f"{self.value * 1000:.0f} ms"
        if self.check == "memory":
            shown = f"{self.value / 1e6:.0f} MB"
        if self.baseline is not None:
            base = f"{self.baseline:.1%}" if self.check == "error_ratio" else f"{self.baseline:.3g}"
            if self.check == "latency_p99":
                base = f"{self.baseline * 1000:.0f} ms"
            if self.check == "memory":
                base = f"{self.baseline / 1e6:.0f} MB"
            shown += f" (baseline {base})"
        return f"{self.check} {shown}"


@dataclass
class Candidate:
    service: str
    depth: int  # 0: alerting; n: n levels below an alerting service in the catalog
    alerting: bool = False
    checks: list[Check] = field(default_factory=list)
    onset: float | None = None  # epoch seconds
    changes: list[dict[str, Any]] = field(default_factory=list)  # {scope, title, at (datetime|None), refs, obs}
    versions: list[str] = field(default_factory=list)
    version_at: float | None = None
    version_obs: int = -1
    past: list[PastIncident] = field(default_factory=list)  # the same signature: the same alert on it
    past_causes: list[PastIncident] = field(default_factory=list)  # their confirmed cause or fix named it
    past_obs: int = -1
    reasons: list[tuple[str, float]] = field(default_factory=list)
    obs: set[int] = field(default_factory=set)
    refs: set[int] = field(default_factory=set)

    @property
    def anomalies(self) -> list[Check]:
        return [c for c in self.checks if c.anomalous]

    @property
    def score(self) -> float:
        return sum(w for _, w in self.reasons)


@dataclass(frozen=True)
class Finding:
    """One ranked hypothesis: ``subject`` is a service or a change scope; ``observations`` index the turn's
    ``Evidence.observations``; ``refs`` are seqs of entries of the incident."""

    text: str
    subject: str
    service: str
    confidence: float
    rank: int
    change: str = ""
    change_kind: str = ""  # deploy | config | flag (core/signals.py ChangeSignal.kind), when ``change`` is set
    flag: str = ""  # the feature flag a ``flag`` change flipped
    refs: tuple[int, ...] = ()
    observations: tuple[int, ...] = ()


@dataclass
class Report:
    findings: list[Finding] = field(default_factory=list)
    checked: list[str] = field(default_factory=list)
    nothing: str = ""  # "nothing stands out" text, when the checks ran and found nothing
    nothing_obs: tuple[int, ...] = ()


@dataclass
class Investigator:
    max_candidates: int = 8
    max_depth: int = 3
    max_findings: int = 3
    max_changes: int = 20  # changes on the candidates one turn reads from the index (each: its kind, one read)
    max_followed: int = 4  # services checked below an anomalous candidate that the breadth cut left out
    change_window_hours: float = 6.0

    async def investigate(self, turn: TurnInput, evidence: Evidence | None, *, linked: list[dict[str, Any]]) -> Report:
        """Rank the causes of ``turn``'s firing alerts. ``linked``: the investigation view's linked changes."""
        s = turn.state
        alerting = sorted({a.service for a in s.firing_alerts if a.service}) or list(s.services)
        first_alert = min(s.firing_alerts, key=lambda a: a.first_seq) if s.firing_alerts else None
        cands: dict[str, Candidate] = {}
        for name in alerting:
            cands.setdefault(name, Candidate(name, 0, alerting=True))
        catalog = evidence.catalog if evidence is not None else None
        if catalog is not None and len(catalog):
            for name in alerting:
                if catalog.get(name) is not None and evidence is not None:
                    comp = catalog.get(name)
                    idx = evidence.note("catalog", f"component {name}", comp.to_json() if comp else None, service=name)
                    cands[name].obs.add(idx)
                for dep, depth in catalog.dependencies(name, depth=self.max_depth):
                    if len(cands) >= self.max_candidates:
                        break
                    if dep not in cands:
                        cands[dep] = Candidate(dep, depth)
        metrics = evidence is not None and evidence.metrics is not None
        unread = False
        if metrics and evidence is not None:
            for cand in list(cands.values()):
                await self.check(turn.now, evidence, cand)
            await self._follow(turn.now, evidence, cands)
        for a in s.firing_alerts:
            if a.service in cands and first_alert is not None:
                cands[a.service].refs.add(a.first_seq)
        self._linked_changes(turn, cands, linked)
        if evidence is not None and turn.index is not None:
            await self._indexed_changes(turn, evidence, cands)
        if metrics and evidence is not None:
            await self._other_alerts(evidence, cands)
            # Not one query answered: the checks say nothing, so rank on what the log holds (as without metrics).
            metrics = any(o.source == "prometheus" and not o.error for o in evidence.observations)
            unread = not metrics
        if evidence is not None:  # after the checks, whose windows end now: the past can be read a moment later
            await self._past(turn, evidence, cands)
        first_seq = first_alert.first_seq if first_alert else 0
        report = self._rank(turn, cands, metrics=metrics, evidence=evidence, first_alert_seq=first_seq)
        if unread:
            report.findings = [replace(f, text=f"{f.text}; Prometheus could not be read") for f in report.findings]
        return report

    # -- gathering -----------------------------------------------------------------------------------------------

    async def _follow(self, now: datetime, evidence: Evidence, cands: dict[str, Candidate]) -> None:
        """Follow the anomaly below the breadth cut: the dependencies of an anomalous candidate that the first
        ``max_candidates`` left out are checked too, one level at a time and only below what was anomalous, up to
        ``max_followed`` more services and ``max_depth`` levels, while the turn's reads leave room for one more
        candidate's checks and the reads that come after them (changes, other alerts, past incidents). A service
        with many direct dependencies fills the breadth with them, and the one that explains them all sits a level
        further down."""
        catalog = evidence.catalog
        frontier = [c for c in cands.values() if c.anomalies]
        followed = 0
        while frontier and followed < self.max_followed:
            below: list[Candidate] = []
            for parent in frontier:
                if parent.depth >= self.max_depth:
                    continue
                for dep, _ in catalog.dependencies(parent.service, depth=1):
                    if dep in cands or followed >= self.max_followed or not self._room(evidence):
                        continue
                    cand = cands[dep] = Candidate(dep, parent.depth + 1)
                    followed += 1
                    await self.check(now, evidence, cand)
                    if cand.anomalies:
                        below.append(cand)
            frontier = below

    @staticmethod
    def _room(evidence: Evidence) -> bool:
        """Whether the turn's reads leave room for one more candidate's checks and the reads after them."""
        lim = evidence.limits
        left = lim.max_calls - len(evidence.observations)
        return not evidence.exhausted() and left >= READS_PER_CANDIDATE + READS_AFTER_CHECKS

    @staticmethod
    def _linked_changes(turn: TurnInput, cands: dict[str, Candidate], linked: list[dict[str, Any]]) -> None:
        for change in linked:
            if change.get("missing"):
                continue
            at = _when(change.get("deployed_at", "")) or _when(change.get("at", ""))
            for service in change.get("services", []):
                if service in cands:
                    item = {**change, "at_dt": at, "refs": [change.get("link_seq", 0)], "obs": -1}
                    cands[service].changes.append(item)

    async def _indexed_changes(self, turn: TurnInput, evidence: Evidence, cands: dict[str, Candidate]) -> None:
        index = turn.index
        if index is None:
            return
        services = sorted(cands)
        since = turn.now - timedelta(hours=self.change_window_hours)

        logs = turn.logs

        async def call() -> list[dict[str, Any]]:
            found = await index.changes_on(services, since)
            rows = []
            for row, at in found[: self.max_changes]:
                item = {"scope": row.id, "title": row.title, "services": list(row.services), "at": at.isoformat()}
                if logs is not None:  # what kind of change it was: which action would undo it
                    with contextlib.suppress(NotFound):
                        kind, flag = change_kind(await logs.read_last(row.id, limit=4, kinds=("observation",)))
                        item |= {"kind": kind} | ({"flag": flag} if flag else {})
                rows.append(item)
            return rows

        query = f"changes on {', '.join(services)} since {since.isoformat()[:19]}"
        rows, idx = await evidence.read("changes", query, call, check="changes")
        for row in rows or []:
            for service in row["services"]:
                cand = cands.get(service)
                if cand is None or any(c.get("scope") == row["scope"] for c in cand.changes):
                    continue
                cand.changes.append({**row, "at_dt": _when(row["at"]), "refs": [], "obs": idx})

    async def _past(self, turn: TurnInput, evidence: Evidence, cands: dict[str, Candidate]) -> None:
        """Past incidents like this one (one recorded read), and which candidates they point at."""
        index, logs = turn.index, turn.logs
        if index is None or logs is None or not turn.state.firing_alerts:
            return
        kept: list[PastIncident] = []

        async def call() -> list[dict[str, Any]]:
            kept[:] = await similar_incidents(logs, index, turn.state, limit=PAST_LIMIT)
            return [p.to_json() for p in kept]

        names = ", ".join(sorted({a.service for a in turn.state.firing_alerts if a.service}))
        found, idx = await evidence.read("incidents", f"similar incidents: alerts on {names}", call, check="past")
        if found is None:
            return
        for cand in cands.values():
            cand.past = [p for p in kept if cand.service in p.pair_services]
            cand.past_causes = [p for p in kept if p.names(cand.service) and not p.lesson.empty]
            if cand.past or cand.past_causes:
                cand.past_obs = idx

    async def check(self, now: datetime, evidence: Evidence, cand: Candidate) -> None:
        """Run the checks of one candidate (the ``check_service`` tool runs this for a model too)."""
        metrics = evidence.metrics
        if metrics is None:
            return
        comp = evidence.catalog.get(cand.service)
        q = ServiceQueries(cand.service, evidence.sources.window, comp.annotations if comp else None)
        # The baseline is the same window one ``baseline`` span earlier: far enough back that the fault (which
        # began at most minutes before the alert) is not in it, so one bad p99 sample cannot be its own baseline.
        offset = evidence.sources.baseline
        base_q = q

        async def instant(check: str, expr: str) -> tuple[float | None, int]:
            vector, idx = await evidence.read(
                "prometheus", expr, lambda: metrics.query(expr), service=cand.service, check=check
            )
            return _scalar(vector), idx

        ratio, i1 = await instant("error_ratio", q.error_ratio())
        base_ratio, i2 = await instant("error_ratio_baseline", base_q.error_ratio(offset=offset))
        c = Check("error_ratio", ratio, base_ratio, obs=i1, expr=q.error_ratio())
        c.anomalous = ratio is not None and ratio >= ERROR_RATIO_MIN and ratio >= 2 * (base_ratio or 0) + 0.02
        cand.checks.append(c)
        cand.obs |= {i1, i2} if c.anomalous else set()
        lat, i3 = await instant("latency_p99", q.latency_p99())
        base_lat, i4 = await instant("latency_p99_baseline", base_q.latency_p99(offset=offset))
        c = Check("latency_p99", lat, base_lat, obs=i3, expr=q.latency_p99())
        c.anomalous = lat is not None and lat >= LATENCY_MIN_S and lat >= 2 * (base_lat or 0)
        cand.checks.append(c)
        cand.obs |= {i3, i4} if c.anomalous else set()
        up, i5 = await instant("up", q.up())
        cand.checks.append(Check("up", up, anomalous=up is not None and up < 1, obs=i5, expr=q.up()))
        restarts, i6 = await instant("restarts", q.restarts())
        cand.checks.append(Check("restarts", restarts, anomalous=bool(restarts and restarts >= 1), obs=i6))
        sat, i7 = await instant("saturation", q.saturation())
        c = Check("saturation", sat, anomalous=sat is not None and sat >= SATURATION_MIN, obs=i7, expr=q.saturation())
        cand.checks.append(c)
        mem, i8 = await instant("memory", q.memory())
        base_mem, i9 = None, -1
        if mem is not None and mem >= MEMORY_MIN_GROWTH_BYTES:  # smaller, it cannot have grown that much
            span = f"{max(60, int(evidence.sources.lookback_s))}s"
            base_mem, i9 = await instant("memory_baseline", q.memory_low(span))
        c = Check("memory", mem, base_mem, obs=i8, expr=q.memory())
        c.anomalous = _memory_grew(mem, base_mem)
        cand.checks.append(c)
        cand.obs |= {i9} if c.anomalous else set()
        for check in cand.checks[2:]:
            if check.anomalous:
                cand.obs.add(check.obs)
        await self._versions(now, evidence, cand, q)
        await self._onset(now, evidence, cand)

    async def _versions(self, now: datetime, evidence: Evidence, cand: Candidate, q: ServiceQueries) -> None:
        metrics = evidence.metrics
        if metrics is None:
            return
        end = now
        start = end - timedelta(seconds=evidence.sources.lookback_s)
        step = max(1.0, evidence.sources.lookback_s / 240)
        sels = q.selectors()
        expr = " or ".join(f'max by (version) ({{__name__=~".+_build_info",{sel}}})' for sel in sels)
        matrix, idx = await evidence.read(
            "prometheus",
            expr,
            lambda: metrics.query_range(expr, start=start, end=end, step_s=step),
            service=cand.service,
            check="versions",
        )
        firsts: list[tuple[float, str]] = []
        for series in matrix or []:
            values = series.get("values") or []
            version = str(series.get("metric", {}).get("version", ""))
            if values and version:
                firsts.append((float(values[0][0]), version))
        firsts.sort()
        cand.versions = [v for _, v in firsts]
        if len(firsts) > 1:
            cand.version_at = firsts[-1][0]
            cand.version_obs = idx

    async def _onset(self, now: datetime, evidence: Evidence, cand: Candidate) -> None:
        """The first step at which the first anomalous check crossed its threshold."""
        metrics = evidence.metrics
        anomalies = [c for c in cand.anomalies if c.expr]
        if metrics is None or not anomalies:
            return
        check = anomalies[0]
        expr = check.expr
        end = now
        start = end - timedelta(seconds=evidence.sources.lookback_s)
        step = max(1.0, evidence.sources.lookback_s / 240)
        matrix, idx = await evidence.read(
            "prometheus",
            expr,
            lambda: metrics.query_range(expr, start=start, end=end, step_s=step),
            service=cand.service,
            check=f"onset:{check.check}",
        )
        for series in matrix or []:
            for t, v in series.get("values") or []:
                try:
                    value = float(v)
                except ValueError:
                    continue
                crossed = {
                    "error_ratio": value >= ERROR_RATIO_MIN,
                    "latency_p99": value >= LATENCY_MIN_S and value >= 2 * (check.baseline or 0),
                    "up": value < 1,
                    "saturation": value >= SATURATION_MIN,
                    "memory": _memory_grew(value, check.baseline),
                }.get(check.check, False)
                if crossed:
                    cand.onset = float(t) if cand.onset is None else min(cand.onset, float(t))
                    break
        if cand.onset is not None:
            cand.obs.add(idx)

    async def _other_alerts(self, evidence: Evidence, cands: dict[str, Candidate]) -> None:
        source = evidence.alerts
        if source is None:
            return
        alerts, idx = await evidence.read("alertmanager", "GET /api/v2/alerts", source.alerts, check="firing")
        for alert in alerts or []:
            labels = alert.get("labels") or {}
            state = (alert.get("status") or {}).get("state", "")
            name = labels.get("service") or labels.get("job") or ""
            if state == "active" and name in cands and not cands[name].alerting:
                cands[name].alerting = True
                cands[name].obs.add(idx)

    # -- ranking -------------------------------------------------------------------------------------------------

    def _rank(
        self,
        turn: TurnInput,
        cands: dict[str, Candidate],
        *,
        metrics: bool,
        evidence: Evidence | None,
        first_alert_seq: int,
    ) -> Report:
        catalog = evidence.catalog if evidence is not None else None
        anomalous = {n for n, c in cands.items() if c.anomalies}
        onsets = [c.onset for c in cands.values() if c.onset is not None and c.anomalies]
        earliest = min(onsets) if onsets else None
        declared = _when(turn.state.created_at)
        # With metrics a change must come shortly before the onset it explains; without, any linked change that
        # did not land after the incident began is a suspect (as people link them).
        max_lead = CHANGE_BEFORE_ONSET_S if metrics else math.inf
        for name, c in cands.items():
            if c.anomalies:
                c.reasons.append(("anomalous: " + ", ".join(x.describe() for x in c.anomalies), ANOMALY))
                below = [d for d in anomalous if d != name and catalog is not None and catalog.depends_on(name, d)]
                above = [u for u in anomalous if u != name and catalog is not None and catalog.depends_on(u, name)]
                if below:
                    c.reasons.append((f"explained by its anomalous dependency {', '.join(sorted(below))}", EXPLAINED))
                elif above:
                    c.reasons.append((f"the deepest anomalous dependency of {', '.join(sorted(above))}", DEEPEST))
                if earliest is not None and c.onset is not None and c.onset <= earliest and max(onsets) > c.onset:
                    c.reasons.append(("its anomaly began first", EARLIEST))
            if c.alerting and (c.anomalies or not metrics):
                c.reasons.append(("it is alerting", ALERTING))
            reference = c.onset or (declared.timestamp() if declared else turn.now.timestamp())
            change = self._change_before(c, reference, max_lead)
            if change is not None and (c.anomalies or not metrics):
                at = change.get("at_dt")
                before = "the onset" if c.onset is not None else "the incident"
                lead_s = reference - at.timestamp() if at is not None else None
                lead = f" {lead_s / 60:.0f} min before {before}" if lead_s is not None else ""
                # several changes in the span share the weight (which one it was is open); with metrics, one that
                # landed at the onset weighs twice one that landed ``CHANGE_BEFORE_ONSET_S`` before it
                rivals = self._changes_in_span(c, reference, max_lead)
                weight = CHANGE / rivals * (_closeness(lead_s) if metrics else 1.0)
                also = f" (one of {rivals} changes on it in that span)" if rivals > 1 else ""
                c.reasons.append((f"{change['scope']} changed it{lead}{also}", round(weight, 3)))
                if not metrics and lead_s is not None and 0 <= lead_s <= 3600:
                    c.reasons.append(
                        ("it landed within the hour before the incident", round(LEAD * (1 - lead_s / 3600), 3))
                    )
            elif c.version_at is not None and c.anomalies and -5 <= reference - c.version_at <= CHANGE_BEFORE_ONSET_S:
                minutes = max(reference - c.version_at, 0) / 60
                versions = " → ".join(c.versions[-2:])
                weight = round(CHANGE * _closeness(reference - c.version_at), 3)
                c.reasons.append((f"its version changed ({versions}) {minutes:.0f} min before the onset", weight))
                c.obs.add(c.version_obs)
            if c.past and (c.anomalies or not metrics):
                same = c.past[0]
                text = f"a past incident with the same signature: {same.scope} (similarity {same.similarity:.0%})"
                c.reasons.append((text, round(PAST * same.similarity, 3)))
                c.obs.add(c.past_obs)
            if c.past_causes and (c.anomalies or not metrics):
                last = c.past_causes[0]
                c.reasons.append(
                    (f"last time this was {c.service}: {_lesson_text(last)}", round(PAST_CAUSE * last.similarity, 3))
                )
                c.obs.add(c.past_obs)
        ranked = sorted(
            (c for c in cands.values() if self._stands_out(c, metrics)),
            key=lambda c: (-c.score, -c.depth, c.onset or math.inf, c.service),
        )
        report = Report(checked=self._checked(cands, metrics, evidence))
        for rank, c in enumerate(ranked[: self.max_findings], start=1):
            reference = c.onset or (declared.timestamp() if declared else turn.now.timestamp())
            change = self._change_before(c, reference, max_lead)
            subject = change["scope"] if change is not None and (c.anomalies or not metrics) else c.service
            confidence = round(max(0.05, min(CONFIDENCE_CAP, c.score)), 2)
            refs = set(c.refs) | {r for ch in c.changes if ch is change for r in ch.get("refs", []) if r}
            if not refs and first_alert_seq:
                refs.add(first_alert_seq)
            why = "; ".join(text for text, _ in c.reasons)
            if change is not None and subject == change["scope"]:
                what = change.get("title") or change["scope"]
                version = str(change.get("version") or "")
                if version and version not in what:
                    what = f"{what} ({version})"
                paths = change.get("paths") or [p for x in change.get("commits", []) for p in x.get("paths", [])]
                touched = f"; it touched {', '.join(paths[:3])}" if paths else ""
                text = f"suspect {change['scope']}: “{what}” on {c.service} — {why}{touched}"
            else:
                text = f"suspect {c.service} — {why}"
            named = change if change is not None and subject == change["scope"] else None
            obs = tuple(sorted(i for i in c.obs if i >= 0))
            if change is not None and change.get("obs", -1) >= 0:
                obs = tuple(sorted({*obs, change["obs"]}))
            report.findings.append(
                Finding(
                    text=text,
                    subject=subject,
                    service=c.service,
                    confidence=confidence,
                    rank=rank,
                    change=named["scope"] if named is not None else "",
                    change_kind=str(named.get("kind") or "deploy") if named is not None else "",
                    flag=str(named.get("flag") or "") if named is not None else "",
                    refs=tuple(sorted(refs)),
                    observations=obs,
                )
            )
        if not report.findings and metrics:
            report.nothing = "Nothing stands out. Checked " + "; ".join(report.checked) + "."
        return report

    @staticmethod
    def _stands_out(c: Candidate, metrics: bool) -> bool:
        if metrics:
            return bool(c.anomalies)
        return bool(c.changes) and c.alerting

    @staticmethod
    def _changes_in_span(c: Candidate, reference: float, max_lead: float) -> int:
        """How many of ``c``'s changes could be the one ``_change_before`` picks (an undated one always could)."""
        return sum(
            1 for ch in c.changes if ch.get("at_dt") is None or -5 <= reference - ch["at_dt"].timestamp() <= max_lead
        )

    @staticmethod
    def _change_before(c: Candidate, reference: float, max_lead: float) -> dict[str, Any] | None:
        """The latest change on ``c`` that landed before ``reference`` (at most ``max_lead`` seconds before it)."""
        best: dict[str, Any] | None = None
        for ch in c.changes:
            at = ch.get("at_dt")
            if at is None:
                best = best or ch
                continue
            lead = reference - at.timestamp()
            if -5 <= lead <= max_lead and (best is None or best.get("at_dt") is None or at > best["at_dt"]):
                best = ch
        return best

    @staticmethod
    def _checked(cands: dict[str, Candidate], metrics: bool, evidence: Evidence | None) -> list[str]:
        out = []
        if metrics:
            for c in cands.values():
                out.append(f"{c.service}: " + ", ".join(x.describe() for x in c.checks) if c.checks else c.service)
        if evidence is not None and evidence.alerts is not None:
            out.append("what else fires in Alertmanager")
        changes = sorted({ch["scope"] for c in cands.values() for ch in c.changes})
        out.append("changes: " + (", ".join(changes) if changes else f"none on {', '.join(sorted(cands))}"))
        return out
