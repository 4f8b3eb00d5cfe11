"""decklog's own alert JSON (scripts, cron jobs, anything without a native integration) → ``[AlertSignal]``.

The schema is documented in this folder's README.md. ``title`` and ``fingerprint`` are required; everything
else is optional. Unknown fields are ignored; known fields of the wrong type are errors.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final, cast

from decklog.adapters import payload as f
from decklog.core.signals import AlertSignal, AlertStatus, Link, PayloadError

SOURCE: Final = "generic"
STATUSES: Final = ("firing", "acknowledged", "resolved")


def _links(top: Mapping[str, object]) -> tuple[Link, ...]:
    out: list[Link] = []
    for index, raw in enumerate(f.opt_list(top, "links", "")):
        path = f.item("links", index)
        entry = f.as_object(raw, path)
        url = f.req_str(entry, "url", path, f.URL_MAX + 1)
        if len(url) > f.URL_MAX:
            raise PayloadError(f.child(path, "url"), f"is longer than {f.URL_MAX} characters")
        if not f.http_url(url):
            raise PayloadError(f.child(path, "url"), "expected an http:// or https:// URL")
        if len(out) < f.LINKS_MAX and all(existing.url != url for existing in out):
            out.append(Link(url=url, title=f.opt_str(entry, "title", path, f.SHORT_MAX)))
    return tuple(out)


def parse(payload: object) -> list[AlertSignal]:
    """A decklog generic alert → ``[AlertSignal]`` (always exactly one)."""
    top = f.root(payload)
    title = f.req_str(top, "title", "", f.TITLE_MAX)
    fingerprint = f.bounded_id(f.req_str(top, "fingerprint", "", 100_000, numbers=True), f.FINGERPRINT_MAX)
    status = f.opt_str(top, "status", "", 50).lower() or "firing"
    event_id = f.opt_str(top, "event_id", "", 100_000, numbers=True)
    if status not in STATUSES:
        raise PayloadError("status", f"expected one of firing, acknowledged, resolved; got {status!r}")
    return [
        f.build(
            AlertSignal,
            "",
            source=SOURCE,
            fingerprint=fingerprint,
            status=cast(AlertStatus, status),
            title=title,
            service=f.opt_str(top, "service", "", f.SERVICE_MAX),
            source_severity=f.opt_str(top, "severity", "", 50, numbers=True),
            summary=f.opt_str(top, "summary", "", f.SUMMARY_MAX),
            labels=f.str_map(top, "labels", ""),
            links=_links(top),
            started_at=f.opt_time(top, "started_at", ""),
            ended_at=f.opt_time(top, "ended_at", ""),
            event_id=f.bounded_id(event_id, f.SHORT_MAX) if event_id else "",
        )
    ]
