"""Change payload normalisers: GitHub and generic fixtures, validation paths, fuzzing, signatures, registry."""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import hmac
import json
import re
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from decklog.adapters.changes import CHANGE_SOURCES, ChangeSource, change_sources, generic, github
from decklog.core.signals import ChangeSignal, Commit, PayloadError
from tests.helpers.payload_fuzz import WRONG_TYPES, collect_keys, paths, related, render
from tests.helpers.payload_fuzz import json_values as payload_json_values

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "changes"


def load(source: str, name: str) -> Any:
    return json.loads((FIXTURES / source / name).read_text(encoding="utf-8"))


def utc(year: int, month: int, day: int, hour: int = 0, minute: int = 0, second: int = 0, micro: int = 0) -> datetime:
    return datetime(year, month, day, hour, minute, second, micro, tzinfo=UTC)


def event_type_for(source: str, name: str) -> str | None:
    """GitHub fixtures are named after their ``X-GitHub-Event``: ``[payments_]<event>[_more].json``."""
    if source != "github":
        return None
    stem = name.removesuffix(".json").removeprefix("payments_")
    return "deployment_status" if stem.startswith("deployment_status") else stem.split("_")[0]


HELLO_DEPLOY = {
    "source": "github",
    "change_id": "gh-deploy-145988746",
    "service": "Hello-World",
    "version": "f95f852bd8fca8fcc58a9a2d6c842781e32a215e",
    "repository": "Codertocat/Hello-World",
    "ref": "master",
}
PAYMENTS_C1 = Commit(
    id="4b7a0d3c5e8f1a2b3c4d5e6f708192a3b49f2c1e",
    message="Lower PSP connect timeout to 800ms",
    author="Jonas Berg",
    url="https://github.com/acme/payments/commit/4b7a0d3c5e8f1a2b3c4d5e6f708192a3b49f2c1e",
    paths=("config/payments/timeouts.yaml",),
)
PAYMENTS_C2 = Commit(
    id="9f2c1e4b7a0d3c5e8f1a2b3c4d5e6f708192a3b4",
    message="Switch card tokenisation to the new PSP client\n\n"
    "The old client is kept behind PSP_CLIENT=legacy for one release.",
    author="Maria Lopez",
    url="https://github.com/acme/payments/commit/9f2c1e4b7a0d3c5e8f1a2b3c4d5e6f708192a3b4",
    # added, then modified, then removed; a path listed twice is kept once
    paths=(
        "payments/psp/client.py",
        "payments/psp/tokenise.py",
        "config/payments/timeouts.yaml",
        "payments/psp/legacy_client.py",
    ),
)
GENERIC_PAYMENTS = {
    "source": "generic",
    "change_id": "r2026-09-19-4",
    "service": "payments",
    "version": "v2026.09.19-4",
    "environment": "production",
    "author": "maria",
}

