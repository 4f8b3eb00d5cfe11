"""The ``verification`` view: the decision and its expected outcome, the run and its recorded result, and the
alert evidence that came after it."""

from __future__ import annotations

from typing import Any

from decklog.core.entries import ActionResult, ActionStarted, Decision, Entry, Observation, Verification
from decklog.core.views.action import pick_obligation
from decklog.core.views.compose import Part
from decklog.core.views.reader import Reader
from decklog.core.views.shapes import alert_items, alert_summary, clip, compact, header, obligation_json


async def verification(r: Reader, obligation_id: str | None) -> list[Part]:
    s = r.state
    ob = pick_obligation(s, obligation_id, purpose="verification")
    parts = [Part("scope", value=header(s))]
    if ob is None:
        missing = f"no open obligation {obligation_id}" if obligation_id else "no open verification obligation"
        return [*parts, Part("obligation", value={"missing": missing})]
    got = await r.many(
        {
            "decision": (("decision",), 3),
            "runs": (("action_started", "action_result"), 60 if ob.run_id else 0),
            "verification": (("verification",), 10),
        }
    )
    runs = got["runs"]
    started = next((e for e in runs if isinstance(e.payload, ActionStarted) and e.payload.run_id == ob.run_id), None)
    result = next(
        (e for e in reversed(runs) if isinstance(e.payload, ActionResult) and e.payload.run_id == ob.run_id), None
    )
    later = await _after(r, result)
    earlier = [
        e for e in got["verification"] if isinstance(e.payload, Verification) and e.payload.obligation_id == ob.id
    ]
    return [
        *parts,
        Part("obligation", value=obligation_json(ob)),
        Part("expected_outcome", value=ob.expected_outcome),
        _decisions(r, got["decision"]),
        Part("run_started", value=_run_json(r, started)),
        Part("result", value=_run_json(r, result)),
        Part("alerts", value=alert_summary(s)),
        Part("firing_alerts", items=alert_items(s, status="firing"), keep=3, priority=40, noun="firing alerts"),
        Part("resolved_alerts", items=alert_items(s, status="resolved"), keep=3, priority=35, noun="resolved alerts"),
        Part(
            "after_result",
            items=[r.brief(e) for e in later],
            keep=3,
            priority=20,
            noun="alert observations after the result",
        ),
        Part("earlier_verifications", items=[r.brief(e) for e in earlier], keep=1, priority=25, noun="verifications"),
    ]


async def _after(r: Reader, result: Entry | None) -> list[Entry]:
    """The alert observations recorded after the run's result (what the world said once the action was done)."""
    if result is None:
        return []
    return [
        e
        for e in await r.store.read(r.scope, after=result.seq, kinds=("observation",), limit=40)
        if isinstance(e.payload, Observation) and e.payload.fingerprint
    ]


def _decisions(r: Reader, decisions: list[Entry]) -> Part:
    return Part(
        "decisions",
        items=[
            {**r.brief(e), "expected_outcome": e.payload.expected_outcome}
            if isinstance(e.payload, Decision) and e.payload.expected_outcome
            else r.brief(e)
            for e in decisions
        ],
        keep=1,
        priority=60,
        noun="decisions",
        total=r.count("decision"),
    )


def _run_json(r: Reader, e: Entry | None) -> dict[str, Any]:
    if e is None:
        return {}
    out = r.brief(e)
    if isinstance(e.payload, ActionResult):
        out.update(compact({"outcome": e.payload.outcome, "error": clip(e.payload.error, 160)}))
    return out
