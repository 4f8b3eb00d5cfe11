"""The HTML rendering of a ``Report``: one self-contained page (inline CSS, no scripts, no external assets) that
reads well in a browser and prints cleanly. Recorded text is escaped; only http(s) URLs become links.
"""

from __future__ import annotations

from collections.abc import Iterable
from html import escape

from core.reports import text as t
from core.reports.model import ActionLine, ObligationLine, Report, RunLine

CSS = """
:root { --fg: #1d1d1f; --muted: #5f6368; --line: #d9dce1; --human: #1a7f37; --agent: #8250df; --system: #57606a;
  --bad: #cf222e; --ok: #1a7f37; --bg-soft: #f6f8fa; }
* { box-sizing: border-box; }
body { font: 14px/1.5 -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; color: var(--fg); margin: 0; }
main { max-width: 1100px; margin: 0 auto; padding: 24px 32px 48px; }
h1 { font-size: 24px; margin: 0 0 4px; }
h2 { font-size: 18px; margin: 28px 0 8px; padding-bottom: 4px; border-bottom: 1px solid var(--line); }
h3 { font-size: 15px; margin: 18px 0 6px; }
p, ul, ol { margin: 6px 0; }
.meta { color: var(--muted); }
code { font: 12px/1.4 ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; background: var(--bg-soft);
  padding: 1px 4px; border-radius: 4px; word-break: break-all; }
table { border-collapse: collapse; width: 100%; margin: 8px 0; }
th, td { text-align: left; vertical-align: top; padding: 4px 8px; border-bottom: 1px solid var(--line); }
th { background: var(--bg-soft); font-weight: 600; }
tr { page-break-inside: avoid; break-inside: avoid; }
.badge { display: inline-block; min-width: 52px; text-align: center; font-size: 11px; font-weight: 600;
  border-radius: 10px; padding: 0 6px; color: #fff; }
.badge.human { background: var(--human); } .badge.agent { background: var(--agent); }
.badge.system { background: var(--system); }
tr.agent td { background: #fbf8ff; }
table.timeline td:nth-child(-n+4) { white-space: nowrap; }
tr.day td { background: var(--bg-soft); font-weight: 600; }
.ok { color: var(--ok); font-weight: 600; } .bad { color: var(--bad); font-weight: 600; }
.none { color: var(--muted); font-style: italic; }
.legend span { margin-right: 12px; }
dl.summary { display: grid; grid-template-columns: max-content auto; gap: 2px 16px; }
dl.summary dt { color: var(--muted); } dl.summary dd { margin: 0; }
a { color: #0969da; }
@media print {
  main { max-width: none; padding: 0; }
  a { color: inherit; text-decoration: none; }
  h2 { page-break-after: avoid; break-after: avoid; }
  tr.agent td { background: none; }
  .badge { color: var(--fg); border: 1px solid var(--fg); background: none !important; }
}
@page { margin: 16mm; }
""".strip()


def e(value: object) -> str:
    return escape(str(value), quote=True)


def a(label: str, url: str) -> str:
    """``label`` (already escaped) as a link to ``url`` when there is one."""
    return f'<a href="{e(url)}">{label}</a>' if url else label


def c(value: object) -> str:
    return f"<code>{e(value)}</code>" if str(value) else ""


def badge(origin: str) -> str:
    return f'<span class="badge {e(origin)}">{e(origin)}</span>'


def none(text: str) -> str:
    return f'<p class="none">{e(text)}</p>'


