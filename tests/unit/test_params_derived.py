"""Parameters derived from the incident (``from_incident``, ``incident_values``)."""

from __future__ import annotations

import pytest

from decklog.adapters.executors import EXECUTOR_TYPES
from decklog.core.actions.catalog import Catalog
from decklog.core.actions.params import ParamSpec, derive, normalise
from decklog.core.actions.proposals import incident_facts
from decklog.core.errors import InvalidInput
from decklog.core.state import ScopeState
from decklog.core.state.model import ThreadRef

SPECS = {
    "summary": ParamSpec(required=True, max_length=40, from_incident="headline"),
    "severity": ParamSpec(
        default="critical",
        enum=("critical", "error", "warning", "info"),
        from_incident="severity",
        incident_values={"1": "critical", "2": "error", "3": "warning", "4": "info"},
    ),
}


def state(**fields: object) -> ScopeState:
    return ScopeState.model_validate({"scope": "incident/db", "kind": "incident", "title": "DB down", **fields})


def test_facts_are_what_the_incident_has() -> None:
    full = incident_facts(
        state(severity=2, services=["db", "api"], thread=ThreadRef(channel="C1", ts="1.2", permalink="https://s/p1"))
    )
    assert full["headline"] == "SEV2 · DB down · db · https://s/p1"
    assert (full["severity"], full["service"], full["services"], full["link"]) == (2, "db", "db, api", "https://s/p1")
    bare = incident_facts(state())
    assert bare == {"title": "DB down", "scope": "incident/db", "status": "investigating", "headline": "DB down"}


def test_derived_values_fill_what_is_left_out_and_map_and_cut() -> None:
    facts = incident_facts(state(severity=2, services=["a-very-long-service-name-indeed"]))
    assert normalise(SPECS, derive(SPECS, {}, facts)) == {
        "severity": "error",
        "summary": "SEV2 · DB down · a-very-long-service-na…",
    }
    given = derive(SPECS, {"summary": "  ", "severity": "info"}, facts)  # blank counts as left out
    assert given["severity"] == "info" and given["summary"].startswith("SEV2")
    unmapped = derive(SPECS, {}, {"headline": "x", "severity": 9})
    assert normalise(SPECS, unmapped)["severity"] == "critical"  # the default, as before
    with pytest.raises(InvalidInput, match=r"params\.summary: is required"):
        normalise(SPECS, derive(SPECS, {}, {}))


def test_incident_values_need_from_incident() -> None:
    raw = {
        "name": "page",
        "description": "page",
        "risk": "R2",
        "params": {"severity": {"incident_values": {"1": "critical"}}},
        "executor": {"type": "http", "url": "http://127.0.0.1:9/x"},
    }
    with pytest.raises(InvalidInput, match="incident_values needs from_incident"):
        Catalog.from_config([raw], env={}, executors=EXECUTOR_TYPES)
    raw["params"] = {"severity": {"from_incident": "mood"}}
    with pytest.raises(InvalidInput, match="from_incident"):
        Catalog.from_config([raw], env={}, executors=EXECUTOR_TYPES)
