"""Open questions: effects nobody knows the outcome of, and verifications that could not tell."""

from __future__ import annotations

from decklog.core.reports.model import OpenQuestion
from decklog.core.reports.model_actions import RunLine, VerificationLine
from decklog.core.reports.sections.source import Source


def open_questions(
    src: Source, runs: dict[str, RunLine], verifications: tuple[VerificationLine, ...]
) -> tuple[OpenQuestion, ...]:
    """Effects nobody knows the outcome of, and verifications that could not tell; each until settled."""
    compensated_by: dict[str, list[str]] = {}
    for run in runs.values():
        if run.compensates_run:
            compensated_by.setdefault(run.compensates_run, []).append(run.run_id)
    out: list[OpenQuestion] = []
    for run in sorted(runs.values(), key=lambda r: r.seq):
        question = _about_run(run, compensated_by.get(run.run_id, []))
        if question is not None:
            out.append(question)
    last_by_target: dict[str, VerificationLine] = {}
    for v in verifications:
        last_by_target[v.run_id or v.obligation_id or f"#{v.seq}"] = v
    out.extend(
        _inconclusive(v) for v in sorted(last_by_target.values(), key=lambda v: v.seq) if v.outcome == "inconclusive"
    )
    out.sort(key=lambda q: q.seq)
    return tuple(out)


def _about_run(run: RunLine, compensations: list[str]) -> OpenQuestion | None:
    """The question a run leaves open: no result at all, or a last result whose effect is unknown."""
    note = "a compensation was attempted: " + ", ".join(compensations) if compensations else ""
    common = {"run_id": run.run_id, "action": run.action, "idempotency_key": run.idempotency_key, "note": note}
    if not run.results:
        return OpenQuestion(
            kind="no_result",
            seq=run.seq,
            at=run.at,
            fence=run.fence,
            text=f"Run {run.run_id} ({run.action}) started under fence {run.fence}; no result was recorded.",
            **common,
        )
    last = run.results[-1]
    error = f" ({last.error})" if last.error else ""
    if last.outcome == "uncertain":
        text = f"Run {run.run_id} ({run.action}): the outcome is unknown" + error + "; not reconciled yet."
        return OpenQuestion(kind="uncertain_effect", seq=last.seq, at=last.at, fence=last.fence, text=text, **common)
    if last.outcome == "abandon_uncertain":
        text = (
            f"Run {run.run_id} ({run.action}) was abandoned as uncertain: whether it took effect is "
            "unknown" + error + "."
        )
        return OpenQuestion(kind="abandoned_uncertain", seq=last.seq, at=last.at, fence=last.fence, text=text, **common)
    return None


def _inconclusive(v: VerificationLine) -> OpenQuestion:
    target = f"run {v.run_id}" if v.run_id else (f"obligation {v.obligation_id}" if v.obligation_id else "")
    return OpenQuestion(
        kind="verification_inconclusive",
        seq=v.seq,
        at=v.at,
        run_id=v.run_id,
        text=f"Verification of {target or 'an outcome'} was inconclusive"
        + (f": expected {v.expected}" if v.expected else "")
        + (f"; observed {v.observed}" if v.observed else "")
        + ".",
    )