def table(header: Iterable[str], rows: Iterable[Iterable[str]], row_classes: Iterable[str] = ()) -> str:
    classes = list(row_classes)
    head = "".join(f"<th>{h}</th>" for h in header)
    body = []
    for n, row in enumerate(rows):
        cls = f' class="{e(classes[n])}"' if n < len(classes) and classes[n] else ""
        body.append(f"<tr{cls}>" + "".join(f"<td>{cell}</td>" for cell in row) + "</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def render_html(r: Report) -> str:
    s = r.summary
    main = r.integrity[0]
    chain = (
        '<span class="ok">verifies</span>'
        if main.checked and main.ok
        else (
            '<span class="bad">was not checked</span>'
            if not main.checked
            else '<span class="bad">DOES NOT verify</span>'
        )
    )
    head = [c(r.scope), e(t.severity(s.severity)), e(s.status)]
    if s.thread_permalink:
        head.append(a("Slack thread", s.thread_permalink))
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>Post-incident report: {e(s.title)} ({e(r.scope)})</title>",
        f"<style>\n{CSS}\n</style></head><body><main>",
        f"<h1>Post-incident report: {e(s.title)}</h1>",
        f'<p class="meta">{" · ".join(head)}</p>',
        f'<p class="meta">Derived from the scope\'s log, entries 1–{main.last_seq} (head {c(t.short(main.head_hash, 16))});'
        f" its hash chain {chain}.</p>",
        '<p class="legend">'
        f"<span>{badge('human')} recorded by people</span>"
        f"<span>{badge('agent')} inferred by an agent — a claim to check</span>"
        f"<span>{badge('system')} decklog and its integrations</span></p>",
        _summary(r),
        _impact(r),
        _milestones(r),
        _timeline(r),
        _decisions(r),
        _inferences(r),
        _actions(r),
        _compensations(r),
        _open_questions(r),
        _obligations(r),
        _participants(r),
        _turns(r),
        _linked(r),
        _integrity(r),
        "</main></body></html>",
    ]
    return "\n".join(parts) + "\n"


def _summary(r: Report) -> str:
    s = r.summary
    sev = t.severity(s.severity)
    if s.worst_severity is not None and s.worst_severity != s.severity:
        sev += f" (worst: {t.severity(s.worst_severity)})"
    declared = t.when(s.declared_at) + (f" by {t.who(s.declared_by)}" if s.declared_by else "")
    if s.declared_via:
        declared += f" (via {s.declared_via})"
    rows = [
        ("Scope", c(s.scope)),
        ("Title", e(s.title)),
        ("Status", e(s.status)),
        ("Severity", e(sev)),
        ("Services", e(", ".join(s.services) or "—")),
        ("Declared", e(declared)),
        ("Resolved", e(t.when(s.resolved_at) if s.resolved_at else "not yet")),
        ("Duration", e(t.duration(s.duration_s) if s.duration_s is not None else "ongoing")),
    ]
    out = ["<h2>Summary</h2>", '<dl class="summary">']
    out += [f"<dt>{k}</dt><dd>{v}</dd>" for k, v in rows]
    out.append("</dl>")
    if s.description:
        out.append(f"<p><strong>Description:</strong> {e(s.description)}</p>")
    if s.resolution:
        out.append(f"<p><strong>Resolution:</strong> {e(s.resolution)}</p>")
    for title, items in (("Goals", s.goals), ("Constraints", s.constraints)):
        if items:
            out.append(f"<h3>{title}</h3><ul>" + "".join(f"<li>{e(i)}</li>" for i in items) + "</ul>")
    return "\n".join(out)


def _impact(r: Report) -> str:
    i = r.impact
    items = [f"<li><strong>Services:</strong> {e(', '.join(i.services) or 'none recorded')}</li>"]
    if i.severity_history:
        steps = " → ".join(f"{t.severity(s.severity)} at {t.clock(s.at)} by {s.by.label()}" for s in i.severity_history)
        items.append(f"<li><strong>Severity:</strong> {e(steps)}</li>")
    else:
        items.append("<li><strong>Severity:</strong> never set</li>")
    if i.started_at:
        end = f"mitigated at {t.when(i.mitigated_at)}" if i.mitigated_at else "not mitigated yet"
        span = f" ({t.duration(i.duration_s)})" if i.duration_s is not None else ""
        items.append(f"<li><strong>Impact window:</strong> {e(f'from {t.when(i.started_at)} to {end}{span}')}</li>")
    out = "<h2>Impact</h2><ul>" + "".join(items) + "</ul>"
    if i.alerts:
        out += table(
            ["Alert", "Service", "Source", "Status", "First", "Last", "Notifications"],
            (
                [
                    e(x.title),
                    e(x.service or "—"),
                    e(x.source or "—"),
                    e(x.status),
                    e(t.when(x.first_at)),
                    e(t.when(x.last_at)),
                    str(x.notifications),
                ]
                for x in i.alerts
            ),
        )
    return out


