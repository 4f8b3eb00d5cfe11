"""The lab's parts without a world: scenario files, the ITBench importer (ground truth kept from the world), the
judge and its baselines, the table, the CLI's refusals. One scenario end to end is in test_lab_e2e.py."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from research.lab import itbench
from research.lab.graph import DEPENDS_ON, SERVICES, catalog_documents
from research.lab.judge import AlertLog, count_bot_messages, is_correct, score
from research.lab.scenario import BUILTIN, BadScenario, Expect, Truth, load, load_dir
from research.lab.shop import KINDS
from research.lab.table import render
from research.lab.world import Change, decklog_config

ROOT = Path(__file__).resolve().parents[2]


def _itbench() -> Path:
    for candidate in (ROOT.parent / "shared", ROOT / "shared", Path("/work/shared")):
        if (candidate / "scenarios" / "itbench").is_dir():
            return candidate / "scenarios" / "itbench"
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail("the ITBench subset (shared/scenarios/itbench) is missing beside the checkout", pytrace=False)
    pytest.skip("the ITBench subset (shared/scenarios/itbench) is not beside this checkout")


# -- scenarios --------------------------------------------------------------------------------------------------


def test_the_built_in_suite_covers_every_fault_kind_decoys_two_faults_and_a_do_not_act_case() -> None:
    cases = load_dir(BUILTIN, "builtin")
    assert len(cases) >= 20
    kinds = {step.kind for case in cases for step in case.scenario.faults}
    assert kinds == set(KINDS)
    assert any(case.scenario.decoys for case in cases)
    assert any(len(case.scenario.faults) >= 2 for case in cases)
    assert any(case.truth.expect.fixes == ("none",) for case in cases)
    assert len({case.scenario.name for case in cases}) == len(cases)


def test_a_scenario_names_the_field_it_gets_wrong(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "name": "x",
                "faults": [{"kind": "meteor", "target": "payment"}],
                "expect": {"root_cause": "payment", "fix": "restart"},
            }
        )
    )
    with pytest.raises(BadScenario, match=r"bad.yaml: faults.*meteor"):
        load(path, "dir")
    path.write_text(yaml.safe_dump({"name": "x", "expect": {"root_cause": "payment", "fix": "reboot_the_world"}}))
    with pytest.raises(BadScenario, match="fix"):
        load(path, "dir")


def test_the_scenario_the_world_gets_has_no_expect() -> None:
    case = load(BUILTIN / "bad-deploy-payment.yaml", "builtin")
    assert "expect" not in case.scenario.model_dump()
    assert "root_cause" not in case.scenario.model_dump_json()


# -- the shop's catalog and decklog's configuration ---------------------------------------------------------------


def test_the_catalog_is_backstage_components_with_the_demo_dependencies() -> None:
    docs = catalog_documents()
    components = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Component"}
    assert set(components) == set(SERVICES)
    assert components["checkout"]["spec"]["dependsOn"] == [f"component:default/{d}" for d in DEPENDS_ON["checkout"]]
    assert all(c["spec"]["owner"] and c["spec"]["system"] for c in components.values())


def test_decklogs_configuration_declares_the_lab_actions_on_the_control_api() -> None:
    import tomllib

    config = tomllib.loads(decklog_config("http://127.0.0.1:9"))
    names = {a["name"]: a for a in config["actions"]}
    assert set(names) == {"rollback_deploy", "revert_config", "restart", "scale_up", "flag_off"}
    assert names["restart"]["executor"] == {
        "type": "http",
        "url": "http://127.0.0.1:9/actions/restart",
        "reconcile_url": "http://127.0.0.1:9/reconcile",
        "timeout_s": 5,
    }


# -- ITBench ------------------------------------------------------------------------------------------------------


def test_itbench_scenarios_become_lab_faults_and_the_rest_are_skipped_with_a_reason() -> None:
    folder = _itbench()
    cases, skipped = itbench.import_dir(folder)
    assert len(cases) + len(skipped) == len([p for p in folder.iterdir() if (p / "scenario.yaml").exists()])
    assert all(s.reason for s in skipped)
    by_name = {c.scenario.name: c for c in cases}
    shipping = by_name["itbench-16"]  # an environment variable change on shipping
    assert [(s.kind, s.target) for s in shipping.scenario.faults] == [("config_change", "shipping")]
    assert shipping.truth.expect.causes == ("shipping",) and shipping.truth.expect.fixes == ("revert_config",)
    assert {s.name for s in skipped} >= {"itbench-47"}  # bookinfo's gateway is not the shop


def test_itbench_ground_truth_reaches_the_judge_and_never_the_world() -> None:
    folder = _itbench()
    cases, _ = itbench.import_dir(folder)
    for case in cases:
        world_part = case.scenario.model_dump_json()
        gt = (folder / f"scenario_{case.truth.source.split(':')[1]}" / "groundtruth.yaml").read_text()
        assert case.truth.ground_truth["groundtruth"] == yaml.safe_load(gt)
        solutions = yaml.safe_load(gt)["spec"].get("solutions") or []
        texts = [
            step.get(k, "") for alt in solutions for sol in alt for step in sol["steps"] for k in ("text", "command")
        ]
        incident = yaml.safe_load(
            (folder / f"scenario_{case.truth.source.split(':')[1]}" / "incident.yaml").read_text()
        )
        texts.append(incident["scenario"]["metadata"]["name"])
        leaked = [t for t in texts if t and t in world_part]
        assert leaked == [], (case.scenario.name, leaked)
        assert case.scenario.description == ""


def test_the_importer_works_on_any_folder_of_the_itbench_layout(tmp_path: Path) -> None:
    source = _itbench() / "scenario_20"
    target = tmp_path / "scenario_900"
    shutil.copytree(source, target)
    text = (target / "scenario.yaml").read_text().replace("product-catalog", "currency")
    (target / "scenario.yaml").write_text(text)
    (target / "groundtruth.yaml").write_text(
        (target / "groundtruth.yaml").read_text().replace("product-catalog", "currency")
    )
    cases, skipped = itbench.import_dir(tmp_path)
    assert skipped == []
    assert [(s.kind, s.target) for s in cases[0].scenario.faults] == [("bad_deploy", "currency")]
    assert cases[0].truth.source == "itbench:900" and cases[0].truth.expect.causes == ("currency",)


# -- the judge ----------------------------------------------------------------------------------------------------


def _entry(kind: str, at: str, seq: int, **payload: object) -> dict[str, object]:
    return {"kind": kind, "at": at, "seq": seq, "payload": payload}


def _alerts(*items: tuple[str, str, str]) -> AlertLog:
    log = AlertLog()
    log.record([{"labels": {"alertname": n, "service": s}, "startsAt": at} for n, s, at in items], 2e9)
    log.firing_now = set()
    return log


def test_a_change_counts_as_the_cause_only_when_the_fault_made_it() -> None:
    truth = Truth(expect=Expect(root_cause="payment", fix="rollback_deploy"))
    changes = [Change("a-1", "payment", 10.0, "deploy", "decoy:0"), Change("a-2", "payment", 20.0, "deploy", "fault:0")]
    assert is_correct("change/a-2", truth, changes)
    assert not is_correct("change/a-1", truth, changes)
    assert is_correct("component:default/payment", truth, changes)
    assert not is_correct("checkout", truth, changes)


def test_a_row_ranks_decklogs_hypotheses_counts_harm_and_computes_the_baselines() -> None:
    truth = Truth(expect=Expect(root_cause="payment", fix="restart"))
    changes = [Change("d-1", "ad", 1796640000.0, "deploy", "decoy:0")]
    alerts = _alerts(
        ("HighErrorRate", "checkout", "2026-12-07T10:40:16Z"), ("HighErrorRate", "payment", "2026-12-07T10:40:17Z")
    )
    entries = [
        _entry("hypothesis", "2026-12-07T10:40:20Z", 5, text="t", subject="checkout", rank=1),
        _entry("hypothesis", "2026-12-07T10:40:20Z", 6, text="t", subject="payment", rank=2),
        _entry(
            "proposal", "2026-12-07T10:40:21Z", 7, proposal_id="p-1", action="restart", params={"service": "payment"}
        ),
        _entry(
            "action_started", "2026-12-07T10:40:22Z", 8, run_id="r1", action="restart", params={"service": "payment"}
        ),
        _entry("action_result", "2026-12-07T10:40:22Z", 9, run_id="r1", action="restart", outcome="applied"),
        _entry("action_started", "2026-12-07T10:40:23Z", 10, run_id="r2", action="scale_up", params={"service": "ad"}),
        _entry("action_result", "2026-12-07T10:40:23Z", 11, run_id="r2", action="scale_up", outcome="applied"),
    ]
    incidents = [{"created_at": "2026-12-07T10:40:18Z"}]
    row = score(
        scenario="s",
        seed=0,
        truth=truth,
        incidents=incidents,
        entries=entries,
        alerts=alerts,
        changes=changes,
        slack_messages=4,
    )
    assert row["first_hypothesis"] == "checkout" and row["correct_rank"] == 2
    assert row["t_incident_s"] == 2.0 and row["t_correct_s"] == 4.0
    assert row["actions_run"] == ["restart(payment)", "scale_up(ad)"] and row["harmful_actions"] == 1
    assert row["baseline_first_alert"] == "checkout" and row["baseline_first_alert_rank"] == 2
    assert row["baseline_recent_deploy"] == "change/d-1" and row["baseline_recent_deploy_rank"] is None
    assert row["baseline_random_alerting"] in ("checkout", "payment")
    assert row["mitigated"] is True


def test_slack_messages_are_the_bots_in_channels_and_threads() -> None:
    snapshot = [
        {
            "messages": [
                {
                    "type": "message",
                    "user": "U0BOT",
                    "replies": [{"type": "message", "user": "U0BOT"}, {"type": "message", "user": "U0ALICE"}],
                }
            ]
        }
    ]
    assert count_bot_messages(snapshot) == 2


def test_the_table_sets_decklog_beside_the_three_baselines_and_lists_what_was_skipped() -> None:
    from research.lab.scenario import Skipped

    row = {
        "scenario": "s",
        "source": "itbench:1",
        "seed": 0,
        "expected_root_cause": "payment",
        "expected_fix": "restart",
        "first_hypothesis": "payment",
        "correct_rank": 1,
        "t_incident_s": 1.0,
        "t_correct_s": 3.0,
        "proposed": [],
        "actions_run": [],
        "mitigated": False,
        "harmful_actions": 0,
        "slack_messages": 3,
        "baseline_recent_deploy_rank": None,
        "baseline_first_alert_rank": 2,
        "baseline_random_alerting_rank": 1,
    }
    text = render([row], [Skipped(name="itbench-47", source="itbench:47", reason="not the shop")])
    assert "## itbench (1 runs)" in text
    assert "| decklog | 1/1 (100%) | 1/1 (100%) |" in text
    assert "| baseline: first alert | 0/1 (0%) | 1/1 (100%) |" in text
    assert "| itbench-47 | itbench:47 | not the shop |" in text


# -- the CLI ------------------------------------------------------------------------------------------------------


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "research.lab", *args], capture_output=True, text=True, cwd=ROOT, timeout=120
    )


def test_the_cli_refuses_a_missing_folder_with_one_line_and_writes_nothing(tmp_path: Path) -> None:
    out = tmp_path / "out"
    done = _cli("run", "--scenarios", str(tmp_path / "nope"), "--out", str(out))
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "nope" in done.stderr and "Traceback" not in done.stderr
    assert not out.exists()


def test_the_cli_names_the_scenario_file_and_field_at_fault(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text(
        json.dumps({"name": "a", "expect": {"root_cause": "x", "fix": "restart"}, "duration": -1})
    )
    done = _cli("run", "--scenarios", str(tmp_path), "--out", str(tmp_path / "out"))
    assert done.returncode == 2 and "a.yaml: duration" in done.stderr


# -- the shop's fault semantics and the person's rule -------------------------------------------------------------


def test_only_the_action_that_would_end_a_fault_in_production_ends_it() -> None:
    from research.lab.shop import Shop

    shop = Shop(seed=0)
    shop.add_fault("bad_deploy", "payment", {"effect": "errors", "version": "v1.1.0"})
    assert shop.act("restart", {"service": "payment"})["ended_faults"] == 0  # a restart keeps the bad version
    assert shop.active("payment", "errors")
    done = shop.act("rollback_deploy", {"service": "payment"})
    assert done["ended_faults"] == 1 and done["rolled_back_from"] == "v1.1.0" and done["version"] == "v1.0.0"
    assert shop.active("payment") == []
    shop.add_fault("config_change", "cart", {"effect": "errors"})
    with pytest.raises(ValueError, match="no previous version"):
        shop.act("rollback_deploy", {"service": "cart"})  # nothing was deployed: a rollback cannot undo a config push
    assert shop.act("revert_config", {"service": "cart"})["ended_faults"] == 1
    shop.add_fault("flag_on", "", {"flag": "paymentFailure"})
    assert shop.active("payment", "errors")
    assert shop.act("flag_off", {"flag": "paymentFailure"})["ended_faults"] == 1


def test_the_person_approves_for_an_alerting_service_or_one_it_depends_on() -> None:
    from research.lab.person import upstream_of

    reach = upstream_of({"checkout"})
    assert {"checkout", "payment", "cart", "cart-cache", "quote"} <= reach
    assert "frontend" not in reach and "ad" not in reach
