"""The trusted read path and the cheaper append encodings give exactly what the validating ones give.

Rows the store wrote are read back without a second validation (``trusted_row_to_entry``); payloads of plain
JSON values are encoded from their fields (``payload_json``); the NaN/Infinity check walks the values instead of
encoding them. Each is compared here with the original formula on random entries of every kind the property
tests draw, plus the edge cases (floats, nested NaN, non-JSON values in ``dict[str, Any]`` fields).
"""

from __future__ import annotations

import json
import math
import types
from datetime import UTC, datetime
from typing import Any, Literal, Union, get_args, get_origin

import pytest
from hypothesis import given
from hypothesis import strategies as st

from decklog.core.entries import PAYLOADS, Actor, NewEntry, canonical_json, parse_payload, payload_json
from decklog.core.errors import InvalidInput
from decklog.core.state import empty_state
from decklog.core.store.rows import row_to_entry, trusted_row_to_entry
from decklog.core.store.staging import Batch, Lookups, stage
from tests.contract.test_store_properties import PAYLOADS as DRAWN
from tests.contract.test_store_properties import SETTINGS, actors

ALICE = Actor.human("U1", "alice")
NOW = datetime(2026, 12, 1, 3, 12, tzinfo=UTC)
LOOK = Lookups(lambda _k: [], lambda _ks: [], lambda _kind: ("index", "slack"))


def _rows(entries: list[NewEntry]) -> list[types.SimpleNamespace]:
    b = Batch("incident/t", empty_state("incident/t"), "", "", existed=False)
    stage(b, [NewEntry.make("declared", ALICE, {"title": "t"})], None, None, now=NOW, look=LOOK)
    for ne in entries:
        stage(b, [ne], None, None, now=NOW, look=LOOK)
    return [types.SimpleNamespace(**row) for row in b.entry_rows]


def _same(row: types.SimpleNamespace) -> None:
    checked, trusted = row_to_entry("incident/t", row), trusted_row_to_entry("incident/t", row)
    assert trusted == checked
    assert type(trusted.payload) is type(checked.payload)
    assert trusted.payload.__dict__ == checked.payload.__dict__
    assert {k: type(v) for k, v in trusted.payload.__dict__.items()} == {
        k: type(v) for k, v in checked.payload.__dict__.items()
    }
    assert trusted.model_fields_set == checked.model_fields_set
    assert trusted.to_json() == checked.to_json()
    assert payload_json(trusted.payload) == row.payload == canonical_json(checked.payload.model_dump(mode="json"))


@SETTINGS
@given(st.data())
def test_trusted_rows_read_back_as_the_validating_path_reads_them(data: st.DataObject) -> None:
    entries = []
    for _ in range(data.draw(st.integers(1, 6))):
        kind = data.draw(st.sampled_from(sorted(DRAWN)))
        entries.append(NewEntry.make(kind, data.draw(actors), data.draw(DRAWN[kind])))
    for row in _rows(entries):
        _same(row)
        assert row.actor == canonical_json(json.loads(row.actor))


def test_floats_tuples_and_nested_values_round_trip() -> None:
    entries = [
        NewEntry.make("hypothesis", ALICE, {"text": "db", "confidence": 1}),
        NewEntry.make("hypothesis", ALICE, {"text": "db", "confidence": 0.25}),
        NewEntry.make(
            "observation",
            ALICE,
            {
                "text": "é ✓",
                "labels": {"z": "1", "a": "2"},
                "links": ["u"],
                "data": {"x": [1.5, {"y": None}], "k": 1e16},
            },
        ),
        NewEntry.make("agent_turn", Actor.agent("rules"), {"reasoner": "rules", "tool_calls": [{"a": [1, 2]}]}),
    ]
    for row in _rows(entries):
        _same(row)


def test_non_json_values_in_free_dicts_still_take_pydantics_encoding() -> None:
    at = datetime(2026, 9, 19, 3, 12, tzinfo=UTC)
    p = parse_payload("observation", {"text": "t", "data": {"at": at, "pair": (1, 2)}})
    assert payload_json(p) == canonical_json(p.model_dump(mode="json"))
    assert '"2026-09-19T03:12:00Z"' in payload_json(p)


@pytest.mark.parametrize(
    "data",
    [
        {"x": math.nan},
        {"x": [1, {"y": math.inf}]},
        {"x": {"y": (-math.inf,)}},
    ],
)
def test_nan_and_infinity_are_refused_wherever_they_hide(data: dict[str, Any]) -> None:
    with pytest.raises(InvalidInput, match="NaN and Infinity"):
        parse_payload("observation", {"text": "t", "data": data})
    with pytest.raises(InvalidInput, match="NaN and Infinity"):
        parse_payload("action_started", {"run_id": "r1", "action": "restart", "params": data})


def _plain(annotation: Any) -> bool:
    """A field type whose stored JSON pydantic-core parses back into the same Python value."""
    if annotation in (str, int, float, bool, type(None), Any):
        return True
    origin = get_origin(annotation)
    if origin is Literal:
        return all(type(a) is str for a in get_args(annotation))
    if origin in (Union, types.UnionType, tuple, dict, list):
        return all(a is Ellipsis or _plain(a) for a in get_args(annotation))
    return False


def test_every_payload_field_is_of_a_type_the_trusted_path_handles() -> None:
    """A new field of another type (a nested model, a datetime) must be checked here before rows are trusted."""
    odd = [
        f"{kind}.{name}: {field.annotation}"
        for kind, model in PAYLOADS.items()
        for name, field in model.model_fields.items()
        if not _plain(field.annotation)
    ]
    assert odd == []