def _milestones(r: Report) -> str:
    rows = []
    for m in r.milestones:
        if not m.reached:
            rows.append([e(m.label), '<span class="none">not reached</span>', "—", "—", "—"])
            continue
        rows.append(
            [
                e(m.label),
                a(e(t.when(m.at)), m.link),
                e(t.duration(m.since_declared_s)),
                e(t.duration(m.since_previous_s)),
                e(f"{t.who(m.by)} (#{m.seq})"),
            ]
        )
    return "<h2>Milestones</h2>" + table(["Milestone", "Time", "Since declared", "Since previous", "By"], rows)


def _timeline(r: Report) -> str:
    if not r.timeline:
        return "<h2>Timeline</h2>" + none("No entries.")
    rows = []
    day = ""
    for line in r.timeline:
        if t.day(line.at) != day:
            day = t.day(line.at)
            rows.append(f'<tr class="day"><td colspan="6">{e(day)} (UTC)</td></tr>')
        where = f"#{line.seq}" if line.scope == r.scope else f"{line.scope} #{line.seq}"
        cells = [
            a(e(where), line.link),
            f'<span title="{e(t.when(line.at))}">{e(t.clock(line.at))}</span>',
            e(t.offset(line.offset_s)),
            badge(line.origin),
            e(line.actor.label()),
            e(line.text),
        ]
        rows.append(f'<tr class="{e(line.origin)}">' + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    head = "".join(f"<th>{h}</th>" for h in ("#", "Time", "Since declared", "", "Who", "What"))
    return (
        f'<h2>Timeline</h2><table class="timeline"><thead><tr>{head}</tr></thead><tbody>{"".join(rows)}</tbody></table>'
    )


def _decisions(r: Report) -> str:
    if not r.decisions:
        return "<h2>Decisions</h2>" + none("No decisions were recorded.")
    items = []
    for d in r.decisions:
        extra = ""
        if d.rationale:
            extra += f"<br>Rationale: {e(d.rationale)}"
        if d.expected_outcome:
            extra += f"<br>Expected outcome: {e(d.expected_outcome)}"
        items.append(
            f"<li><strong>{e(d.text)}</strong> — {badge(d.origin)} {e(d.by.label())}, {e(t.when(d.at))} · "
            f"{a(e(f'#{d.seq}'), d.link)}{extra}</li>"
        )
    return "<h2>Decisions</h2><ol>" + "".join(items) + "</ol>"


def _inferences(r: Report) -> str:
    title = "<h2>Hypotheses, suggestions and answers</h2>"
    if not r.inferences:
        return title + none("None were recorded.")
    items = []
    for i in r.inferences:
        extra = []
        if i.confidence is not None:
            extra.append(f"confidence {i.confidence:.0%}")
        if i.suspect_scope:
            extra.append(f"suspects {i.suspect_scope}")
        if i.kind == "suggestion":
            extra.append("open" if i.verdict == "open" else i.verdict + (f" by {i.verdict_by}" if i.verdict_by else ""))
        note = f" ({'; '.join(extra)})" if extra else ""
        items.append(f"<li>{badge(i.origin)} {e(i.by.label())} · {e(i.kind + note)}: {e(i.text)} · #{i.seq}</li>")
    return title + "<ul>" + "".join(items) + "</ul>"


def _run(run: RunLine, who: dict[str, str]) -> str:
    lines = [
        f"<strong>Run {c(run.run_id)}</strong> started {e(t.when(run.at))} by {e(t.who(run.started_by))} "
        f"(#{run.seq}), fence {run.fence}" + (f", lease until {e(t.when(run.lease_until))}" if run.lease_until else "")
    ]
    authority = []
    if run.proposer:
        authority.append(f"proposed by {e(who.get(run.proposer, run.proposer))}")
    if run.approvers:
        authority.append("approved by " + e(", ".join(who.get(a, a) for a in run.approvers)))
    if run.receipt:
        authority.append(f"receipt {c(run.receipt)}")
    if run.idempotency_key:
        authority.append(f"idempotency key {c(run.idempotency_key)}")
    sub = []
    if authority:
        sub.append("Authority: " + "; ".join(authority))
    if run.params:
        sub.append("Parameters: " + ", ".join(f"{e(k)}={c(v)}" for k, v in sorted(run.params.items())))
    if run.compensates_run:
        sub.append(f"Compensates run {c(run.compensates_run)}")
    for res in run.results:
        bits = [f"<strong>{e(t.words(res.outcome))}</strong> at {e(t.when(res.at))} (#{res.seq}, fence {res.fence})"]
        if res.reconciled:
            bits.append("reconciled by lookup")
        if res.effect_digest:
            bits.append(f"effect digest {c(res.effect_digest)}")
        if res.error:
            bits.append(e(res.error))
        sub.append("Result: " + "; ".join(bits))
    if not run.results:
        sub.append('Result: <span class="bad">no result recorded</span>')
    if run.verification:
        sub.append(f"Verification: {e(run.verification)}")
    return "<li>" + lines[0] + "<ul>" + "".join(f"<li>{x}</li>" for x in sub) + "</ul></li>"


def _action_row(x: ActionLine) -> list[str]:
    p = x.proposal
    run = x.runs[-1] if x.runs else None
    approved = (
        ", ".join(ap.approver_name or ap.approver for ap in p.approvals if ap.decision == "approved") if p else ""
    )
    if not approved and run is not None:
        approved = ", ".join(run.approvers)
    proposer = p.by.label() if p else (run.proposer or run.started_by.label() if run else "—")
    result = t.words(run.outcome) if run else (t.words(p.status) if p else "—")
    return [
        e(x.action),
        e(x.risk or "—"),
        e(proposer),
        e(approved or "—"),
        c(run.run_id) if run else "—",
        str(run.fence) if run else "—",
        e(result),
        c(t.short(run.effect_digest, 16)) if run and run.effect_digest else "—",
    ]


def _actions(r: Report) -> str:
    who = t.names((p.actor.id, p.actor.label()) for p in r.participants)
    out = ["<h2>Actions</h2>"]
    if not r.actions:
        out.append(none("No actions were proposed or run."))
    else:
        out.append(
            table(
                ["Action", "Risk", "Proposed by", "Approved by", "Run", "Fence", "Result", "Effect digest"],
                (_action_row(x) for x in r.actions),
            )
        )
    for n, x in enumerate(r.actions, 1):
        out.append(f"<h3>{n}. {e(x.action)}" + (f" — {e(x.risk)}" if x.risk else "") + "</h3><ul>")
        p = x.proposal
        if p is not None:
            sub = []
            if p.preview:
                sub.append(f"Preview: <code>{e(p.preview)}</code>")
            if p.rationale:
                sub.append(f"Why: {e(p.rationale)}")
            if p.args_hash:
                sub.append(f"Arguments hash: {c(p.args_hash)}")
            if p.proposer != p.by.id:
                sub.append(f"On behalf of: {e(p.proposer)}")
            if p.reason:
                sub.append(f"Policy: {e(p.reason)}")
            if p.safety_conditions:
                sub.append("Safety conditions: " + e("; ".join(p.safety_conditions)))
            if p.checks:
                sub.append("Checked when proposed: " + e("; ".join(t.check(c) for c in p.checks)))
            sub.append(f"Approvals required: {p.approvals_required}")
            for ap in p.approvals:
                reason = f" — {e(ap.reason)}" if ap.reason else ""
                sub.append(
                    f"{e(ap.decision.capitalize())} by {e(ap.approver_name or ap.approver)} ({e(ap.approver)}) at "
                    f"{e(t.when(ap.at))} (#{ap.seq}){reason}"
                )
            for rf in p.refusals:
                sub.append(f"Refused {e(rf.user_id)} at {e(t.when(rf.at))} (#{rf.seq}): {e(rf.reason)}")
            closed = f" — {e(p.closed_reason)}" if p.closed_reason else ""
            out.append(
                f"<li><strong>Proposal {c(p.proposal_id)}</strong> by {badge(p.origin)} {e(t.who(p.by))} at "
                f"{e(t.when(p.at))} (#{p.seq}): {e(t.words(p.status))}{closed}<ul>"
                + "".join(f"<li>{s}</li>" for s in sub)
                + "</ul></li>"
            )
        out += [_run(run, who) for run in x.runs]
        out.append("</ul>")
    if r.verifications:
        items = []
        for v in r.verifications:
            target = (
                f"run {c(v.run_id)}" if v.run_id else (f"obligation {c(v.obligation_id)}" if v.obligation_id else "")
            )
            items.append(
                f"<li><strong>{e(v.outcome)}</strong> {target} by {badge(v.origin)} {e(v.by.label())} at "
                f"{e(t.when(v.at))} (#{v.seq})"
                + (f" — expected: {e(v.expected)}" if v.expected else "")
                + (f"; observed: {e(v.observed)}" if v.observed else "")
                + "</li>"
            )
        out.append("<h3>Verifications</h3><ul>" + "".join(items) + "</ul>")
    if r.fence_rejections:
        items = [
            f"<li>{e(t.when(f.at))} (#{f.seq}): {e(f.holder or 'a holder')} wrote on {c(f.obligation_id)} with fence "
            f"{f.fence} &lt; {f.current_fence}" + (f" ({e(f.attempted)})" if f.attempted else "") + "</li>"
            for f in r.fence_rejections
        ]
        out.append("<h3>Rejected stale writes</h3><ul>" + "".join(items) + "</ul>")
    return "\n".join(out)


def _compensations(r: Report) -> str:
    if not r.compensations:
        return "<h2>Compensations</h2>" + none("No effect was compensated.")
    return "<h2>Compensations</h2>" + table(
        ["Original run", "Action", "Original effect", "Compensating run", "Action", "Status", "Compensating effect"],
        (
            [
                c(x.original_run),
                e(x.original_action or "—"),
                c(t.short(x.original_digest, 16)) if x.original_digest else "—",
                c(x.compensating_run) if x.compensating_run else c(x.proposal_id) + " (proposed)",
                e(x.compensating_action or "—"),
                e(t.words(x.status)),
                c(t.short(x.compensating_digest, 16)) if x.compensating_digest else "—",
            ]
            for x in r.compensations
        ),
    )


def _open_questions(r: Report) -> str:
    if not r.open_questions:
        return "<h2>Open questions</h2>" + none("None: every recorded effect has a known outcome.")
    items = []
    for q in r.open_questions:
        key = f" Idempotency key {c(q.idempotency_key)}." if q.idempotency_key else ""
        note = f" {e(q.note)}." if q.note else ""
        items.append(
            f'<li><strong class="bad">{e(t.words(q.kind))}</strong> — {e(q.text)}{key}{note} '
            f"({e(t.when(q.at))}, #{q.seq})</li>"
        )
    return "<h2>Open questions</h2><ul>" + "".join(items) + "</ul>"


def _obligation(o: ObligationLine) -> str:
    bits = [f"{c(o.obligation_id)} ({e(o.purpose)}): {e(o.text)}"]
    if o.status == "claimed":
        bits.append(
            f"claimed by {e(o.holder)} under fence {o.fence}"
            + (f" until {e(t.when(o.lease_until))}" if o.lease_until else "")
        )
    elif o.status != "open":
        bits.append(e(o.status + (f": {o.note}" if o.note else "")))
    if o.conditions:
        bits.append("conditions: " + e("; ".join(o.conditions)))
    if o.expected_outcome:
        bits.append(f"expected: {e(o.expected_outcome)}")
    if o.due_at:
        bits.append(f"due {e(t.when(o.due_at))}")
    bits.append(f"opened by {e(o.by.label())} at {e(t.when(o.at))} (#{o.seq})")
    return " — ".join(bits)


def _obligations(r: Report) -> str:
    out = ["<h2>Open obligations and follow-ups</h2>", "<h3>Open obligations</h3>"]
    out.append(
        "<ul>" + "".join(f"<li>{_obligation(o)}</li>" for o in r.obligations) + "</ul>"
        if r.obligations
        else none("None.")
    )
    out.append("<h3>Follow-ups</h3>")
    out.append(
        "<ul>"
        + "".join(f"<li>{'☑' if o.status == 'fulfilled' else '☐'} {_obligation(o)}</li>" for o in r.follow_ups)
        + "</ul>"
        if r.follow_ups
        else none("None.")
    )
    return "\n".join(out)


def _participants(r: Report) -> str:
    return "<h2>Participants</h2>" + table(
        ["Participant", "Type", "Roles", "Entries", "First", "Last"],
        (
            [
                e(t.who(p.actor)),
                badge(p.actor.type),
                e(", ".join(p.roles) or "—"),
                str(p.entries),
                e(t.when(p.first_at)),
                e(t.when(p.last_at)),
            ]
            for p in r.participants
        ),
    )


def _turns(r: Report) -> str:
    if not r.agent_turns:
        return "<h2>Agent turns and cost</h2>" + none("No agent turns.")
    tot = r.agent_totals
    return (
        "<h2>Agent turns and cost</h2>"
        + table(
            [
                "#",
                "Time",
                "Reasoner",
                "View",
                "Model",
                "Input",
                "Tokens in / out",
                "Cache read / write",
                "Cost",
                "Outcome",
            ],
            (
                [
                    str(x.seq),
                    e(t.when(x.at)),
                    e(x.reasoner),
                    e(x.view or "—"),
                    e(x.model or "—"),
                    f"#{x.seq_from}–#{x.seq_to}",
                    f"{x.input_tokens} / {x.output_tokens}",
                    f"{x.cache_read_input_tokens} / {x.cache_creation_input_tokens}",
                    e(t.usd(x.cost_usd)),
                    e(x.outcome + (f": {x.error}" if x.error else "")),
                ]
                for x in r.agent_turns
            ),
        )
        + f"<p><strong>Total:</strong> {tot.turns} turns ({tot.failed} failed), {tot.total_tokens} tokens "
        f"({tot.input_tokens} in, {tot.output_tokens} out, {tot.cache_read_input_tokens} cache read, "
        f"{tot.cache_creation_input_tokens} cache write), {e(t.usd(tot.cost_usd))}, "
        f"{e(t.duration(tot.duration_ms / 1000))}.</p>"
    )


def _linked(r: Report) -> str:
    if not r.linked_scopes:
        return "<h2>Linked scopes</h2>" + none("None.")
    return "<h2>Linked scopes</h2>" + table(
        ["Scope", "Relation", "Title", "Status", "Declared", "In the timeline"],
        (
            [
                c(x.scope),
                e(x.relation + (f": {x.reason}" if x.reason else "")),
                e(x.title) if x.found else '<span class="bad">not found</span>',
                e(x.status or "—"),
                e(t.when(x.declared_at)),
                "yes" if x.merged_into_timeline else "no",
            ]
            for x in r.linked_scopes
        ),
    )


def _integrity(r: Report) -> str:
    rows = []
    for i in r.integrity:
        if i.checked and i.ok:
            verdict = '<span class="ok">verified</span>'
        elif not i.checked:
            verdict = '<span class="none">not checked</span>'
        else:
            verdict = f'<span class="bad">BROKEN at #{i.first_bad_seq}</span>: {e(i.reason)}'
        rows.append([c(i.scope), verdict, f"1–{i.last_seq}", c(i.head_hash) or "—"])
    return (
        "<h2>Integrity</h2>"
        + table(["Scope", "Hash chain", "Entries", "Head hash"], rows)
        + '<p class="meta"><code>report_exported</code> entries record exports of this report and are not part of it.</p>'
    )
