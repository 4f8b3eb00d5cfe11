"""API tokens with scopes: made once, shown once, stored as a hash, checked on every REST API request.

A token is ``dl_`` and 32 random bytes (URL-safe base64). Only its sha256 is stored (``ApiKeys``, a store port),
so a stolen database holds no usable token; a high-entropy secret needs no slow hash, and looking it up by its
digest compares nothing byte by byte. Scopes are ordered: ``read`` (GET routes), ``write`` (read, and the writes
under ``/api/scopes``), ``admin`` (everything, and the token routes). ``DECKLOG_API_TOKEN`` stays an admin token
named ``DECKLOG_API_TOKEN``.

Every write a token makes is recorded with the token's name as the actor's name. A token made ``--user U…`` acts
as that person (a human actor with that Slack user id: it may approve where that person is an approver); without
one its writes are the system's (``token:<name>``), which never approves.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
import time
from dataclasses import dataclass

from decklog.core.entries import Actor
from decklog.core.errors import Conflict, InvalidInput, NotFound
from decklog.core.store.ports import ApiKeys, ApiTokenRow

SCOPES = ("read", "write", "admin")
PREFIX = "dl_"
ENV_TOKEN_NAME = "DECKLOG_API_TOKEN"
NAME = re.compile(r"^[a-z0-9][a-z0-9._-]{0,62}$")
USER = re.compile(r"^[A-Z0-9][A-Z0-9_.-]{0,62}$", re.IGNORECASE)


def digest(secret: str) -> str:
    return hashlib.sha256(secret.encode("utf-8")).hexdigest()


def allows(held: str, needed: str) -> bool:
    """Whether a token of scope ``held`` may use a route that needs ``needed``."""
    return SCOPES.index(held) >= SCOPES.index(needed)


@dataclass(frozen=True)
class Identity:
    """Who a REST API request is: the token's name and scope, and the Slack user it acts for ("" = none)."""

    name: str
    scope: str
    user: str = ""

    @property
    def actor(self) -> Actor:
        if self.user:
            return Actor(type="human", id=self.user, name=self.name)
        return Actor(type="system", id=f"token:{self.name}", name=self.name)


def check_name(name: str) -> str:
    name = name.strip()
    if not NAME.match(name):
        raise InvalidInput(
            f"{name!r} is not a token name: 1-63 lower-case letters, digits, '.', '_' or '-' (e.g. ci-canary)",
            field="name",
        )
    if name == ENV_TOKEN_NAME.lower():
        raise InvalidInput(f"{name!r} is reserved for DECKLOG_API_TOKEN", field="name")
    return name


def check_scope(scope: str) -> str:
    if scope not in SCOPES:
        raise InvalidInput(f"must be one of {', '.join(SCOPES)}, not {scope!r}", field="scope")
    return scope


class Tokens:
    """Make, list, revoke and check tokens over the ``ApiKeys`` port. ``env_token``: ``DECKLOG_API_TOKEN``."""

    def __init__(self, keys: ApiKeys, *, env_token: str | None = None) -> None:
        self.keys = keys
        self._env = env_token.encode("utf-8") if env_token else None

    async def create(self, name: str, scope: str, *, user: str = "", now: float | None = None) -> str:
        """A new token; returns its secret (the only time it is seen). ``Conflict`` when the name is live."""
        name, scope, user = check_name(name), check_scope(scope), user.strip()
        if user and not USER.match(user):
            raise InvalidInput(f"{user!r} is not a Slack user id (e.g. U0123ABCD)", field="user")
        secret = PREFIX + secrets.token_urlsafe(32)
        row = ApiTokenRow(name=name, scope=scope, digest=digest(secret), user=user, created_at=now or time.time())
        if not await self.keys.token_add(row):
            raise Conflict(f"a token named {name!r} exists already (revoke it first, or choose another name)")
        return secret

    async def list(self) -> list[ApiTokenRow]:
        return await self.keys.tokens()

    async def revoke(self, name: str, *, now: float | None = None) -> None:
        if not await self.keys.token_revoke(name.strip(), at=now or time.time()):
            raise NotFound(f"no live token named {name!r}")

    async def identify(self, secret: str) -> Identity | None:
        """The identity ``secret`` proves, or None (unknown, or revoked)."""
        if self._env is not None and hmac.compare_digest(secret.encode("utf-8"), self._env):
            return Identity(ENV_TOKEN_NAME, "admin")
        if not secret.startswith(PREFIX):
            return None
        row = await self.keys.token_by_digest(digest(secret))
        if row is None or row.revoked_at is not None:
            return None
        return Identity(row.name, row.scope, row.user)
