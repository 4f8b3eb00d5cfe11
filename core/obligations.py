"""Obligations and fenced claims: pure decide functions over a scope's state.

Claiming is a compare-and-set: it happens inside the scope's write transaction (``store.append(scope, decide)``),
sees the current holder, and grants a lease with a fencing token strictly greater than every earlier token in
the scope (``state.max_fence + 1``). Every later write by a holder carries its fence; a write whose fence is not
the obligation's current one — or whose lease has passed — is refused (``StaleFence``), and the refusal itself is
recorded as a ``fence_rejected`` entry by ``reject_stale``.

An incident that resolves with obligations still open says so (``left_open``: a ``reminder`` of purpose
``obligations``, appended with the resolve and delivered to the thread through the outbox, with a button per
obligation). People then close each one (a ``done`` finding answer, core/agents/answers.py) or keep it as a
follow-up (``keep_as_follow_up``: a ``follow_up`` entry filed in the tracker, and the obligation closed as moved
there). No obligation stays open with nobody told.

Usage (inside ``store.append``)::

    result = await store.append(scope, lambda s: claim(s, "ob-1", holder="agent:verify", now=clock.now(),
                                                       lease_seconds=120, actor=actor))
    fence = result.entries[0].payload.fence
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from datetime import datetime, timedelta

from decklog.core.clock import iso, parse_iso
from decklog.core.entries import (
    Actor,
    FenceRejected,
    FollowUp,
    NewEntry,
    ObligationCancelled,
    ObligationClaimed,
    ObligationExpired,
    ObligationFulfilled,
    ObligationOpened,
    ObligationReleased,
)
from decklog.core.entries.lifecycle import Reminder
from decklog.core.errors import Conflict, NotFound, StaleFence
from decklog.core.state import ObligationState, ScopeState

#: How many open obligations a resolve notice names in its text (its buttons: adapters/slack/render/obligations.py).
NAMED_AT_RESOLVE = 10


def new_obligation_id() -> str:
    return f"ob-{secrets.token_hex(3)}"


def open_obligation(
    state: ScopeState,
    *,
    text: str,
    actor: Actor,
    purpose: str = "task",
    conditions: Sequence[str] = (),
    action: str = "",
    params: dict[str, object] | None = None,
    expected_outcome: str = "",
    due_at: str = "",
    run_id: str = "",
    obligation_id: str | None = None,
    refs: Sequence[int] = (),
) -> list[NewEntry]:
    """Open an obligation (no-op if one with the same id is already open)."""
    oid = obligation_id or new_obligation_id()
    if oid in state.obligations:
        return []
    payload = ObligationOpened(
        obligation_id=oid,
        text=text,
        purpose=purpose,
        conditions=tuple(conditions),
        action=action,
        params=dict(params or {}),
        expected_outcome=expected_outcome,
        due_at=due_at,
        run_id=run_id,
    )
    return [NewEntry.make("obligation_opened", actor, payload, refs=tuple(refs))]


def _require(state: ScopeState, obligation_id: str) -> ObligationState:
    ob = state.obligations.get(obligation_id)
    if ob is None:
        raise NotFound(f"no open obligation {obligation_id} in {state.scope}")
    return ob


def lease_live(ob: ObligationState, now: datetime) -> bool:
    return ob.status == "claimed" and bool(ob.lease_until) and parse_iso(ob.lease_until) > now


def claim(
    state: ScopeState,
    obligation_id: str,
    *,
    holder: str,
    now: datetime,
    lease_seconds: float,
    actor: Actor,
) -> list[NewEntry]:
    """Claim an open obligation (or one whose lease has passed). Raises ``Conflict`` if someone holds a live lease."""
    ob = _require(state, obligation_id)
    if lease_live(ob, now) and ob.holder != holder:
        raise Conflict(f"{obligation_id} is held by {ob.holder} (fence {ob.fence}) until {ob.lease_until}")
    fence = state.max_fence + 1
    until = now + timedelta(seconds=lease_seconds)
    payload = ObligationClaimed(
        obligation_id=obligation_id, holder=holder, fence=fence, lease_until=iso(until), claim_id=secrets.token_hex(4)
    )
    return [NewEntry.make("obligation_claimed", actor, payload)]


def check_fence(state: ScopeState, obligation_id: str, fence: int, now: datetime) -> ObligationState:
    """The obligation, if ``fence`` is its current, live holder's token; else ``StaleFence`` / ``NotFound``."""
    ob = state.obligations.get(obligation_id)
    if ob is None:
        raise NotFound(f"obligation {obligation_id} is no longer open in {state.scope}")
    if ob.status != "claimed" or ob.fence != fence:
        raise StaleFence(
            f"fence {fence} on {obligation_id} is stale (current fence {ob.fence}, holder {ob.holder or 'none'})",
            fence=fence,
            current=ob.fence,
        )
    if not lease_live(ob, now):
        raise StaleFence(
            f"the lease of fence {fence} on {obligation_id} ended at {ob.lease_until}", fence=fence, current=ob.fence
        )
    return ob


