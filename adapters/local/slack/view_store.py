"""Modals (a stack per person, at most 3 deep) and App Home tabs (one per person) of the fake workspace.

Mirrors ``views.open`` / ``views.push`` / ``views.update`` / ``views.publish``: ids are stable across
updates, every write gets a new ``hash`` and a stale ``hash`` is a ``hash_conflict``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .changes import Change, ChangeFeed
from .errors import SlackError
from .ids import IdMint
from .model import Identity, View
from .records import record_from_dict, record_to_dict

__all__ = ["ViewStore"]

JSON = dict[str, Any]
MAX_STACK = 3


class ViewStore:
    def __init__(
        self,
        *,
        identity: Identity,
        ids: IdMint,
        feed: ChangeFeed,
        new_hash: Callable[[], str],
    ) -> None:
        self._identity = identity
        self._ids = ids
        self._feed = feed
        self._new_hash = new_hash
        self._homes: dict[str, View] = {}
        self._stacks: dict[str, list[View]] = {}

    def get(self, view_id: str) -> View:
        for view in self._all():
            if view.id == view_id:
                return view
        raise SlackError("not_found")

    def by_external_id(self, external_id: str) -> View:
        for view in self._all():
            if external_id and view.external_id == external_id:
                return view
        raise SlackError("not_found")

    def home(self, user: str) -> View | None:
        return self._homes.get(user)

    def stack(self, user: str) -> list[View]:
        return list(self._stacks.get(user, []))

    def open(self, user: str, body: JSON) -> View:
        self._check_external_id(body)
        view = self._new(user, body, root=None, previous=None)
        for old in self._stacks.get(user, []):
            self._feed.emit(Change("view_closed", user=user, data=old.to_api(self._identity)))
        self._stacks[user] = [view]
        self._feed.emit(Change("view_opened", user=user, data=view.to_api(self._identity)))
        return view

    def push(self, user: str, body: JSON) -> View:
        stack = self._stacks.get(user, [])
        if not stack:
            return self.open(user, body)
        if len(stack) >= MAX_STACK:
            raise SlackError("push_limit_reached")
        self._check_external_id(body)
        view = self._new(user, body, root=stack[0].id, previous=stack[-1].id)
        stack.append(view)
        self._feed.emit(Change("view_pushed", user=user, data=view.to_api(self._identity)))
        return view

    def update(self, view: View, body: JSON, *, hash: str | None = None) -> View:
        if hash is not None and hash != view.hash:
            raise SlackError("hash_conflict")
        if body.get("type", view.type) != view.type:
            raise SlackError("invalid_arguments", "a view cannot change its type")
        view.body = dict(body)
        view.hash = self._new_hash()
        view.errors = None
        self._feed.emit(Change("view_updated", user=view.user, data=view.to_api(self._identity)))
        return view

    def publish(self, user: str, body: JSON, *, hash: str | None = None) -> View:
        current = self._homes.get(user)
        if current is not None:
            if hash is not None and hash != current.hash:
                raise SlackError("hash_conflict")
            current.body, current.hash = dict(body), self._new_hash()
            view = current
        else:
            view = self._new(user, body, root=None, previous=None)
            self._homes[user] = view
        self._feed.emit(Change("view_published", user=user, data=view.to_api(self._identity)))
        return view

    def close(self, view_id: str) -> list[View]:
        """Closes a modal and everything pushed above it; returns the closed views (topmost first)."""
        for user, stack in self._stacks.items():
            ids = [v.id for v in stack]
            if view_id in ids:
                closed = stack[ids.index(view_id) :][::-1]
                del stack[ids.index(view_id) :]
                for view in closed:
                    self._feed.emit(Change("view_closed", user=user, data=view.to_api(self._identity)))
                return closed
        raise SlackError("not_found")

    def clear(self, user: str) -> list[View]:
        stack = self._stacks.get(user, [])
        return self.close(stack[0].id) if stack else []

    def _new(self, user: str, body: JSON, *, root: str | None, previous: str | None) -> View:
        view_id = self._ids.mint("V")
        return View(
            id=view_id,
            user=user,
            body=dict(body),
            hash=self._new_hash(),
            root_view_id=root or view_id,
            previous_view_id=previous,
        )

    def _check_external_id(self, body: JSON) -> None:
        external_id = body.get("external_id")
        if external_id and any(v.external_id == external_id for v in self._all()):
            raise SlackError("duplicate_external_id")

    def _all(self) -> list[View]:
        return [*self._homes.values(), *(v for stack in self._stacks.values() for v in stack)]

    # -- round trip ------------------------------------------------------------------------------------------

    def to_dict(self) -> JSON:
        """Every App Home tab and every open modal stack, as plain data."""
        return {
            "homes": {user: record_to_dict(view) for user, view in self._homes.items()},
            "stacks": {user: [record_to_dict(v) for v in stack] for user, stack in self._stacks.items()},
        }

    def load_dict(self, data: Any) -> None:
        """Replace everything with :meth:`to_dict`'s data (all or nothing); ``ValueError`` when it is not that."""
        if not isinstance(data, dict):
            raise ValueError("the views must be an object")
        homes, stacks = data.get("homes", {}), data.get("stacks", {})
        if not isinstance(homes, dict) or not isinstance(stacks, dict):
            raise ValueError("views.homes and views.stacks must be objects")
        loaded_homes = {str(user): record_from_dict(View, v) for user, v in homes.items()}
        loaded_stacks: dict[str, list[View]] = {}
        for user, stack in stacks.items():
            if not isinstance(stack, list) or len(stack) > MAX_STACK:
                raise ValueError(f"the modal stack of {user} must be a list of at most {MAX_STACK}")
            loaded_stacks[str(user)] = [record_from_dict(View, v) for v in stack]
        self._homes, self._stacks = loaded_homes, loaded_stacks
