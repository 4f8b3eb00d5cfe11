"""The scripted policy as decklog's ``Reasoner`` (core/agents/reasoner.py): every arm's turn is a real
``TurnRuntime`` turn (core/agents/runtime.py) with this reasoner plugged in.

What the policy is shown depends on the arm. ``rules`` / ``nm``: the product's task-scoped views (``core/views``:
``triage``, ``joiner``, ``investigation``) read through the turn's ``read_view`` tool under the runtime's view
budget, then the entries those views list, read in full through ``read_entries`` (as a model would follow a seq it
sees); nothing the views do not list reaches the policy. The views' ``related_actions`` (runs in related
incidents, core/views/related.py) become RELATED lines, and a finding this incident recorded about one a NOTED line. ``central``: the orchestrator's warm transcript (the run's
journal). Either way the text is rendered into the policy's lines (``research/experiment/view.py``) and sent to the
model (``Run.model``: in process, or a real ``ClaudeReasoner`` turn against the fake Messages API).

The decision goes back through the agents' own tools: ``record_hypothesis``, ``open_obligation``,
``propose_action`` (after reading the obligation's ``action`` view: the re-check), ``suggest`` (a hold, for the
on-call to record as a decision; ``resolve``, for the on-call to accept). What the product's tools cannot say is
noted in the turn's ``tool_calls`` and done after the turn by the experiment (``research/experiment/hands.py``): the
scenario's read tools answered as evidence, the re-check recorded as an observation, and the mutants' breakage.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from decklog.core.agents.reasoner import Tools, TurnInput, TurnOutput, Usage
from decklog.core.agents.tool_specs import MAX_READ
from decklog.core.clock import parse_iso
from decklog.core.state import ScopeState
from decklog.core.views import FINDING
from research.experiment import policy
from research.experiment.scenario import Scenario, action_key
from research.experiment.view import header, payload_lines

if TYPE_CHECKING:
    from research.experiment.run import Run

VIEWS = ("triage", "joiner", "investigation")
_FULL = frozenset({"observation", "hypothesis", "decision", "approval", "action_result", "status_changed"})
NOTES = ("scenario_lookup", "recheck", "drop", "no_claim", "cancel")  # tool_calls the experiment acts on after the turn
HOLD = "hold: no action, the evidence says this is expected"
RESOLVE = "resolve: the alerts cleared"


def _items(value: Any) -> Iterator[dict[str, Any]]:
    """Every entry brief (a dict with ``seq`` and ``kind``) anywhere in a view, evidence chains included."""
    if isinstance(value, dict):
        if "seq" in value and "kind" in value:
            yield value
        for v in value.values():
            yield from _items(v)
    elif isinstance(value, list):
        for v in value:
            yield from _items(v)


def _size(data: Any) -> int:
    return len(json.dumps(data, default=str).encode())


async def read_views(tools: Tools, scenario: Scenario, turn: TurnInput) -> tuple[str, int]:
    """The policy's lines from the product views (and the entries they list, read in full); the bytes read."""
    shown: dict[str, Any] = {}
    read = 0
    for name in VIEWS:
        got = await tools.call("read_view", {"name": name})
        if got.status == "success":
            shown[name] = got.data
            read += _size(got.data)
    briefs: dict[int, dict[str, Any]] = {}
    for item in _items(shown):
        briefs.setdefault(int(item["seq"]), item)
    want = sorted(s for s, b in briefs.items() if b["kind"] in _FULL and not b.get("alert_status"))
    full: dict[int, dict[str, Any]] = {}
    for i in range(0, len(want), MAX_READ):
        got = await tools.call("read_entries", {"seqs": want[i : i + MAX_READ]})
        if got.status == "success":
            read += _size(got.data)
            full.update((int(e["seq"]), e["payload"]) for e in got.data if "truncated" not in e["payload"])
    lines = header(scenario)
    lines += _alerts(shown)
    lines += _obligations(shown, turn)
    lines += _related(shown)
    for seq in sorted(briefs):
        kind = str(briefs[seq]["kind"])
        text = str(briefs[seq].get("text", ""))
        if seq in full:
            lines += payload_lines(kind, seq, full[seq])
        elif kind == "suggestion" and FINDING in text:  # a finding this incident recorded already
            lines.append(f"NOTED\tkey={text.partition(FINDING)[2].split()[0]}")
        else:
            text = str(briefs[seq].get("text", ""))[:80].replace("\t", " ")
            lines.append(f"LOG\tseq={seq}\tkind={kind}\t{text}")
    if any((v.get("scope") or {}).get("status") == "resolved" for v in shown.values() if isinstance(v, dict)):
        lines.append("RESOLVED\t")
    return "\n".join(lines), read


def _alerts(shown: dict[str, Any]) -> list[str]:
    fps: dict[str, str] = {}
    for v in shown.values():
        for a in v.get("firing_alerts", []) if isinstance(v, dict) else []:
            fps.setdefault(str(a.get("fingerprint", "")), str(a.get("status", "firing")))
    return [f"ALERT\tfp={fp}\tstatus={'resolved' if st == 'resolved' else 'firing'}" for fp, st in sorted(fps.items())]


def _related(shown: dict[str, Any]) -> list[str]:
    """The runs of related incidents the views list (``related_actions``): the policy's RELATED lines."""
    seen: dict[str, dict[str, Any]] = {}
    for v in shown.values():
        for a in v.get("related_actions", []) if isinstance(v, dict) else []:
            seen.setdefault(str(a.get("ref", "")), a)
    return [
        f"RELATED\tkey={a['action']}({a['target']})\toutcome={a['outcome']}\tscope={a['scope']}\tat={a['at']}"
        f"\tref={a['ref']}\trelation={a['relation']}"
        for _, a in sorted(seen.items())
    ]


