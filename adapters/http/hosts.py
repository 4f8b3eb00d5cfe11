"""What a host name says about who can reach it: a loopback name, or a wildcard address that names no one host.

The server's own ``DECKLOG_HOST`` is judged with these (the sandbox page serves on loopback only, a filed issue
cannot link to a wildcard address), and so is the ``Host`` header of a REST API request without a token. Names are
never resolved.
"""

from __future__ import annotations

import ipaddress


def is_loopback_host(host: str) -> bool:
    """``localhost`` (and ``*.localhost``) or a loopback IP literal; names are not resolved, and a wildcard address
    (``0.0.0.0``, ``::``) is not loopback."""
    name = host.strip().strip("[]").lower().rstrip(".")
    if name == "localhost" or name.endswith(".localhost"):
        return True
    ip = _ip_literal(name)
    return ip is not None and ip.is_loopback


def is_wildcard_host(host: str) -> bool:
    """``0.0.0.0``, ``::`` or an empty host: every interface, no one address a reader can open."""
    name = host.strip().strip("[]")
    ip = _ip_literal(name)
    return not name or (ip is not None and ip.is_unspecified)


def _ip_literal(name: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(name)
    except ValueError:
        return None
