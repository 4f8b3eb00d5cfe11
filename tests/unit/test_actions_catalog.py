"""The action catalog from decklog.toml, parameter normalisation, and the safety conditions as pure checks."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, cast

import pytest

from decklog.adapters.executors import EXECUTOR_TYPES, ExecutorAdapter, build_executor
from decklog.adapters.executors.options import ExecutorOptions
from decklog.bot.actions import build_catalog
from decklog.bot.config import load_config
from decklog.bot.settings import Settings, SettingsError, example_config_path
from decklog.core.actions import Catalog, ChangeFact, Evidence
from decklog.core.actions.catalog import substitute
from decklog.core.actions.conditions import describe_drift, evaluate, inputs_digest
from decklog.core.actions.params import ParamSpec, args_hash, normalise, preview
from decklog.core.errors import InvalidInput
from decklog.core.state import AlertState, RunState, empty_state
from tests.actions_support import effect_action
from tests.conftest import test_config


def test_the_shipped_example_declares_the_rollback_and_the_status_page_update() -> None:
    config = load_config(example_config_path())
    unset = Catalog.from_config(config.actions, env={}, executors=EXECUTOR_TYPES)
    assert {a.name: a.available for a in unset} == {
        "rollback_deploy": False,
        "restore_deploy": False,
        "status_page_update": False,
        "page_oncall": False,  # available once DECKLOG_PAGERDUTY_ROUTING_KEY is set
    }
    assert unset.get("rollback_deploy").unavailable_reason == "DECKLOG_DEPLOY_API_URL is not set"
    env = {
        "DECKLOG_DEPLOY_API_URL": "http://deploy.internal:8080/",
        "DECKLOG_STATUSPAGE_API_URL": "https://api.statuspage.io",
        "DECKLOG_STATUSPAGE_PAGE_ID": "kctbh9vrtdwd",
    }
    catalog = Catalog.from_config(config.actions, env=env, executors=EXECUTOR_TYPES, timeout_override=3.5)
    rollback = catalog.get("rollback_deploy")
    assert rollback.risk == "R2" and rollback.available
    assert rollback.executor.options["url"] == "http://deploy.internal:8080/rollback"
    assert rollback.executor.options["reconcile_url"] == "http://deploy.internal:8080/reconcile"
    assert rollback.safety_conditions == (
        "alert_still_firing",
        "change_is_latest_on_service",
        "no_other_run_in_flight",
        "not_run_in_related_incident",
    )
    assert rollback.compensation is not None and rollback.compensation.action == "restore_deploy"
    status = catalog.get("status_page_update")
    assert (
        status.risk == "R2"
        and status.executor.type == "statuspage"
        and status.executor.options["page_id"] == "kctbh9vrtdwd"
    )
    assert {a.executor.timeout_s for a in catalog} == {3.5}  # DECKLOG_EXECUTOR_TIMEOUT overrides every timeout
    no_page = Catalog.from_config(
        config.actions, env={"DECKLOG_STATUSPAGE_API_URL": "https://api.statuspage.io"}, executors=EXECUTOR_TYPES
    )
    assert "page id" in no_page.get("status_page_update").unavailable_reason
    page_url = Catalog.from_config(
        config.actions,
        env={"DECKLOG_STATUSPAGE_API_URL": "https://KEY@api.statuspage.io/v1/pages/abc"},
        executors=EXECUTOR_TYPES,
    )
    assert page_url.get("status_page_update").available


@pytest.mark.parametrize(
    ("change", "where"),
    [
        ({"risk": "R5"}, "actions[0] (poke).risk"),
        ({"safety_conditions": ["moon_is_full"]}, "unknown safety condition 'moon_is_full'"),
        ({"params": {"target": {"type": "colour"}}}, "actions[0] (poke).params.target.type"),
        ({"params": {"Target": {}}}, "lower_snake_case"),
        ({"executor": {"type": "ftp", "url": "ftp://x"}}, "executor.type"),
        ({"verify": "vibes"}, "verify"),
        ({"surprise": 1}, "surprise"),
        ({"compensation": {"action": "undo_poke"}}, "unknown action 'undo_poke'"),
    ],
)
def test_a_bad_action_table_names_the_key_at_fault(change: dict[str, Any], where: str) -> None:
    action = {**effect_action(), **change}
    with pytest.raises(InvalidInput, match=re.escape(where)):
        Catalog.from_config([action], env={"DEPLOY": "http://x"}, executors=EXECUTOR_TYPES)


@pytest.mark.parametrize(
    ("executor", "where", "says"),
    [
        ({"url": "http://x"}, "actions[0] (poke).executor.type", "an executor type is required (known: http, "),
        ({"type": "ftp", "url": "ftp://x"}, "actions[0] (poke).executor.type", "unknown executor type 'ftp' (known: "),
        ({"type": "http", "url": "http://x", "page_id": "p"}, "actions[0] (poke).executor.page_id", "not an option "),
        ({"type": "pagerduty", "url": "http://x", "headers": {}}, "actions[0] (poke).executor.headers", "pagerduty"),
        ({"type": "http", "url": "http://x", "headers": 5}, "actions[0] (poke).executor.headers", "dictionary"),
        ({"type": "statuspage", "url": "http://x", "api_key": 7}, "actions[0] (poke).executor.api_key", "string"),
        ({"type": "http", "url": "http://x", "timeout_s": 0}, "actions[0] (poke).executor.timeout_s", "greater than"),
    ],
)
def test_a_bad_executor_names_the_action_and_the_key(executor: dict[str, Any], where: str, says: str) -> None:
    """Each executor type's adapter validates its own options; the catalog names the action and the key."""
    action = {**effect_action(), "executor": executor}
    with pytest.raises(InvalidInput, match=re.escape(where)) as refused:
        Catalog.from_config([action], env={}, executors=EXECUTOR_TYPES)
    assert says in str(refused.value)
    assert str(refused.value).count(where) == 1  # the key is named once, not twice