EXPECTED: dict[tuple[str, str], list[ChangeSignal]] = {
    ("github", "deployment_status_success.json"): [
        ChangeSignal(
            **HELLO_DEPLOY,
            environment="production",
            author="Codertocat",
            status="succeeded",
            description="deploy master to production",
            at=utc(2019, 5, 15, 15, 20, 55),
        )
    ],
    ("github", "deployment_status_failure.json"): [
        ChangeSignal(
            **HELLO_DEPLOY,
            environment="production",
            author="Codertocat",
            status="failed",
            link="https://ci.example.com/Codertocat/Hello-World/builds/512",
            description="Deployment failed: health check timed out",
            at=utc(2019, 5, 15, 15, 24, 10),
        )
    ],
    ("github", "deployment_status_in_progress_pages.json"): [
        ChangeSignal(
            **HELLO_DEPLOY,
            environment="github-pages",
            author="github-pages[bot]",
            status="started",
            link="https://github.com/CorsixTH/CorsixTH/runs/4687056418?check_suite_focus=true",
            description="deploy master to github-pages",
            at=utc(2022, 1, 3, 1, 28, 40),
        )
    ],
    ("github", "push_new_branch.json"): [
        ChangeSignal(
            source="github",
            change_id="gh-push-6113728f27ae",
            service="Hello-World",
            version="6113728f27ae82c7b1a177c8d03f9e96e0adf246",
            author="Codertocat",
            status="pushed",
            commits=(
                Commit(
                    id="6113728f27ae82c7b1a177c8d03f9e96e0adf246",
                    message="Initial commit",
                    author="Codertocat",
                    url="https://github.com/Codertocat/Hello-World/commit/6113728f27ae82c7b1a177c8d03f9e96e0adf246",
                    paths=("README.md",),
                ),
            ),
            link="https://github.com/Codertocat/Hello-World/commit/6113728f27ae82c7b1a177c8d03f9e96e0adf246",
            description="1 commit pushed to master",
            at=utc(2019, 5, 15, 15, 19, 25),
            repository="Codertocat/Hello-World",
            ref="refs/heads/master",
        )
    ],
    ("github", "push_tag_deleted.json"): [],
    ("github", "ping.json"): [],
    ("github", "payments_push.json"): [
        ChangeSignal(
            source="github",
            change_id="gh-push-9f2c1e4b7a0d",
            service="payments",
            version="9f2c1e4b7a0d3c5e8f1a2b3c4d5e6f708192a3b4",
            author="maria-acme",
            status="pushed",
            commits=(PAYMENTS_C1, PAYMENTS_C2),
            link="https://github.com/acme/payments/compare/1d2e3f405162...9f2c1e4b7a0d",
            description="2 commits pushed to main",
            at=utc(2026, 9, 19, 14, 1, 44),
            repository="acme/payments",
            ref="refs/heads/main",
        )
    ],
    ("github", "payments_deployment_status_success.json"): [
        ChangeSignal(
            source="github",
            change_id="gh-deploy-1892004417",
            service="payments",
            version="9f2c1e4b7a0d3c5e8f1a2b3c4d5e6f708192a3b4",
            environment="production",
            author="maria-acme",
            status="succeeded",
            link="https://ci.example.com/pipelines/payments/8841/log",
            description="Deployed v2026.09.19-4 to production",
            at=utc(2026, 9, 19, 14, 4, 12),
            repository="acme/payments",
            ref="v2026.09.19-4",
        )
    ],
    ("generic", "payments_deploy.json"): [
        ChangeSignal(
            **GENERIC_PAYMENTS,
            status="succeeded",
            commits=(
                Commit(
                    id="9f2c1e4b7a0d3c5e8f1a2b3c4d5e6f708192a3b4",
                    message="Switch card tokenisation to the new PSP client",
                    author="maria",
                    url="https://github.com/acme/payments/commit/9f2c1e4b7a0d3c5e8f1a2b3c4d5e6f708192a3b4",
                    paths=("payments/psp/client.py", "payments/psp/tokenise.py"),
                ),
                Commit(
                    id="4b7a0d3c5e8f1a2b3c4d5e6f708192a3b49f2c1e",
                    message="Lower PSP connect timeout to 800ms",
                    author="jonas",
                    paths=("config/payments/timeouts.yaml",),
                ),
            ),
            link="https://ci.example.com/pipelines/payments/8841",
            description="Switch card tokenisation to the new PSP client",
            at=utc(2026, 9, 19, 14, 4, 12),
        )
    ],
    ("generic", "payments_deploy_started.json"): [
        ChangeSignal(**GENERIC_PAYMENTS, status="started", at=utc(2026, 9, 19, 14, 3, 0))
    ],
    ("generic", "minimal.json"): [
        ChangeSignal(
            source="generic",
            change_id="checkout-"
            + hashlib.sha256(
                b'{"author":"","commits":[],"description":"","environment":"","link":"","service":"checkout",'
                b'"status":"succeeded"}'
            ).hexdigest()[:12],
            service="checkout",
        )
    ],
}


def parse(source: str, payload: object, event_type: str | None) -> list[ChangeSignal]:
    return CHANGE_SOURCES[source].parse(payload, event_type)


