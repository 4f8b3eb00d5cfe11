"""Action parameters: a small schema per parameter, validation, and the normalised form proposals record.

Normalising makes equal arguments look equal: strings are trimmed (and lower-cased where the schema says so),
numbers and booleans written as text are parsed, defaults are filled in, keys are sorted. The preview and the
args hash are computed from the normalised form, so two proposals of the same thing hash the same.

A parameter may be *derived from the incident* (``from_incident``): when a proposal leaves it out, it is filled
in from the incident's facts (``INCIDENT_FACTS``: its title, severity, first service, Slack link, …), mapped
through ``incident_values`` where the action wants its own words (a SEV2 is PagerDuty's ``error``), before the
default. Nobody paging at 03:00 types a summary the incident already has.

>>> specs = {"summary": ParamSpec(required=True, from_incident="headline")}
>>> derive(specs, {}, {"headline": "SEV2 · Checkout 5xx"})
{'summary': 'SEV2 · Checkout 5xx'}

>>> specs = {"service": ParamSpec(required=True, lowercase=True)}
>>> normalise(specs, {"service": "  Payments "})
{'service': 'payments'}
>>> preview("rollback_deploy", {"service": "payments"})
'rollback_deploy(service="payments")'
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from typing import Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, model_validator

from decklog.core.entries import canonical_json
from decklog.core.errors import InvalidInput

ParamType = Literal["string", "integer", "number", "boolean"]
Scalar = str | int | float | bool
#: What a parameter can be derived from (core/actions/proposals.py ``incident_facts`` computes them):
#: ``title``; ``severity`` (1–4); ``service`` (the first), ``services`` (comma-separated); ``link`` (the Slack
#: thread's permalink); ``scope`` (the id); ``status``; ``headline`` — ``SEV2 · <title> · <service> · <link>``,
#: whatever of it is known, one line for a page or a status update.
IncidentFact = Literal["title", "severity", "service", "services", "link", "scope", "status", "headline"]
INCIDENT_FACTS: tuple[str, ...] = get_args(IncidentFact)
_TRUE = ("true", "yes", "on", "1")
_FALSE = ("false", "no", "off", "0")


class ParamSpec(BaseModel):
    """One parameter of an action (``[actions.params.<name>]`` in decklog.toml)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    type: ParamType = "string"
    required: bool = False
    default: Scalar | None = None
    description: str = ""
    enum: tuple[Scalar, ...] = ()
    pattern: str = ""
    min: float | None = None
    max: float | None = None
    max_length: int = Field(500, ge=1, le=10_000)
    lowercase: bool = False
    from_incident: IncidentFact | None = None  # filled in from the incident when a proposal leaves it out
    incident_values: dict[str, Scalar] = Field(default_factory=dict)  # the incident's value (as text) → this one's

    @model_validator(mode="after")
    def _check(self) -> ParamSpec:
        if self.pattern:
            try:
                re.compile(self.pattern)
            except re.error as exc:
                raise ValueError(f"pattern is not a valid regular expression: {exc}") from None
        if self.incident_values and self.from_incident is None:
            raise ValueError("incident_values needs from_incident (which of the incident's facts they map)")
        return self


def _coerce(name: str, spec: ParamSpec, value: Any) -> Scalar:
    field = f"params.{name}"
    if spec.type == "string":
        if isinstance(value, bool) or not isinstance(value, str | int | float):
            raise InvalidInput("must be text", field=field)
        text = " ".join(str(value).split())
        if spec.lowercase:
            text = text.lower()
        if len(text) > spec.max_length:
            raise InvalidInput(f"must be at most {spec.max_length} characters", field=field)
        if spec.pattern and not re.fullmatch(spec.pattern, text):
            raise InvalidInput(f"{text!r} does not match {spec.pattern}", field=field)
        return text
    if spec.type == "boolean":
        if isinstance(value, bool):
            return value
        word = str(value).strip().lower()
        if word in _TRUE:
            return True
        if word in _FALSE:
            return False
        raise InvalidInput("must be true or false", field=field)
    if isinstance(value, bool):
        raise InvalidInput(f"must be a {spec.type}", field=field)
    number: int | float
    try:
        if spec.type == "integer":
            if isinstance(value, float) and not value.is_integer():
                raise ValueError
            number = int(value) if not isinstance(value, str) else int(value.strip())
        else:
            number = float(value)
    except (TypeError, ValueError):
        raise InvalidInput(f"must be a{'n' if spec.type == 'integer' else ''} {spec.type}", field=field) from None
    if spec.min is not None and number < spec.min:
        raise InvalidInput(f"must be at least {spec.min:g}", field=field)
    if spec.max is not None and number > spec.max:
        raise InvalidInput(f"must be at most {spec.max:g}", field=field)
    return number


def normalise(specs: Mapping[str, ParamSpec], params: Mapping[str, Any]) -> dict[str, Any]:
    """Validate ``params`` against ``specs``; return them normalised (sorted keys, defaults filled in).

    Raises ``InvalidInput`` naming the parameter (``params.service``) on an unknown, missing or bad value.
    """
    unknown = sorted(set(params) - set(specs))
    if unknown:
        known = ", ".join(sorted(specs)) or "none"
        raise InvalidInput(f"unknown parameter (this action takes: {known})", field=f"params.{unknown[0]}")
    out: dict[str, Any] = {}
    for name in sorted(specs):
        spec = specs[name]
        value = params.get(name)
        if value is None or (isinstance(value, str) and not value.strip()):
            if spec.default is not None:
                value = spec.default
            elif spec.required:
                raise InvalidInput("is required", field=f"params.{name}")
            else:
                continue
        coerced = _coerce(name, spec, value)
        if spec.enum and coerced not in spec.enum:
            allowed = ", ".join(str(v) for v in spec.enum)
            raise InvalidInput(f"{coerced!r} is not one of {allowed}", field=f"params.{name}")
        out[name] = coerced
    return out


def derive(specs: Mapping[str, ParamSpec], params: Mapping[str, Any], facts: Mapping[str, Scalar]) -> dict[str, Any]:
    """``params`` with every parameter derived from the incident that they leave out (or leave blank) filled in
    from ``facts``: mapped through ``incident_values`` (a fact it does not map fills nothing), a text cut to the
    parameter's ``max_length``. A fact the incident does not have (no severity, no Slack thread yet) fills nothing,
    and the default or ``is required`` apply as before."""
    out = dict(params)
    for name, spec in specs.items():
        given = out.get(name)
        if spec.from_incident is None or not (given is None or (isinstance(given, str) and not given.strip())):
            continue
        value: Scalar | None = facts.get(spec.from_incident)
        if value is None or value == "":
            continue
        if spec.incident_values:
            value = spec.incident_values.get(str(value))
            if value is None:
                continue
        if spec.type == "string" and isinstance(value, str) and len(value) > spec.max_length:
            value = value[: spec.max_length - 1].rstrip() + "…"
        out[name] = value
    return out


def preview(action: str, params: Mapping[str, Any]) -> str:
    """One line showing exactly what would run: ``action(key="value", n=3)`` with keys sorted."""
    args = ", ".join(f"{k}={json.dumps(params[k], ensure_ascii=False)}" for k in sorted(params))
    return f"{action}({args})"


def args_hash(action: str, params: Mapping[str, Any]) -> str:
    """sha256 over the action name and its normalised arguments (canonical JSON)."""
    material = canonical_json({"action": action, "params": dict(params)})
    return "sha256:" + hashlib.sha256(material.encode("utf-8")).hexdigest()
