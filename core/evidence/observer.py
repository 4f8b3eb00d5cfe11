"""``Evidence``: one turn's reads of the world outside the log, bounded and remembered.

Every read (a PromQL query, Alertmanager's alerts, a catalog lookup, the change index, past incidents) goes
through ``Evidence.read``: it is refused once the turn's budget of calls, seconds or bytes is spent, it has its own
timeout, and its outcome — the values, or why there are none (unreachable, refused, timed out, over budget) — is
kept as an ``ObservationIntent``: the source, the exact query, the values and the time. The turn runtime records
them as ``observation`` entries before the turn's findings, in the turn's one append (the reads themselves ran
before it, outside any database transaction), and a hypothesis refers to the observations it rests on by index.

An unreachable source never fails a turn: the read answers ``None`` and the observation says why.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, TypeVar

from decklog.core.evidence.catalog import ServiceCatalog
from decklog.core.evidence.ports import AlertsPort, MetricsPort, SourceError

T = TypeVar("T")
SOURCE_TEXT_MAX = 400


@dataclass(frozen=True)
class Limits:
    """A turn's bounds on outside reads: calls, wall seconds over all of them, bytes of answers, one call's
    timeout, and the largest answer one call keeps."""

    max_calls: int = 40
    max_seconds: float = 10.0
    max_bytes: int = 512_000
    call_timeout_s: float = 3.0
    max_call_bytes: int = 64_000


@dataclass(frozen=True)
class EvidenceSources:
    """What the process can read (each optional). ``window``: the PromQL window of the checks."""

    metrics: MetricsPort | None = None
    alerts: AlertsPort | None = None
    catalog: ServiceCatalog | None = None
    limits: Limits = Limits()
    window: str = "5m"
    baseline: str = "30m"  # how long before now the window a check compares with ends (a PromQL offset)
    lookback_s: float = 1800.0  # how far back a range query looks for an onset

    @property
    def any(self) -> bool:
        return self.metrics is not None or self.alerts is not None or bool(self.catalog)


@dataclass(frozen=True)
class ObservationIntent:
    """One read as it will be recorded: ``source`` (prometheus, alertmanager, catalog, changes, incidents), the
    exact ``query``, its ``values`` (or ``error``), when it ran, and the service it was about."""

    source: str
    query: str
    values: Any = None
    error: str = ""
    at: str = ""
    service: str = ""
    check: str = ""
    ms: int = 0
    bytes: int = 0
    summary: str = ""  # a conclusion to show people (the investigator's "nothing stands out"), not a read

    @property
    def text(self) -> str:
        if self.summary:
            return self.summary[:3000]
        what = f"{self.check} of {self.service}" if self.check and self.service else self.check or self.source
        if self.error:
            return f"{self.source}: {what} could not be read ({self.error})"[:SOURCE_TEXT_MAX]
        shown = json.dumps(self.values, ensure_ascii=False, default=str)
        return f"{self.source}: {what} = {shown}"[:SOURCE_TEXT_MAX]

    def payload(self) -> dict[str, Any]:
        if self.summary:
            return {"text": self.text, "source": self.source, "service": self.service, "data": {"at": self.at}}
        data: dict[str, Any] = {"tool": self.source, "query": self.query, "at": self.at, "ms": self.ms}
        if self.check:
            data["check"] = self.check
        if self.error:
            data["error"] = self.error
        else:
            data["values"] = self.values
        return {"text": self.text, "source": self.source, "service": self.service, "data": data}


def _size(value: Any) -> int:
    return len(json.dumps(value, ensure_ascii=False, default=str).encode())


@dataclass
class Evidence:
    """One turn's bounded reads. ``observations``: every read, in order (a hypothesis refers to them by index)."""

    sources: EvidenceSources
    now: Callable[[], datetime]
    observations: list[ObservationIntent] = field(default_factory=list)
    spent_s: float = 0.0
    spent_bytes: int = 0
    refused: int = 0

    @property
    def limits(self) -> Limits:
        return self.sources.limits

    @property
    def metrics(self) -> MetricsPort | None:
        return self.sources.metrics

    @property
    def alerts(self) -> AlertsPort | None:
        return self.sources.alerts

    @property
    def catalog(self) -> ServiceCatalog:
        return self.sources.catalog or ServiceCatalog()

    def exhausted(self) -> str:
        """Why no further read may run this turn ('' while one may)."""
        lim = self.limits
        if len(self.observations) >= lim.max_calls:
            return f"the turn's {lim.max_calls} reads are spent"
        if self.spent_s >= lim.max_seconds:
            return f"the turn's {lim.max_seconds:g}s of reads are spent"
        if self.spent_bytes >= lim.max_bytes:
            return f"the turn's {lim.max_bytes} bytes of reads are spent"
        return ""

    def note(self, source: str, query: str, values: Any, *, service: str = "", check: str = "") -> int:
        """Keep a read that needed no call (the catalog, the log's own index); returns its index."""
        at = self.now().isoformat()
        self.observations.append(
            ObservationIntent(source, query, values, at=at, service=service, check=check, bytes=_size(values))
        )
        return len(self.observations) - 1

    def conclude(self, source: str, text: str) -> int:
        """Keep a conclusion drawn from the reads (shown in the thread); returns its index."""
        self.observations.append(ObservationIntent(source, "", at=self.now().isoformat(), summary=text))
        return len(self.observations) - 1

    async def read(
        self, source: str, query: str, call: Callable[[], Awaitable[T]], *, service: str = "", check: str = ""
    ) -> tuple[T | None, int]:
        """Run ``call`` within the budget; (its answer or None, the index of its observation — -1 when the budget
        refused it, which is counted but not recorded)."""
        if self.exhausted():
            self.refused += 1
            return None, -1
        at = self.now().isoformat()
        started = time.monotonic()
        timeout = min(self.limits.call_timeout_s, max(0.1, self.limits.max_seconds - self.spent_s))
        value: T | None = None
        error = ""
        try:
            value = await asyncio.wait_for(call(), timeout=timeout)
        except TimeoutError:
            error = f"no answer within {timeout:g}s"
        except SourceError as exc:
            error = exc.reason
        ms = int((time.monotonic() - started) * 1000)
        self.spent_s += ms / 1000
        size = _size(value) if value is not None else 0
        if size > self.limits.max_call_bytes:
            error, value = f"the answer had {size} bytes, more than the {self.limits.max_call_bytes} kept", None
        self.spent_bytes += size
        obs = ObservationIntent(
            source, query, value, error=error, at=at, service=service, check=check, ms=ms, bytes=size
        )
        self.observations.append(obs)
        return value, len(self.observations) - 1

    def summary(self) -> dict[str, Any]:
        """What the turn's ``agent_turn`` says about its reads."""
        failed = sum(1 for o in self.observations if o.error)
        return {
            "tool": "evidence",
            "reads": len(self.observations),
            "failed": failed,
            "refused_over_budget": self.refused,
            "ms": int(self.spent_s * 1000),
            "bytes": self.spent_bytes,
        }
