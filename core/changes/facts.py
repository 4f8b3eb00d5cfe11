"""What a change is made of in the log (core/changes/service.py records and links it): the ``change/<id>`` scope name, the
title, the idempotency key, the observation that carries the deploy and its commits' paths, the facts an incident
needs of a change scope, and the evidence line a link puts in the incident's thread. Pure functions only."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Literal

from decklog.core.clock import iso, parse_iso
from decklog.core.entries import Actor, Entry, Observation
from decklog.core.ids import ScopeId
from decklog.core.signals import ChangeSignal, Commit

CHANGES_ACTOR = Actor.system("decklog:changes")
EVIDENCE_SOURCE = "change"
TITLE_MAX = 300
COMMITS_KEPT = 20
PATHS_PER_COMMIT = 30
PATHS_KEPT = 60
REGISTRY_MAX = 200  # incidents remembered per service (this process; the index has the rest)
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,119}")
_SHA = re.compile(r"[0-9a-f]{40}")
_CONFIG = re.compile(r"(^|/)(config|conf|settings|deploy|helm|k8s|charts?)(/|$)|\.(ya?ml|toml|json|ini|conf|env)$")

Outcome = Literal["new", "updated", "duplicate"]


@dataclass(frozen=True)
class ChangeOutcome:
    change_id: str
    scope: str
    outcome: Outcome
    seq: int = 0
    linked: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "change_id": self.change_id,
            "scope": self.scope,
            "outcome": self.outcome,
            "seq": self.seq or None,
            "linked": list(self.linked),
        }


@dataclass(frozen=True)
class ChangeFacts:
    """What an incident needs to know of a change scope, gathered from its log."""

    scope: str
    services: tuple[str, ...]
    at: datetime
    change_id: str = ""
    version: str = ""
    author: str = ""
    status: str = ""
    link: str = ""
    paths: tuple[str, ...] = field(default_factory=tuple)

    @property
    def label(self) -> str:
        name = self.change_id or self.scope.split("/", 1)[-1]
        return f"{name} by {self.author}" if self.author else name


# -- pure helpers ------------------------------------------------------------------------------------------------


def change_scope(change_id: str) -> str:
    """``change/<id>``: the id itself when it is a valid scope name, else a readable slug + a digest (stable)."""
    if _NAME.fullmatch(change_id):
        return f"change/{change_id}"
    slug = re.sub(r"[^A-Za-z0-9._-]+", "-", change_id).strip("-._")[:100].rstrip("-._") or "change"
    digest = hashlib.sha256(change_id.encode("utf-8", "replace")).hexdigest()[:10]
    return str(ScopeId.parse(f"change/{slug}-{digest}"))


def short_version(version: str) -> str:
    return version[:12] if _SHA.fullmatch(version) else version


def change_title(signal: ChangeSignal) -> str:
    """``payments r2026-09-19-4 (v2026.09.19-4) by maria``."""
    title = f"{signal.service} {signal.change_id}"
    version = short_version(signal.version)
    if version and version.lower() not in signal.change_id.lower():
        title += f" ({version})"
    if signal.author:
        title += f" by {signal.author}"
    title = " ".join(title.split())
    return title if len(title) <= TITLE_MAX else title[: TITLE_MAX - 1] + "…"


def change_key(signal: ChangeSignal) -> str:
    """A digest of the normalised change: the same delivery twice has the same key (appends once)."""
    fields = signal.model_dump(mode="json")
    for name, default in (("kind", "deploy"), ("flag", "")):  # absent when default: keys made before stay the same
        if fields.get(name) == default:
            fields.pop(name, None)
    material = json.dumps(fields, sort_keys=True, ensure_ascii=True)
    return f"change:{signal.source}:{hashlib.sha256(material.encode('ascii')).hexdigest()[:32]}"


def touched_paths(commits: Sequence[Commit], limit: int = PATHS_KEPT) -> list[str]:
    """Every path the commits touched, once, configuration-looking paths first."""
    paths = list(dict.fromkeys(p for c in commits for p in c.paths))
    return sorted(paths, key=lambda p: 0 if _CONFIG.search(p.lower()) else 1)[:limit]


def change_text(signal: ChangeSignal) -> str:
    where = f" to {signal.environment}" if signal.environment else ""
    who = f" ({signal.author})" if signal.author else ""
    what = f"{signal.service} {short_version(signal.version)}".strip()
    verb = {"started": "started", "succeeded": "succeeded", "failed": "failed", "pushed": "pushed"}[signal.status]
    if signal.status == "pushed":
        line = f"push to {signal.repository or signal.service}{who}"
    elif signal.kind == "flag":
        flag = f" {signal.flag}" if signal.flag else ""
        line = f"feature flag{flag} change on {what}{where} {verb}{who}"
    elif signal.kind == "config":
        line = f"config change to {what}{where} {verb}{who}"
    else:
        line = f"deploy of {what}{where} {verb}{who}"
    description = signal.description.strip().splitlines()[0] if signal.description.strip() else ""
    return f"{line}: {description}" if description else line


def change_observation(signal: ChangeSignal, raw: Mapping[str, Any] | None = None) -> Observation:
    commits = [
        {
            "id": c.id,
            "message": c.message.splitlines()[0] if c.message else "",
            "author": c.author,
            "url": c.url,
            "paths": list(c.paths[:PATHS_PER_COMMIT]),
        }
        for c in signal.commits[:COMMITS_KEPT]
    ]
    data: dict[str, Any] = {
        "change_id": signal.change_id,
        "kind": signal.kind,
        "flag": signal.flag,
        "status": signal.status,
        "version": signal.version,
        "environment": signal.environment,
        "author": signal.author,
        "link": signal.link,
        "description": signal.description,
        "at": iso(signal.at) if signal.at else "",
        "repository": signal.repository,
        "ref": signal.ref,
        "commits": commits,
        "commits_total": len(signal.commits),
        "paths": touched_paths(signal.commits),
    }
    links = tuple(dict.fromkeys(u for u in (signal.link, *(c.url for c in signal.commits[:5])) if u))
    return Observation(
        text=change_text(signal),
        source=signal.source,
        service=signal.service,
        links=links,
        data={k: v for k, v in data.items() if v not in ("", [], None)} | {"change_id": signal.change_id},
        raw=dict(raw or {}),
    )


def _minutes(delta: timedelta) -> str:
    minutes = abs(delta.total_seconds()) / 60
    if minutes < 1:
        return "less than a minute"
    if minutes < 120:
        return f"{minutes:.0f} min"
    return f"{minutes / 60:.1f} h"


def evidence_text(facts: ChangeFacts, service: str, alert_at: datetime) -> tuple[str, str, str, str]:
    """(evidence line, relation from the incident, relation from the change, when: "2 min before the alert")."""
    lead = alert_at - facts.at
    if lead >= timedelta(0):
        when, relation, back = f"{_minutes(lead)} before the alert", "suspected_cause", "suspected_effect"
        head = f"Recent change on {service}"
    else:
        when, relation, back = f"{_minutes(lead)} after the alert started", "related", "related"
        head = f"Change on {service} during this incident"
    version = short_version(facts.version)
    label = facts.label + (f" ({version})" if version and version not in facts.label else "")
    text = f"{head}: {label} {when}"
    if facts.status in ("started", "failed"):
        text += f" (deploy {facts.status})"
    if facts.paths:
        more = f" and {len(facts.paths) - 3} more" if len(facts.paths) > 3 else ""
        text += f" — touched {', '.join(facts.paths[:3])}{more}"
    return text, relation, back, when


def change_time(entries: Sequence[Entry]) -> datetime | None:
    """A change's own time in ``entries`` (a change scope's observations): the earliest time its senders reported
    (``data["at"]``), an observation that reported none counting at its recording time; None when no entry is a
    change observation. A deploy reported "a day ago" and recorded now happened a day ago: ordering it by its
    recording time would put every replayed or late-delivered change just before whatever fires next."""
    times: list[datetime] = []
    for entry in entries:
        p = entry.payload
        if not isinstance(p, Observation) or "change_id" not in p.data:
            continue
        stamp = p.data.get("at")
        try:
            times.append(parse_iso(stamp) if isinstance(stamp, str) and stamp else entry.at)
        except ValueError:
            times.append(entry.at)
    return min(times) if times else None


def change_kind(entries: Sequence[Entry]) -> tuple[str, str]:
    """(kind, flag) of a change from its scope's observations: ``deploy``, ``config`` or ``flag``, and the feature
    flag's name for a flag. A change recorded before changes had kinds is a deploy."""
    for entry in entries:
        p = entry.payload
        if isinstance(p, Observation) and "change_id" in p.data:
            kind = p.data.get("kind")
            if isinstance(kind, str) and kind in ("deploy", "config", "flag"):
                flag = p.data.get("flag")
                return kind, flag if isinstance(flag, str) else ""
    return "deploy", ""


def alert_started(entry: Entry) -> datetime | None:
    """The ``started_at`` an alert observation carries, if any."""
    p = entry.payload
    if isinstance(p, Observation):
        stamp = p.data.get("started_at")
        if isinstance(stamp, str) and stamp:
            try:
                return parse_iso(stamp)
            except ValueError:
                return None
    return None


def incident_alert_time(entries: Sequence[Entry]) -> datetime | None:
    """The first alert time of a declaration batch (declared + its first observations), else its time."""
    times = [t for t in (alert_started(e) for e in entries) if t is not None]
    if times:
        return min(times)
    return entries[0].at if entries else None
