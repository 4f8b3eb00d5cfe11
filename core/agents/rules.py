"""The default reasoner: deterministic rules over task-scoped views. Works with no API key.

Each rule first checks the stored state cheaply, and only then reads the one view it needs:

1. investigation — the investigator (core/agents/investigator.py) ranks the causes of the firing alerts from the
   outside read tools (Prometheus, Alertmanager, the service catalog), the changes and past incidents; each is a
   hypothesis with its subject, rank, evidence-derived confidence and refs to the observations it rests on. When
   the top one is a change: an obligation to undo it *only if the recorded safety conditions hold*, once per
   change, with the catalog action that undoes its kind (a config push: ``revert_config``; a feature flag:
   ``flag_off``; a deploy, or a kind whose action the catalog lacks: ``rollback_deploy``) — unless that action
   already applied in a related incident (the view's ``related_actions``): then a finding citing the run instead. Nothing standing out is said, with what
   was checked. Without outside sources, a change linked to an alerting service is the evidence.
2. action — an open rollback obligation with an action, never proposed before → a proposal through the
   ``Proposer`` port (it parks for approval; nothing runs here). Never one whose action already applied on the
   same target in a related incident (the views' ``related_actions``): a finding citing that run instead.
3. verification — an open "verification" obligation: alerts resolved after the run's result → verified; still
   firing after the grace period (or past the obligation's ``due_at``) → failed; otherwise inconclusive (left
   open, looked at again when the grace period ends).
4. resolve — every alert resolved and the incident still open → suggest resolving, once per all-clear.
5. nudge — no human activity for ``idle_nudge_minutes`` → a nudge, once per quiet period.
6. status — a SEV1/SEV2 incident with no public update (a proposal of ``status_action``) for
   ``status_update_after_minutes`` → a proposal of ``status_action``, if that action is configured.

Action names come from ``[agents.rules]`` in decklog.toml (``rollback_action``, ``config_action``, ``flag_action``,
``status_action``), never from constants here. A suspect a person ruled out (``finding_answer``) is never suggested again unless new evidence (an
alert first seen after the ruling) arrives.

Asked a question, it answers from the read tools where a rule can (core/agents/ask_tools.py: who owns a service,
what it depends on, its error rate now, what was checked), else from the investigation (or joiner) view: what
changed, what is firing, what is suspected, what is open. Anything else: "I can't answer that without a model".
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from decklog.core.agents.ask_tools import CANNOT, answer_from_tools
from decklog.core.agents.investigator import Finding, Investigator
from decklog.core.agents.ports import ActionInfo
from decklog.core.agents.reasoner import (
    HypothesisIntent,
    ObligationIntent,
    ProposalIntent,
    SuggestionIntent,
    TurnInput,
    TurnOutput,
    VerificationIntent,
)
from decklog.core.clock import parse_iso
from decklog.core.obligations import new_obligation_id
from decklog.core.views import applied_in, finding_text

DEFAULT_ROLLBACK_ACTION = "rollback_deploy"  # the defaults of [agents.rules] (bot/config.py RulesConfig)
DEFAULT_UNDO_ACTIONS = {"config": "revert_config", "flag": "flag_off"}  # kind of change → the action undoing it
DEFAULT_STATUS_ACTION = "status_page_update"
DEFAULT_STATUS_UPDATE_AFTER_MINUTES = 30.0
PUBLIC_STATUS = {"investigating": "investigating", "identified": "identified", "mitigated": "monitoring"}
_CHANGE_WORDS = re.compile(r"\b(chang|deploy|releas|commit|rollout|roll out|ship|push|version)", re.I)
_SUMMARY_WORDS = re.compile(r"\b(summar|catch me up|status|what.?s (going on|happening)|overview|joined)", re.I)


def fit_params(params: Mapping[str, Any], info: ActionInfo | None) -> dict[str, Any]:
    """``params`` as ``info``'s action takes them: an obligation keeps the whole context of what it undoes
    (service, change, flag), and the proposal carries only the parameters the catalog declares for the action."""
    if info is None or not info.params_schema:
        return dict(params)
    return {k: v for k, v in params.items() if k in info.params_schema}


def _undo_text(finding: Finding) -> str:
    """``roll back change/x``, ``revert the config change change/x``, ``turn the flag F off (change/x)``."""
    if finding.change_kind == "config":
        return f"revert the config change {finding.change}"
    if finding.change_kind == "flag":
        return f"turn the flag {finding.flag} off ({finding.change})" if finding.flag else f"undo {finding.change}"
    return f"roll back {finding.change}"


def _when(text: str) -> datetime | None:
    try:
        return parse_iso(text) if text else None
    except ValueError:
        return None


class RuleBasedReasoner:
    name = "rules"
    model = ""
    wants_wakes = True

    def __init__(
        self,
        *,
        idle_nudge_minutes: float = 20.0,
        verification_grace_s: float = 300.0,
        rollback_action: str = DEFAULT_ROLLBACK_ACTION,
        undo_actions: Mapping[str, str] | None = None,
        status_action: str = DEFAULT_STATUS_ACTION,
        status_update_after_minutes: float = DEFAULT_STATUS_UPDATE_AFTER_MINUTES,
    ) -> None:
        self.idle_nudge_s = idle_nudge_minutes * 60
        self.verification_grace_s = verification_grace_s
        self.rollback_action = rollback_action
        self.undo_actions = dict(DEFAULT_UNDO_ACTIONS if undo_actions is None else undo_actions)
        self.status_action = status_action
        self.status_update_after_s = status_update_after_minutes * 60
        self.investigator = Investigator()

    async def run(self, turn: TurnInput) -> TurnOutput:
        out = TurnOutput()
        if turn.trigger == "ask":
            out.answer = await self.answer(turn)
            return out
        if turn.state.kind != "incident" or not turn.state.is_open:
            return out
        await self.investigate(turn, out)
        await self.act(turn, out)
        await self.verify(turn, out)
        await self.suggest_resolve(turn, out)
        await self.nudge(turn, out)
        await self.status_update(turn, out)
        return out

    # -- 1. investigation ------------------------------------------------------------------------------------

    async def investigate(self, turn: TurnInput, out: TurnOutput) -> None:
        """Rank the causes of the firing alerts (core/agents/investigator.py) and record them as hypotheses; a rollback
        obligation for the top one when it is a change. With outside sources the checks run when an alert arrived
        since the last turn; without, a change linked to an alerting service is the evidence there is."""
        s = turn.state
        if not s.firing_alerts:
            return
        fresh = any(a.first_seq >= turn.seq_from for a in s.firing_alerts)
        evidence = turn.evidence if fresh else None
        if evidence is None and not any(x.startswith("change/") for x in s.linked):
            return
        view = await turn.views.view("investigation")
        suspects = set(view.sections.get("suspects", []))
        suspects |= {str(o.params.get("change", "")) for o in s.obligations.values() if o.purpose == "rollback"}
        for ruled in view.sections.get("ruled_out", []):  # a person ruled it out: only new evidence reopens it
            (suspects.discard if ruled.get("new_evidence") else suspects.add)(ruled.get("suspect_scope", ""))
        linked = [c for c in view.sections.get("linked_changes", []) if not self._after_incident(c, turn)]
        report = await self.investigator.investigate(turn, evidence, linked=linked)
        if report.nothing and evidence is not None:
            evidence.conclude("investigator", report.nothing)
            return
        for finding in report.findings:
            if finding.change and finding.change in suspects:
                continue  # hypothesised before (or ruled out without new evidence): not again
            out.hypotheses.append(
                HypothesisIntent(
                    text=finding.text,
                    confidence=finding.confidence,
                    suspect_scope=finding.change,
                    refs=finding.refs,
                    subject=finding.subject,
                    rank=finding.rank,
                    observations=finding.observations,
                )
            )
            if not finding.change or finding.rank != 1:
                continue
            suspects.add(finding.change)
            action = self.undo_action(turn, finding.change_kind)
            if not action:
                continue
            params = {"service": finding.service, "change": finding.change}
            if finding.flag:
                params["flag"] = finding.flag
            info = turn.action_info(action)
            if done := applied_in(view.sections.get("related_actions", []), action, fit_params(params, info)):
                out.suggestions.append(SuggestionIntent(finding_text(done), rationale=done["ref"], refs=finding.refs))
                continue  # undone in a related incident already: say so, do not open it again
            out.obligations.append(
                ObligationIntent(
                    text=f"{_undo_text(finding)} only if the recorded safety conditions hold",
                    purpose="rollback",
                    conditions=info.safety_conditions if info is not None else (),
                    action=action,
                    params=params,
                    expected_outcome=f"the {finding.service} alerts resolve after {action}",
                    refs=finding.refs,
                    obligation_id=new_obligation_id(),
                    hypothesis_index=len(out.hypotheses) - 1,
                )
            )

    def undo_action(self, turn: TurnInput, kind: str) -> str:
        """The catalog action that undoes a change of ``kind``: the one ``[agents.rules]`` names for that kind
        (``config_action``, ``flag_action``) when the catalog has it, else ``rollback_action`` ("" = none)."""
        action = self.undo_actions.get(kind, "")
        if action and turn.may_propose(action):
            return action
        return self.rollback_action

    @staticmethod
    def _after_incident(change: dict[str, Any], turn: TurnInput) -> bool:
        """A change that landed after the incident began is a candidate fix, not a suspect: never roll it back."""
        changed_at = (
            _when(change.get("deployed_at", "")) or _when(change.get("recorded_at", "")) or _when(change.get("at", ""))
        )
        declared_at = _when(turn.state.created_at)
        return bool(changed_at and declared_at and changed_at > declared_at)

    # -- 2. action -------------------------------------------------------------------------------------------

    async def act(self, turn: TurnInput, out: TurnOutput) -> None:
        s = turn.state
        for ob in sorted(s.obligations.values(), key=lambda o: o.opened_seq):
            if ob.purpose != "rollback" or not ob.action or ob.status != "open":
                continue
            if any(p.obligation_id == ob.id for p in s.proposals.values()):
                continue
            if any(r.obligation_id == ob.id for r in s.runs.values()) or not turn.may_propose(ob.action):
                continue
            view = await turn.views.view("action", obligation_id=ob.id)
            history = view.sections.get("history", [])
            proposed = view.sections.get("proposed_in_turns", [])
            if proposed or any(h.get("kind") in ("proposal", "action_started", "suggestion") for h in history):
                continue  # proposed once already (approved, denied or merely suggested): humans decide now
            if done := applied_in(
                view.sections.get("related_actions", []), ob.action, fit_params(ob.params, turn.action_info(ob.action))
            ):
                refs = (ob.opened_seq,) if ob.opened_seq else ()  # once: the action view's history shows it
                out.suggestions.append(SuggestionIntent(finding_text(done), rationale=done["ref"], refs=refs))
                continue
            evidence = view.sections.get("opened", {}).get("refs", [])
            why = f"obligation {ob.id}: {ob.text}"
            if evidence:
                why += f" (evidence: {', '.join(f'#{r}' for r in evidence)})"
            out.proposals.append(
                ProposalIntent(ob.action, fit_params(ob.params, turn.action_info(ob.action)), why, ob.id)
            )

    # -- 3. verification -------------------------------------------------------------------------------------

    async def verify(self, turn: TurnInput, out: TurnOutput) -> None:
        s = turn.state
        for ob in sorted(s.obligations.values(), key=lambda o: o.opened_seq):
            if ob.purpose != "verification" or ob.status != "open":
                continue
            view = await turn.views.view("verification", obligation_id=ob.id)
            result = view.sections.get("result") or {}
            if not result:
                continue  # the result will arrive as an entry, and that warrants a turn
            expected = ob.expected_outcome or "the alerts resolve"
            run = ob.run_id or ""
            refs: tuple[int, ...] = (int(result["seq"]),)
            if result.get("outcome") != "applied":
                observed = f"run {run} ended {result.get('outcome')}; its effect cannot have happened"
                out.verifications.append(VerificationIntent(ob.id, "failed", run, expected, observed, refs))
                continue
            firing = view.sections.get("firing_alerts", [])
            resolved = view.sections.get("resolved_alerts", [])
            result_at = _when(result.get("at", "")) or turn.now
            elapsed = (turn.now - result_at).total_seconds()
            due = _when(ob.due_at)  # the desk may say by when the effect must show; else the grace period
            left = (due - turn.now).total_seconds() if due else self.verification_grace_s - elapsed
            if resolved and not firing:
                after = [a for a in resolved if a.get("last_seq", 0) > result["seq"]]
                names = ", ".join(a.get("title", "") for a in (after or resolved)[:3])
                when = "after" if after else "by the time of"
                observed = f"all {len(resolved)} alert(s) resolved {when} run {run}: {names}"
                refs += tuple(a["last_seq"] for a in after[:5])
                out.verifications.append(VerificationIntent(ob.id, "verified", run, expected, observed, refs))
            elif firing and left <= 0:
                names = ", ".join(a.get("title", "") for a in firing[:3])
                observed = f"still firing {elapsed:.0f}s after run {run}: {names}"
                out.verifications.append(VerificationIntent(ob.id, "failed", run, expected, observed, refs))
            elif firing:
                out.wake(left)  # inconclusive: leave it open, look again when the grace period (or due time) ends

    # -- 4. resolve ------------------------------------------------------------------------------------------

    async def suggest_resolve(self, turn: TurnInput, out: TurnOutput) -> None:
        s = turn.state
        if not s.alerts or s.firing_alerts or "resolve" in s.suggestion_actions.values():
            return
        if any(sg.action == "resolve" for sg in out.suggestions):
            return
        last_alert = max(a.last_seq for a in s.alerts.values())
        view = await turn.views.view("triage")
        if any(i.get("action") == "resolve" and i.get("seq", 0) > last_alert for i in view.sections["suggestions"]):
            return  # suggested once for this all-clear (and answered)
        n = len(s.alerts)
        out.suggestions.append(
            SuggestionIntent(
                text=f"All {n} alert{'s' if n != 1 else ''} have resolved. Resolve the incident?",
                action="resolve",
                rationale=f"every alert of this incident is resolved (the last at #{last_alert})",
                refs=(last_alert,),
            )
        )

    # -- 5. nudge --------------------------------------------------------------------------------------------

    async def nudge(self, turn: TurnInput, out: TurnOutput) -> None:
        s = turn.state
        if s.last_human_seq:
            view = await turn.views.view("triage")
            quiet_since = _when(view.sections["activity"].get("last_human_at", "")) or turn.now
        else:
            view = None
            quiet_since = _when(s.created_at) or turn.now
        quiet = (turn.now - quiet_since).total_seconds()
        if quiet < self.idle_nudge_s:
            out.wake(self.idle_nudge_s - quiet)
            return
        view = view or await turn.views.view("triage")
        if any(
            str(i.get("id", "")).startswith("sg-nudge-") and i["seq"] > s.last_human_seq
            for i in view.sections["suggestions"]
        ):
            return  # nudged once in this quiet period
        minutes = quiet / 60
        out.suggestions.append(
            SuggestionIntent(
                text=(
                    f"No one has posted here for {minutes:.0f} minutes. Post an update for the people following "
                    "along, or resolve the incident if it is over."
                ),
                rationale=f"no human activity since #{s.last_human_seq}"
                if s.last_human_seq
                else "no human activity yet",
                suggestion_id=f"sg-nudge-{s.last_human_seq}-{s.version}",
            )
        )

    # -- 6. status page --------------------------------------------------------------------------------------

    async def status_update(self, turn: TurnInput, out: TurnOutput) -> None:
        s = turn.state
        if s.severity not in (1, 2) or not self.status_action or turn.action_info(self.status_action) is None:
            return
        if any(p.action == self.status_action for p in s.proposals.values()):
            return  # one is waiting already
        view = await turn.views.view("triage")
        last = _when(view.sections.get("last_proposed", {}).get(self.status_action, "")) or _when(s.created_at)
        quiet = (turn.now - last).total_seconds() if last else self.status_update_after_s
        if quiet < self.status_update_after_s:
            out.wake(self.status_update_after_s - quiet)
            return
        status = PUBLIC_STATUS.get(s.status, "investigating")
        services = ", ".join(s.services) or "some services"
        params = {"status": status, "message": f"We are {status} an issue affecting {services}: {s.title}"[:2000]}
        why = f"SEV{s.severity} with no public update for {quiet / 60:.0f} min"
        out.proposals.append(ProposalIntent(self.status_action, params, why, ""))

    # -- asking ----------------------------------------------------------------------------------------------

    async def answer(self, turn: TurnInput) -> str:
        question = turn.question
        from_tools = await answer_from_tools(turn)
        if from_tools is not None:
            return from_tools
        if _SUMMARY_WORDS.search(question) and not _CHANGE_WORDS.search(question):
            return await self._summary(turn)
        if not _CHANGE_WORDS.search(question):
            return CANNOT  # an honest "no" rather than a summary that does not answer
        view = await turn.views.view("investigation")
        sec = view.sections
        lines: list[str] = []
        if _CHANGE_WORDS.search(question):
            changes = sec.get("linked_changes", [])
            for c in changes[:4]:
                commits = c.get("commits", [])
                detail = (
                    f" — {len(commits)} commit(s): "
                    + "; ".join(
                        f"{x.get('message', '')}"
                        + (f" ({', '.join(x.get('paths', [])[:2])})" if x.get("paths") else "")
                        for x in commits[:2]
                    )
                    if commits
                    else ""
                )
                lines.append(
                    f"• {c.get('scope')}: {c.get('title', '')} at {c.get('at', '?')} on {', '.join(c.get('services', []))}{detail}"
                )
            for item in sec.get("context", []):
                if item.get("about") == "recent_changes":
                    for c in item.get("items", [])[:4]:
                        if not any(c.get("scope") == x.get("scope") for x in changes):
                            lines.append(
                                f"• {c.get('scope')}: {c.get('title', '')} ({c.get('minutes_before_incident')} min before the incident, not linked)"
                            )
            if not lines:
                services = ", ".join(turn.state.services) or "its services"
                lines.append(f"No change to {services} is linked to this incident or recorded in the change window.")
            else:
                lines.insert(0, "Changes linked to this incident:")
        lines.extend(self._situation(turn, sec))
        return "\n".join(lines)

    async def _summary(self, turn: TurnInput) -> str:
        view = await turn.views.view("joiner")
        sec = view.sections
        head = sec["scope"]
        lines = [
            f"{head.get('title')} — {head.get('status')}, SEV{head.get('severity') or '?'}, "
            f"services {', '.join(head.get('services', [])) or 'unknown'}."
        ]
        roles = sec.get("roles") or {}
        if roles:
            lines.append("Roles: " + ", ".join(f"{r} {u}" for r, u in roles.items()))
        decisions = sec.get("last_decisions", [])
        if decisions:
            lines.append(f"Last decision (#{decisions[-1]['seq']}): {decisions[-1]['text']}")
        lines.extend(self._situation(turn, {**sec, "hypotheses": sec.get("hypotheses", [])}))
        return "\n".join(lines)

    @staticmethod
    def _situation(turn: TurnInput, sec: dict[str, Any]) -> list[str]:
        s = turn.state
        lines = []
        firing = s.firing_alerts
        if firing:
            lines.append(
                f"Firing: {', '.join(a.title for a in firing[:3])}"
                + (f" (+{len(firing) - 3} more)" if len(firing) > 3 else "")
            )
        elif s.alerts:
            lines.append(f"All {len(s.alerts)} alert(s) have resolved.")
        hyps = sec.get("hypotheses", [])
        if hyps:
            lines.append(f"Latest hypothesis (#{hyps[-1]['seq']}): {hyps[-1]['text']}")
        if s.obligations:
            lines.append("Open: " + "; ".join(o.text for o in list(s.obligations.values())[:3]))
        return lines
