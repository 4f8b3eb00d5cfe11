"""The judge: scores one run from what decklog recorded, against the scenario's ``expect`` (which only the judge
reads), next to three baselines computed from the same signals.

decklog's diagnosis is its ``hypothesis`` entries, read through its REST API: ``payload.subject`` (the
investigator's: a service's catalog name or a change's scope id) or, from today's rules reasoner,
``payload.suspect_scope`` (a change scope). Ranked by ``payload.rank`` within the entries of one moment and by time
across them; a subject counts once, at its first appearance.

A subject is correct when it names an expected root-cause service (``payment``, ``component:default/payment``)
or a change the faults themselves made on one (the bad deploy, the config push, the flag flip); a decoy change
on the same service is wrong.

Baselines (each a ranking, from the alerts Alertmanager held and the changes the deployer reported):
``recent_deploy`` — the most recent change anywhere before the first alert, then the ones before it;
``first_alert`` — the services in the order they first alerted; ``random_alerting`` — the alerting services in a
random order (seeded by the scenario and seed).
"""

from __future__ import annotations

import random
import statistics
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from research.lab.scenario import Truth
from research.lab.world import Change

BASELINES = ("recent_deploy", "first_alert", "random_alerting")


def parse_at(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


@dataclass
class AlertLog:
    """What Alertmanager held during the run: (alertname, service) → first start and last time seen firing."""

    first: dict[tuple[str, str], float] = field(default_factory=dict)
    last_seen: dict[tuple[str, str], float] = field(default_factory=dict)
    firing_now: set[tuple[str, str]] = field(default_factory=set)

    def record(self, alerts: list[dict[str, Any]], now: float) -> None:
        self.firing_now = set()
        for alert in alerts:
            labels = alert.get("labels", {})
            key = (str(labels.get("alertname", "")), str(labels.get("service", "")))
            self.firing_now.add(key)
            started = parse_at(alert["startsAt"]) if alert.get("startsAt") else now
            self.first.setdefault(key, min(started, now))
            self.last_seen[key] = now

    @property
    def started_at(self) -> float | None:
        return min(self.first.values()) if self.first else None

    def services_in_order(self) -> list[str]:
        seen: list[str] = []
        for (_, service), _at in sorted(self.first.items(), key=lambda kv: kv[1]):
            if service not in seen:
                seen.append(service)
        return seen


def normalise(subject: str) -> str:
    """``component:default/payment`` → ``payment``; a change scope stays as it is."""
    if subject.startswith("change/"):
        return subject
    return subject.rsplit("/", 1)[-1].removeprefix("component:").strip().lower()


def is_correct(subject: str, truth: Truth, changes: list[Change]) -> bool:
    causes = set(truth.expect.causes)
    subject = normalise(subject)
    if subject in causes:
        return True
    if subject.startswith("change/"):
        return any(c.scope == subject and c.origin.startswith("fault:") and c.service in causes for c in changes)
    return False


def rank_of(ranking: list[str], truth: Truth, changes: list[Change]) -> int | None:
    for i, subject in enumerate(ranking, 1):
        if is_correct(subject, truth, changes):
            return i
    return None


def hypotheses(entries: list[dict[str, Any]]) -> list[tuple[float, str]]:
    """(time, subject) of every hypothesis entry that names one, in decklog's order of confidence over time."""
    found = []
    for e in entries:
        if e.get("kind") != "hypothesis":
            continue
        p = e.get("payload") or {}
        subject = str(p.get("subject") or p.get("suspect_scope") or "")
        if subject:
            rank = p.get("rank") if isinstance(p.get("rank"), int) else 1_000
            found.append((parse_at(e["at"]), rank, int(e.get("seq", 0)), subject))
    return [(at, subject) for at, _rank, _seq, subject in sorted(found)]


def baselines(alerts: AlertLog, changes: list[Change], seed_text: str) -> dict[str, list[str]]:
    start = alerts.started_at
    before = [c for c in changes if start is None or c.at <= start]
    recent = [c.scope for c in sorted(before, key=lambda c: c.at, reverse=True)]
    order = alerts.services_in_order()
    shuffled = list(sorted(order))
    random.Random(seed_text).shuffle(shuffled)
    return {"recent_deploy": recent, "first_alert": order, "random_alerting": shuffled}


def count_bot_messages(node: Any, bot: str = "U0BOT") -> int:
    """Messages the bot posted anywhere in the sandbox workspace's snapshot (threads included)."""
    if isinstance(node, dict):
        own = 1 if node.get("type") == "message" and node.get("user") == bot else 0
        return own + sum(count_bot_messages(v, bot) for v in node.values() if isinstance(v, (dict, list)))
    if isinstance(node, list):
        return sum(count_bot_messages(v, bot) for v in node)
    return 0


def score(
    *,
    scenario: str,
    seed: int,
    truth: Truth,
    incidents: list[dict[str, Any]],
    entries: list[dict[str, Any]],
    alerts: AlertLog,
    changes: list[Change],
    slack_messages: int,
) -> dict[str, Any]:
    """One row of results.jsonl."""
    start = alerts.started_at
    created = [parse_at(i["created_at"]) for i in incidents]
    ranking: list[str] = []
    first_correct: float | None = None
    for at, subject in hypotheses(entries):
        if subject not in ranking:
            ranking.append(subject)
        if first_correct is None and is_correct(subject, truth, changes):
            first_correct = at
    started = {e["payload"]["run_id"]: e["payload"] for e in entries if e.get("kind") == "action_started"}
    applied = []
    for e in entries:
        if e.get("kind") == "action_result" and e["payload"].get("outcome") == "applied":
            run = started.get(e["payload"]["run_id"], {})
            applied.append(
                {"action": e["payload"].get("action", ""), "service": (run.get("params") or {}).get("service", "")}
            )
    needed = [a for a in applied if a["action"] in truth.expect.fixes and a["service"] in truth.expect.causes]
    proposals = [e["payload"] for e in entries if e.get("kind") == "proposal"]
    base = baselines(alerts, changes, f"{scenario}:{seed}")

    def since(at: float | None) -> float | None:
        return round(at - start, 1) if at is not None and start is not None else None

    row: dict[str, Any] = {
        "scenario": scenario,
        "source": truth.source,
        "seed": seed,
        "expected_root_cause": "|".join(truth.expect.causes),
        "expected_fix": "|".join(truth.expect.fixes),
        "alerts": len(alerts.first),
        "incidents": len(incidents),
        "hypotheses": ranking[:10],
        "first_hypothesis": ranking[0] if ranking else None,
        "correct_rank": rank_of(ranking, truth, changes),
        "t_incident_s": since(min(created)) if created else None,
        "t_correct_s": since(first_correct),
        "proposed": [f"{p.get('action')}({(p.get('params') or {}).get('service', '')})" for p in proposals],
        "actions_run": [f"{a['action']}({a['service']})" for a in applied],
        "mitigated": bool(alerts.first) and not alerts.firing_now,
        "fixed_by_action": bool(needed),
        "harmful_actions": len(applied) - len(needed),
        "slack_messages": slack_messages,
    }
    for name in BASELINES:
        row[f"baseline_{name}"] = base[name][0] if base[name] else None
        row[f"baseline_{name}_rank"] = rank_of(base[name], truth, changes)
    return row


def median(values: list[float]) -> float | None:
    return round(statistics.median(values), 1) if values else None
