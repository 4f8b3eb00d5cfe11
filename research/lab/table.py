"""``table.md`` from the rows of ``results.jsonl``: per source (built-in, ITBench, a folder), decklog and the three
baselines side by side — top-1 and top-3 accuracy, median times, harm, Slack messages — and the skipped
scenarios with their reasons."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from research.lab.judge import BASELINES, median
from research.lab.scenario import Skipped


def _group(source: str) -> str:
    return source.split(":", 1)[0]


def _pct(hits: int, n: int) -> str:
    return f"{hits}/{n} ({100 * hits / n:.0f}%)" if n else "—"


def _top(rows: list[dict[str, Any]], key: str, k: int) -> str:
    return _pct(sum(1 for r in rows if r.get(key) is not None and r[key] <= k), len(rows))


def _num(value: float | None, unit: str = " s") -> str:
    return "—" if value is None else f"{value:g}{unit}"


def render(rows: list[dict[str, Any]], skipped: list[Skipped], *, wall_s: float | None = None) -> str:
    groups: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        groups[_group(row["source"])].append(row)
    lines = ["# Lab results", ""]
    lines.append(
        "decklog's diagnosis is its hypotheses (rank of the true cause among them); the baselines use the same alerts "
        "and changes. Times are seconds from the first alert. Harm counts actions that ran but were not the "
        "scenario's fix."
    )
    lines.append("")
    for name in sorted(groups):
        g = groups[name]
        lines += [f"## {name} ({len(g)} runs)", ""]
        lines.append(
            "| who | top-1 | top-3 | median t_incident | median t_correct | mitigated | harmful actions | "
            "median Slack messages |"
        )
        lines.append("|---|---|---|---|---|---|---|---|")
        lines.append(
            "| decklog | "
            + " | ".join(
                [
                    _top(g, "correct_rank", 1),
                    _top(g, "correct_rank", 3),
                    _num(median([r["t_incident_s"] for r in g if r["t_incident_s"] is not None])),
                    _num(median([r["t_correct_s"] for r in g if r["t_correct_s"] is not None])),
                    _pct(sum(1 for r in g if r["mitigated"]), len(g)),
                    str(sum(r["harmful_actions"] for r in g)),
                    _num(median([float(r["slack_messages"]) for r in g]), ""),
                ]
            )
            + " |"
        )
        for base in BASELINES:
            key = f"baseline_{base}_rank"
            lines.append(
                f"| baseline: {base.replace('_', ' ')} | {_top(g, key, 1)} | {_top(g, key, 3)} | — | — | — | — | — |"
            )
        lines.append("")
        lines.append(
            "| scenario | seed | expected | decklog's first | rank | t_correct | proposed | ran | mitigated | harm |"
        )
        lines.append("|---|---|---|---|---|---|---|---|---|---|")
        for r in sorted(g, key=lambda r: (r["scenario"], r["seed"])):
            lines.append(
                f"| {r['scenario']} | {r['seed']} | {r['expected_root_cause']} / {r['expected_fix']} | "
                f"{r['first_hypothesis'] or '—'} | {r['correct_rank'] or '—'} | {_num(r['t_correct_s'])} | "
                f"{', '.join(r['proposed']) or '—'} | {', '.join(r['actions_run']) or '—'} | "
                f"{'yes' if r['mitigated'] else 'no'} | {r['harmful_actions']} |"
            )
        lines.append("")
    if skipped:
        lines += [f"## Skipped ({len(skipped)})", "", "| scenario | source | why |", "|---|---|---|"]
        lines += [f"| {s.name} | {s.source} | {s.reason} |" for s in skipped]
        lines.append("")
    if wall_s is not None:
        lines.append(f"Wall time: {wall_s:.0f} s for {len(rows)} runs.")
        lines.append("")
    return "\n".join(lines)
