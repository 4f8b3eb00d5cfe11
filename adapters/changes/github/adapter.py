"""GitHub webhooks → ``ChangeSignal``: ``deployment_status`` and ``push``; every other event (``ping``, …) →
``[]`` (``issues`` is read by ``adapters.changes.github.issues``: follow-ups closed in GitHub).

The event type is not in the body: it is the ``X-GitHub-Event`` header, hence ``parse(payload, event_type)``.
Payload shapes: https://docs.github.com/en/webhooks/webhook-events-and-payloads (examples from
octokit/webhooks).

``deployment_status``:

* ``change_id`` ← ``gh-deploy-<deployment.id>`` (every status of one deployment updates the same change);
* ``service`` ← ``deployment.payload.service`` (when the deployer set one) → ``repository.name``;
* ``version`` ← ``deployment.sha`` → ``deployment.ref``; ``environment`` ← ``deployment_status.environment`` →
  ``deployment.environment``;
* ``status`` ← ``deployment_status.state``: ``success`` → succeeded; ``failure``, ``error`` → failed;
  ``pending``, ``queued``, ``in_progress``, ``waiting`` → started; ``inactive`` (superseded by a newer
  deployment) → ``[]``;
* ``author`` ← ``deployment.creator.login`` → ``deployment_status.creator.login`` → ``sender.login``;
* ``link`` ← ``deployment_status.log_url`` → ``target_url`` → ``environment_url``;
* ``description`` ← ``deployment_status.description`` → ``deployment.description`` → ``"deploy <ref> to
  <env>"``;
* ``at`` ← ``deployment_status.updated_at`` → ``created_at``;
* ``repository`` ← ``repository.full_name``; ``ref`` ← ``deployment.ref``.

``push``:

* a deleted ref (``deleted: true`` or ``after`` all zeros) → ``[]``;
* ``change_id`` ← ``gh-push-<first 12 hex of after>``; ``status`` ``pushed``; ``service`` ←
  ``repository.name``;
* ``version`` ← the tag name for ``refs/tags/*``, else ``after``; ``environment`` ← ``""``;
* ``commits`` ← ``commits[]`` with ``paths`` = added + modified + removed (GitHub sends at most 20 commits);
* ``author`` ← ``pusher.name`` → ``sender.login``; ``link`` ← ``compare``; ``at`` ← ``head_commit.timestamp``;
* ``repository`` ← ``repository.full_name``; ``ref`` ← ``ref``.

``verify_signature`` checks ``X-Hub-Signature-256: sha256=<hex HMAC-SHA256 of the raw body>`` in constant
time.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping
from types import MappingProxyType
from typing import Final, Literal

from decklog.adapters import payload as f
from decklog.core.signals import ChangeSignal, Commit, PayloadError

SOURCE: Final = "github"
EVENT_HEADER: Final = "X-GitHub-Event"
SIGNATURE_HEADER: Final = "X-Hub-Signature-256"

COMMITS_MAX: Final = 100
PATHS_MAX: Final = 300
MESSAGE_MAX: Final = 2000

ChangeStatus = Literal["started", "succeeded", "failed", "pushed"]

_STATES: Final[Mapping[str, ChangeStatus | None]] = MappingProxyType(
    {
        "success": "succeeded",
        "failure": "failed",
        "error": "failed",
        "pending": "started",
        "queued": "started",
        "in_progress": "started",
        "waiting": "started",
        "inactive": None,
    }
)


def _login(obj: Mapping[str, object] | None, key: str, path: str) -> str:
    if obj is None:
        return ""
    user = f.opt_object(obj, key, path)
    return f.opt_str(user, "login", f.child(path, key)) if user is not None else ""


def _service(top: Mapping[str, object], deployment: Mapping[str, object]) -> tuple[str, str]:
    """(service, repository full name): ``deployment.payload.service`` → ``repository.name``."""
    repository = f.opt_object(top, "repository", "")
    repo_name = f.opt_str(repository, "name", "repository", f.SERVICE_MAX) if repository is not None else ""
    full_name = f.opt_str(repository, "full_name", "repository") if repository is not None else ""
    custom = deployment.get("payload")  # object, or a string, chosen by whoever created the deployment
    custom_service = (
        f.opt_str(custom, "service", "deployment.payload", f.SERVICE_MAX) if isinstance(custom, Mapping) else ""
    )
    service = f.first(custom_service, repo_name)
    if not service:
        raise PayloadError("repository.name", "is required (or deployment.payload.service)")
    return service, full_name


def _deployment_status(top: Mapping[str, object]) -> list[ChangeSignal]:
    status_obj = f.req_object(top, "deployment_status", "")
    spath = "deployment_status"
    state = f.req_str(status_obj, "state", spath, 50).lower()
    if state not in _STATES:
        raise PayloadError(f.child(spath, "state"), f"unknown deployment state {state!r}")
    status = _STATES[state]
    if status is None:
        return []

    deployment = f.req_object(top, "deployment", "")
    dpath = "deployment"
    deployment_id = f.req_str(deployment, "id", dpath, 100, numbers=True)
    service, full_name = _service(top, deployment)
    environment = f.first(f.opt_str(status_obj, "environment", spath), f.opt_str(deployment, "environment", dpath))
    ref = f.opt_str(deployment, "ref", dpath)
    task = f.opt_str(deployment, "task", dpath) or "deploy"
    fallback_description = " ".join(part for part in (task, ref, f"to {environment}" if environment else "") if part)
    return [
        f.build(
            ChangeSignal,
            "",
            source=SOURCE,
            change_id=f.bounded_id(f"gh-deploy-{deployment_id}", f.CHANGE_ID_MAX),
            service=service,
            version=f.first(f.opt_str(deployment, "sha", dpath), ref),
            environment=environment,
            author=f.first(
                _login(deployment, "creator", dpath),
                _login(status_obj, "creator", spath),
                _login(top, "sender", ""),
            ),
            status=status,
            link=f.first(
                f.opt_url(status_obj, "log_url", spath),
                f.opt_url(status_obj, "target_url", spath),
                f.opt_url(status_obj, "environment_url", spath),
            ),
            description=f.clean(
                f.first(
                    f.opt_str(status_obj, "description", spath, f.SUMMARY_MAX),
                    f.opt_str(deployment, "description", dpath, f.SUMMARY_MAX),
                    fallback_description,
                ),
                f.SUMMARY_MAX,
            ),
            at=f.opt_time(status_obj, "updated_at", spath) or f.opt_time(status_obj, "created_at", spath),
            repository=full_name,
            ref=ref,
        )
    ]


def _commit(raw: object, path: str) -> Commit:
    commit = f.as_object(raw, path)
    author = f.opt_object(commit, "author", path)
    apath = f.child(path, "author")
    paths: list[str] = []
    for key in ("added", "modified", "removed"):
        for entry in f.str_list(commit, key, path, f.LABEL_VALUE_MAX, PATHS_MAX):
            if entry not in paths and len(paths) < PATHS_MAX:
                paths.append(entry)
    return f.build(
        Commit,
        path,
        id=f.req_str(commit, "id", path, 100),
        message=f.opt_str(commit, "message", path, MESSAGE_MAX),
        author=f.first(f.opt_str(author, "name", apath), f.opt_str(author, "username", apath)) if author else "",
        url=f.opt_url(commit, "url", path),
        paths=tuple(paths),
    )


def _push(top: Mapping[str, object]) -> list[ChangeSignal]:
    deleted = top.get("deleted")
    if deleted is not None and not isinstance(deleted, bool):
        raise PayloadError("deleted", f"expected a boolean, got {f.json_type(deleted)}")
    after = f.req_str(top, "after", "", 100)
    if deleted or set(after) == {"0"}:
        return []

    repository = f.req_object(top, "repository", "")
    service = f.req_str(repository, "name", "repository", f.SERVICE_MAX)
    ref = f.opt_str(top, "ref", "")
    commits = [
        _commit(raw, f.item("commits", index))
        for index, raw in enumerate(f.opt_list(top, "commits", ""))
        if index < COMMITS_MAX
    ]
    head = f.opt_object(top, "head_commit", "")
    pusher = f.opt_object(top, "pusher", "")
    if ref.startswith("refs/tags/"):
        tag = ref.removeprefix("refs/tags/")
        version, description = tag, f"tag {tag} pushed"
    else:
        branch = ref.removeprefix("refs/heads/")
        plural = "commit" if len(commits) == 1 else "commits"
        version = after
        description = f"{len(commits)} {plural} pushed to {branch}" if branch else f"{len(commits)} {plural} pushed"
    return [
        f.build(
            ChangeSignal,
            "",
            source=SOURCE,
            change_id=f"gh-push-{after[:12]}",
            service=service,
            version=version,
            author=f.first(f.opt_str(pusher, "name", "pusher") if pusher else "", _login(top, "sender", "")),
            status="pushed",
            commits=tuple(commits),
            link=f.opt_url(top, "compare", ""),
            description=description,
            at=f.opt_time(head, "timestamp", "head_commit") if head else None,
            repository=f.opt_str(repository, "full_name", "repository"),
            ref=ref,
        )
    ]


def parse(payload: object, event_type: str | None) -> list[ChangeSignal]:
    """A GitHub webhook body and its ``X-GitHub-Event`` header → change signals (``[]`` for other events)."""
    if event_type is None or not event_type.strip():
        raise PayloadError("", f"the {EVENT_HEADER} header is required")
    top = f.root(payload)
    event = event_type.strip().lower()
    if event == "deployment_status":
        return _deployment_status(top)
    if event == "push":
        return _push(top)
    return []


def verify_signature(secret: str, raw_body: bytes, header_value: str | None) -> bool:
    """True when ``X-Hub-Signature-256`` is ``sha256=`` + the HMAC-SHA256 hex of ``raw_body`` under ``secret``
    (compared in constant time). An empty secret or a missing/garbled header never verifies."""
    if not secret or not header_value:
        return False
    scheme, _, signature = header_value.strip().partition("=")
    if scheme.strip().lower() != "sha256":
        return False
    expected = hmac.new(secret.encode("utf-8"), raw_body, hashlib.sha256).hexdigest().encode("ascii")
    return hmac.compare_digest(expected, signature.strip().lower().encode("utf-8", "replace"))
