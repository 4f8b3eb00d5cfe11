"""The keys the index finds scopes by: a Slack thread's or channel's route, and an alert source's group."""

from __future__ import annotations

import hashlib


def route_key(channel: str, thread_ts: str = "") -> str:
    return f"slack:{channel}:{thread_ts}" if thread_ts else f"slack:{channel}"


def group_fingerprint(group: str) -> str:
    """The index key under which a source's group is claimed (next to the alerts' own fingerprints)."""
    if len(group) <= 400:
        return f"group:{group}"
    return "group:sha256:" + hashlib.sha256(group.encode("utf-8", "replace")).hexdigest()
