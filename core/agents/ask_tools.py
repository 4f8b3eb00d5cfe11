"""``ask`` without a model, answered from the read tools where a rule can: who owns a service, what it depends on,
its error rate now, and what the investigator checked. ``answer_from_tools`` returns None for any other question
(the rules then answer what changed or catch the person up, and otherwise say honestly that they cannot).

The service is the first catalog component (or incident service) the question names, else the incident's first
service. The error rate is one PromQL read (core/evidence/queries.py), recorded like any other.
"""

from __future__ import annotations

import re
from typing import Any

from decklog.core.agents.reasoner import TurnInput
from decklog.core.evidence.queries import ServiceQueries

CANNOT = (
    "I can't answer that without a model. Without one I can answer: who owns a service, what it depends on, "
    "its error rate now, what changed, what was checked, or catch you up."
)
_OWNER = re.compile(r"\b(who owns|owner|owns|responsible for|maintain|which team)\b", re.I)
_DEPENDS = re.compile(r"\b(depend|dependenc|upstream|downstream|calls)\w*", re.I)
_ERRORS = re.compile(r"\b(error rate|error ratio|errors?|5xx|failing)\b", re.I)
_CHECKED = re.compile(r"\b(check(ed)?|look(ed)? at|what did you (see|read))\b", re.I)


def _service(turn: TurnInput, question: str) -> str:
    words = set(re.findall(r"[\w.-]+", question.lower()))
    names: list[str] = []
    if turn.evidence is not None:
        names += list(turn.evidence.catalog.components)
    names += [s.lower() for s in turn.state.services]
    for name in names:
        if name in words:
            return name
    return turn.state.services[0] if turn.state.services else ""


async def answer_from_tools(turn: TurnInput) -> str | None:
    q = turn.question
    ev = turn.evidence
    service = _service(turn, q)
    if _CHECKED.search(q):
        return await _checked(turn)
    if ev is None:
        return None
    comp = ev.catalog.get(service) if service else None
    if _OWNER.search(q):
        if comp is None:
            return f"The service catalog has no component named {service or '(no service)'}."
        ev.note("catalog", f"component {comp.name}", comp.to_json(), service=comp.name)
        system = f" (system {comp.system})" if comp.system else ""
        return f"{comp.name} is owned by {comp.owner or 'nobody recorded'}{system}."
    if _DEPENDS.search(q):
        if comp is None:
            return f"The service catalog has no component named {service or '(no service)'}."
        deps = ev.catalog.dependencies(comp.name)
        ev.note("catalog", f"dependencies of {comp.name}", [list(d) for d in deps], service=comp.name)
        direct = ", ".join(n for n, d in deps if d == 1) or "nothing recorded"
        deeper = ", ".join(f"{n} (level {d})" for n, d in deps if d > 1)
        users = ", ".join(ev.catalog.dependents(comp.name)) or "nothing recorded"
        return (
            f"{comp.name} depends on {direct}" + (f"; further down: {deeper}" if deeper else "") + f". Used by {users}."
        )
    if _ERRORS.search(q) and ev.metrics is not None and service:
        metrics = ev.metrics
        expr = ServiceQueries(service, ev.sources.window, comp.annotations if comp else None).error_ratio()
        vector, idx = await ev.read(
            "prometheus", expr, lambda: metrics.query(expr), service=service, check="error_ratio"
        )
        if idx < 0 or ev.observations[idx].error:
            why = ev.observations[idx].error if idx >= 0 else ev.exhausted()
            return f"I could not read {service}'s error rate: {why}."
        value = _first(vector)
        if value is None:
            return f"Prometheus has no request metrics for {service} (query: `{expr}`)."
        return f"{service}'s error rate over the last {ev.sources.window}: {value:.1%} (query: `{expr}`)."
    return None


def _first(vector: list[dict[str, Any]] | None) -> float | None:
    for sample in vector or []:
        try:
            return float(sample["value"][1])
        except (KeyError, IndexError, TypeError, ValueError):
            continue
    return None


async def _checked(turn: TurnInput) -> str:
    view = await turn.views.view("investigation")
    sec = view.sections
    lines = []
    for item in sec.get("observations", []):
        text = str(item.get("text", ""))
        if text.startswith("Nothing stands out"):
            lines.append(text)
    for h in sec.get("hypotheses", [])[-3:]:
        lines.append(f"#{h.get('seq')}: {h.get('text', '')}")
    if not lines:
        return "The investigator has not checked anything on this incident yet."
    return "What the investigator checked and concluded:\n" + "\n".join(lines)