def test_a_bad_executor_stops_start_up_naming_the_config_file_the_action_and_the_key(tmp_path: Path) -> None:
    config = test_config().model_copy(
        update={"actions": ({**effect_action(), "executor": {"type": "http", "url": "http://x", "page_id": "p"}},)}
    )
    with pytest.raises(SettingsError, match=re.escape("actions[0] (poke).executor.page_id")):
        build_catalog(Settings(data_dir=tmp_path), config)


def test_an_executor_type_is_one_adapter_and_one_registry_line() -> None:
    """A type core never heard of: its adapter (an options model and ``build``) in the registry is all it takes."""

    class EchoOptions(ExecutorOptions):
        NEEDS = ("url", "secret")

        secret: str = ""

    built: list[tuple[Any, float]] = []

    def build(options: EchoOptions, session: Any, timeout: float, egress: Any) -> Any:
        built.append((options, timeout))
        return object()

    types = {**EXECUTOR_TYPES, "echo": ExecutorAdapter("echo", EchoOptions, build)}
    action = {**effect_action(), "executor": {"type": "echo", "url": "${ECHO}/x", "secret": "${KEY}", "timeout_s": 3}}
    off = Catalog.from_config([action], env={"ECHO": "http://echo.internal"}, executors=types).get("poke")
    assert not off.available and off.unavailable_reason == "KEY is not set"
    on = Catalog.from_config([action], env={"ECHO": "http://echo.internal", "KEY": "k"}, executors=types).get("poke")
    assert on.available and on.executor.type == "echo" and on.executor.urls == ("http://echo.internal/x",)
    assert on.executor.options == {"url": "http://echo.internal/x", "secret": "k"}
    build_executor(on.executor, cast(Any, None), types=types)
    assert built == [(EchoOptions(url="http://echo.internal/x", secret="k"), 3.0)]
    with pytest.raises(InvalidInput, match=re.escape("unknown executor type 'echo'")):
        Catalog.from_config([action], env={}, executors=EXECUTOR_TYPES)


def test_twice_the_same_name_is_refused() -> None:
    with pytest.raises(InvalidInput, match="declared twice"):
        Catalog.from_config([effect_action(), effect_action()], env={"DEPLOY": "http://x"}, executors=EXECUTOR_TYPES)