def fixture_files() -> list[tuple[str, str]]:
    return sorted((path.parent.name, path.name) for path in FIXTURES.glob("*/*.json"))


def test_every_fixture_has_an_expectation_and_a_provenance_note() -> None:
    assert fixture_files() == sorted(EXPECTED)
    for source, name in fixture_files():
        notes = (FIXTURES / source / "SOURCES.md").read_text(encoding="utf-8")
        assert f"`{name}`" in notes, f"{source}/{name} is not described in SOURCES.md"


@pytest.mark.parametrize(("source", "name"), sorted(EXPECTED))
def test_fixture_parses_to_the_expected_signals(source: str, name: str) -> None:
    payload = load(source, name)
    original = copy.deepcopy(payload)
    signals = parse(source, payload, event_type_for(source, name))
    assert signals == EXPECTED[(source, name)]
    assert payload == original  # parsers are pure
    for signal in signals:
        assert signal.at is None or signal.at.utcoffset() == UTC.utcoffset(None)


def test_demo_fixtures_agree_on_the_payments_service_and_commits() -> None:
    push = EXPECTED[("github", "payments_push.json")][0]
    deploy = EXPECTED[("github", "payments_deployment_status_success.json")][0]
    generic_deploy = EXPECTED[("generic", "payments_deploy.json")][0]
    assert push.service == deploy.service == generic_deploy.service == "payments"
    assert deploy.version == push.version  # the deploy ships the pushed head
    assert {c.id for c in generic_deploy.commits} == {c.id for c in push.commits}


# ------------------------------------------------------------------------------------------------ malformed


def edit(payload: Any, path: tuple[str | int, ...], value: Any = ...) -> Any:
    out = copy.deepcopy(payload)
    node = out
    for key in path[:-1]:
        node = node[key]
    if value is ...:
        del node[path[-1]]
    else:
        node[path[-1]] = value
    return out


DS = load("github", "payments_deployment_status_success.json")
PUSH = load("github", "payments_push.json")
GEN = load("generic", "payments_deploy.json")

