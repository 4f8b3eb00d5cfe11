"""Scope commands: declare, record, severity, status, roles, links — the one door every receiver uses.

Slack handlers, alert receivers, the CLI and agents all call these; each is one transaction on the scope's log
(decide from the current state, append, fold) and returns what was appended. Nothing here talks to Slack.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from pydantic import ValidationError

from decklog.core.entries import (
    INCIDENT_STATUSES,
    Actor,
    Declared,
    NewEntry,
    RoleAssigned,
    ScopeLinked,
    SeverityChanged,
    StatusChanged,
    parse_payload,
)
from decklog.core.entries.registry import invalid_input
from decklog.core.errors import Conflict, InvalidInput, NotFound
from decklog.core.ids import SCOPE_KINDS, ScopeId, slugify
from decklog.core.obligations import keep_as_follow_up, left_open
from decklog.core.state import ScopeState
from decklog.core.store.ports import AppendResult, IndexPort, LogStore

ROLE_NAMES = ("commander", "comms", "ops", "scribe", "lead", "liaison")


def parse_severity(value: Any, *, field: str = "severity") -> int:
    text = str(value).strip().lower().removeprefix("sev").removeprefix("p")
    if text not in ("1", "2", "3", "4"):
        raise InvalidInput(f"severity must be 1-4 (or sev1-sev4), not {value!r}", field=field)
    return int(text)


class ScopeService:
    """``declarer_role``: the role a person who declares an incident in Slack takes at once (``[slack]
    declarer_role`` in decklog.toml, default ``commander``; empty: none)."""

    def __init__(self, store: LogStore, index: IndexPort, *, declarer_role: str = "commander") -> None:
        self.store = store
        self.index = index
        self.declarer_role = declarer_role.strip().lower()

    # -- declaring --------------------------------------------------------------------------------------------

    async def declare(
        self,
        *,
        title: str,
        actor: Actor,
        severity: int | None = None,
        scope: str | None = None,
        kind: str = "incident",
        services: Sequence[str] = (),
        summary: str = "",
        via: str = "api",
        dedicated_channel: bool = False,
        channel: str = "",
        idempotency_key: str | None = None,
        then: Sequence[NewEntry] = (),
    ) -> AppendResult:
        """Open a new scope. Its id comes from the title (``incident/payments-5xx``), suffixed when taken;
        an explicit ``scope`` must be new. A repeated ``idempotency_key`` returns the original declaration."""
        title = " ".join(title.split())
        if not title:
            raise InvalidInput("must not be empty: say in a few words what is happening", field="title")
        try:
            payload = Declared(
                title=title,
                severity=severity,
                services=tuple(dict.fromkeys(s for s in services if s)),
                summary=summary,
                via=via,
                dedicated_channel=dedicated_channel,
                channel=channel,
            )
        except ValidationError as exc:  # a title over TITLE_MAX, a service name that is not text: the caller's
            raise invalid_input(exc) from None
        declared = NewEntry.make("declared", actor, payload)
        entries = [declared, *self._declarer_roles(actor, kind, via, then), *then]
        if idempotency_key:
            known = await self.index.inbound_scope(idempotency_key)
            if known is not None:
                return await self.store.append(known, entries, idempotency_key=idempotency_key, create=True)
        if scope:
            sid = ScopeId.parse(scope)
            base, kind = sid.name, sid.kind
        else:
            if kind not in SCOPE_KINDS:
                raise InvalidInput(f"unknown scope kind {kind!r}", field="kind")
            base = slugify(title)
        sid = await self.index.reserve_scope(
            kind, base, exact=bool(scope), on_disk=self.store.holds, inbound_key=idempotency_key
        )  # one transaction: the id, and the inbound event that asked for it
        return await self.store.append(str(sid), entries, idempotency_key=idempotency_key, create=True)

    def _declarer_roles(self, actor: Actor, kind: str, via: str, then: Sequence[NewEntry]) -> list[NewEntry]:
        """The declarer's role entry: a person declaring an incident in Slack becomes its commander,
        unless configured otherwise or the declaration assigns that role itself."""
        role = self.declarer_role
        if not role or actor.type != "human" or kind != "incident" or via != "slack":
            return []
        if any(isinstance(e.payload, RoleAssigned) and e.payload.role == role for e in then):
            return []
        return [NewEntry.make("role_assigned", actor, RoleAssigned(role=role, user_id=actor.id, user_name=actor.name))]

    # -- recording --------------------------------------------------------------------------------------------

    async def record(
        self,
        scope: str,
        kind: str,
        payload: dict[str, Any] | Any,
        actor: Actor,
        *,
        refs: Sequence[int] = (),
        idempotency_key: str | None = None,
    ) -> AppendResult:
        """Append one entry of any kind (``decklog append``, Slack messages, evidence)."""
        if kind == "declared":
            raise InvalidInput("use declare to open a scope", field="kind")
        entry = NewEntry(
            kind=kind,
            actor=actor,
            payload=parse_payload(kind, payload),
            refs=tuple(refs),
            idempotency_key=idempotency_key,
        )
        p = entry.payload
        if isinstance(p, StatusChanged) and p.status == "resolved":  # `decklog append … status_changed`, the API

            def resolving(state: ScopeState) -> list[NewEntry]:
                return [entry, *(_left_open(state, actor) if state.status != "resolved" else [])]

            return await self.store.append(scope, resolving)
        return await self.store.append(scope, [entry])

    async def keep_as_follow_up(
        self, scope: str, obligation_id: str, actor: Actor, *, idempotency_key: str | None = None
    ) -> AppendResult:
        """An open obligation kept as a follow-up (core/obligations.py ``keep_as_follow_up``); ``NotFound`` if it is
        not open. A repeated ``idempotency_key`` returns the first follow-up."""
        return await self.store.append(
            scope, lambda s: keep_as_follow_up(s, obligation_id, actor=actor), idempotency_key=idempotency_key
        )

    async def state(self, scope: str) -> ScopeState:
        return await self.store.get_state(scope)

    async def set_severity(
        self, scope: str, severity: int, actor: Actor, *, reason: str = "", idempotency_key: str | None = None
    ) -> AppendResult:
        severity = parse_severity(severity)

        def decide(state: ScopeState) -> list[NewEntry]:
            _require_incident(state)
            if state.severity == severity:
                return []
            return [
                NewEntry.make(
                    "severity_changed",
                    actor,
                    SeverityChanged(severity=severity, previous=state.severity, reason=reason),
                )
            ]

        return await self.store.append(scope, decide, idempotency_key=idempotency_key)

    async def set_status(
        self, scope: str, status: str, actor: Actor, *, summary: str = "", idempotency_key: str | None = None
    ) -> AppendResult:
        status = status.strip().lower()
        if status not in INCIDENT_STATUSES:
            raise InvalidInput(f"status must be one of {', '.join(INCIDENT_STATUSES)}, not {status!r}", field="status")

        def decide(state: ScopeState) -> list[NewEntry]:
            _require_incident(state)
            if state.status == status:
                if status == "resolved":
                    raise Conflict(f"{state.scope} is already resolved")
                return []
            changed = NewEntry.make(
                "status_changed", actor, StatusChanged(status=status, previous=state.status, summary=summary)
            )
            return [changed, *(_left_open(state, actor) if status == "resolved" else [])]

        return await self.store.append(scope, decide, idempotency_key=idempotency_key)

    async def resolve(
        self, scope: str, actor: Actor, *, summary: str = "", idempotency_key: str | None = None
    ) -> AppendResult:
        return await self.set_status(scope, "resolved", actor, summary=summary, idempotency_key=idempotency_key)

    async def assign_role(
        self,
        scope: str,
        role: str,
        user_id: str,
        actor: Actor,
        *,
        user_name: str = "",
        idempotency_key: str | None = None,
    ) -> AppendResult:
        role = role.strip().lower()
        if not role.isidentifier() or len(role) > 30:
            raise InvalidInput(f"not a role name: {role!r} (e.g. {', '.join(ROLE_NAMES[:3])})", field="role")

        def decide(state: ScopeState) -> list[NewEntry]:
            held = state.roles.get(role)
            if held is not None and held.user_id == user_id:
                return []
            return [
                NewEntry.make("role_assigned", actor, RoleAssigned(role=role, user_id=user_id, user_name=user_name))
            ]

        return await self.store.append(scope, decide, idempotency_key=idempotency_key)

    async def suggestion_feedback(
        self, scope: str, suggestion_id: str, verdict: str, actor: Actor, *, idempotency_key: str | None = None
    ) -> AppendResult:
        """Accept or dismiss an open suggestion; accepting a "resolve" suggestion resolves, in the same transaction."""
        if verdict not in ("accepted", "dismissed"):
            raise InvalidInput("verdict must be accepted or dismissed", field="verdict")

        def decide(state: ScopeState) -> list[NewEntry]:
            if suggestion_id not in state.suggestions:
                return []
            out = [
                NewEntry.make(
                    "suggestion_feedback",
                    actor,
                    {"suggestion_id": suggestion_id, "verdict": verdict, "user_id": actor.id},
                )
            ]
            action = state.suggestion_actions.get(suggestion_id, "")
            if verdict == "accepted" and action == "resolve" and state.status != "resolved":
                out.append(
                    NewEntry.make(
                        "status_changed",
                        actor,
                        StatusChanged(
                            status="resolved", previous=state.status, summary="accepted the suggestion to resolve"
                        ),
                    )
                )
                out += _left_open(state, actor)
            return out

        return await self.store.append(scope, decide, idempotency_key=idempotency_key)

    async def link(
        self,
        scope: str,
        other: str,
        actor: Actor,
        *,
        relation: str = "related",
        reason: str = "",
        back_relation: str | None = None,
    ) -> tuple[AppendResult, AppendResult]:
        """Link two scopes both ways (``scope_linked`` in each log); linking twice appends nothing."""
        a, b = str(ScopeId.parse(scope)), str(ScopeId.parse(other))
        if a == b:
            raise InvalidInput("a scope cannot be linked to itself", field="scope")
        if not await self.store.exists(b):
            raise NotFound(f"no such scope: {b}")

        def link_to(target: str, rel: str) -> Any:
            def decide(state: ScopeState) -> list[NewEntry]:
                if target in state.linked:
                    return []
                return [NewEntry.make("scope_linked", actor, ScopeLinked(scope=target, relation=rel, reason=reason))]

            return decide

        first = await self.store.append(a, link_to(b, relation))
        second = await self.store.append(b, link_to(a, back_relation or relation))
        return first, second


def _left_open(state: ScopeState, actor: Actor) -> list[NewEntry]:
    return left_open(state, actor=actor, now=datetime.now(UTC))


def _require_incident(state: ScopeState) -> None:
    if state.kind != "incident":
        raise InvalidInput(f"{state.scope} is a {state.kind} scope, not an incident", field="scope")