def _obligations(shown: dict[str, Any], turn: TurnInput) -> list[str]:
    seen: dict[str, dict[str, Any]] = {}
    for v in shown.values():
        for ob in v.get("open_obligations", []) if isinstance(v, dict) else []:
            seen.setdefault(str(ob.get("id", "")), ob)
    out = []
    for ob in sorted(seen.values(), key=lambda o: int(o.get("opened_seq", 0))):
        until = str(ob.get("lease_until") or "")
        claimed = bool(ob.get("holder")) and bool(until) and parse_iso(until) > turn.now
        out.append(
            f"OBLIGATION\tid={ob['id']}\tstatus={'claimed' if claimed else 'open'}\taction={ob.get('action', '')}"
            f"\tparams={json.dumps(ob.get('params') or {}, sort_keys=True)}"
            f"\tconditions={'|'.join(ob.get('conditions') or [])}"
        )
    return out


class ScriptedReasoner:
    """One agent (``name``: the run's agent or worker of the moment) answering through the scripted policy."""

    model = "scripted-policy"
    wants_wakes = False

    def __init__(self, experiment: Run, name: str) -> None:
        self.experiment = experiment
        self.name = name

    async def run(self, turn: TurnInput) -> TurnOutput:
        run, tools = self.experiment, turn.tools
        assert tools is not None
        if run.spec.arm == "central":
            text = await run.view(turn.scope)
            read = 0
        else:
            text, read = await read_views(tools, run.spec.scenario, turn)
        run.cost.reconstruction_bytes += read
        prompt = text + ("\nMUTATION\t" + run.spec.mutation if run.spec.mutation else "")
        answer, usage = await run.model(policy.SYSTEM, prompt, turn.scope)
        sent = usage.pop("context_bytes", len((policy.SYSTEM + prompt).encode()))
        run.cost.add(usage, sent)
        await run.maybe("kill_after_model", turn.scope)
        if run.spec.arm == "central":
            run.journal(turn.scope)
        notes = await act(tools, turn.state, json.loads(answer or "{}"), run.spec.mutation)
        c = tools.collected
        # the ids this turn's findings get are the seed's (a recording then replays to the same requests)
        obligations = [replace(o, obligation_id=f"ob-{run.rng.getrandbits(24):06x}") for o in c.obligations]
        suggestions = [replace(s, suggestion_id=f"sg-{run.rng.getrandbits(32):08x}") for s in c.suggestions]
        # The read tools' answers are recorded after the turn (research/experiment/hands.py), by the agent, so they
        # warrant no turn; a product tool answers within the turn. So a turn that asked for them asks for another
        # look at once: the scheduler's forced wake-up (``rules``; the other arms' drivers see the new entries).
        wake = 0.0 if any(n["tool"] == "scenario_lookup" for n in notes) else None
        return TurnOutput(
            hypotheses=list(c.hypotheses),
            suggestions=suggestions,
            obligations=obligations,
            proposals=list(c.proposals),
            usage=Usage(
                usage.get("input_tokens", 0),
                usage.get("output_tokens", 0),
                usage.get("cache_read_input_tokens", 0),
                usage.get("cache_creation_input_tokens", 0),
            ),
            model=self.model,
            tool_calls=notes,
            wake_after=wake,
        )


async def act(tools: Tools, state: ScopeState, d: dict[str, Any], mutation: str) -> list[dict[str, Any]]:
    """The decision through the agents' tools; what they cannot carry, as notes for after the turn."""
    notes: list[dict[str, Any]] = []
    if d.get("call"):
        notes.append({"tool": "scenario_lookup", "names": list(d["call"])})
    if h := d.get("hypothesis"):
        args = {"text": f"root cause: {h['entity']}", "suspect_scope": h["entity"], "evidence_seqs": h["evidence"]}
        await tools.call("record_hypothesis", args)
    if d.get("hold"):
        await tools.call("suggest", {"text": HOLD})
    if d.get("resolve"):
        await tools.call("suggest", {"text": RESOLVE, "action": "resolve"})
    if d.get("drop"):
        notes.append({"tool": "drop", "obligation_ids": list(d["drop"])})
    if f := d.get("finding"):
        await tools.call("suggest", {"text": f})
    if c := d.get("cancel"):
        notes.append({"tool": "cancel", "obligation_id": c["obligation_id"], "reason": c["reason"]})
    if o := d.get("open"):
        args = {
            "text": f"run {action_key(o['action'], o['params'])} if the conditions hold",
            "purpose": "rollback",
            "action": o["action"],
            "params": o["params"],
            "conditions": o["conditions"],
        }
        await tools.call("open_obligation", args)
    if p := d.get("propose"):
        await _propose(tools, state, p, mutation, notes)
    return notes


async def _propose(
    tools: Tools, state: ScopeState, p: dict[str, Any], mutation: str, notes: list[dict[str, Any]]
) -> None:
    """Re-check the obligation on its ``action`` view, then hand it to the desk with ``propose_action``."""
    oid = str(p["obligation_id"])
    ob = state.obligations.get(oid)
    if ob is None:
        return
    await tools.call("read_view", {"name": "action", "obligation_id": oid})
    notes.append({"tool": "recheck", "obligation_id": oid, "conditions": list(p["conditions"])})
    if mutation == "no_claim":
        notes.append({"tool": "no_claim", "obligation_id": oid})
        return
    rationale = f"obligation {oid}; conditions re-checked: " + "; ".join(p["conditions"])
    args = {"action": ob.action, "params": dict(ob.params), "rationale": rationale, "obligation_id": oid}
    await tools.call("propose_action", args)