MALFORMED: list[tuple[str, Any, str | None, str, str]] = [
    # (source, payload, event type, expected path, expected message fragment)
    ("github", [], "push", "", "expected a JSON object"),
    ("github", "{}", "deployment_status", "", "expected a JSON object"),
    ("github", {}, None, "", "X-GitHub-Event header is required"),
    ("github", {}, "  ", "", "X-GitHub-Event header is required"),
    ("github", edit(DS, ("deployment_status",)), "deployment_status", "deployment_status", "is required"),
    ("github", edit(DS, ("deployment_status", "state")), "deployment_status", "deployment_status.state", "required"),
    ("github", edit(DS, ("deployment_status", "state"), "exploded"), "deployment_status", "deployment_status.state",
     "unknown deployment state"),
    ("github", edit(DS, ("deployment",)), "deployment_status", "deployment", "is required"),
    ("github", edit(DS, ("deployment",), [1]), "deployment_status", "deployment", "expected an object, got array"),
    ("github", edit(DS, ("deployment", "id")), "deployment_status", "deployment.id", "is required"),
    ("github", edit(DS, ("deployment", "id"), 1.5), "deployment_status", "deployment.id", "got number"),
    ("github", edit(DS, ("deployment", "payload", "service"), ["payments"]), "deployment_status",
     "deployment.payload.service", "expected a string, got array"),
    ("github", edit(edit(DS, ("deployment", "payload"), {}), ("repository",)), "deployment_status",
     "repository.name", "is required (or deployment.payload.service)"),
    ("github", edit(DS, ("deployment", "creator"), "maria"), "deployment_status", "deployment.creator",
     "expected an object, got string"),
    ("github", edit(DS, ("deployment_status", "updated_at"), "now"), "deployment_status",
     "deployment_status.updated_at", "ISO 8601"),
    ("github", edit(PUSH, ("after",)), "push", "after", "is required"),
    ("github", edit(PUSH, ("after",), 123), "push", "after", "expected a string, got number"),
    ("github", edit(PUSH, ("deleted",), "no"), "push", "deleted", "expected a boolean, got string"),
    ("github", edit(PUSH, ("repository",)), "push", "repository", "is required"),
    ("github", edit(PUSH, ("repository", "name"), ""), "push", "repository.name", "must not be empty"),
    ("github", edit(PUSH, ("commits",), {"id": "x"}), "push", "commits", "expected an array, got object"),
    ("github", edit(PUSH, ("commits", 0, "id")), "push", "commits[0].id", "is required"),
    ("github", edit(PUSH, ("commits", 1), "9f2c1e4"), "push", "commits[1]", "expected an object, got string"),
    ("github", edit(PUSH, ("commits", 1, "added"), "payments/psp/client.py"), "push", "commits[1].added",
     "expected an array, got string"),
    ("github", edit(PUSH, ("commits", 1, "modified", 1), 7), "push", "commits[1].modified[1]",
     "expected a string, got number"),
    ("github", edit(PUSH, ("commits", 0, "author"), "Jonas"), "push", "commits[0].author", "expected an object"),
    ("github", edit(PUSH, ("head_commit", "timestamp"), "today"), "push", "head_commit.timestamp", "ISO 8601"),
    ("generic", [], None, "", "expected a JSON object"),
    ("generic", {}, None, "service", "is required"),
    ("generic", {"service": ""}, None, "service", "must not be empty"),
    ("generic", {"service": 42}, None, "service", "expected a string, got number"),
    ("generic", edit(GEN, ("status",), "done"), None, "status", "expected one of started, succeeded, failed, pushed"),
    ("generic", edit(GEN, ("kind",), "schema"), None, "kind", "expected one of deploy, config, flag"),
    ("generic", edit(GEN, ("kind",), 3), None, "kind", "expected a string, got number"),
    ("generic", edit(GEN, ("flag",), "newCheckout"), None, "flag", "kind must be \"flag\""),
    ("generic", edit(GEN, ("commits",), "abc"), None, "commits", "expected an array, got string"),
    ("generic", edit(GEN, ("commits", 0, "id")), None, "commits[0].id", "is required"),
    ("generic", edit(GEN, ("commits", 1, "id"), {"sha": "x"}), None, "commits[1].id", "got object"),
    ("generic", edit(GEN, ("commits", 0, "paths"), "a.py"), None, "commits[0].paths", "expected an array"),
    ("generic", edit(GEN, ("commits", 0, "paths", 1), None), None, "", ""),  # null entries are skipped: no error
    ("generic", edit(GEN, ("commits", 0, "paths", 1), ["a"]), None, "commits[0].paths[1]", "got array"),
    ("generic", edit(GEN, ("commits", 0, "url"), "git@github.com:acme/payments"), None, "commits[0].url",
     "http:// or https://"),
    ("generic", edit(GEN, ("link",), "ci/8841"), None, "link", "http:// or https://"),
    ("generic", edit(GEN, ("at",), 1789826652), None, "at", "expected an ISO 8601 timestamp string, got number"),
    ("generic", edit(GEN, ("at",), "2026-09-19T14:04:12+99:00"), None, "at", "invalid UTC offset"),
    ("generic", edit(GEN, ("id",), ["r1"]), None, "id", "expected a string or an integer, got array"),
]  # fmt: skip


@pytest.mark.parametrize(("source", "payload", "event_type", "path", "message"), MALFORMED)
def test_malformed_payloads_name_the_field(
    source: str, payload: Any, event_type: str | None, path: str, message: str
) -> None:
    if not message:
        parse(source, payload, event_type)  # a lenient case
        return
    with pytest.raises(PayloadError) as caught:
        parse(source, payload, event_type)
    assert caught.value.path == path
    assert message in caught.value.message


# ------------------------------------------------------------------------------------------------ behaviour


@pytest.mark.parametrize(
    ("state", "expected"),
    [
        ("success", "succeeded"),
        ("SUCCESS", "succeeded"),
        ("failure", "failed"),
        ("error", "failed"),
        ("pending", "started"),
        ("queued", "started"),
        ("in_progress", "started"),
        ("waiting", "started"),
    ],
)
def test_deployment_states(state: str, expected: str) -> None:
    (signal,) = github.parse(edit(DS, ("deployment_status", "state"), state), "deployment_status")
    assert signal.status == expected
    assert signal.change_id == "gh-deploy-1892004417"  # every status of a deployment is the same change