def fenced(
    state: ScopeState,
    obligation_id: str,
    fence: int,
    now: datetime,
    entries: Sequence[NewEntry],
) -> list[NewEntry]:
    """Guard arbitrary writes (an action result, a verification) with a fence check."""
    check_fence(state, obligation_id, fence, now)
    return list(entries)


def fulfil(
    state: ScopeState,
    obligation_id: str,
    *,
    fence: int,
    now: datetime,
    actor: Actor,
    note: str = "",
    run_id: str = "",
    before: Sequence[NewEntry] = (),
) -> list[NewEntry]:
    """Record ``before`` (e.g. the result) and fulfil the obligation, all under the holder's fence."""
    check_fence(state, obligation_id, fence, now)
    done = NewEntry.make(
        "obligation_fulfilled",
        actor,
        ObligationFulfilled(obligation_id=obligation_id, fence=fence, note=note, run_id=run_id),
    )
    return [*before, done]


def release(
    state: ScopeState, obligation_id: str, *, fence: int, now: datetime, actor: Actor, reason: str = ""
) -> list[NewEntry]:
    check_fence(state, obligation_id, fence, now)
    return [
        NewEntry.make(
            "obligation_released", actor, ObligationReleased(obligation_id=obligation_id, fence=fence, reason=reason)
        )
    ]


def cancel(state: ScopeState, obligation_id: str, *, actor: Actor, reason: str = "") -> list[NewEntry]:
    _require(state, obligation_id)
    return [
        NewEntry.make("obligation_cancelled", actor, ObligationCancelled(obligation_id=obligation_id, reason=reason))
    ]


def expire_leases(state: ScopeState, *, now: datetime, actor: Actor | None = None) -> list[NewEntry]:
    """The sweep: every claimed obligation whose lease has passed gets an ``obligation_expired`` entry."""
    who = actor or Actor.system("lease-sweep")
    out = []
    for ob in state.obligations.values():
        if ob.status == "claimed" and ob.lease_until and parse_iso(ob.lease_until) <= now:
            out.append(
                NewEntry.make(
                    "obligation_expired",
                    who,
                    ObligationExpired(obligation_id=ob.id, fence=ob.fence, reason=f"lease ended {ob.lease_until}"),
                )
            )
    return out


def reject_stale(
    state: ScopeState, error: StaleFence, *, obligation_id: str, holder: str, attempted: str, actor: Actor
) -> list[NewEntry]:
    """The entry that records a refused stale write (append it in its own transaction after catching StaleFence)."""
    return [
        NewEntry.make(
            "fence_rejected",
            actor,
            FenceRejected(
                obligation_id=obligation_id,
                fence=error.fence,
                # the obligation's current fence when it is still open; else the scope's latest
                current_fence=error.current or state.max_fence,
                holder=holder,
                attempted=attempted,
                reason=error.message,
            ),
        )
    ]


def left_open(state: ScopeState, *, actor: Actor, now: datetime) -> list[NewEntry]:
    """With a resolve (in its transaction): the notice that obligations are still open, or nothing when none is.
    It names each one; the thread shows it with a way to close it or keep it as a follow-up."""
    if not state.obligations:
        return []
    obs = list(state.obligations.values())
    named = "; ".join(f"{' '.join(o.text.split())[:200]} ({o.id})" for o in obs[:NAMED_AT_RESOLVE])
    more = f"; and {len(obs) - NAMED_AT_RESOLVE} more" if len(obs) > NAMED_AT_RESOLVE else ""
    text = (
        f"Resolved with {len(obs)} obligation{'s' if len(obs) != 1 else ''} still open: {named}{more}. "
        "Close each one, or keep it as a follow-up."
    )
    notice = Reminder(
        purpose="obligations",
        due_at=iso(now),
        since=iso(now),
        text=text[:3000],
        obligations=tuple(o.id for o in obs),
    )
    return [NewEntry.make("reminder", actor, notice, refs=tuple(o.opened_seq for o in obs if o.opened_seq))]


def keep_as_follow_up(state: ScopeState, obligation_id: str, *, actor: Actor) -> list[NewEntry]:
    """An open obligation kept as a follow-up: a ``follow_up`` (its text, its holder as the owner; the
    ``trackers`` topic files it) and the obligation closed as moved there. ``NotFound`` if it is not open."""
    ob = _require(state, obligation_id)
    follow_up = FollowUp(text=" ".join(ob.text.split())[:500], owner=ob.holder[:200], obligation_id=ob.id)
    refs = (ob.opened_seq,) if ob.opened_seq else ()
    moved = ObligationCancelled(obligation_id=ob.id, reason=f"kept as a follow-up by {actor.label()}")
    return [
        NewEntry.make("follow_up", actor, follow_up, refs=refs),
        NewEntry.make("obligation_cancelled", actor, moved, refs=refs),
    ]
