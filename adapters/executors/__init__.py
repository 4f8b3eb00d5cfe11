"""Executors: one module per type, each the adapter of one kind of target (``http``: decklog's webhook protocol,
``statuspage``, ``pagerduty``).

``EXECUTOR_TYPES`` (built by ``executor_types()``, read-only) maps the ``type`` of an ``[actions.executor]`` table
to an ``ExecutorAdapter``: the type's options model (it validates the table's other keys, refusing one it does not
know) and how to build the executor of an action. The catalog (core/actions/catalog.py) asks it through the
``ExecutorType`` port; an unknown type or a bad option stops start-up naming the action and the key.

Adding an executor: a module here with ``TYPE``, an options model (a subclass of ``options.ExecutorOptions``), an
executor (the ``core.actions.Executor`` port) and ``build``; then one line in ``executor_types()``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Final, Generic, TypeVar

import aiohttp
from pydantic import ValidationError

from decklog.adapters.executors import http, pagerduty, statuspage
from decklog.adapters.executors.options import ExecutorOptions
from decklog.core.actions.catalog import ExecutorSpec
from decklog.core.actions.executor import CheckedOptions, Executor
from decklog.core.egress import EgressPolicy
from decklog.core.errors import InvalidInput

OptionsT = TypeVar("OptionsT", bound=ExecutorOptions)


@dataclass(frozen=True, slots=True)
class ExecutorAdapter(Generic[OptionsT]):
    """One executor type: its name, its options model, and ``build(options, session, timeout, egress)``."""

    name: str
    options: type[OptionsT]
    build: Callable[[OptionsT, aiohttp.ClientSession, float, EgressPolicy | None], Executor]

    def check(self, options: Mapping[str, Any], unset: Mapping[str, str]) -> CheckedOptions:
        """The ``ExecutorType`` port of core/actions/executor.py."""
        try:
            parsed = self.options.model_validate(dict(options))
        except ValidationError as exc:
            first = exc.errors()[0]
            key = ".".join(str(part) for part in first["loc"])
            if first["type"] == "extra_forbidden":
                known = ", ".join([*self.options.model_fields, "timeout_s"])
                raise InvalidInput(
                    f"not an option of the {self.name} executor (its options: {known})", field=key
                ) from None
            raise InvalidInput(first["msg"], field=key) from None
        urls = tuple(url for url in parsed.urls() if url)
        return CheckedOptions(parsed.model_dump(), urls, parsed.unavailable(unset))

    def executor(self, spec: ExecutorSpec, session: aiohttp.ClientSession, egress: EgressPolicy | None) -> Executor:
        return self.build(self.options.model_validate(spec.options), session, spec.timeout_s, egress)


def executor_types() -> Mapping[str, ExecutorAdapter[Any]]:
    """A fresh, read-only registry of every executor type, keyed by its ``type`` name."""
    adapters: tuple[ExecutorAdapter[Any], ...] = (
        ExecutorAdapter(http.TYPE, http.HttpOptions, http.build),
        ExecutorAdapter(statuspage.TYPE, statuspage.StatuspageOptions, statuspage.build),
        ExecutorAdapter(pagerduty.TYPE, pagerduty.PagerDutyOptions, pagerduty.build),
    )
    return MappingProxyType({adapter.name: adapter for adapter in adapters})


EXECUTOR_TYPES: Final[Mapping[str, ExecutorAdapter[Any]]] = executor_types()


def build_executor(
    spec: ExecutorSpec,
    session: aiohttp.ClientSession,
    egress: EgressPolicy | None = None,
    *,
    types: Mapping[str, ExecutorAdapter[Any]] = EXECUTOR_TYPES,
) -> Executor:
    """The executor of one action; every call it makes goes through ``egress`` (None: its own URLs' hosts)."""
    return types[spec.type].executor(spec, session, egress)


__all__ = ["EXECUTOR_TYPES", "ExecutorAdapter", "build_executor", "executor_types"]
