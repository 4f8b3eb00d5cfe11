"""The shapes every part of ``decklog serve`` hands back to the composition root (``bot.wiring``).

A part is built by one function that takes what it needs (typed) and returns what it provides: a dataclass of
its own (the objects other parts and tests may use) holding a ``Provides`` (what the root plugs in: routes, outbox
senders, Slack sender updaters, store listeners, periodic jobs, boot tasks and drains). Nothing here is built at
import time, and no part reaches into another: the root passes each one what it needs.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

from aiohttp import web

from decklog.adapters.slack.sender import EntryUpdater as Updater
from decklog.core.entries import Entry
from decklog.core.outbox.sender import Sender

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
Stopper = Callable[[], Awaitable[None]]
Task = Callable[[], Awaitable[object]]
Listener = Callable[[str, Sequence[Entry]], None]


@dataclass(frozen=True)
class Route:
    method: str
    """GET, POST, or * (any: the handler answers 405 itself)."""
    path: str
    handler: Handler


@dataclass(frozen=True)
class Job:
    """A periodic job on the server's alarm (``name`` is its alarm key)."""

    name: str
    every_s: float
    run: Callable[[], Awaitable[None]]


@dataclass
class Provides:
    """What a part plugs into the server. The root registers senders in part order (the Slack sender first)."""

    routes: list[Route] = field(default_factory=list)
    senders: list[Sender] = field(default_factory=list)
    updaters: list[Updater] = field(default_factory=list)
    listeners: list[Listener] = field(default_factory=list)
    jobs: list[Job] = field(default_factory=list)
    tasks: list[Task] = field(default_factory=list)
    """Spawned once the server listens (logged if they fail, cancelled at stop)."""
    drains: list[Stopper] = field(default_factory=list)
    """Run first at stop, in reverse build order, while the HTTP server still holds its connections."""


@dataclass
class Address:
    """The server's base URL, known once it listens (``DecklogServer.start`` sets it)."""

    url: str = ""


def http_url(host: str, port: int) -> str:
    """``http://host:port``, with an IPv6 literal in brackets (``http://[::1]:8080``)."""
    name = host.strip()
    if ":" in name and not name.startswith("["):
        name = f"[{name}]"
    return f"http://{name}:{port}"
