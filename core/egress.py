"""The egress allowlist: which hosts decklog's executors (and any read tool that calls out) may reach.

``[security] egress_allow`` in decklog.toml names them. When the key is absent, the allowlist is the hosts of the
configured executor URLs (``DECKLOG_DEPLOY_API_URL``, ``DECKLOG_STATUSPAGE_API_URL`` and every ``url`` /
``reconcile_url`` of the action catalog), each with its port. An explicit empty list allows nothing.

How an entry matches a URL:

- hosts compare case-insensitively (a trailing dot is ignored; IPv6 literals are written in brackets:
  ``[::1]:8080``);
- ``host:port`` matches that port only. A URL without a port is on its scheme's default port (80 / 443);
- ``host`` without a port matches that host on any port;
- ``*.example.com`` matches every subdomain of example.com (``api.example.com``, ``a.b.example.com``), never
  ``example.com`` itself. No other wildcard exists: a ``*`` anywhere else is a configuration error;
- there is no allow-everything entry, and no name resolution: ``127.0.0.1`` and ``localhost`` are different
  entries.

Every executor calls :func:`check` with the exact URL before it opens a connection; a refusal means nothing was
sent, and the runner records it as a definite ``failed`` result with the reason.

>>> policy = EgressPolicy.from_entries(["Deploy.internal:8080", "*.statuspage.io"])
>>> check(policy, "http://deploy.internal:8080/rollback") is None
True
>>> check(policy, "https://api.statuspage.io/v1/pages/p") is None
True
>>> check(policy, "http://deploy.internal:9090/rollback").host
'deploy.internal:9090'
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import urlsplit

from decklog.core.errors import InvalidInput

DEFAULT_PORTS = {"http": 80, "https": 443}


@dataclass(frozen=True)
class Target:
    """A URL's host (lower-case, no trailing dot) and effective port."""

    host: str
    port: int

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"


@dataclass(frozen=True)
class Rule:
    """One allowlist entry: an exact host or a ``*.`` suffix, with a port or any port (``None``)."""

    host: str
    port: int | None = None
    subdomains: bool = False

    def matches(self, target: Target) -> bool:
        if self.port is not None and self.port != target.port:
            return False
        if self.subdomains:
            return target.host.endswith("." + self.host)
        return target.host == self.host

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        host = f"*.{host}" if self.subdomains else host
        return host if self.port is None else f"{host}:{self.port}"


@dataclass(frozen=True)
class EgressRefusal:
    """Why a call was not made: the URL's host:port is not on the allowlist."""

    url: str
    host: str
    reason: str


@dataclass(frozen=True)
class EgressPolicy:
    rules: tuple[Rule, ...]
    origin: str = "[security] egress_allow"

    @classmethod
    def from_entries(cls, entries: Iterable[str], *, origin: str = "[security] egress_allow") -> EgressPolicy:
        """From ``egress_allow``; a malformed entry raises ``InvalidInput`` naming it."""
        return cls(tuple(parse_rule(e) for e in entries), origin)

    @classmethod
    def from_urls(cls, urls: Iterable[str]) -> EgressPolicy:
        """The default: exactly the hosts (with their effective ports) of the configured executor URLs."""
        rules: dict[Rule, None] = {}
        for url in urls:
            target = target_of(url)
            if target is not None:
                rules[Rule(target.host, target.port)] = None
        return cls(tuple(rules), "the default allowlist (the hosts of the configured executor URLs)")

    @classmethod
    def configured(cls, allow: Iterable[str] | None, executor_urls: Iterable[str]) -> EgressPolicy:
        """``egress_allow`` when it is set (even to ``[]``), else the default from the executor URLs."""
        return cls.from_urls(executor_urls) if allow is None else cls.from_entries(allow)

    def describe(self) -> str:
        return ", ".join(str(r) for r in self.rules) or "nothing"


def check(policy: EgressPolicy, url: str) -> EgressRefusal | None:
    """None when ``url`` may be called; otherwise the refusal, with a reason fit to record."""
    target = target_of(url)
    if target is None:
        shown = _redacted(url)
        return EgressRefusal(
            shown, "", f"egress refused: {shown!r} is not an http(s) URL with a host; nothing was sent"
        )
    if any(rule.matches(target) for rule in policy.rules):
        return None
    return EgressRefusal(
        _redacted(url),
        str(target),
        f"egress refused: {target} is not allowed by {policy.origin} (allowed: {policy.describe()}); nothing was sent",
    )


def target_of(url: str) -> Target | None:
    """The host and effective port of an http(s) URL, or None when it has neither."""
    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError:
        return None
    scheme = parts.scheme.lower()
    host = _norm_host(parts.hostname or "")
    if scheme not in DEFAULT_PORTS or not host:
        return None
    return Target(host, port if port is not None else DEFAULT_PORTS[scheme])


def parse_rule(entry: str) -> Rule:
    """``host``, ``host:port``, ``*.domain``, ``*.domain:port``, ``[v6]`` or ``[v6]:port``."""
    text = entry.strip()
    if not text or "/" in text or "@" in text:
        raise InvalidInput(f"egress_allow entry {entry!r} must be a host or host:port (no scheme, path or user)")
    subdomains = text.startswith("*.")
    if subdomains:
        text = text[2:]
    try:
        parts = urlsplit(f"//{text}")
        port = parts.port
    except ValueError as exc:
        raise InvalidInput(f"egress_allow entry {entry!r}: {exc}") from None
    host = _norm_host(parts.hostname or "")
    if not host or "*" in host:
        raise InvalidInput(f"egress_allow entry {entry!r}: the only wildcard is a leading '*.' (e.g. *.example.com)")
    return Rule(host, port, subdomains)


def _norm_host(host: str) -> str:
    return host.strip().lower().rstrip(".")


def _redacted(url: str) -> str:
    """The URL without its user part (a Statuspage key may ride there)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<unparseable URL>"
    if parts.username is None and parts.password is None:
        return url
    netloc = parts.netloc.rsplit("@", 1)[-1]
    return parts._replace(netloc=netloc).geturl()
