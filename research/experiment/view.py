"""Rendering entries into the policy's lines (the central transcript; the cold arms' product views, in
research/experiment/reasoner.py) and the cost of a model call."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from decklog.core.entries import Entry
from research.experiment.scenario import Scenario, action_key

PRICES = {"input": 3.0, "output": 15.0, "cache_read": 0.30, "cache_write": 3.75}  # $ per million tokens


def entry_lines(e: Entry) -> list[str]:
    return payload_lines(e.kind, e.seq, e.payload.model_dump())


def payload_lines(k: str, seq: int, p: dict[str, Any]) -> list[str]:
    """The policy's lines for one entry, from its kind, seq and payload (a stored entry's, or the payload a
    ``read_entries`` tool call returned)."""
    if k == "observation" and str(p.get("source", "")).startswith("tool:"):
        d = p["data"]
        fix = d.get("fix") or {}
        key = action_key(fix["action"], fix.get("params", {})) if fix else ""
        return [
            f"EVIDENCE\tseq={seq}\ttool={d['tool']}\tkind={d['kind']}\tsuspect={d.get('suspect', '')}"
            f"\thold={int(d.get('hold', False))}\tkey={key}\tfix={json.dumps(fix, sort_keys=True)}\ttext={p['text']}"
        ]
    if k == "hypothesis":
        return [f"HYPOTHESIS\tentity={p['suspect_scope']}"]
    if k == "decision" and p["text"].startswith("hold"):
        return ["HOLD\t"]
    if k == "approval" and p["decision"] == "denied":
        return [f"DENIED\tkey={p['reason']}"]
    if k == "action_result":
        # A lost response names no key: the runner settles it next, so a later settled line of the same action does
        # (run ids are random: a view that showed them could not be replayed from a recording).
        key, action = p["response"].get("key", ""), p.get("action", "")
        head = {"applied": "APPLIED", "abandon_uncertain": "ABANDONED", "not_applied": "NOT_APPLIED"}
        head["uncertain"] = "UNCERTAIN"
        if p["outcome"] in head:
            return [f"{head[p['outcome']]}\tkey={key}\taction={action}"]
    if k == "status_changed" and p["status"] == "resolved":
        return ["RESOLVED\t"]
    return [f"LOG\tseq={seq}\tkind={k}\t{_gist(p)}"]


def _gist(p: dict[str, Any]) -> str:
    """One short line for an entry the policy does not act on (alerts, messages, claims, turns): it takes room."""
    text = str(p.get("text") or p.get("title") or p.get("summary") or p.get("obligation_id") or "")
    return text[:80].replace("\t", " ").replace("\n", " ")


@dataclass
class Folded:
    """What a cold view shows beyond entry lines: the alerts and open obligations, from the stored state."""

    alerts: dict[str, str] = field(default_factory=dict)
    obligations: list[dict[str, Any]] = field(default_factory=list)


def header(scenario: Scenario) -> list[str]:
    return [
        "TOOLS\tnames=" + ",".join(t.name for t in scenario.tools),
        "CONDITIONS\tlist=" + "|".join(scenario.invariants.conditions),
    ]


def state_lines(folded: Folded) -> list[str]:
    out = [f"ALERT\tfp={fp}\tstatus={st}" for fp, st in sorted(folded.alerts.items())]
    for ob in folded.obligations:
        out.append(
            f"OBLIGATION\tid={ob['id']}\tstatus={ob['status']}\taction={ob['action']}"
            f"\tparams={json.dumps(ob['params'], sort_keys=True)}\tconditions={'|'.join(ob['conditions'])}"
        )
    return out


@dataclass
class Cost:
    calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_input_tokens: int = 0
    cache_creation_input_tokens: int = 0
    context_bytes: int = 0
    reconstruction_bytes: int = 0

    def add(self, usage: dict[str, int], context_bytes: int) -> None:
        self.calls += 1
        self.input_tokens += usage.get("input_tokens", 0)
        self.output_tokens += usage.get("output_tokens", 0)
        self.cache_read_input_tokens += usage.get("cache_read_input_tokens", 0)
        self.cache_creation_input_tokens += usage.get("cache_creation_input_tokens", 0)
        self.context_bytes += context_bytes

    @property
    def tokens(self) -> int:
        return self.input_tokens + self.output_tokens + self.cache_read_input_tokens + self.cache_creation_input_tokens

    @property
    def usd(self) -> float:
        return (
            self.input_tokens * PRICES["input"]
            + self.output_tokens * PRICES["output"]
            + self.cache_read_input_tokens * PRICES["cache_read"]
            + self.cache_creation_input_tokens * PRICES["cache_write"]
        ) / 1e6


def usage_for(prompt: str, answer: str, cached_prefix: int) -> dict[str, int]:
    """Token counts (≈ bytes / 4) with a prompt cache: the first ``cached_prefix`` bytes were sent before."""
    total = len(prompt.encode())
    cached = min(cached_prefix, total)
    return {
        "input_tokens": max(1, (total - cached) // 4),
        "output_tokens": max(1, len(answer.encode()) // 4),
        "cache_read_input_tokens": cached // 4,
        "cache_creation_input_tokens": (total - cached) // 4 if cached_prefix >= 0 else 0,
    }
