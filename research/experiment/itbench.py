"""``--import-itbench DIR``: ITBench scenario folders (groundtruth.yaml, groundtruth_v1.yaml) → Scenario.

alerts ← ``alerts``; read-tool answers ← the alerts' own descriptions (what monitoring shows); world mitigations ←
``solutions`` (their mutating kubectl steps); root cause ← the ``root_cause`` groups and the ``aliases`` lists that
hold them. The ground truth (root cause, propagation, fault, solutions, the scenario's name) goes to the judge and
the world only: nothing an agent reads carries it.
DIR is one scenario folder or a folder of them. Missing required parts stop with a message naming file and field.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from decklog.core.errors import InvalidInput
from research.experiment.scenario import Scenario, parse_scenario

READ_ONLY = (" get ", " describe ", " logs ", " top ")


def _load(path: Path) -> dict[str, Any]:
    if not path.exists():
        return {}
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise InvalidInput(f"{path}: not readable YAML: {str(exc).splitlines()[0]}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise InvalidInput(f"{path}: expected a mapping at the top")
    return data


def _spec(data: dict[str, Any]) -> dict[str, Any]:
    spec = data.get("spec") or {}
    return spec if isinstance(spec, dict) else {}


def scenario_dirs(root: Path) -> list[Path]:
    if not root.is_dir():
        raise InvalidInput(f"--import-itbench {root}: not a directory")
    if _is_scenario(root):
        return [root]
    found = sorted((p for p in root.iterdir() if p.is_dir() and _is_scenario(p)), key=lambda p: p.name)
    if not found:
        raise InvalidInput(f"--import-itbench {root}: no folder with groundtruth.yaml or groundtruth_v1.yaml in it")
    return found


def _is_scenario(path: Path) -> bool:
    return (path / "groundtruth.yaml").exists() or (path / "groundtruth_v1.yaml").exists()


def import_dir(root: Path) -> list[Scenario]:
    return [convert(d) for d in scenario_dirs(root)]


def _alerts(v1: dict[str, Any], v2: dict[str, Any]) -> list[dict[str, Any]]:
    steps = []
    for i, a in enumerate(v1.get("alerts") or v2.get("alerts") or []):
        if not isinstance(a, dict):
            continue
        name = str(a.get("id") or a.get("name") or f"alert-{i}")
        group = str(a.get("group_id") or "")
        desc = str((a.get("metadata") or {}).get("description") or name)
        steps.append(
            {
                "at": 10 * i,
                "type": "alert",
                "fingerprint": f"{group}:{name}" if group else name,
                "service": group,
                "title": desc[:500],
            }
        )
    return steps


def _root_cause(folder: Path, v1: dict[str, Any], v2: dict[str, Any]) -> dict[str, Any]:
    roots = [
        str(g["id"]) for g in v1.get("groups") or [] if isinstance(g, dict) and g.get("root_cause") and g.get("id")
    ]
    entities = [
        str((e.get("metadata") or {}).get("name"))
        for e in v2.get("entities") or []
        if isinstance(e, dict) and (e.get("metadata") or {}).get("name")
    ]
    if not roots and not entities:
        raise InvalidInput(
            f"{folder}: no root cause: groundtruth_v1.yaml spec.groups has no root_cause: true "
            "and groundtruth.yaml spec.entities is empty"
        )
    aliases: list[str] = [*roots[1:], *entities]
    for group in v1.get("aliases") or []:
        if isinstance(group, list) and any(str(x) in roots for x in group):
            aliases.extend(str(x) for x in group)
    entity = roots[0] if roots else entities[0]
    return {"entity": entity, "aliases": [a for a in dict.fromkeys(aliases) if a != entity]}


def _recommended(v1: dict[str, Any]) -> list[str]:
    items = v1.get("recommendedActions") or v1.get("recommended_actions") or []
    return [
        str(i["solution"]["id"])
        for i in items
        if isinstance(i, dict) and isinstance(i.get("solution"), dict) and i["solution"].get("id")
    ]


def _mitigations(folder: Path, v1: dict[str, Any], v2: dict[str, Any]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for alternative in v2.get("solutions") or []:
        steps = alternative if isinstance(alternative, list) else [alternative]
        for step in steps:
            for s in (step or {}).get("steps") or [] if isinstance(step, dict) else []:
                cmd = " ".join(str((s or {}).get("command") or "").split())
                if cmd and not any(word in f" {cmd} " for word in READ_ONLY):
                    out.append({"action": "kubectl", "params": {"command": cmd}})
    if not out:  # no kubectl solution: the recommended actions (groundtruth_v1.yaml) name the fix
        out = [{"action": "recommended", "params": {"id": rid}} for rid in _recommended(v1) if "no_action" not in rid]
    if not out and not _recommended(v1):
        raise InvalidInput(
            f"{folder}: no mitigation: groundtruth.yaml spec.solutions has no mutating step "
            "and groundtruth_v1.yaml has no recommendedActions"
        )
    return out


def _tools(alerts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The read tools an agent may call: what the monitoring shows about each alert (its description and the group
    it fired on). Nothing from the ground truth: no root cause, propagation, fault, solution or scenario name, so
    no tool names a suspect or suggests a fix, and the scripted policy (which names a cause only from a tool that
    points at one) cannot diagnose these scenarios: the judge then scores what it did, not what it was told."""
    return [
        {"name": f"alert_detail_{i}", "kind": "alert", "answer": f"{a['title']} (alert group {a['service'] or '-'})"}
        for i, a in enumerate(alerts)
    ]


def convert(folder: Path) -> Scenario:
    v2 = _spec(_load(folder / "groundtruth.yaml"))
    v1 = _spec(_load(folder / "groundtruth_v1.yaml"))
    alerts = _alerts(v1, v2)
    if not alerts:
        raise InvalidInput(f"{folder}: no alerts in groundtruth_v1.yaml or groundtruth.yaml spec.alerts")
    rc = _root_cause(folder, v1, v2)
    mitigations = _mitigations(folder, v1, v2)
    data = {
        "id": f"itbench-{folder.name}",
        "title": f"ITBench {folder.name}",  # the scenario's own name is its diagnosis
        "timeline": alerts,
        "act": bool(mitigations),
        "tools": _tools(alerts),
        "world": {"mitigations": mitigations, "resolves": [a["fingerprint"] for a in alerts] if mitigations else []},
        "root_cause": rc,
        "invariants": {"evidence_kinds": ["alert"]},
        "source": f"itbench:{folder.name}",
    }
    return parse_scenario(data, str(folder))
