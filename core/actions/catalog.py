"""The action catalog: what ``[[actions]]`` in decklog.toml declares, validated once at start-up.

Each action has a name, a description, a risk (R1–R4), a parameter schema, an executor, safety conditions, an
optional compensation, and what to verify afterwards. The executor is a ``type`` (an adapter, one module each in
``adapters/executors/``), a ``timeout_s``, and the type's own options, which its adapter validates (the
``ExecutorType`` port). Option values may reference the environment (``${DECKLOG_DEPLOY_API_URL}``,
``${NAME:-default}``); an action whose executor needs an unset variable (its URL, say) is *unavailable*: listed,
with the reason, and never proposed.

>>> class Any_:
...     def check(self, options, unset):
...         return CheckedOptions(dict(options), unavailable=f"{unset['url']} is not set" if "url" in unset else "")
>>> catalog = Catalog.from_config([{"name": "noop", "description": "nothing", "risk": "R1",
...     "executor": {"type": "hook", "url": "${HOOK_URL}/noop"}}], env={}, executors={"hook": Any_()})
>>> catalog.get("noop").available, catalog.get("noop").unavailable_reason
(False, 'HOOK_URL is not set')
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from decklog.core.actions import params as p
from decklog.core.actions.conditions import CONDITIONS
from decklog.core.actions.executor import CheckedOptions, ExecutorType
from decklog.core.entries import Risk
from decklog.core.errors import InvalidInput, NotFound

_ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}|\$([A-Za-z_][A-Za-z0-9_]*)")
_NAME = r"^[a-z][a-z0-9_]{0,63}$"


class _Spec(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class ExecutorSpec(_Spec):
    """Where and how an action runs: the executor ``type``, its timeout, and the type's own ``options`` as its
    adapter validated them (e.g. ``url`` and ``reconcile_url`` for ``http``). ``urls``: what it calls."""

    type: str = Field(min_length=1)
    timeout_s: float = Field(10.0, gt=0, le=600)
    options: dict[str, Any] = Field(default_factory=dict)
    urls: tuple[str, ...] = ()


class CompensationSpec(_Spec):
    """The action that undoes this one. ``params`` values may be templates: ``{params.service}`` (the original
    run's arguments) or ``{effect.rolled_back_from}`` (a field of the original effect's recorded response)."""

    action: str = Field(pattern=_NAME)
    params: dict[str, Any] = Field(default_factory=dict)


class ActionSpec(_Spec):
    name: str = Field(pattern=_NAME)
    description: str = Field(min_length=1, max_length=500)
    risk: Risk
    params: dict[str, p.ParamSpec] = Field(default_factory=dict)
    executor: ExecutorSpec
    safety_conditions: tuple[str, ...] = ()
    compensation: CompensationSpec | None = None
    approver_group: str = ""
    expected_outcome: str = ""
    verify: Literal["alerts_resolved", "manual", "none"] = "manual"
    verify_within_minutes: float = Field(15, gt=0)
    available: bool = True
    unavailable_reason: str = ""

    @field_validator("safety_conditions")
    @classmethod
    def _known_conditions(cls, names: tuple[str, ...]) -> tuple[str, ...]:
        unknown = [n for n in names if n not in CONDITIONS]
        if unknown:
            raise ValueError(f"unknown safety condition {unknown[0]!r} (known: {', '.join(sorted(CONDITIONS))})")
        return names

    @field_validator("params")
    @classmethod
    def _param_names(cls, specs: dict[str, p.ParamSpec]) -> dict[str, p.ParamSpec]:
        for name in specs:
            if not re.match(_NAME, name):
                raise ValueError(f"parameter name {name!r} must be lower_snake_case")
        return specs

    def normalise(self, params: Mapping[str, Any]) -> dict[str, Any]:
        return p.normalise(self.params, params)

    def expected(self, params: Mapping[str, Any]) -> str:
        """``expected_outcome`` with ``{param}`` placeholders filled in (unknown ones are left as written)."""
        text = self.expected_outcome or f"{self.name} has the intended effect"
        return re.sub(r"\{([a-z_][a-z0-9_]*)\}", lambda m: str(params.get(m.group(1), m.group(0))), text)


def substitute(text: str, env: Mapping[str, str]) -> tuple[str, list[str]]:
    """Replace ``$NAME`` / ``${NAME}`` / ``${NAME:-default}``; return the text and the names that were unset.

    A value is joined to a following path without doubling the slash (``${URL}/rollback`` with ``URL=http://h/``).
    """
    missing: list[str] = []

    def replace(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(3)
        default = match.group(2)
        value = env.get(name, "")
        if not value.strip():
            if default is None:
                missing.append(name)
                return ""
            return default
        end = match.end()
        return value.rstrip("/") if text[end : end + 1] == "/" else value

    return _ENV_REF.sub(replace, text), missing


def _resolve_executor(
    raw: Mapping[str, Any], env: Mapping[str, str], executors: Mapping[str, ExecutorType], where: str
) -> tuple[dict[str, Any], str]:
    """The executor table checked by its type's adapter, with the environment substituted into its options; the
    reason the action is unavailable, if it is. ``InvalidInput`` names the key at fault under ``where``."""
    kind = raw.get("type")
    if not isinstance(kind, str) or kind not in executors:
        known = ", ".join(sorted(executors)) or "none"
        what = f"unknown executor type {kind!r}" if isinstance(kind, str) else "an executor type is required"
        raise InvalidInput(f"{what} (known: {known})", field=f"{where}.executor.type")
    out: dict[str, Any] = {"type": kind}
    options: dict[str, Any] = {}
    unset: dict[str, str] = {}
    for key, value in raw.items():
        if key == "type":
            continue
        if isinstance(value, str):
            value, missing = substitute(value, env)
            if missing:
                unset[key] = missing[0]
        elif isinstance(value, dict):
            value = {k: substitute(v, env)[0] if isinstance(v, str) else v for k, v in value.items()}
        if key == "timeout_s":
            out[key] = value
        else:
            options[key] = value
    try:
        checked: CheckedOptions = executors[kind].check(options, unset)
    except InvalidInput as exc:
        key = f".{exc.field}" if exc.field else ""
        message = exc.message.removeprefix(f"{exc.field}: ") if exc.field else exc.message
        raise InvalidInput(message, field=f"{where}.executor{key}") from None
    out["options"] = checked.options
    out["urls"] = checked.urls
    return out, checked.unavailable


class Catalog:
    """The actions of this deployment, by name."""

    def __init__(self, actions: Sequence[ActionSpec]) -> None:
        self._actions: dict[str, ActionSpec] = {}
        for action in actions:
            if action.name in self._actions:
                raise InvalidInput(f"action {action.name!r} is declared twice", field="actions")
            self._actions[action.name] = action
        for action in actions:
            comp = action.compensation
            if comp is not None and comp.action not in self._actions:
                raise InvalidInput(
                    f"the compensation of {action.name} names an unknown action {comp.action!r}",
                    field=f"actions.{action.name}.compensation.action",
                )

    @classmethod
    def from_config(
        cls,
        raw_actions: Sequence[Mapping[str, Any]],
        *,
        env: Mapping[str, str],
        executors: Mapping[str, ExecutorType],
        timeout_override: float | None = None,
    ) -> Catalog:
        """Validate ``[[actions]]`` tables; ``InvalidInput`` names the table and key at fault. ``executors``: the
        executor types by name (``adapters.executors.EXECUTOR_TYPES``)."""
        specs = []
        for i, raw in enumerate(raw_actions):
            where = f"actions[{i}]" + (f" ({raw.get('name')})" if isinstance(raw, Mapping) and raw.get("name") else "")
            if not isinstance(raw, Mapping):
                raise InvalidInput("each [[actions]] entry must be a table", field=where)
            data = dict(raw)
            if "available" in data or "unavailable_reason" in data:
                raise InvalidInput("available is derived from the environment, not configured", field=where)
            executor = data.get("executor")
            if isinstance(executor, Mapping):
                resolved, reason = _resolve_executor(executor, env, executors, where)
                if timeout_override is not None:
                    resolved["timeout_s"] = timeout_override
                data["executor"] = resolved
                data["available"] = not reason
                data["unavailable_reason"] = reason
            try:
                specs.append(ActionSpec.model_validate(data))
            except ValidationError as exc:
                first = exc.errors()[0]
                loc = ".".join(str(x) for x in first["loc"])
                raise InvalidInput(f"{first['msg']}", field=f"{where}.{loc}" if loc else where) from None
        return cls(specs)

    def get(self, name: str) -> ActionSpec:
        action = self._actions.get(name)
        if action is None:
            known = ", ".join(sorted(self._actions)) or "none configured"
            raise NotFound(f"no action named {name!r} (known: {known})")
        return action

    def __contains__(self, name: object) -> bool:
        return name in self._actions

    def __iter__(self) -> Iterator[ActionSpec]:
        return iter(self._actions.values())

    def __len__(self) -> int:
        return len(self._actions)
