"""The experiment measures the strategies, not its own harness: an orchestrator that sees a sibling's run in its
transcript does not run it again, ``dup_delivery`` hands one work item to two workers (once), and the ITBench
import gives the agents the symptoms, never the answer."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from decklog.bot.runtime import Runtime
from decklog.bot.settings import load_settings
from research.experiment import itbench, policy, scenario
from research.experiment.one import run_one
from research.experiment.run import Spec

ITBENCH = Path(__file__).resolve().parents[2] / "shared" / "scenarios" / "itbench"
ITBENCH = ITBENCH if ITBENCH.is_dir() else Path("/work/shared/scenarios/itbench")


def _by_id(sid: str) -> scenario.Scenario:
    return next(s for s in scenario.builtin() if s.id == sid)


def _run(tmp_path: Path, sid: str, arm: str, fault: str, seed: int = 1) -> dict[str, Any]:
    return asyncio.run(run_one(Spec(_by_id(sid), arm, fault, seed), tmp_path / "run", "scripted"))


def _turn_actors(r: dict[str, Any]) -> list[str]:
    async def read() -> list[str]:
        rt = await Runtime.open(load_settings(data_dir=Path(r["data_dir"]), database_url=None))
        try:
            return [e.actor.id for s in r["scopes"] for e in await rt.store.read(s, kinds=["agent_turn"])]
        finally:
            await rt.close()

    return asyncio.run(read())


_LINES = [
    "TOOLS\tnames=dns_logs",
    "CONDITIONS\tlist=alert still firing",
    "EVIDENCE\tseq=4\ttool=dns_logs\tkind=logs\tsuspect=dns\thold=0\tkey=revert_config(key=ndots,service=dns)"
    '\tfix={"action": "revert_config", "params": {"key": "ndots", "service": "dns"}}\ttext=NXDOMAIN',
    "HYPOTHESIS\tentity=dns",
    "ALERT\tfp=api-errors\tstatus=firing",
    'OBLIGATION\tid=ob-1\tstatus=open\taction=revert_config\tparams={"key": "ndots", "service": "dns"}'
    "\tconditions=alert still firing",
]


def test_an_open_obligation_whose_action_the_transcript_shows_applied_is_cancelled_not_proposed() -> None:
    """The orchestrator's transcript carries the sibling incidents' results as APPLIED lines (no RELATED section:
    that is the cold views'). An obligation opened before the sibling's run applied is cancelled with a reason."""
    before = policy.decide("\n".join(_LINES))
    assert before["propose"]["obligation_id"] == "ob-1"
    applied = "APPLIED\tkey=revert_config(key=ndots,service=dns)\taction=revert_config\tscope=incident/web"
    after = policy.decide("\n".join([*_LINES, applied]))
    assert "propose" not in after, after
    assert after["cancel"]["obligation_id"] == "ob-1"
    assert "revert_config(key=ndots,service=dns)" in after["cancel"]["reason"]
    assert "incident/web" in after["cancel"]["reason"]


@pytest.mark.parametrize("fault", ["kill_after_claim", "lease_expiry", "executor_timeout"])
def test_the_orchestrator_runs_the_storms_fix_once_under_faults(tmp_path: Path, fault: str) -> None:
    r = _run(tmp_path, "storm", "central", fault, seed=1)
    assert r["duplicate_effects"] == 0 and r["correct"] is True, r["checks"]


def test_dup_delivery_gives_one_work_item_to_two_workers_once(tmp_path: Path) -> None:
    """The README's fault: one work item to two workers, once in the run (not every round)."""
    r = _run(tmp_path, "bad-deploy", "nm", "dup_delivery")
    actors = _turn_actors(r)
    doubled = [a for a in actors if a.startswith("worker-dup-")]
    assert len(doubled) == 1, actors
    assert r["correct"] is True, r["checks"]


# -- ITBench: the ground truth goes to the judge only ----------------------------------------------------------


def _ground_truth(folder: Path) -> set[str]:
    """The strings a correct diagnosis or fix would name: the root-cause groups and entities, the faulted entity,
    the solution commands and the recommended actions (ITBench's alias lists also hold the alerting services, which
    the monitoring shows, so they are not in it)."""
    import yaml

    def spec(name: str) -> dict[str, Any]:
        p = folder / name
        data = yaml.safe_load(p.read_text()) if p.exists() else {}
        return (data or {}).get("spec") or {}

    v1, v2 = spec("groundtruth_v1.yaml"), spec("groundtruth.yaml")
    out = {str(g["id"]) for g in v1.get("groups") or [] if g.get("root_cause")}
    out |= {str((f.get("entity") or {}).get("name") or "") for f in v1.get("fault") or []}
    out |= {str((e.get("metadata") or {}).get("name") or "") for e in v2.get("entities") or []}
    for alt in v2.get("solutions") or []:
        for step in alt if isinstance(alt, list) else [alt]:
            for s in (step or {}).get("steps") or []:
                out.add(" ".join(str(s.get("command") or "").split()))
    for a in v1.get("recommendedActions") or []:
        out.add(str((a.get("solution") or {}).get("id") or ""))
        out |= {str(x) for x in (a.get("solution") or {}).get("actions") or []}
    for p in v1.get("propagations") or []:
        out |= {str(p.get("condition") or ""), str(p.get("effect") or "")}
    return {s.lower() for s in out if len(s) > 3 and s != "To be specified".lower()}


def _agent_readable(s: scenario.Scenario) -> list[str]:
    """Everything of a converted scenario an agent can read beyond the alerts themselves: the read tools (their
    names, answers, suspects and fixes, which the tool observations carry), the incident's title, the messages.
    What the alerts say (their description and group, as the monitoring reports them) is taken out first: an
    alert may well fire on the faulty service, and saying so again gives nothing away."""
    observed = sorted({x.lower() for st in s.timeline if st.type == "alert" for x in (st.title, st.service) if x})
    out = [s.title]
    for t in s.tools:
        out += [t.name, t.kind, t.answer, t.suspect, json.dumps(t.fix) if t.fix else ""]
    out += [st.text for st in s.timeline if st.type != "alert"]
    texts = []
    for x in (x.lower() for x in out if x):
        for seen in sorted(observed, key=len, reverse=True):
            x = x.replace(seen, " ")
        texts.append(x)
    return texts


def test_no_itbench_read_tool_hands_the_policy_the_ground_truth() -> None:
    folders = itbench.scenario_dirs(ITBENCH)
    assert len(folders) >= 5
    leaks = []
    for folder in folders:
        s = itbench.convert(folder)
        truth = _ground_truth(folder)
        assert truth, folder
        assert not any(t.suspect or t.fix or t.hold for t in s.tools), folder
        for text in _agent_readable(s):
            leaks += [(folder.name, t, text[:120]) for t in truth if t in text]
        assert s.root_cause.names() & {n.lower() for n in truth}  # the judge still has it
    assert not leaks, leaks[:5]
