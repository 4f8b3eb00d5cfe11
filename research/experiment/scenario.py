"""The scenario format: a timeline on a virtual clock, read-tool answers, a world oracle, ground truth, invariants.

Loaded from YAML (the built-in suite is ``research/experiment/scenarios/*.yaml``; ``--suite DIR`` reads a folder).
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from decklog.core.errors import InvalidInput


class _M(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Step(_M):
    """One input at ``at`` virtual seconds: an alert (firing/resolved), a change, or a human message."""

    at: float = Field(ge=0)
    type: Literal["alert", "change", "message"]
    fingerprint: str = ""
    status: Literal["firing", "resolved"] = "firing"
    service: str = ""
    title: str = ""
    text: str = ""
    user: str = "U0ONCALL"


class Tool(_M):
    """A read tool's answer: looked up on request, never injected. ``suspect``: the entity it points at;
    ``fix``: the action it suggests (``action`` + ``params``); ``hold``: it says not to act."""

    name: str = Field(min_length=1)
    kind: str = Field(min_length=1)
    answer: str = Field(min_length=1)
    suspect: str = ""
    fix: dict[str, Any] = Field(default_factory=dict)
    hold: bool = False


class ActionRef(_M):
    action: str = Field(min_length=1)
    params: dict[str, Any] = Field(default_factory=dict)

    def key(self) -> str:
        return action_key(self.action, self.params)


class World(_M):
    mitigations: tuple[ActionRef, ...] = ()
    harmful: tuple[ActionRef, ...] = ()
    resolves: tuple[str, ...] = ()  # fingerprints that resolve once a mitigation applied
    resolve_after: float = Field(default=0, ge=0)  # virtual seconds from the mitigation to the resolution


class RootCause(_M):
    entity: str = Field(min_length=1)
    aliases: tuple[str, ...] = ()

    def names(self) -> set[str]:
        return {n.lower() for n in (self.entity, *self.aliases) if n}


class Invariants(_M):
    constraints: tuple[str, ...] = ()
    evidence_kinds: tuple[str, ...] = ()
    max_effects_per_action: int = Field(default=1, ge=1)
    conditions: tuple[str, ...] = ("alert still firing", "no other run of this action in progress")


class Scenario(_M):
    id: str = Field(min_length=1)
    title: str = Field(min_length=1)
    act: bool = True  # False: the right answer is not to act
    timeline: tuple[Step, ...] = Field(min_length=1)
    tools: tuple[Tool, ...] = Field(min_length=1)
    world: World = World()
    root_cause: RootCause
    invariants: Invariants = Invariants()
    source: str = "builtin"

    @model_validator(mode="after")
    def _check(self) -> Scenario:
        if not any(s.type == "alert" and s.status == "firing" for s in self.timeline):
            raise ValueError("the timeline needs at least one firing alert")
        if self.act and not self.world.mitigations:
            raise ValueError("a scenario with act: true needs world.mitigations")
        return self


def action_key(action: str, params: dict[str, Any]) -> str:
    return action + "(" + ",".join(f"{k}={params[k]}" for k in sorted(params)) + ")"


def parse_scenario(data: Any, origin: str) -> Scenario:
    if not isinstance(data, dict):
        raise InvalidInput(f"{origin}: a scenario must be a YAML mapping")
    try:
        return Scenario.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "scenario"
        raise InvalidInput(f"{origin}: {where}: {first['msg']}") from None


def load_file(path: Path) -> Scenario:
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise InvalidInput(f"{path}: cannot read scenario: {exc}".splitlines()[0]) from None
    return parse_scenario(data, str(path))


def load_dir(path: Path) -> list[Scenario]:
    if not path.is_dir():
        raise InvalidInput(f"--suite {path}: not a directory")
    files = sorted(p for p in path.iterdir() if p.suffix in (".yaml", ".yml"))
    if not files:
        raise InvalidInput(f"--suite {path}: no *.yaml scenarios in it")
    return [load_file(p) for p in files]


def builtin() -> list[Scenario]:
    root = resources.files("research.experiment") / "scenarios"
    out = []
    for item in sorted(root.iterdir(), key=lambda p: p.name):
        if item.name.endswith(".yaml"):
            out.append(parse_scenario(yaml.safe_load(item.read_text(encoding="utf-8")), f"builtin:{item.name}"))
    return out
