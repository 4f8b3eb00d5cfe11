"""A notification whose group-level status is ``resolved`` resolves every alert of its group.

With ``max_alerts``, Alertmanager sends only the first alerts of a resolved group and then forgets the group: the
others never come as resolved (641 alerts, ``max_alerts: 500``: 141 stayed firing in decklog for good, and the
all-clear suggestion never came). The group-level ``status`` (``AlertSignal.group_resolved``) is the only word about
them, so after the notification's own alerts are recorded, every alert of the group that is still firing — in any
incident that holds the group or one of the service groups split off it — gets a ``resolved`` observation, marked
``data.resolved_with_group``, and the all-clear suggestion follows as for any resolve.

Which alerts are the group's comes from stored state, never from memory: the incidents the notification was routed
to, and the open incidents linked to them that hold the group (a split notification's parent and children,
core/alerts/splits.py), each read as it is now; the incident's log says which of its firing alerts came with this
group (it may also hold other groups, or lone alerts that joined by service). Each incident is one append whose
``decide`` looks again at the alerts' status, so a resend (or another replica) resolves nothing twice.
"""

from __future__ import annotations

import hashlib
from collections.abc import Awaitable, Callable, Collection, Sequence

from decklog.core.alerts.batch import all_clear, in_family
from decklog.core.entries import Actor, NewEntry, Observation
from decklog.core.errors import NotFound
from decklog.core.state import AlertState, ScopeState
from decklog.core.store.ports import LogStore

VISIT_MAX = 500  # incidents looked at for one resolved group (a split notification's are linked to one parent)


def resolve_key(source: str, group: str) -> str:
    """The notification identity an implied resolve leaves on its alert (``state.alert_keys``): never a firing
    notification's, so the alert firing again is recorded even with the start time it had before."""
    digest = hashlib.sha256(group.encode("utf-8", "replace")).hexdigest()[:16]
    return f"alert:{source}:resolved-with-group:{digest}"


def implied_resolve(alert: AlertState, *, source: str, group: str) -> NewEntry:
    observation = Observation(
        text=alert.title or f"Alert {alert.fingerprint}",
        source=source,
        service=alert.service,
        fingerprint=alert.fingerprint,
        alert_status="resolved",
        data={"key": resolve_key(source, group), "resolved_with_group": group},
    )
    return NewEntry.make("observation", Actor.system(source), observation)


def decide_resolves(
    state: ScopeState, *, source: str, group: str, fingerprints: Collection[str], named: Collection[str]
) -> list[NewEntry]:
    """Inside the append: a resolve for each of the group's ``fingerprints`` that is still firing in ``state`` and
    that the notification did not name (``named``), and the all-clear suggestion when that resolves the last firing
    alert."""
    if state.kind != "incident" or not state.is_open:
        return []
    alerts = [
        a
        for fp, a in state.alerts.items()
        if a.status != "resolved" and a.source == source and fp not in named and fp in fingerprints
    ]
    out = [implied_resolve(a, source=source, group=group) for a in alerts]
    suggestion = all_clear(state, [(a.fingerprint, "resolved", a.title) for a in alerts])
    if suggestion is not None:
        out.append(suggestion)
    return out


class GroupResolves:
    def __init__(self, store: LogStore, open_incident: Callable[[str], Awaitable[ScopeState | None]]) -> None:
        self.store = store
        self.open_incident = open_incident
        self.resolved = 0  # implied resolves appended by this process (for tests and /metrics)

    async def resolve(self, source: str, group: str, routed: Sequence[str], named: Collection[str]) -> int:
        """``group`` (a notification group) resolved: resolve its alerts still firing in the incidents it was
        ``routed`` to and in the open incidents linked to them that hold it. Returns how many it resolved."""
        seen: set[str] = set()
        queue = list(dict.fromkeys(routed))
        done = 0
        while queue and len(seen) < VISIT_MAX:
            scope = queue.pop(0)
            if scope in seen:
                continue
            seen.add(scope)
            state = await self.open_incident(scope)
            if state is None or not any(in_family(g, group) for g in state.alert_groups):
                continue
            queue.extend(s for s in state.linked if s.startswith("incident/") and s not in seen)
            done += await self._resolve_in(state, source, group, named)
        self.resolved += done
        return done

    async def _resolve_in(self, state: ScopeState, source: str, group: str, named: Collection[str]) -> int:
        firing = [
            fp for fp, a in state.alerts.items() if a.status != "resolved" and a.source == source and fp not in named
        ]
        if not firing:
            return 0
        # Which of them came with this group: the log says (the incident may also hold other groups, or lone alerts
        # that joined it by service; the folded state does not keep an alert's group).
        fingerprints = await self._of_group(state.scope, group, set(firing))
        if not fingerprints:
            return 0

        def decide(now: ScopeState) -> list[NewEntry]:
            return decide_resolves(now, source=source, group=group, fingerprints=fingerprints, named=named)

        try:
            result = await self.store.append(state.scope, decide)
        except NotFound:
            return 0
        if result.duplicate:
            return 0
        return sum(1 for e in result.entries if e.kind == "observation")

    async def _of_group(self, scope: str, group: str, firing: set[str]) -> set[str]:
        """Which of the ``firing`` fingerprints last came with ``group`` (or a service group split off it), per the
        incident's log."""
        last: dict[str, str] = {}
        for entry in await self.store.read(scope, kinds=("observation",)):
            p = entry.payload
            if isinstance(p, Observation) and p.fingerprint in firing:
                came_with = p.data.get("group")
                if isinstance(came_with, str) and came_with:
                    last[p.fingerprint] = came_with
        return {fp for fp, g in last.items() if in_family(g, group)}
