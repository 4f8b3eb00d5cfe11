"""The fake deploy service's state as plain data, and back: ``dump_state(DeployState)`` / ``parse_state(data)``.

The sandbox keeps this across restarts (adapters/local/sandbox/persistence.py). No file I/O here.
"""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple

from decklog.adapters.local.services.loopback import Effect, KeyState

DEPLOY_STATE_FORMAT = "decklog-fake-deploy-service"
DEPLOY_STATE_VERSION = 1


class DeployState(NamedTuple):
    deploy_seq: int
    deploys: dict[str, list[dict[str, Any]]]
    effects: list[Effect]
    keys: dict[str, KeyState]
    fences: dict[tuple[str, str], int]


def dump_state(state: DeployState) -> dict[str, Any]:
    """``state`` as JSON-ready data (effects by position, so a key's effect is the same object after ``parse_state``)."""
    effects = list(state.effects)
    position = {id(e): i for i, e in enumerate(effects)}
    keys = {}
    for key, key_state in state.keys.items():
        keys[key] = {
            "fingerprint": key_state.fingerprint,
            "status": key_state.status,
            "body": key_state.body.decode("utf-8") if key_state.body is not None else None,
            "effect": position.get(id(key_state.effect)) if key_state.effect is not None else None,
        }
    return {
        "format": DEPLOY_STATE_FORMAT,
        "version": DEPLOY_STATE_VERSION,
        "deploy_seq": state.deploy_seq,
        "deploys": {service: [dict(d) for d in history] for service, history in state.deploys.items()},
        "effects": [dataclasses.asdict(e) for e in effects],
        "keys": keys,
        "fences": [[scope, action, fence] for (scope, action), fence in state.fences.items()],
    }


def parse_state(data: Any) -> DeployState:
    """:func:`dump_state`'s data as a state; ``ValueError`` when ``data`` is not such data (all or nothing)."""
    if not isinstance(data, dict) or data.get("format") != DEPLOY_STATE_FORMAT:
        raise ValueError("not a fake deploy service state")
    if data.get("version") != DEPLOY_STATE_VERSION:
        raise ValueError(f"deploy service state version {data.get('version')!r} is not {DEPLOY_STATE_VERSION}")
    try:
        seq = data["deploy_seq"]
        if not isinstance(seq, int) or isinstance(seq, bool) or seq < 0:
            raise ValueError("deploy_seq must be a non-negative integer")
        deploys: dict[str, list[dict[str, Any]]] = {}
        for service, history in dict(data["deploys"]).items():
            if not isinstance(history, list) or not all(
                isinstance(d, dict) and d.get("service") == service and isinstance(d.get("version"), str)
                for d in history
            ):
                raise ValueError(f"the deploy history of {service!r} is damaged")
            deploys[str(service)] = [dict(d) for d in history]
        effects = [
            Effect(
                idempotency_key=e["idempotency_key"],
                kind=str(e["kind"]),
                request=e["request"],
                response=dict(e["response"]),
                at=str(e["at"]),
            )
            for e in data["effects"]
        ]
        keys: dict[str, KeyState] = {}
        for key, raw in dict(data["keys"]).items():
            index, body = raw["effect"], raw["body"]
            keys[str(key)] = KeyState(
                fingerprint=str(raw["fingerprint"]),
                status=None if raw["status"] is None else int(raw["status"]),
                body=None if body is None else str(body).encode("utf-8"),
                effect=None if index is None else effects[int(index)],
            )
        fences = {(str(scope), str(action)): int(fence) for scope, action, fence in data["fences"]}
    except (KeyError, IndexError, TypeError, AttributeError) as exc:
        raise ValueError(f"the deploy service state is damaged ({exc.__class__.__name__}: {exc})") from None
    return DeployState(seq, deploys, effects, keys, fences)
