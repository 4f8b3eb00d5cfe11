"""A lab scenario: one YAML file with ``name``, optional ``description``, ``faults`` and ``decoys`` (lists of
``{at, kind, target, params}``), ``expect`` (``root_cause``: the service or change a correct diagnosis names;
``fix``: the catalog action that ends it, or ``none``) and ``duration`` (seconds after the start).

The world is given the faults and decoys only; ``expect`` (and, for imported scenarios, the source's ground
truth) is kept in :class:`Truth` and read by the judge alone.

Decoys are harmless changes: ``kind`` ``deploy`` (a new version with no fault) or ``config_change`` (a config
push with no effect). A fault's ``params.until`` (seconds after its start) ends it by itself: a transient.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from research.lab.graph import FLAGS, SERVICES
from research.lab.shop import ACTIONS, KINDS

FIXES = (*ACTIONS, "none")


class Step(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    at: float = Field(ge=0, default=0)
    kind: str
    target: str = ""
    params: dict[str, Any] = Field(default_factory=dict)


class Expect(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    root_cause: str | list[str]
    fix: str | list[str]

    @property
    def causes(self) -> tuple[str, ...]:
        return (self.root_cause,) if isinstance(self.root_cause, str) else tuple(self.root_cause)

    @property
    def fixes(self) -> tuple[str, ...]:
        return (self.fix,) if isinstance(self.fix, str) else tuple(self.fix)

    @model_validator(mode="after")
    def _known(self) -> Expect:
        for fix in self.fixes:
            if fix not in FIXES:
                raise ValueError(f"fix: {fix!r} is not one of {', '.join(FIXES)}")
        return self


class Scenario(BaseModel):
    """What the world runs (everything but ``expect``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    name: str = Field(min_length=1)
    description: str = ""
    faults: tuple[Step, ...] = ()
    decoys: tuple[Step, ...] = ()
    duration: float = Field(gt=0, default=90)

    @model_validator(mode="after")
    def _known(self) -> Scenario:
        for i, step in enumerate(self.faults):
            if step.kind not in KINDS:
                raise ValueError(f"faults[{i}].kind: {step.kind!r} is not one of {', '.join(KINDS)}")
            flag = step.params.get("flag")
            if step.kind == "flag_on" and flag not in FLAGS:
                raise ValueError(f"faults[{i}].params.flag: {flag!r} is not one of {', '.join(FLAGS)}")
            if step.kind != "flag_on" and step.target not in SERVICES:
                raise ValueError(f"faults[{i}].target: {step.target!r} is not a shop service")
        for i, step in enumerate(self.decoys):
            if step.kind not in ("deploy", "config_change"):
                raise ValueError(f"decoys[{i}].kind: {step.kind!r} is not deploy or config_change")
            if step.target not in SERVICES:
                raise ValueError(f"decoys[{i}].target: {step.target!r} is not a shop service")
        return self


class Truth(BaseModel):
    """What the judge alone reads: the expected answer, and the source's own ground truth when imported."""

    model_config = ConfigDict(frozen=True)
    expect: Expect
    source: str = "builtin"
    ground_truth: dict[str, Any] = Field(default_factory=dict)


class Case(BaseModel):
    model_config = ConfigDict(frozen=True)
    scenario: Scenario
    truth: Truth


class Skipped(BaseModel):
    model_config = ConfigDict(frozen=True)
    name: str
    source: str
    reason: str


class BadScenario(ValueError):
    """A scenario file that cannot be run; the message names the file and the field."""


def _first(exc: ValidationError) -> str:
    """The first error as ``field: message`` (a validator's own message already names its field)."""
    first = exc.errors()[0]
    message = str(first["msg"]).removeprefix("Value error, ")
    where = ".".join(str(x) for x in first["loc"])
    return f"{where}: {message}" if where else message


def load(path: Path, source: str) -> Case:
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise BadScenario(f"{path}: {exc}") from None
    if not isinstance(data, dict):
        raise BadScenario(f"{path}: a scenario is a mapping")
    data = dict(data)
    raw_expect = data.pop("expect", None)
    try:
        scenario = Scenario.model_validate(data)
    except ValidationError as exc:
        raise BadScenario(f"{path}: {_first(exc)}") from None
    try:
        expect = Expect.model_validate(raw_expect)
    except ValidationError as exc:
        raise BadScenario(f"{path}: expect: {_first(exc)}") from None
    return Case(scenario=scenario, truth=Truth(expect=expect, source=source))


def load_dir(directory: Path, source: str) -> list[Case]:
    files = sorted([*directory.glob("*.yaml"), *directory.glob("*.yml")])
    if not files:
        raise BadScenario(f"{directory}: no scenario files (*.yaml)")
    return [load(path, source) for path in files]


Source = Literal["builtin", "dir"]
BUILTIN = Path(__file__).resolve().parent / "scenarios"