async def test_a_bad_catalog_stops_start_up_with_the_config_path(make_server: Any) -> None:
    config = test_config().model_copy(update={"actions": ({**effect_action(), "risk": "R9"},)})
    with pytest.raises(SettingsError, match=r"DECKLOG_CONFIG: .*risk"):
        await make_server(config=config)


def test_environment_references() -> None:
    assert substitute("${A}/x", {"A": "http://h/"}) == ("http://h/x", [])
    assert substitute("$A and ${B:-dflt}", {"A": "1"}) == ("1 and dflt", [])
    assert substitute("${MISSING}/x", {}) == ("/x", ["MISSING"])


def test_normalising_makes_equal_arguments_equal() -> None:
    specs = {
        "service": ParamSpec(required=True, lowercase=True, pattern="[a-z0-9-]+"),
        "replicas": ParamSpec(type="integer", min=0, max=50, default=3),
        "force": ParamSpec(type="boolean", default=False),
        "note": ParamSpec(),
    }
    a = normalise(specs, {"service": "  Payments ", "replicas": "4", "force": "yes"})
    b = normalise(specs, {"force": True, "replicas": 4, "service": "payments"})
    assert a == b == {"force": True, "replicas": 4, "service": "payments"}
    assert preview("scale", a) == 'scale(force=true, replicas=4, service="payments")'
    assert args_hash("scale", a) == args_hash("scale", b) != args_hash("scale", {**a, "replicas": 5})
    assert normalise(specs, {"service": "x", "note": "  two   words "})["note"] == "two words"
    for bad, message in (
        ({"service": "pay ments"}, "does not match"),
        ({"service": "x", "replicas": 51}, "at most 50"),
        ({"service": "x", "replicas": 1.5}, "must be an integer"),
        ({"service": "x", "force": "maybe"}, "true or false"),
        ({"service": ["x"]}, "must be text"),
    ):
        with pytest.raises(InvalidInput, match=message):
            normalise(specs, bad)


def _state(**alerts: str) -> Any:
    state = empty_state("incident/payments-5xx")
    return state.model_copy(
        update={
            "alerts": {
                fp: AlertState(fingerprint=fp, status=status, service="payments", title=f"alert {fp}")
                for fp, status in alerts.items()
            },
            "linked": ("change/r4",),
        }
    )


def test_the_conditions_judge_recorded_facts() -> None:
    changes = Evidence(
        (
            ChangeFact("change/r3", ("payments",), "2026-09-19T02:00:00Z"),
            ChangeFact("change/r4", ("payments",), "2026-09-19T03:00:00Z"),
            ChangeFact("change/x1", ("search",), "2026-09-19T03:05:00Z"),
        )
    )
    names = ("alert_still_firing", "change_is_latest_on_service", "no_other_run_in_flight", "incident_open")
    params = {"service": "payments"}
    ok = evaluate(names, _state(a="firing", b="resolved"), changes, params)
    assert [r.ok for r in ok] == [True, True, True, True]
    assert ok[1].detail == "change/r4 is the latest change on payments"
    older = evaluate(names, _state(a="firing"), changes, {**params, "change": "change/r3"})
    assert not older[1].ok and "change/r4 came after it" in older[1].detail
    quiet = evaluate(names, _state(a="resolved"), changes, params)
    assert not quiet[0].ok and quiet[0].detail == "every alert on payments has resolved"
    busy = _state(a="firing").model_copy(
        update={"runs": {"run-1": RunState(run_id="run-1", action="rollback_deploy", outcome="uncertain")}}
    )
    assert (
        evaluate(["no_other_run_in_flight"], busy, changes, params)[0].detail
        == "run run-1 (rollback_deploy) is uncertain"
    )
    assert inputs_digest(ok) == inputs_digest(evaluate(names, _state(a="firing", b="resolved"), changes, params))
    assert inputs_digest(ok) != inputs_digest(quiet)
    drift = describe_drift([r.to_json() for r in ok], quiet)
    assert drift.startswith("alert_still_firing: was “1 alert(s) firing on payments")
