"""The Markdown rendering of a ``Report``: readable as plain text, and as rendered Markdown (tables, links).

Recorded text is escaped (it may contain Markdown or HTML written by anyone who can append); only http(s)
URLs become links.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from core.reports import text as t
from core.reports.model import (
    ActionLine,
    ObligationLine,
    Report,
    RunLine,
)

_SPECIAL = re.compile(r"([\\`*_\[\]<>|~])")


def esc(value: object) -> str:
    """Recorded text as inert Markdown on one line."""
    return _SPECIAL.sub(r"\\\1", " ".join(str(value).split()))


def code(value: object) -> str:
    text = " ".join(str(value).split()).replace("`", "'")
    return f"`{text}`" if text else ""


def link(label: str, url: str) -> str:
    if not url:
        return label
    safe = url.replace(" ", "%20").replace("(", "%28").replace(")", "%29")
    return f"[{label}]({safe})"


def _table(header: Iterable[str], rows: Iterable[Iterable[str]]) -> list[str]:
    head = list(header)
    out = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    out.extend("| " + " | ".join(cell or " " for cell in row) + " |" for row in rows)
    return out


def render_markdown(r: Report) -> str:
    out: list[str] = []
    s = r.summary
    main = r.integrity[0]
    head = [code(r.scope), t.severity(s.severity), esc(s.status)]
    if s.thread_permalink:
        head.append(link("Slack thread", s.thread_permalink))
    chain = "verifies" if main.checked and main.ok else ("was not checked" if not main.checked else "DOES NOT verify")
    out += [
        f"# Post-incident report: {esc(s.title)}",
        "",
        " · ".join(head),
        "",
        f"Derived from the scope's log, entries 1–{main.last_seq} (head {code(t.short(main.head_hash, 16))}); "
        f"its hash chain {chain}. Each line says who recorded it: **human** (people), **agent** (inferred by an "
        "agent — a claim to check) or **system** (decklog and its integrations).",
    ]
    out += _summary(r)
    out += _impact(r)
    out += _milestones(r)
    out += _timeline(r)
    out += _decisions(r)
    out += _inferences(r)
    out += _actions(r)
    out += _compensations(r)
    out += _open_questions(r)
    out += _obligations(r)
    out += _participants(r)
    out += _turns(r)
    out += _linked(r)
    out += _integrity(r)
    return "\n".join(out).rstrip("\n") + "\n"


def _section(title: str) -> list[str]:
    return ["", f"## {title}", ""]


def _summary(r: Report) -> list[str]:
    s = r.summary
    sev = t.severity(s.severity)
    if s.worst_severity is not None and s.worst_severity != s.severity:
        sev += f" (worst: {t.severity(s.worst_severity)})"
    declared = t.when(s.declared_at) + (f" by {esc(t.who(s.declared_by))}" if s.declared_by else "")
    if s.declared_via:
        declared += f" (via {esc(s.declared_via)})"
    rows = [
        ("Scope", code(s.scope)),
        ("Title", esc(s.title)),
        ("Status", esc(s.status)),
        ("Severity", sev),
        ("Services", esc(", ".join(s.services)) or "—"),
        ("Declared", declared),
        ("Resolved", t.when(s.resolved_at) if s.resolved_at else "not yet"),
        ("Duration", t.duration(s.duration_s) if s.duration_s is not None else "ongoing"),
    ]
    out = _section("Summary") + _table(["", ""], rows)
    if s.description:
        out += ["", f"**Description:** {esc(s.description)}"]
    if s.resolution:
        out += ["", f"**Resolution:** {esc(s.resolution)}"]
    for title, items in (("Goals", s.goals), ("Constraints", s.constraints)):
        if items:
            out += ["", f"**{title}**", ""] + [f"- {esc(i)}" for i in items]
    return out


def _impact(r: Report) -> list[str]:
    i = r.impact
    out = _section("Impact")
    out.append(f"- **Services:** {esc(', '.join(i.services)) or 'none recorded'}")
    if i.severity_history:
        steps = " → ".join(
            f"{t.severity(s.severity)} at {t.clock(s.at)} by {esc(s.by.label())}" for s in i.severity_history
        )
        out.append(f"- **Severity:** {steps}")
    else:
        out.append("- **Severity:** never set")
    if i.started_at:
        end = f"mitigated at {t.when(i.mitigated_at)}" if i.mitigated_at else "not mitigated yet"
        span = f" ({t.duration(i.duration_s)})" if i.duration_s is not None else ""
        out.append(f"- **Impact window:** from {t.when(i.started_at)} to {end}{span}")
    if i.alerts:
        out.append("")
        out += _table(
            ["Alert", "Service", "Source", "Status", "First", "Last", "Notifications"],
            (
                [
                    esc(a.title),
                    esc(a.service) or "—",
                    esc(a.source) or "—",
                    esc(a.status),
                    t.when(a.first_at),
                    t.when(a.last_at),
                    str(a.notifications),
                ]
                for a in i.alerts
            ),
        )
    return out


def _milestones(r: Report) -> list[str]:
    rows = []
    for m in r.milestones:
        if not m.reached:
            rows.append([m.label, "not reached", "—", "—", "—"])
            continue
        when = link(t.when(m.at), m.link)
        rows.append(
            [
                m.label,
                when,
                t.duration(m.since_declared_s),
                t.duration(m.since_previous_s),
                esc(t.who(m.by)) + f" (#{m.seq})",
            ]
        )
    return _section("Milestones") + _table(["Milestone", "Time", "Since declared", "Since previous", "By"], rows)


def _timeline(r: Report) -> list[str]:
    out = _section("Timeline")
    if not r.timeline:
        return [*out, "No entries."]
    current_day = ""
    for line in r.timeline:
        if t.day(line.at) != current_day:
            if current_day:
                out.append("")
            current_day = t.day(line.at)
            out += [f"### {current_day}", ""]
        where = f"#{line.seq}" if line.scope == r.scope else f"{line.scope} #{line.seq}"
        out.append(
            f"- `{t.clock(line.at)}` {t.offset(line.offset_s)} · **{line.origin}** {esc(line.actor.label())} — "
            f"{esc(line.text)} · {link(esc(where), line.link)}"
        )
    return out


def _decisions(r: Report) -> list[str]:
    out = _section("Decisions")
    if not r.decisions:
        return [*out, "No decisions were recorded."]
    for n, d in enumerate(r.decisions, 1):
        out.append(
            f"{n}. **{esc(d.text)}** — **{d.origin}** {esc(d.by.label())}, {t.when(d.at)} · {link(f'#{d.seq}', d.link)}"
        )
        if d.rationale:
            out.append(f"   - Rationale: {esc(d.rationale)}")
        if d.expected_outcome:
            out.append(f"   - Expected outcome: {esc(d.expected_outcome)}")
    return out


def _inferences(r: Report) -> list[str]:
    out = _section("Hypotheses, suggestions and answers")
    if not r.inferences:
        return [*out, "None were recorded."]
    for i in r.inferences:
        extra = []
        if i.confidence is not None:
            extra.append(f"confidence {i.confidence:.0%}")
        if i.suspect_scope:
            extra.append(f"suspects {code(i.suspect_scope)}")
        if i.kind == "suggestion":
            extra.append(
                "open" if i.verdict == "open" else f"{i.verdict}" + (f" by {esc(i.verdict_by)}" if i.verdict_by else "")
            )
        note = f" ({'; '.join(extra)})" if extra else ""
        out.append(f"- **{i.origin}** {esc(i.by.label())} · {i.kind}{note}: {esc(i.text)} · #{i.seq}")
    return out


def _run_lines(run: RunLine, who: dict[str, str]) -> list[str]:
    out = [
        f"- **Run {code(run.run_id)}** started {t.when(run.at)} by {esc(t.who(run.started_by))} (#{run.seq}), "
        f"fence {run.fence}" + (f", lease until {t.when(run.lease_until)}" if run.lease_until else "")
    ]
    authority = []
    if run.proposer:
        authority.append(f"proposed by {esc(who.get(run.proposer, run.proposer))}")
    if run.approvers:
        authority.append("approved by " + ", ".join(esc(who.get(a, a)) for a in run.approvers))
    if run.receipt:
        authority.append(f"receipt {code(run.receipt)}")
    if run.idempotency_key:
        authority.append(f"idempotency key {code(run.idempotency_key)}")
    if authority:
        out.append("  - Authority: " + "; ".join(authority))
    if run.params:
        out.append("  - Parameters: " + ", ".join(f"{esc(k)}={code(v)}" for k, v in sorted(run.params.items())))
    if run.compensates_run:
        out.append(f"  - Compensates run {code(run.compensates_run)}")
    for res in run.results:
        bits = [f"**{t.words(res.outcome)}** at {t.when(res.at)} (#{res.seq}, fence {res.fence})"]
        if res.reconciled:
            bits.append("reconciled by lookup")
        if res.effect_digest:
            bits.append(f"effect digest {code(res.effect_digest)}")
        if res.error:
            bits.append(esc(res.error))
        out.append("  - Result: " + "; ".join(bits))
    if not run.results:
        out.append("  - Result: **no result recorded**")
    if run.verification:
        out.append(f"  - Verification: {esc(run.verification)}")
    return out


def _action_rows(a: ActionLine) -> list[str]:
    p = a.proposal
    approved = (
        ", ".join(esc(x.approver_name or x.approver) for x in p.approvals if x.decision == "approved") if p else ""
    )
    if not approved and a.runs:
        approved = ", ".join(esc(x) for x in a.runs[-1].approvers)
    run = a.runs[-1] if a.runs else None
    return [
        esc(a.action),
        esc(a.risk) or "—",
        esc(p.by.label()) if p else (esc(run.proposer or run.started_by.label()) if run else "—"),
        approved or "—",
        code(run.run_id) if run else "—",
        str(run.fence) if run else "—",
        esc(t.words(run.outcome)) if run else esc(t.words(p.status)) if p else "—",
        code(t.short(run.effect_digest, 16)) if run and run.effect_digest else "—",
    ]


def _actions(r: Report) -> list[str]:
    who = t.names((p.actor.id, p.actor.label()) for p in r.participants)
    out = _section("Actions")
    if not r.actions:
        out.append("No actions were proposed or run.")
    else:
        out += _table(
            ["Action", "Risk", "Proposed by", "Approved by", "Run", "Fence", "Result", "Effect digest"],
            (_action_rows(a) for a in r.actions),
        )
    for n, a in enumerate(r.actions, 1):
        p = a.proposal
        title = f"### {n}. {esc(a.action)}" + (f" — {esc(a.risk)}" if a.risk else "")
        out += ["", title, ""]
        if p is not None:
            out.append(
                f"- **Proposal {code(p.proposal_id)}** by **{p.origin}** {esc(t.who(p.by))} at {t.when(p.at)} "
                f"(#{p.seq}): {esc(t.words(p.status))}" + (f" — {esc(p.closed_reason)}" if p.closed_reason else "")
            )
            if p.preview:
                out.append(f"  - Preview: {esc(p.preview)}")
            if p.rationale:
                out.append(f"  - Why: {esc(p.rationale)}")
            if p.args_hash:
                out.append(f"  - Arguments hash: {code(p.args_hash)}")
            if p.proposer != p.by.id:
                out.append(f"  - On behalf of: {esc(p.proposer)}")
            if p.reason:
                out.append(f"  - Policy: {esc(p.reason)}")
            if p.safety_conditions:
                out.append("  - Safety conditions: " + "; ".join(esc(c) for c in p.safety_conditions))
            if p.checks:
                out.append("  - Checked when proposed: " + "; ".join(esc(t.check(c)) for c in p.checks))
            out.append(f"  - Approvals required: {p.approvals_required}")
            for ap in p.approvals:
                reason = f" — {esc(ap.reason)}" if ap.reason else ""
                out.append(
                    f"  - {esc(ap.decision).capitalize()} by {esc(ap.approver_name or ap.approver)} "
                    f"({esc(ap.approver)}) at {t.when(ap.at)} (#{ap.seq}){reason}"
                )
            for rf in p.refusals:
                out.append(f"  - Refused {esc(rf.user_id)} at {t.when(rf.at)} (#{rf.seq}): {esc(rf.reason)}")
        for run in a.runs:
            out += _run_lines(run, who)
    if r.verifications:
        out += ["", "### Verifications", ""]
        for v in r.verifications:
            target = (
                f"run {code(v.run_id)}"
                if v.run_id
                else (f"obligation {code(v.obligation_id)}" if v.obligation_id else "")
            )
            out.append(
                f"- **{esc(v.outcome)}** {target} by **{v.origin}** {esc(v.by.label())} at {t.when(v.at)} (#{v.seq})"
                + (f" — expected: {esc(v.expected)}" if v.expected else "")
                + (f"; observed: {esc(v.observed)}" if v.observed else "")
            )
    if r.fence_rejections:
        out += ["", "### Rejected stale writes", ""]
        for f in r.fence_rejections:
            out.append(
                f"- {t.when(f.at)} (#{f.seq}): {esc(f.holder) or 'a holder'} wrote on {code(f.obligation_id)} with "
                f"fence {f.fence} < {f.current_fence}" + (f" ({esc(f.attempted)})" if f.attempted else "")
            )
    return out


def _compensations(r: Report) -> list[str]:
    out = _section("Compensations")
    if not r.compensations:
        return [*out, "No effect was compensated."]
    return out + _table(
        ["Original run", "Action", "Original effect", "Compensating run", "Action", "Status", "Compensating effect"],
        (
            [
                code(c.original_run),
                esc(c.original_action) or "—",
                code(t.short(c.original_digest, 16)) if c.original_digest else "—",
                code(c.compensating_run) if c.compensating_run else (code(c.proposal_id) + " (proposed)"),
                esc(c.compensating_action) or "—",
                esc(t.words(c.status)),
                code(t.short(c.compensating_digest, 16)) if c.compensating_digest else "—",
            ]
            for c in r.compensations
        ),
    )


def _open_questions(r: Report) -> list[str]:
    out = _section("Open questions")
    if not r.open_questions:
        return [*out, "None: every recorded effect has a known outcome."]
    for q in r.open_questions:
        note = f" {esc(q.note)}." if q.note else ""
        key = f" Idempotency key {code(q.idempotency_key)}." if q.idempotency_key else ""
        out.append(f"- **{esc(t.words(q.kind))}** — {esc(q.text)}{key}{note} ({t.when(q.at)}, #{q.seq})")
    return out


def _obligation(o: ObligationLine) -> str:
    bits = [f"{code(o.obligation_id)} ({esc(o.purpose)}): {esc(o.text)}"]
    if o.status == "claimed":
        bits.append(
            f"claimed by {esc(o.holder)} under fence {o.fence}"
            + (f" until {t.when(o.lease_until)}" if o.lease_until else "")
        )
    elif o.status != "open":
        bits.append(o.status + (f": {esc(o.note)}" if o.note else ""))
    if o.conditions:
        bits.append("conditions: " + "; ".join(esc(c) for c in o.conditions))
    if o.expected_outcome:
        bits.append(f"expected: {esc(o.expected_outcome)}")
    if o.due_at:
        bits.append(f"due {t.when(o.due_at)}")
    bits.append(f"opened by {esc(o.by.label())} at {t.when(o.at)} (#{o.seq})")
    return " — ".join(bits)


def _obligations(r: Report) -> list[str]:
    out = _section("Open obligations and follow-ups")
    out += ["### Open obligations", ""]
    out += [f"- {_obligation(o)}" for o in r.obligations] or ["None."]
    out += ["", "### Follow-ups", ""]
    out += [f"- [{'x' if o.status == 'fulfilled' else ' '}] {_obligation(o)}" for o in r.follow_ups] or ["None."]
    return out


def _participants(r: Report) -> list[str]:
    return _section("Participants") + _table(
        ["Participant", "Type", "Roles", "Entries", "First", "Last"],
        (
            [
                esc(t.who(p.actor)),
                p.actor.type,
                esc(", ".join(p.roles)) or "—",
                str(p.entries),
                t.when(p.first_at),
                t.when(p.last_at),
            ]
            for p in r.participants
        ),
    )


def _turns(r: Report) -> list[str]:
    out = _section("Agent turns and cost")
    tot = r.agent_totals
    if not r.agent_turns:
        return [*out, "No agent turns."]
    out += _table(
        ["#", "Time", "Reasoner", "View", "Model", "Input", "Tokens in / out", "Cache read / write", "Cost", "Outcome"],
        (
            [
                str(x.seq),
                t.when(x.at),
                esc(x.reasoner),
                esc(x.view) or "—",
                esc(x.model) or "—",
                f"#{x.seq_from}–#{x.seq_to}",
                f"{x.input_tokens} / {x.output_tokens}",
                f"{x.cache_read_input_tokens} / {x.cache_creation_input_tokens}",
                t.usd(x.cost_usd),
                esc(x.outcome) + (f": {esc(x.error)}" if x.error else ""),
            ]
            for x in r.agent_turns
        ),
    )
    out += [
        "",
        f"**Total:** {tot.turns} turns ({tot.failed} failed), {tot.total_tokens} tokens "
        f"({tot.input_tokens} in, {tot.output_tokens} out, {tot.cache_read_input_tokens} cache read, "
        f"{tot.cache_creation_input_tokens} cache write), {t.usd(tot.cost_usd)}, {t.duration(tot.duration_ms / 1000)}.",
    ]
    return out


def _linked(r: Report) -> list[str]:
    out = _section("Linked scopes")
    if not r.linked_scopes:
        return [*out, "None."]
    return out + _table(
        ["Scope", "Relation", "Title", "Status", "Declared", "In the timeline"],
        (
            [
                code(x.scope),
                esc(x.relation) + (f": {esc(x.reason)}" if x.reason else ""),
                esc(x.title) if x.found else "*not found*",
                esc(x.status) or "—",
                t.when(x.declared_at),
                "yes" if x.merged_into_timeline else "no",
            ]
            for x in r.linked_scopes
        ),
    )


def _integrity(r: Report) -> list[str]:
    rows = []
    for i in r.integrity:
        verdict = "verified" if i.checked and i.ok else ("not checked" if not i.checked else "**BROKEN**")
        if i.checked and not i.ok:
            verdict += f" at #{i.first_bad_seq}: {esc(i.reason)}"
        rows.append([code(i.scope), verdict, f"1–{i.last_seq}", code(i.head_hash) or "—"])
    return (
        _section("Integrity")
        + _table(["Scope", "Hash chain", "Entries", "Head hash"], rows)
        + [
            "",
            "`report_exported` entries record exports of this report and are not part of it.",
        ]
    )