def test_inactive_deployments_are_not_changes() -> None:
    assert github.parse(edit(DS, ("deployment_status", "state"), "inactive"), "deployment_status") == []


def test_deployment_service_falls_back_to_the_repository_name() -> None:
    (signal,) = github.parse(edit(DS, ("deployment", "payload"), "raw string payload"), "deployment_status")
    assert signal.service == "payments"  # repository.name
    payload = edit(edit(DS, ("deployment", "payload"), {"service": "ledger"}), ("deployment_status", "environment"))
    (signal,) = github.parse(payload, "deployment_status")
    assert signal.service == "ledger" and signal.environment == "production"  # deployment.environment


def test_other_github_events_are_empty_and_event_names_are_case_insensitive() -> None:
    for event in ("ping", "pull_request", "deployment", "workflow_run", "issues", "made-up"):
        assert github.parse(PUSH, event) == []
    assert github.parse(PUSH, " Push ") == EXPECTED[("github", "payments_push.json")]


def test_pushes_of_tags_and_deleted_branches() -> None:
    tag = edit(PUSH, ("ref",), "refs/tags/v2026.09.19-4")
    (signal,) = github.parse(tag, "push")
    assert signal.version == "v2026.09.19-4" and signal.description == "tag v2026.09.19-4 pushed"
    assert github.parse(edit(PUSH, ("deleted",), True), "push") == []
    assert github.parse(edit(PUSH, ("after",), "0" * 40), "push") == []


def test_push_commit_and_path_caps() -> None:
    many = edit(PUSH, ("commits",), [{"id": f"{i:040x}", "added": [f"f{j}" for j in range(500)]} for i in range(150)])
    (signal,) = github.parse(many, "push")
    assert len(signal.commits) == github.adapter.COMMITS_MAX
    assert all(len(commit.paths) == github.adapter.PATHS_MAX for commit in signal.commits)


def test_generic_default_ids_are_deterministic_slugs() -> None:
    assert generic.slug("Payments API", "v2.4.1 (hotfix)") == "payments-api-v2.4.1-hotfix"
    base = {"service": "Payments API", "version": "v2.4.1"}
    assert generic.parse(base)[0].change_id == "payments-api-v2.4.1"
    assert generic.parse({"service": "payments", "at": "2026-09-19T16:04:12+02:00"})[0].change_id == (
        "payments-20260919t140412z"
    )
    one, two = generic.parse({"service": "payments"}), generic.parse({"service": "payments"})
    assert one == two  # a retried POST lands on the same change
    assert generic.parse({"service": "payments", "author": "x"})[0].change_id != one[0].change_id
    unicode_only = generic.parse({"service": "支付", "version": "1"})[0].change_id
    assert re.fullmatch(r"change-[0-9a-f]{8}-1", unicode_only)
    assert generic.parse({"service": "a", "id": "x" * 300})[0].change_id.startswith("sha256:")
    assert generic.parse({"service": "a", "id": 42})[0].change_id == "42"


def test_generic_status_is_case_insensitive_and_defaults_to_succeeded() -> None:
    assert generic.parse({"service": "a", "status": "FAILED"})[0].status == "failed"
    assert generic.parse({"service": "a", "status": None})[0].status == "succeeded"


def test_generic_kind_says_what_changed_and_a_flag_names_its_flag() -> None:
    assert generic.parse({"service": "a"})[0].kind == "deploy"
    (config,) = generic.parse({"service": "cart", "kind": "Config", "version": "config cache.ttl"})
    assert config.kind == "config" and config.flag == ""
    (flag,) = generic.parse({"service": "payment", "kind": "flag", "flag": "paymentFailure"})
    assert flag.kind == "flag" and flag.flag == "paymentFailure"
    # a deploy's default id is what it was before changes had kinds; another kind's is its own
    assert (
        generic.parse({"service": "a", "kind": "deploy"})[0].change_id == generic.parse({"service": "a"})[0].change_id
    )
    assert (
        generic.parse({"service": "a", "kind": "config"})[0].change_id != generic.parse({"service": "a"})[0].change_id
    )


