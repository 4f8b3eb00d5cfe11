"""decklog's own change JSON (deploy scripts, CD pipelines) → ``[ChangeSignal]``. Schema: README.md here.

``service`` is required. ``id`` defaults to a deterministic slug, so a retried POST of the same change lands
on the same change: ``<service>-<version>``; without a version ``<service>-<at>``; without either,
``<service>-`` + a short hash of the change's content.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from datetime import datetime
from typing import Final, Literal, cast

from decklog.adapters import payload as f
from decklog.core.signals import CHANGE_KINDS, ChangeSignal, Commit, PayloadError

SOURCE: Final = "generic"
ChangeStatus = Literal["started", "succeeded", "failed", "pushed"]
STATUSES: Final = ("started", "succeeded", "failed", "pushed")
COMMITS_MAX: Final = 100
PATHS_MAX: Final = 300
MESSAGE_MAX: Final = 2000


def slug(*parts: str) -> str:
    """``slug("Payments", "v2.4.1")`` → ``"payments-v2.4.1"``: lowercase ASCII letters, digits, dots,
    dashes."""
    text = "-".join(re.sub(r"[^a-z0-9.]+", "-", part.lower()).strip("-.") for part in parts)
    return re.sub(r"-{2,}", "-", text).strip("-")


def _strict_url(obj: Mapping[str, object], key: str, path: str) -> str:
    url = f.opt_str(obj, key, path, f.URL_MAX + 1)
    if not url:
        return ""
    if len(url) > f.URL_MAX:
        raise PayloadError(f.child(path, key), f"is longer than {f.URL_MAX} characters")
    if not f.http_url(url):
        raise PayloadError(f.child(path, key), "expected an http:// or https:// URL")
    return url


def _commit(raw: object, path: str) -> Commit:
    commit = f.as_object(raw, path)
    return f.build(
        Commit,
        path,
        id=f.req_str(commit, "id", path, 100, numbers=True),
        message=f.opt_str(commit, "message", path, MESSAGE_MAX),
        author=f.opt_str(commit, "author", path),
        url=_strict_url(commit, "url", path),
        paths=tuple(dict.fromkeys(f.str_list(commit, "paths", path, f.LABEL_VALUE_MAX, PATHS_MAX))),
    )


def _short_hash(text: str, length: int) -> str:
    return hashlib.sha256(text.encode("utf-8", "replace")).hexdigest()[:length]


def _default_id(service: str, version: str, at: datetime | None, content: Mapping[str, object]) -> str:
    head = slug(service) or f"change-{_short_hash(service, 8)}"
    if version:
        tail = slug(version) or _short_hash(version, 8)
    elif at is not None:
        tail = at.strftime("%Y%m%dt%H%M%Sz")
    else:
        tail = _short_hash(json.dumps(content, sort_keys=True, separators=(",", ":")), 12)
    return f.bounded_id(f"{head}-{tail}", f.CHANGE_ID_MAX)


def parse(payload: object) -> list[ChangeSignal]:
    """A decklog generic change → ``[ChangeSignal]`` (always exactly one)."""
    top = f.root(payload)
    service = f.req_str(top, "service", "", f.SERVICE_MAX)
    version = f.opt_str(top, "version", "", f.SHORT_MAX, numbers=True)
    status = f.opt_str(top, "status", "", 50).lower() or "succeeded"
    if status not in STATUSES:
        raise PayloadError("status", f"expected one of started, succeeded, failed, pushed; got {status!r}")
    kind = f.opt_str(top, "kind", "", 50).lower() or "deploy"
    if kind not in CHANGE_KINDS:
        raise PayloadError("kind", f"expected one of {', '.join(CHANGE_KINDS)}; got {kind!r}")
    flag = f.opt_str(top, "flag", "", 200)
    if flag and kind != "flag":
        raise PayloadError("flag", f'names a feature flag, so kind must be "flag" (got {kind!r})')
    environment = f.opt_str(top, "environment", "")
    author = f.opt_str(top, "author", "")
    link = _strict_url(top, "link", "")
    description = f.opt_str(top, "description", "", f.SUMMARY_MAX)
    at = f.opt_time(top, "at", "")
    commits = tuple(
        _commit(raw, f.item("commits", index))
        for index, raw in enumerate(f.opt_list(top, "commits", ""))
        if index < COMMITS_MAX
    )
    given_id = f.opt_str(top, "id", "", 100_000, numbers=True)
    if given_id:
        change_id = f.bounded_id(given_id, f.CHANGE_ID_MAX)
    else:
        content = {
            "service": service,
            "environment": environment,
            "author": author,
            "status": status,
            "commits": [commit.id for commit in commits],
            "link": link,
            "description": description,
        }
        if kind != "deploy":  # only then: the ids of deploys stay what they were before changes had kinds
            content |= {"kind": kind, "flag": flag}
        change_id = _default_id(service, version, at, content)
    return [
        f.build(
            ChangeSignal,
            "",
            source=SOURCE,
            change_id=change_id,
            service=service,
            version=version,
            environment=environment,
            author=author,
            status=cast(ChangeStatus, status),
            commits=commits,
            link=link,
            description=description,
            at=at,
            kind=kind,
            flag=flag,
        )
    ]
