"""``build_report``: a pure function from a scope's log (and its linked scopes' logs) to a ``Report``.

Deterministic by construction: it reads only the entries and the verification results it is given, never the
clock, never an entry id; every list is in log order (or sorted by a total key). ``report_exported`` entries are
dropped first, so recording an export never changes the next export's bytes.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from core.clock import iso
from core.entries import (
    ActionResult,
    ActionStarted,
    Actor,
    AgentTurn,
    Answer,
    Approval,
    ApprovalRefused,
    Constraint,
    Decision,
    Declared,
    EffectCompensated,
    Entry,
    Evidence,
    FenceRejected,
    Goal,
    Hypothesis,
    Message,
    MessageDeleted,
    MessageEdited,
    ObligationCancelled,
    ObligationClaimed,
    ObligationExpired,
    ObligationFulfilled,
    ObligationOpened,
    ObligationReleased,
    Observation,
    ProposalClosed,
    ProposalMade,
    RoleAssigned,
    ScopeLinked,
    SeverityChanged,
    StatusChanged,
    Suggestion,
    SuggestionFeedback,
    Verification,
)
from core.reports.model import (
    ActionLine,
    AlertLine,
    ApprovalLine,
    CompensationLine,
    DecisionLine,
    FenceRejection,
    Impact,
    InferenceLine,
    Integrity,
    LinkedScope,
    Milestone,
    MilestoneName,
    ObligationLine,
    OpenQuestion,
    Origin,
    Participant,
    ProposalLine,
    RefusalLine,
    Report,
    ResultLine,
    RunLine,
    SeverityStep,
    Summary,
    TimelineLine,
    TurnLine,
    TurnTotals,
    VerificationLine,
)
from core.state import ScopeState, fold_all
from core.store import VerifyReport

EXCLUDED_KINDS = frozenset({"report_exported"})
# Linked scopes of these kinds have their entries merged into the timeline (a deploy's start and end matter to
# the incident); linked incidents are summarised only: they have reports of their own.
MERGED_KINDS = ("change",)
_SLACK_ARCHIVE = re.compile(r"^(https://[^/?#\s]+/)archives/[A-Z0-9]+/p\d+")


@dataclass(frozen=True)
class ScopeLog:
    """A report's input for one scope: its entries (all of them, in seq order) and its chain verification.

    ``verify`` is None when the chain was not checked; ``found`` is False for a linked scope that is not on disk.
    """

    scope: str
    entries: tuple[Entry, ...] = ()
    verify: VerifyReport | None = None
    found: bool = True


def report_entries(entries: Iterable[Entry]) -> list[Entry]:
    """The entries a report is made of: everything but the bookkeeping of exports."""
    return [e for e in entries if e.kind not in EXCLUDED_KINDS]


def build_report(main: ScopeLog, linked: Sequence[ScopeLog] = ()) -> Report:
    """The post-incident report of ``main``; ``linked`` are the logs of the scopes it links to (any order)."""
    return _Builder(main, {log.scope: log for log in linked}).build()


# -- helpers ---------------------------------------------------------------------------------------------------


def _seconds(later: datetime, earlier: datetime) -> float:
    return round((later - earlier).total_seconds(), 3)


def _origin(actor: Actor) -> Origin:
    return actor.type


def http_url(url: str) -> str:
    """``url`` when it is an http(s) URL, else empty: recorded text never becomes a ``javascript:`` link."""
    url = url.strip()
    return url if url.startswith(("https://", "http://")) and not any(c.isspace() for c in url) else ""


def message_permalink(thread_permalink: str, channel: str, ts: str, thread_ts: str = "") -> str:
    """A Slack message's permalink, derived from the thread's (same workspace): ``…/archives/C…/p<ts>``.

    Empty unless the thread permalink has Slack's ``/archives/`` form and the message has a channel and a ts.
    """
    match = _SLACK_ARCHIVE.match(thread_permalink)
    if match is None or not channel or not re.fullmatch(r"\d+\.\d+", ts):
        return ""
    link = f"{match.group(1)}archives/{channel}/p{ts.replace('.', '')}"
    if thread_ts and thread_ts != ts and re.fullmatch(r"\d+\.\d+", thread_ts):
        link += f"?thread_ts={thread_ts}&cid={channel}"
    return link


@dataclass
class _Proposal:
    line: dict[str, Any]
    approvals: list[ApprovalLine] = field(default_factory=list)
    refusals: list[RefusalLine] = field(default_factory=list)
    runs: list[str] = field(default_factory=list)


@dataclass
class _Run:
    line: dict[str, Any]
    results: list[ResultLine] = field(default_factory=list)
    verification: str = ""


@dataclass
class _Participant:
    actor: Actor
    entries: int = 0
    first_seq: int = 0
    first_at: str | None = None
    last_at: str | None = None
    roles: list[str] = field(default_factory=list)


class _Builder:
    def __init__(self, main: ScopeLog, linked: dict[str, ScopeLog]) -> None:
        self.main = main
        self.entries = report_entries(main.entries)
        self.linked_logs = linked
        self.state: ScopeState = fold_all(main.scope, self.entries)
        self.thread_permalink = http_url(self.state.thread.permalink) if self.state.thread else ""
        self.declared: Entry | None = next((e for e in self.entries if isinstance(e.payload, Declared)), None)
        self.origin_at = self.declared.at if self.declared else (self.entries[0].at if self.entries else None)

    # -- the parts -------------------------------------------------------------------------------------------

    def build(self) -> Report:
        milestones = self._milestones()
        actions, verifications, rejections, runs = self._actions()
        obligations = self._obligations()
        return Report(
            scope=self.main.scope,
            summary=self._summary(milestones),
            impact=self._impact(milestones),
            milestones=milestones,
            timeline=self._timeline(),
            decisions=self._decisions(),
            inferences=self._inferences(),
            actions=actions,
            verifications=verifications,
            fence_rejections=rejections,
            compensations=self._compensations(runs, actions),
            open_questions=self._open_questions(runs, verifications),
            obligations=tuple(o for o in obligations if o.purpose != "follow_up" and o.status in ("open", "claimed")),
            follow_ups=tuple(o for o in obligations if o.purpose == "follow_up"),
            participants=self._participants(),
            agent_turns=self._turns(),
            agent_totals=self._totals(),
            linked_scopes=self._linked(),
            integrity=self._integrity(),
        )

    def _offset(self, at: datetime) -> float | None:
        return _seconds(at, self.origin_at) if self.origin_at is not None else None

    def link_for(self, entry: Entry, thread_permalink: str | None = None) -> str:
        """The entry's own Slack permalink where recorded (or derivable), else its thread's."""
        thread = self.thread_permalink if thread_permalink is None else thread_permalink
        p = entry.payload
        if isinstance(p, Message | Evidence) and http_url(p.permalink):
            return http_url(p.permalink)
        if isinstance(p, Message | Evidence | MessageEdited | MessageDeleted):
            derived = message_permalink(thread, p.channel, p.ts, getattr(p, "thread_ts", ""))
            if derived:
                return derived
        return thread

    def _summary(self, milestones: tuple[Milestone, ...]) -> Summary:
        s = self.state
        d = self.declared
        declared = d.payload if d is not None and isinstance(d.payload, Declared) else None
        resolution = ""
        goals: list[str] = []
        constraints: list[str] = []
        for e in self.entries:
            p = e.payload
            if isinstance(p, StatusChanged) and p.status == "resolved" and p.summary:
                resolution = p.summary
            elif isinstance(p, Goal):
                goals.append(p.text)
            elif isinstance(p, Constraint):
                constraints.append(p.text)
        resolved = next(m for m in milestones if m.name == "resolved")
        return Summary(
            scope=self.main.scope,
            kind=s.kind,
            title=s.title or self.main.scope,
            status=s.status,
            severity=s.severity,
            worst_severity=self._worst_severity(),
            services=s.services,
            declared_at=iso(d.at) if d is not None else None,
            declared_by=d.actor if d is not None else None,
            declared_via=declared.via if declared is not None else "",
            resolved_at=resolved.at,
            duration_s=resolved.since_declared_s,
            description=declared.summary if declared is not None else "",
            resolution=resolution,
            goals=tuple(goals),
            constraints=tuple(constraints),
            thread_permalink=self.thread_permalink,
        )

    def _severity_steps(self) -> list[SeverityStep]:
        steps: list[SeverityStep] = []
        for e in self.entries:
            p = e.payload
            if isinstance(p, Declared) and p.severity is not None:
                steps.append(SeverityStep(seq=e.seq, at=iso(e.at), severity=p.severity, by=e.actor, reason="declared"))
            elif isinstance(p, SeverityChanged):
                steps.append(SeverityStep(seq=e.seq, at=iso(e.at), severity=p.severity, by=e.actor, reason=p.reason))
        return steps

    def _worst_severity(self) -> int | None:
        values = [s.severity for s in self._severity_steps()]
        return min(values) if values else None

    def _impact(self, milestones: tuple[Milestone, ...]) -> Impact:
        alerts: dict[str, dict[str, Any]] = {}
        first_firing: datetime | None = None
        for e in self.entries:
            p = e.payload
            if not isinstance(p, Observation) or not p.fingerprint:
                continue
            at = iso(e.at)
            status = p.alert_status or (alerts[p.fingerprint]["status"] if p.fingerprint in alerts else "firing")
            if status == "firing" and first_firing is None:
                first_firing = e.at
            if p.fingerprint not in alerts:
                alerts[p.fingerprint] = {
                    "fingerprint": p.fingerprint,
                    "title": p.text,
                    "service": p.service,
                    "source": p.source,
                    "status": status,
                    "first_at": at,
                    "last_at": at,
                    "notifications": 1,
                    "resolved_at": at if status == "resolved" else None,
                }
                continue
            alert = alerts[p.fingerprint]
            alert.update(status=status, last_at=at, notifications=alert["notifications"] + 1)
            alert["resolved_at"] = at if status == "resolved" else None
        started = self.declared.at if self.declared is not None else None
        if first_firing is not None and (started is None or first_firing < started):
            started = first_firing
        mitigated = next((m for m in milestones if m.name == "mitigated" and m.reached), None)
        mitigated_at = mitigated.at if mitigated is not None else None
        duration = None
        if started is not None and mitigated is not None:
            end = next(e.at for e in self.entries if e.seq == mitigated.seq)
            duration = _seconds(end, started)
        return Impact(
            services=self.state.services,
            worst_severity=self._worst_severity(),
            severity_history=tuple(self._severity_steps()),
            alerts=tuple(AlertLine(**a) for a in alerts.values()),
            started_at=iso(started) if started is not None else None,
            mitigated_at=mitigated_at,
            duration_s=duration,
        )

    def _milestones(self) -> tuple[Milestone, ...]:
        """Declared, first human response, mitigated, resolved — computed the way the state fold computes them."""
        found: dict[str, Entry] = {}
        for e in self.entries:
            p = e.payload
            if isinstance(p, Declared) and "declared" not in found:
                found["declared"] = e
            human = e.actor.type == "human" or (isinstance(p, Observation) and p.alert_status == "acknowledged")
            if human and "first_human_response" not in found:
                found["first_human_response"] = e
            if isinstance(p, StatusChanged):
                if p.status in ("mitigated", "resolved") and "mitigated" not in found:
                    found["mitigated"] = e
                if p.status == "resolved":
                    found["resolved"] = e
                else:
                    found.pop("resolved", None)  # reopened
        labels: dict[MilestoneName, str] = {
            "declared": "Declared",
            "first_human_response": "First human response",
            "mitigated": "Mitigated",
            "resolved": "Resolved",
        }
        out: list[Milestone] = []
        previous: Entry | None = None
        declared = found.get("declared")
        for name, label in labels.items():
            hit = found.get(name)
            if hit is None:
                out.append(Milestone(name=name, label=label, reached=False))
                continue
            out.append(
                Milestone(
                    name=name,
                    label=label,
                    reached=True,
                    seq=hit.seq,
                    at=iso(hit.at),
                    by=hit.actor,
                    since_declared_s=_seconds(hit.at, declared.at) if declared is not None else None,
                    since_previous_s=_seconds(hit.at, previous.at) if previous is not None else None,
                    link=self.link_for(hit),
                )
            )
            previous = hit
        return tuple(out)

    def _timeline(self) -> tuple[TimelineLine, ...]:
        rows: list[tuple[datetime, int, str, int, TimelineLine]] = []
        for e in self.entries:
            rows.append((e.at, 0, e.scope, e.seq, self._line(e, self.thread_permalink)))
        for scope in sorted(self._merged_scopes()):
            log = self.linked_logs[scope]
            for e in report_entries(log.entries):
                if isinstance(e.payload, ScopeLinked) and e.payload.scope == self.main.scope:
                    continue  # the other half of a link this log already shows
                rows.append((e.at, 1, scope, e.seq, self._line(e, "")))
        rows.sort(key=lambda r: (r[0], r[1], r[2], r[3]))
        return tuple(r[4] for r in rows)

    def _line(self, e: Entry, thread_permalink: str) -> TimelineLine:
        return TimelineLine(
            scope=e.scope,
            seq=e.seq,
            at=iso(e.at),
            offset_s=self._offset(e.at),
            origin=_origin(e.actor),
            actor=e.actor,
            kind=e.kind,
            text=e.text,
            link=self.link_for(e, thread_permalink),
            refs=e.refs,
        )

    def _decisions(self) -> tuple[DecisionLine, ...]:
        return tuple(
            DecisionLine(
                seq=e.seq,
                at=iso(e.at),
                by=e.actor,
                origin=_origin(e.actor),
                text=e.payload.text,
                rationale=e.payload.rationale,
                expected_outcome=e.payload.expected_outcome,
                link=self.link_for(e),
            )
            for e in self.entries
            if isinstance(e.payload, Decision)
        )

    def _inferences(self) -> tuple[InferenceLine, ...]:
        verdicts: dict[str, tuple[str, str]] = {}
        for e in self.entries:
            if isinstance(e.payload, SuggestionFeedback):
                verdicts.setdefault(e.payload.suggestion_id, (e.payload.verdict, e.payload.user_id or e.actor.id))
        out: list[InferenceLine] = []
        for e in self.entries:
            p = e.payload
            base = {"seq": e.seq, "at": iso(e.at), "by": e.actor, "origin": _origin(e.actor)}
            if isinstance(p, Hypothesis):
                out.append(
                    InferenceLine(
                        **base, kind="hypothesis", text=p.text, confidence=p.confidence, suspect_scope=p.suspect_scope
                    )
                )
            elif isinstance(p, Suggestion):
                verdict, who = verdicts.get(p.suggestion_id, ("open", ""))
                text = p.text + (f" — {p.rationale}" if p.rationale else "")
                out.append(InferenceLine(**base, kind="suggestion", text=text, verdict=verdict, verdict_by=who))
            elif isinstance(p, Answer):
                out.append(InferenceLine(**base, kind="answer", text=f"Q: {p.question} — A: {p.text}"))
        return tuple(out)

    def _actions(
        self,
    ) -> tuple[tuple[ActionLine, ...], tuple[VerificationLine, ...], tuple[FenceRejection, ...], dict[str, RunLine]]:
        proposals: dict[str, _Proposal] = {}
        runs: dict[str, _Run] = {}
        order: list[tuple[int, str, str]] = []  # (first seq, "proposal"|"run", id)
        verifications: list[VerificationLine] = []
        rejections: list[FenceRejection] = []
        for e in self.entries:
            p = e.payload
            at = iso(e.at)
            if isinstance(p, ProposalMade):
                if p.proposal_id in proposals:
                    continue  # a proposal id is made once; a repeat is ignored like the fold ignores it
                line = {
                    "proposal_id": p.proposal_id,
                    "seq": e.seq,
                    "at": at,
                    "by": e.actor,
                    "origin": _origin(e.actor),
                    "proposer": p.proposer or e.actor.id,
                    "action": p.action,
                    "risk": p.risk,
                    "preview": p.preview,
                    "args_hash": p.args_hash,
                    "params": p.params,
                    "rationale": p.rationale,
                    "safety_conditions": p.safety_conditions,
                    "obligation_id": p.obligation_id,
                    "approvals_required": p.approvals_required,
                    "expires_at": p.expires_at,
                    "compensates_run": p.compensates_run,
                    "inputs_digest": p.inputs_digest,
                    "checks": p.checks,
                    "reason": p.reason,
                    "status": p.status,
                }
                proposals[p.proposal_id] = _Proposal(line)
                order.append((e.seq, "proposal", p.proposal_id))
            elif isinstance(p, Approval):
                prop = proposals.get(p.proposal_id)
                if prop is None:
                    continue
                prop.approvals.append(
                    ApprovalLine(
                        seq=e.seq,
                        at=at,
                        decision=p.decision,
                        approver=p.approver,
                        approver_name=p.approver_name,
                        reason=p.reason,
                    )
                )
                approved = sum(1 for a in prop.approvals if a.decision == "approved")
                if p.decision == "denied":
                    prop.line["status"] = "denied"
                elif approved >= int(prop.line["approvals_required"]) and prop.line["status"] == "waiting_for_approval":
                    prop.line["status"] = "approved"
            elif isinstance(p, ApprovalRefused):
                if p.proposal_id in proposals:
                    proposals[p.proposal_id].refusals.append(
                        RefusalLine(seq=e.seq, at=at, user_id=p.user_id, reason=p.reason)
                    )
            elif isinstance(p, ProposalClosed):
                if p.proposal_id in proposals:
                    proposals[p.proposal_id].line.update(status=p.outcome, closed_reason=p.reason)
            elif isinstance(p, ActionStarted):
                if p.run_id in runs:
                    continue
                line = {
                    "run_id": p.run_id,
                    "action": p.action,
                    "seq": e.seq,
                    "at": at,
                    "started_by": e.actor,
                    "proposal_id": p.proposal_id,
                    "obligation_id": p.obligation_id,
                    "fence": p.fence,
                    "lease_until": p.lease_until,
                    "receipt": p.receipt,
                    "idempotency_key": p.idempotency_key,
                    "proposer": p.proposer,
                    "approvers": p.approvers,
                    "params": p.params,
                    "compensates_run": p.compensates_run,
                }
                runs[p.run_id] = _Run(line)
                prop = proposals.get(p.proposal_id) if p.proposal_id else None
                if prop is not None:
                    prop.runs.append(p.run_id)
                    prop.line["status"] = "ran"
                    if not line["proposer"]:
                        line["proposer"] = prop.line["proposer"]
                    if not line["approvers"]:
                        line["approvers"] = tuple(a.approver for a in prop.approvals if a.decision == "approved")
                else:
                    order.append((e.seq, "run", p.run_id))
            elif isinstance(p, ActionResult):
                run = runs.get(p.run_id)
                if run is None:  # a result for a run this log never saw start: show it as a run of its own
                    run = _Run({"run_id": p.run_id, "action": p.action, "seq": e.seq, "at": at, "started_by": e.actor})
                    runs[p.run_id] = run
                    order.append((e.seq, "run", p.run_id))
                run.results.append(
                    ResultLine(
                        seq=e.seq,
                        at=at,
                        outcome=p.outcome,
                        fence=p.fence,
                        effect_digest=p.effect_digest,
                        error=p.error,
                        reconciled=p.reconciled,
                        by=e.actor,
                    )
                )
            elif isinstance(p, Verification):
                verifications.append(
                    VerificationLine(
                        seq=e.seq,
                        at=at,
                        by=e.actor,
                        origin=_origin(e.actor),
                        outcome=p.outcome,
                        run_id=p.run_id,
                        obligation_id=p.obligation_id,
                        expected=p.expected,
                        observed=p.observed,
                    )
                )
                if p.run_id in runs:
                    runs[p.run_id].verification = p.outcome
            elif isinstance(p, FenceRejected):
                rejections.append(
                    FenceRejection(
                        seq=e.seq,
                        at=at,
                        obligation_id=p.obligation_id,
                        fence=p.fence,
                        current_fence=p.current_fence,
                        holder=p.holder,
                        attempted=p.attempted,
                        reason=p.reason,
                    )
                )
        finished: dict[str, RunLine] = {rid: self._run_line(run) for rid, run in runs.items()}
        actions: list[ActionLine] = []
        for _seq, what, ident in sorted(order):
            if what == "proposal":
                prop = proposals[ident]
                pline = ProposalLine(**prop.line, approvals=tuple(prop.approvals), refusals=tuple(prop.refusals))
                actions.append(
                    ActionLine(
                        action=pline.action,
                        risk=pline.risk,
                        proposal=pline,
                        runs=tuple(finished[r] for r in prop.runs),
                    )
                )
            else:
                rline = finished[ident]
                actions.append(ActionLine(action=rline.action, runs=(rline,)))
        return tuple(actions), tuple(verifications), tuple(rejections), finished

    @staticmethod
    def _run_line(run: _Run) -> RunLine:
        line = dict(run.line)
        if run.results:
            line["outcome"] = run.results[-1].outcome
        digests = [r.effect_digest for r in run.results if r.effect_digest]
        line["effect_digest"] = digests[-1] if digests else ""
        return RunLine(**line, results=tuple(run.results), verification=run.verification)

    def _compensations(self, runs: dict[str, RunLine], actions: tuple[ActionLine, ...]) -> tuple[CompensationLine, ...]:
        recorded: dict[str, tuple[int, EffectCompensated]] = {}
        for e in self.entries:
            if isinstance(e.payload, EffectCompensated):
                recorded.setdefault(e.payload.compensating_run, (e.seq, e.payload))
        out: list[CompensationLine] = []
        seen: set[str] = set()
        for action in actions:
            prop = action.proposal
            comp_runs = [r for r in action.runs if r.compensates_run]
            if prop is not None and prop.compensates_run and not action.runs:
                original = runs.get(prop.compensates_run)
                out.append(
                    CompensationLine(
                        original_run=prop.compensates_run,
                        original_action=original.action if original else "",
                        original_digest=original.effect_digest if original else "",
                        compensating_action=prop.action,
                        proposal_id=prop.proposal_id,
                        status=prop.status,
                        seq=prop.seq,
                        at=prop.at,
                    )
                )
            for run in comp_runs:
                seen.add(run.run_id)
                original = runs.get(run.compensates_run)
                rec = recorded.get(run.run_id)
                out.append(
                    CompensationLine(
                        original_run=run.compensates_run,
                        original_action=original.action if original else "",
                        original_digest=(rec[1].original_digest if rec else "")
                        or (original.effect_digest if original else ""),
                        compensating_run=run.run_id,
                        compensating_action=run.action,
                        proposal_id=run.proposal_id,
                        status="compensated" if rec else run.outcome,
                        compensating_digest=(rec[1].compensating_digest if rec else "") or run.effect_digest,
                        recorded_seq=rec[0] if rec else None,
                        seq=run.seq,
                        at=run.at,
                    )
                )
        for comp_run, (seq, p) in recorded.items():
            if comp_run in seen:
                continue
            entry = next(e for e in self.entries if e.seq == seq)
            original = runs.get(p.original_run)
            comp = runs.get(comp_run)
            out.append(
                CompensationLine(
                    original_run=p.original_run,
                    original_action=original.action if original else "",
                    original_digest=p.original_digest,
                    compensating_run=comp_run,
                    compensating_action=comp.action if comp else "",
                    status="compensated",
                    compensating_digest=p.compensating_digest,
                    recorded_seq=seq,
                    seq=seq,
                    at=iso(entry.at),
                )
            )
        out.sort(key=lambda c: (c.seq, c.compensating_run))
        return tuple(out)

    def _open_questions(
        self, runs: dict[str, RunLine], verifications: tuple[VerificationLine, ...]
    ) -> tuple[OpenQuestion, ...]:
        """Effects nobody knows the outcome of, and verifications that could not tell; each until settled."""
        compensated_by: dict[str, list[str]] = {}
        for run in runs.values():
            if run.compensates_run:
                compensated_by.setdefault(run.compensates_run, []).append(run.run_id)
        out: list[OpenQuestion] = []
        for run in sorted(runs.values(), key=lambda r: r.seq):
            note = ""
            if run.run_id in compensated_by:
                note = "a compensation was attempted: " + ", ".join(compensated_by[run.run_id])
            common = {"run_id": run.run_id, "action": run.action, "idempotency_key": run.idempotency_key, "note": note}
            if not run.results:
                out.append(
                    OpenQuestion(
                        kind="no_result",
                        seq=run.seq,
                        at=run.at,
                        fence=run.fence,
                        text=f"Run {run.run_id} ({run.action}) started under fence {run.fence}; no result was recorded.",
                        **common,
                    )
                )
                continue
            last = run.results[-1]
            if last.outcome == "uncertain":
                out.append(
                    OpenQuestion(
                        kind="uncertain_effect",
                        seq=last.seq,
                        at=last.at,
                        fence=last.fence,
                        text=f"Run {run.run_id} ({run.action}): the outcome is unknown"
                        + (f" ({last.error})" if last.error else "")
                        + "; not reconciled yet.",
                        **common,
                    )
                )
            elif last.outcome == "abandon_uncertain":
                out.append(
                    OpenQuestion(
                        kind="abandoned_uncertain",
                        seq=last.seq,
                        at=last.at,
                        fence=last.fence,
                        text=f"Run {run.run_id} ({run.action}) was abandoned as uncertain: whether it took effect is "
                        "unknown" + (f" ({last.error})" if last.error else "") + ".",
                        **common,
                    )
                )
        last_by_target: dict[str, VerificationLine] = {}
        for v in verifications:
            last_by_target[v.run_id or v.obligation_id or f"#{v.seq}"] = v
        for v in sorted(last_by_target.values(), key=lambda v: v.seq):
            if v.outcome == "inconclusive":
                target = f"run {v.run_id}" if v.run_id else (f"obligation {v.obligation_id}" if v.obligation_id else "")
                out.append(
                    OpenQuestion(
                        kind="verification_inconclusive",
                        seq=v.seq,
                        at=v.at,
                        run_id=v.run_id,
                        text=f"Verification of {target or 'an outcome'} was inconclusive"
                        + (f": expected {v.expected}" if v.expected else "")
                        + (f"; observed {v.observed}" if v.observed else "")
                        + ".",
                    )
                )
        out.sort(key=lambda q: q.seq)
        return tuple(out)

    def _obligations(self) -> list[ObligationLine]:
        lines: dict[str, dict[str, Any]] = {}
        for e in self.entries:
            p = e.payload
            if isinstance(p, ObligationOpened):
                lines[p.obligation_id] = {
                    "obligation_id": p.obligation_id,
                    "text": p.text,
                    "purpose": p.purpose,
                    "status": "open",
                    "seq": e.seq,
                    "at": iso(e.at),
                    "by": e.actor,
                    "conditions": p.conditions,
                    "action": p.action,
                    "expected_outcome": p.expected_outcome,
                    "due_at": p.due_at,
                    "run_id": p.run_id,
                }
                continue
            ob_id = getattr(p, "obligation_id", None)
            if not isinstance(ob_id, str) or ob_id not in lines:
                continue
            ob = lines[ob_id]
            if isinstance(p, ObligationClaimed):
                ob.update(status="claimed", holder=p.holder, fence=p.fence, lease_until=p.lease_until)
            elif isinstance(p, ObligationReleased | ObligationExpired):
                if ob.get("fence", 0) == p.fence and ob["status"] == "claimed":
                    ob.update(status="open", holder="", lease_until="")
            elif isinstance(p, ObligationFulfilled):
                ob.update(status="fulfilled", closed_seq=e.seq, note=p.note, holder="", lease_until="")
                if p.run_id:
                    ob["run_id"] = p.run_id
            elif isinstance(p, ObligationCancelled):
                ob.update(status="cancelled", closed_seq=e.seq, note=p.reason, holder="", lease_until="")
        return [ObligationLine(**ob) for ob in lines.values()]

    def _participants(self) -> tuple[Participant, ...]:
        people: dict[tuple[str, str], _Participant] = {}
        for e in self.entries:
            key = (e.actor.type, e.actor.id)
            who = people.get(key)
            if who is None:
                who = people[key] = _Participant(actor=e.actor, first_seq=e.seq, first_at=iso(e.at))
            who.actor = e.actor if e.actor.name else who.actor
            who.entries += 1
            who.last_at = iso(e.at)
        for e in self.entries:
            p = e.payload
            if not isinstance(p, RoleAssigned):
                continue
            key = ("human", p.user_id)
            who = people.get(key)
            if who is None:
                who = people[key] = _Participant(actor=Actor.human(p.user_id, p.user_name), first_seq=10**12 + e.seq)
            if p.role not in who.roles:
                who.roles.append(p.role)
        rank = {"human": 0, "agent": 1, "system": 2}
        ordered = sorted(people.values(), key=lambda w: (rank[w.actor.type], w.first_seq, w.actor.id))
        return tuple(
            Participant(actor=w.actor, roles=tuple(w.roles), entries=w.entries, first_at=w.first_at, last_at=w.last_at)
            for w in ordered
        )

    def _turns(self) -> tuple[TurnLine, ...]:
        out: list[TurnLine] = []
        for e in self.entries:
            p = e.payload
            if isinstance(p, AgentTurn):
                out.append(
                    TurnLine(
                        seq=e.seq,
                        at=iso(e.at),
                        reasoner=p.reasoner,
                        model=p.model,
                        view=p.view,
                        trigger=p.trigger,
                        seq_from=p.seq_from,
                        seq_to=p.seq_to,
                        view_bytes=p.view_bytes,
                        view_tokens=p.view_tokens,
                        tool_calls=len(p.tool_calls),
                        input_tokens=p.input_tokens,
                        output_tokens=p.output_tokens,
                        cache_read_input_tokens=p.cache_read_input_tokens,
                        cache_creation_input_tokens=p.cache_creation_input_tokens,
                        cost_usd=p.cost_usd,
                        duration_ms=p.duration_ms,
                        outcome=p.outcome,
                        error=p.error,
                    )
                )
        return tuple(out)

    def _totals(self) -> TurnTotals:
        turns = self._turns()
        tokens = {
            k: sum(getattr(t, k) for t in turns)
            for k in ("input_tokens", "output_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")
        }
        return TurnTotals(
            turns=len(turns),
            failed=sum(1 for t in turns if t.outcome == "failed"),
            total_tokens=sum(tokens.values()),
            cost_usd=round(sum(t.cost_usd for t in turns), 6),
            duration_ms=sum(t.duration_ms for t in turns),
            **tokens,
        )

    def _links(self) -> dict[str, tuple[Entry, ScopeLinked]]:
        links: dict[str, tuple[Entry, ScopeLinked]] = {}
        for e in self.entries:
            if isinstance(e.payload, ScopeLinked) and e.payload.scope not in links:
                links[e.payload.scope] = (e, e.payload)
        return links

    def _merged_scopes(self) -> list[str]:
        return [
            scope
            for scope in self._links()
            if scope in self.linked_logs and self.linked_logs[scope].found and scope.split("/", 1)[0] in MERGED_KINDS
        ]

    def _linked(self) -> tuple[LinkedScope, ...]:
        merged = set(self._merged_scopes())
        out: list[LinkedScope] = []
        for scope, (e, p) in self._links().items():
            base: dict[str, Any] = {
                "scope": scope,
                "relation": p.relation,
                "reason": p.reason,
                "linked_seq": e.seq,
                "linked_at": iso(e.at),
            }
            log = self.linked_logs.get(scope)
            if log is None or not log.found:
                out.append(LinkedScope(**base, found=False))
                continue
            entries = report_entries(log.entries)
            st = fold_all(scope, entries)
            declared = next((x for x in entries if isinstance(x.payload, Declared)), None)
            out.append(
                LinkedScope(
                    **base,
                    kind=st.kind,
                    title=st.title,
                    status=st.status,
                    severity=st.severity,
                    services=st.services,
                    declared_at=iso(declared.at) if declared is not None else None,
                    resolved_at=st.resolved_at or None,
                    merged_into_timeline=scope in merged,
                )
            )
        return tuple(out)

    def _integrity(self) -> tuple[Integrity, ...]:
        out = [_integrity_of(self.main.scope, self.entries, self.main.verify)]
        for scope in self._links():
            log = self.linked_logs.get(scope)
            if log is not None and log.found:
                out.append(_integrity_of(scope, report_entries(log.entries), log.verify))
        return tuple(out)


def _integrity_of(scope: str, entries: Sequence[Entry], verify: VerifyReport | None) -> Integrity:
    last = entries[-1] if entries else None
    common: dict[str, Any] = {
        "scope": scope,
        "last_seq": last.seq if last is not None else 0,
        "head_hash": last.hash if last is not None else "",
    }
    if verify is None:
        return Integrity(**common, checked=False, ok=False, reason="not checked")
    return Integrity(
        **common,
        checked=True,
        ok=verify.ok,
        first_bad_seq=verify.first_bad_seq,
        reason="" if verify.ok else verify.reason,
    )