def test_generic_readme_documents_every_field() -> None:
    readme = (Path(generic.__file__).parent / "README.md").read_text(encoding="utf-8")
    for name in ("service", "id", "version", "environment", "author", "status", "kind", "flag", "description",
                 "link", "at", "commits", "commits[].id", "commits[].paths"):  # fmt: skip
        assert f"`{name}`" in readme


def test_long_strings_are_capped() -> None:
    (signal,) = generic.parse({"service": "s" * 500, "version": "v" * 500, "description": "d" * 9000})
    assert len(signal.service) == 200 and len(signal.version) == 200 and len(signal.description) == 4000
    assert signal.service.endswith("…")
    assert len(signal.change_id) <= 200


# ------------------------------------------------------------------------------------------------ signatures

GITHUB_DOCS_SECRET = "It's a Secret to Everybody"
GITHUB_DOCS_BODY = b"Hello, World!"
GITHUB_DOCS_SIGNATURE = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"


def test_github_signature_docs_test_vector() -> None:
    # GitHub docs, "Validating webhook deliveries", "Testing the webhook payload validation"
    assert github.verify_signature(GITHUB_DOCS_SECRET, GITHUB_DOCS_BODY, GITHUB_DOCS_SIGNATURE)


def test_github_signature_good_bad_missing() -> None:
    body = json.dumps(PUSH).encode()
    good = "sha256=" + hmac.new(b"s3cret", body, hashlib.sha256).hexdigest()
    assert github.verify_signature("s3cret", body, good)
    assert github.verify_signature("s3cret", body, " " + good.upper().replace("SHA256=", "sha256=") + " ")
    assert not github.verify_signature("s3cret", body + b"\n", good)
    assert not github.verify_signature("other", body, good)
    assert not github.verify_signature("s3cret", body, good.removeprefix("sha256="))
    assert not github.verify_signature("s3cret", body, "sha1=" + hmac.new(b"s3cret", body, hashlib.sha1).hexdigest())
    assert not github.verify_signature("s3cret", body, "")
    assert not github.verify_signature("s3cret", body, None)
    assert not github.verify_signature("", body, "sha256=" + hmac.new(b"", body, hashlib.sha256).hexdigest())
    assert not github.verify_signature("s3cret", body, "sha256=ünïcödé")


def test_registry_verify_and_event_header() -> None:
    source = CHANGE_SOURCES["github"]
    assert source.signature_header == "X-Hub-Signature-256"
    assert source.event_header == "X-GitHub-Event"
    headers = {"x-hub-signature-256": GITHUB_DOCS_SIGNATURE, "X-GitHub-Event": "ping"}
    assert source.verify(GITHUB_DOCS_SECRET, GITHUB_DOCS_BODY, headers)
    assert not source.verify(GITHUB_DOCS_SECRET, GITHUB_DOCS_BODY, {"X-GitHub-Event": "ping"})
    assert source.parse_request(PUSH, {"x-github-event": "push"}) == EXPECTED[("github", "payments_push.json")]
    assert source.parse_request(PUSH, {"X-GitHub-Event": "ping"}) == []
    with pytest.raises(PayloadError, match="X-GitHub-Event header is required"):
        source.parse_request(PUSH, {})
    plain = CHANGE_SOURCES["generic"]
    assert plain.signature_header is None and plain.event_header is None
    assert not plain.verify(GITHUB_DOCS_SECRET, GITHUB_DOCS_BODY, headers)
    assert plain.parse_request(GEN, {"X-GitHub-Event": "push"}) == plain.parse(GEN)


@given(secret=st.text(), body=st.binary(), header=st.text())
def test_signature_verification_never_raises(secret: str, body: bytes, header: str) -> None:
    assert github.verify_signature(secret, body, header) in (True, False)


