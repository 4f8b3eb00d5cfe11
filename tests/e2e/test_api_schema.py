"""The OpenAPI description against the running server: it validates as OpenAPI 3.1 (``openapi-spec-validator``),
it names every /api route the server serves, and ``schemathesis`` driving a live ``decklog serve`` (every
operation, valid and invalid inputs, stateful sequences over the links it infers) finds no 5xx and no answer that
the description does not allow (status, media type, body schema)."""

from __future__ import annotations

import asyncio
import re
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
from openapi_spec_validator import validate

from decklog.adapters.local.services import FakeDeployService
from decklog.bot.server import DecklogServer
from decklog.bot.settings import Settings
from tests.conftest import test_config

TOKEN = "schema-admin-token"
#: The checks that mean "no 5xx, and every answer conforms to the description".
CHECKS = "not_a_server_error,status_code_conformance,content_type_conformance,response_schema_conformance"
CATCH_ALL = re.compile(r"\{tail:")


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[DecklogServer]:
    async with FakeDeployService() as deploy:
        deploy.record_deploy("payments", "r41")
        settings = Settings(
            data_dir=tmp_path / "data",
            host="127.0.0.1",
            port=0,
            api_token=TOKEN,
            deploy_api_url=deploy.base_url,
            approvers="U0APPROVER",
        )
        srv = DecklogServer(settings, config=test_config(), parts={"api", "actions", "reports"})
        await srv.start()
        try:
            yield srv
        finally:
            await srv.stop()


async def description(server: DecklogServer) -> dict[str, object]:
    async with aiohttp.ClientSession() as http, http.get(server.url + "/api/openapi.json") as resp:
        assert resp.status == 200
        body: dict[str, object] = await resp.json()
        return body


async def test_the_description_is_valid_openapi_3_1_and_names_every_api_route(server: DecklogServer) -> None:
    doc = await description(server)
    validate(doc)  # raises on an invalid description
    assert doc["openapi"] == "3.1.0"
    paths = doc["paths"]
    assert isinstance(paths, dict)
    served = {r.path for r in server.parts.routes if r.path.startswith("/api") and not CATCH_ALL.search(r.path)}
    served.discard("/api")
    assert served <= set(paths), f"served but not described: {sorted(served - set(paths))}"
    writes = [(p, m) for p, ops in paths.items() for m in ops if m == "post"]
    assert len(writes) >= 9
    assert all(
        any(x["name"] == "Idempotency-Key" for x in paths[p]["post"]["parameters"]) for p, _ in writes
    )  # every write takes one


def test_a_route_registered_twice_is_refused() -> None:
    from decklog.adapters.http.openapi import ApiDescription, Operation

    d = ApiDescription()
    d.add(Operation("GET", "/api/oncall", "on-call", "read", {}))
    with pytest.raises(ValueError, match="registered twice"):
        d.add(Operation("GET", "/api/oncall", "on-call", "read", {}))


@pytest.mark.slow
async def test_schemathesis_against_a_live_server_finds_no_5xx_and_no_nonconforming_answer(
    server: DecklogServer, tmp_path: Path
) -> None:
    st = Path(sys.executable).parent / "schemathesis"
    proc = await asyncio.create_subprocess_exec(
        str(st),
        "run",
        f"{server.url}/api/openapi.json",
        "--url",
        server.url,
        "-H",
        f"Authorization: Bearer {TOKEN}",
        "--checks",
        CHECKS,
        "--max-examples",
        "15",
        "--seed",
        "37",
        "--request-timeout",
        "30",
        "--suppress-health-check",
        "all",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        cwd=tmp_path,
        env={"PATH": str(st.parent), "HOME": str(tmp_path), "NO_COLOR": "1", "SCHEMATHESIS_TELEMETRY": "false"},
    )
    out, _ = await asyncio.wait_for(proc.communicate(), timeout=900)
    text = out.decode("utf-8", "replace")
    summary = text[text.rfind("SUMMARY") :] if "SUMMARY" in text else text[-4000:]
    failures = text[text.find("FAILURES") : text.rfind("SUMMARY")][:6000] if "FAILURES" in text else ""
    assert proc.returncode == 0, failures + summary
    generated = re.search(r"(\d+) generated", summary)
    assert generated is not None and int(generated.group(1)) > 100, summary
    assert "Tested: 16" in summary or re.search(r"Tested: (\d+)", summary), summary
    print(summary)  # the closing note quotes it (pytest -s)
