"""One lab scenario end to end: the shop, Debian's Prometheus and Alertmanager, ``decklog serve`` in the sandbox,
the scripted on-call person and the judge — then nothing decklog was handed or wrote may contain the answer.

A bad payment deploy: Prometheus's rules fire, Alertmanager posts to decklog, decklog links the deploy, suspects
it, proposes ``rollback_deploy``; the person approves (payment is alerting), the executor calls the shop's control
API, the fault ends and the alerts resolve.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from research.lab.runner import run_all
from research.lab.scenario import BUILTIN, Case, load
from tests.helpers.monitoring import ALERTMANAGER, PROMETHEUS, require_binary


def _files(directory: Path) -> list[Path]:
    return [p for p in directory.rglob("*") if p.is_file()]


async def test_one_scenario_end_to_end_is_diagnosed_fixed_and_the_answer_never_reaches_decklog() -> None:
    require_binary(PROMETHEUS)
    require_binary(ALERTMANAGER)
    case = load(BUILTIN / "bad-deploy-payment.yaml", "builtin")
    # not pytest's tmp_path: its name carries the test's name, and decklog is handed paths under it
    tmp_path = Path(tempfile.mkdtemp(prefix="lab-"))
    try:
        await _run_and_check(case, tmp_path)
    finally:
        shutil.rmtree(tmp_path, ignore_errors=True)


async def _run_and_check(case: Case, tmp_path: Path) -> None:
    rows = await run_all([case], [], seeds=1, jobs=1, out=tmp_path / "out", quiet=True)

    [row] = rows
    assert "error" not in row, row.get("error")
    assert row["source"] == "builtin" and row["expected_root_cause"] == "payment"
    assert row["incidents"] >= 1 and row["t_incident_s"] is not None
    assert row["first_hypothesis"].startswith("change/") and row["correct_rank"] == 1  # the bad deploy's change
    assert row["actions_run"] == ["rollback_deploy(payment)"] and row["harmful_actions"] == 0
    assert row["mitigated"] is True and row["slack_messages"] > 0
    for name in ("baseline_recent_deploy", "baseline_first_alert", "baseline_random_alerting"):
        assert name in row
    assert (tmp_path / "out" / "table.md").read_text().count("| decklog |") == 1

    # Everything decklog was handed (config, catalog, environment) and everything it wrote (its data directory):
    # none of it may carry the scenario's name, its description or its expect block.
    agent = Path(row["run_dir"]) / "agent"
    assert (agent / "data").is_dir() and (agent / "catalog-info.yaml").is_file()
    secrets = [case.scenario.name, case.scenario.description, "root_cause", "rollback_deploy\nexpect", "bad_deploy"]
    found = [
        (str(path.relative_to(agent)), secret)
        for path in _files(agent)
        for secret in secrets
        if secret.encode() in path.read_bytes()
    ]
    assert found == []