def test_registry_is_read_only_and_rebuilt_fresh() -> None:
    assert set(CHANGE_SOURCES) == {"github", "generic"}
    assert all(isinstance(source, ChangeSource) and source.name == name for name, source in CHANGE_SOURCES.items())
    with pytest.raises(TypeError):
        CHANGE_SOURCES["x"] = CHANGE_SOURCES["generic"]  # type: ignore[index]
    with pytest.raises(dataclasses.FrozenInstanceError):
        CHANGE_SOURCES["generic"].name = "y"  # type: ignore[misc]
    again = change_sources()
    assert again is not CHANGE_SOURCES and dict(again) == dict(CHANGE_SOURCES)


# ------------------------------------------------------------------------------------------------ fuzzing


ALL_FIXTURES = [(source, name, load(source, name)) for source, name in sorted(EXPECTED)]
KNOWN_KEYS = sorted(set().union(*(collect_keys(payload, set()) for _, _, payload in ALL_FIXTURES)))
KNOWN_STRINGS = [
    "success", "failure", "inactive", "in_progress", "refs/heads/main", "refs/tags/v1", "0" * 40,
    "2026-09-19T14:04:12Z", "https://example.com/x", "started", "pushed",
]  # fmt: skip
EVENT_TYPES = st.one_of(st.sampled_from(["push", "deployment_status", "ping"]), st.none(), st.text(max_size=12))

json_values = payload_json_values(KNOWN_KEYS, KNOWN_STRINGS)


def call(source: str, payload: object, event_type: str | None) -> list[ChangeSignal]:
    try:
        signals = parse(source, payload, event_type)
    except PayloadError as exc:
        assert isinstance(exc.path, str) and isinstance(exc.message, str) and exc.message
        assert "could not be normalised" not in exc.message  # the adapter bounded every field itself
        str(exc).encode("utf-8")  # safe to put in a JSON error response
        raise
    assert isinstance(signals, list) and all(isinstance(s, ChangeSignal) for s in signals)
    for signal in signals:
        signal.model_dump_json()
    return signals


FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@FUZZ
@given(source=st.sampled_from(sorted(CHANGE_SOURCES)), payload=json_values, event_type=EVENT_TYPES)
def test_fuzz_arbitrary_json_raises_only_payload_error(source: str, payload: object, event_type: str | None) -> None:
    try:
        call(source, payload, event_type)
    except PayloadError:
        pass


@FUZZ
@given(
    source=st.sampled_from(sorted(CHANGE_SOURCES)),
    payload=st.dictionaries(st.sampled_from(KNOWN_KEYS), json_values, max_size=8),
    event_type=EVENT_TYPES,
)
def test_fuzz_objects_with_vendor_keys_raise_only_payload_error(
    source: str, payload: object, event_type: str | None
) -> None:
    try:
        call(source, payload, event_type)
    except PayloadError:
        pass


@st.composite
def mutations(draw: Callable[..., Any]) -> tuple[str, Any, str | None, str, bool]:
    source, name, payload = draw(st.sampled_from(ALL_FIXTURES))
    path = draw(st.sampled_from(list(paths(payload))))
    mutated = copy.deepcopy(payload)
    node = mutated
    for key in path[:-1]:
        node = node[key]
    operation = draw(st.sampled_from(["delete", "wrong type", "any value"]))
    replacement: Any = None
    if operation == "delete":
        del node[path[-1]]
    else:
        replacement = draw(WRONG_TYPES if operation == "wrong type" else json_values)
        node[path[-1]] = replacement
    return source, mutated, event_type_for(source, name), render(path), not isinstance(replacement, str)


@settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=mutations())
def test_fuzz_mutated_real_fixtures_raise_only_payload_error_at_the_mutated_field(
    case: tuple[str, Any, str | None, str, bool],
) -> None:
    source, payload, event_type, mutated_path, in_place = case
    try:
        call(source, payload, event_type)
    except PayloadError as exc:
        if in_place:
            assert related(exc.path, mutated_path), (exc.path, mutated_path)
