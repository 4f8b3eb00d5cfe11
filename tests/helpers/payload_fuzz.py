"""Hypothesis strategies and path helpers shared by the alert and change parser fuzz tests."""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from typing import Any

from hypothesis import strategies as st

from decklog.adapters import payload as fields

WRONG_TYPES: st.SearchStrategy[Any] = st.sampled_from(
    [None, 0, -1, 1.5, True, False, [], {}, [None], {"a": 1}, [[]], {"": {}}]
)


def collect_keys(value: Any, into: set[str]) -> set[str]:
    """Every object key anywhere in ``value`` (to make fuzzed objects look like the vendor's)."""
    if isinstance(value, dict):
        for key, child in value.items():
            into.add(key)
            collect_keys(child, into)
    elif isinstance(value, list):
        for child in value:
            collect_keys(child, into)
    return into


def json_values(known_keys: Sequence[str], known_strings: Sequence[str]) -> st.SearchStrategy[Any]:
    """Arbitrary JSON (NaN, huge integers and lone surrogates included), biased towards the vendor's own words."""
    texts = st.one_of(
        st.text(max_size=20),
        st.text(st.characters(exclude_categories=[]), max_size=8),  # lone surrogates, controls
        st.sampled_from(list(known_strings)),
    )
    scalars = st.one_of(
        st.none(),
        st.booleans(),
        st.integers(),
        st.integers(min_value=-(10**30), max_value=10**30),
        st.floats(allow_nan=True, allow_infinity=True),
        texts,
    )
    return st.recursive(
        scalars,
        lambda children: st.one_of(
            st.lists(children, max_size=4),
            st.dictionaries(st.one_of(st.sampled_from(list(known_keys)), st.text(max_size=8)), children, max_size=6),
        ),
        max_leaves=25,
    )


def paths(value: Any, prefix: tuple[str | int, ...] = ()) -> Iterator[tuple[str | int, ...]]:
    """Every key/index path into ``value``, parents before children."""
    if isinstance(value, dict):
        for key, child in value.items():
            yield (*prefix, key)
            yield from paths(child, (*prefix, key))
    elif isinstance(value, list):
        for index, child in enumerate(value):
            yield (*prefix, index)
            yield from paths(child, (*prefix, index))


def render(path: tuple[str | int, ...]) -> str:
    """A path as PayloadError names it: ``alerts[0].labels``."""
    out = ""
    for part in path:
        out = fields.item(out, part) if isinstance(part, int) else fields.child(out, part)
    return out


def parent(path: str) -> str:
    """``alerts[0].labels`` → ``alerts[0]`` → ``alerts`` → ``""``."""
    match = re.fullmatch(r"(.*?)(\.[^.\[]*|\[[^\]]*\])", path)
    return match.group(1) if match else ""


def related(error_path: str, mutated_path: str) -> bool:
    """The error names the mutated field, something inside it, an object containing it, or a sibling that
    depends on it (``alerts[0].fingerprint`` is required when ``alerts[0].labels`` is gone)."""
    return (
        error_path.startswith(mutated_path)
        or mutated_path.startswith(error_path)
        or parent(error_path) == parent(mutated_path) != ""
    )
