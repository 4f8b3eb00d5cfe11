"""Bad input of every receiver route, fuzzed over real HTTP: arbitrary JSON bodies, arbitrary bytes and mutated
vendor samples. Never a 5xx; every 4xx is ``{"error": ...}``; a 4xx never reaches core (nothing is appended).

The server runs on its own event loop in a thread for the whole module (hypothesis drives it synchronously with
``http.client``); core's entry points are wrapped to count the requests that reached them.
"""

from __future__ import annotations

import asyncio
import http.client
import json
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from decklog.bot.server import DecklogServer
from decklog.bot.settings import Settings
from tests.conftest import test_config

TOKEN = "fuzz-token"
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
ALERT_ROUTES = ["alertmanager", "grafana", "pagerduty", "datadog", "generic"]
CHANGE_ROUTES = ["github", "generic"]
SAMPLES = sorted(FIXTURES.glob("*/*/*.json"))
EXAMPLES = 120
KNOWN_FIELDS = [
    *("title", "fingerprint", "status", "severity", "service", "summary", "labels", "links", "started_at"),
    *("ended_at", "event_id", "id", "version", "environment", "author", "commits", "link", "at"),
]


@dataclass
class Live:
    server: DecklogServer
    loop: asyncio.AbstractEventLoop
    host: str
    port: int
    reached_core: list[str] = field(default_factory=list)

    def post(self, path: str, body: bytes, headers: dict[str, str]) -> tuple[int, Any]:
        conn = http.client.HTTPConnection(self.host, self.port, timeout=30)
        try:
            conn.request("POST", path, body=body, headers=headers)
            response = conn.getresponse()
            data = response.read()
        finally:
            conn.close()
        return response.status, json.loads(data) if data else None


@pytest.fixture(scope="module")
def live() -> Iterator[Live]:
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    data_dir = tempfile.mkdtemp(prefix="decklog-fuzz-")
    settings_ = Settings(
        data_dir=Path(data_dir), host="127.0.0.1", port=0, alert_token=TOKEN, first_turn_delay=60, turn_debounce=60
    )
    server = DecklogServer(settings_, config=test_config(), parts={"receivers"})
    asyncio.run_coroutine_threadsafe(server.start(), loop).result(30)
    url = urlsplit(server.url)
    assert url.hostname is not None and url.port is not None
    state = Live(server, loop, url.hostname, url.port)
    receivers = server.parts.receivers.receivers
    accept, record = receivers.intake.accept, receivers.changes.record

    async def counted_accept(source: str, *args: Any, **kw: Any) -> Any:  # an alert reaches core when it is stored
        state.reached_core.append(source)
        return await accept(source, *args, **kw)

    async def counted_record(signals: Any, **kw: Any) -> Any:
        state.reached_core.append("changes")
        return await record(signals, **kw)

    receivers.intake.accept = counted_accept  # type: ignore[method-assign]
    receivers.changes.record = counted_record  # type: ignore[method-assign]
    yield state
    asyncio.run_coroutine_threadsafe(server.stop(), loop).result(30)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(10)


def check(live: Live, path: str, body: bytes, headers: dict[str, str] | None = None) -> tuple[int, Any]:
    before = len(live.reached_core)
    sent = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json", **(headers or {})}
    status, answer = live.post(path, body, sent)
    assert status < 500, (status, answer, body[:300])
    if status >= 400:
        assert isinstance(answer, dict) and isinstance(answer.get("error"), str) and answer["error"], answer
        assert len(live.reached_core) == before, f"a {status} reached core: {answer}"
    else:
        assert status in (200, 202) and isinstance(answer, dict)
        stored = isinstance(answer.get("receipt"), str) and answer.get("accepted", 0) > 0  # routed behind the 202
        assert stored or isinstance(answer.get("alerts", answer.get("changes")), list)
    return status, answer


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=40),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12), children, max_size=4),
    max_leaves=25,
)
routes = st.sampled_from([f"/alerts/{r}" for r in ALERT_ROUTES] + [f"/changes/{r}" for r in CHANGE_ROUTES])
event_headers = st.sampled_from(["push", "deployment_status", "ping", "Push", ""]).map(
    lambda e: {"X-GitHub-Event": e} if e else {}
)
FUZZ = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@FUZZ
@given(path=routes, value=json_values, headers=event_headers)
def test_arbitrary_json_never_gets_a_5xx(live: Live, path: str, value: Any, headers: dict[str, str]) -> None:
    check(live, path, json.dumps(value).encode(), headers)


@FUZZ
@given(path=routes, body=st.binary(max_size=300))
def test_arbitrary_bytes_never_get_a_5xx(live: Live, path: str, body: bytes) -> None:
    check(live, path, body, {"X-GitHub-Event": "push"})


@FUZZ
@given(
    path=st.sampled_from(["/alerts/generic", "/changes/generic"]),
    fields=st.dictionaries(
        st.sampled_from(KNOWN_FIELDS),
        json_values,
        max_size=8,
    ),
)
def test_known_fields_with_any_values_never_get_a_5xx(live: Live, path: str, fields: dict[str, Any]) -> None:
    body = {"title": "t", "fingerprint": "f", "service": "s"} | fields
    check(live, path, json.dumps(body).encode())


def _mutate(doc: Any, data: st.DataObject) -> Any:
    """Replace (or delete) one randomly chosen node of ``doc`` with arbitrary JSON."""
    if not isinstance(doc, dict | list) or not doc or data.draw(st.integers(0, 3)) == 0:
        return data.draw(json_values)
    if isinstance(doc, dict):
        key = data.draw(st.sampled_from(sorted(doc)))
        if data.draw(st.booleans()) and data.draw(st.booleans()):
            return {k: v for k, v in doc.items() if k != key}
        return {**doc, key: _mutate(doc[key], data)}
    index = data.draw(st.integers(0, len(doc) - 1))
    return [*doc[:index], _mutate(doc[index], data), *doc[index + 1 :]]


@FUZZ
@given(sample=st.sampled_from(SAMPLES), data=st.data())
def test_mutated_vendor_samples_never_get_a_5xx(live: Live, sample: Path, data: st.DataObject) -> None:
    kind, source = sample.parent.parent.name, sample.parent.name
    headers: dict[str, str] = {}
    if source == "github":
        stem = sample.stem.removeprefix("payments_")
        headers["X-GitHub-Event"] = "deployment_status" if stem.startswith("deployment_status") else stem.split("_")[0]
    mutated = _mutate(json.loads(sample.read_text(encoding="utf-8")), data)
    check(live, f"/{kind}/{source}", json.dumps(mutated).encode(), headers)


def test_unencodable_strings_deep_nesting_and_odd_numbers_are_handled(live: Live) -> None:
    odd = [
        b'{"title": "\\ud800 lone", "fingerprint": "\\udfff", "labels": {"\\ud83d": "x"}, "extra": "\\ud800"}',
        b'{"title": "deep", "fingerprint": "d", "extra": ' + b"[" * 500 + b"]" * 500 + b"}",
        b'{"title": "big", "fingerprint": "b", "extra": 1e400, "n": ' + b"9" * 5000 + b"}",
        b'{"title": "inf", "fingerprint": "i", "extra": Infinity}',
        b'{"title": "' + "é".encode() * 600 + b'", "fingerprint": "' + b"f" * 3000 + b'"}',
    ]
    for body in odd:
        check(live, "/alerts/generic", body)
    check(live, "/changes/generic", b'{"service": "\\ud800", "id": "\\udfff", "commits": [{"id": "\\ud800"}]}')
