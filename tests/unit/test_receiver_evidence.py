"""The vendor payload kept as evidence (``Receivers._evidence``): the fast path for an ordinary body (few
brackets, no ``\\udXXX`` escape) keeps what the full path keeps, and the full path still repairs what UTF-8 cannot
store and still keeps a too-deep payload as text."""

from __future__ import annotations

import json
from typing import Any

import pytest

from decklog.adapters.http import receivers as r
from decklog.core.signals import truncate_raw

RAW_BYTES = 16_384


def evidence(body: bytes) -> dict[str, Any]:
    holder: Any = object.__new__(r.Receivers)  # only ``raw_bytes`` is read
    holder.raw_bytes = RAW_BYTES
    return r.Receivers._evidence(holder, json.loads(body), body)


def full_path(body: bytes) -> dict[str, Any]:
    text = json.dumps(json.loads(body), ensure_ascii=False, allow_nan=False)
    return truncate_raw(json.loads(text.encode("utf-8", "replace")), RAW_BYTES)


@pytest.mark.parametrize(
    "body",
    [
        b'{"title": "svc-1: check 4 failing", "fingerprint": "fp-4", "labels": {"env": "prod"}, "n": [1, 2.5]}',
        '{"title": "caf\u00e9 \u2014 \U0001f525", "fingerprint": "x"}'.encode(),
        b'{"title": "\\ud83d\\udd25 a pair is no lone surrogate", "fingerprint": "x"}',
        b'{"title": "a literal backslash-u: \\\\udc80", "fingerprint": "x"}',
        json.dumps({"title": "big", "fingerprint": "x", "blob": "y" * 40_000}).encode(),
    ],
)
def test_the_fast_path_keeps_what_the_full_path_keeps(body: bytes) -> None:
    assert evidence(body) == full_path(body)


def test_a_lone_surrogate_is_replaced_so_the_evidence_stores_as_utf8() -> None:
    body = b'{"title": "bad \\udc80 title", "fingerprint": "x"}'
    kept = evidence(body)
    assert kept == {"json": {"title": "bad ? title", "fingerprint": "x"}}
    json.dumps(kept, ensure_ascii=False).encode("utf-8")


def test_a_payload_nested_too_deeply_is_kept_as_text() -> None:
    body = b'{"a": ' * (r.RAW_DEPTH_MAX + 2) + b"1" + b"}" * (r.RAW_DEPTH_MAX + 2)
    assert not r._shallow(body)
    assert evidence(body) == {"truncated": body.decode(), "bytes": len(body)}


def test_a_shallow_body_has_few_brackets() -> None:
    assert r._shallow(b'{"a": [1, {"b": 2}]}')
    assert not r._shallow(b"[" * (r.RAW_DEPTH_MAX + 1))
