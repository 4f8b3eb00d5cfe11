"""Scope identifiers: ``<kind>/<name>`` such as ``incident/payments-5xx`` or ``change/r2026-09-19-4``.

A scope id is identity and is never reused; Slack threads and alert fingerprints are routing metadata. Ids map
to file names reversibly (``incident/payments-5xx`` → ``incident~payments-5xx.db``).
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass

from decklog.core.errors import InvalidInput

SCOPE_KINDS = ("incident", "change", "oncall")  # oncall/<schedule>: its overrides (core/oncall/desk.py)
_KIND = r"[a-z][a-z0-9_-]{0,31}"
_NAME = r"[A-Za-z0-9][A-Za-z0-9._-]{0,119}"
_SCOPE_RE = re.compile(rf"^({_KIND})/({_NAME})$")


@dataclass(frozen=True, order=True)
class ScopeId:
    kind: str
    name: str

    @classmethod
    def parse(cls, text: str) -> ScopeId:
        match = _SCOPE_RE.match(text.strip())
        if not match:
            raise InvalidInput(
                f"not a scope id: {text!r} (expected <kind>/<name>, e.g. incident/payments-5xx)",
                field="scope",
            )
        kind, name = match.group(1), match.group(2)
        if kind not in SCOPE_KINDS:
            raise InvalidInput(f"unknown scope kind {kind!r} (one of: {', '.join(SCOPE_KINDS)})", field="scope")
        return cls(kind, name)

    def __str__(self) -> str:
        return f"{self.kind}/{self.name}"

    @property
    def file_stem(self) -> str:
        return f"{self.kind}~{self.name}"

    @classmethod
    def from_file_stem(cls, stem: str) -> ScopeId:
        kind, sep, name = stem.partition("~")
        if not sep:
            raise InvalidInput(f"not a scope file name: {stem!r}")
        return cls.parse(f"{kind}/{name}")


def slugify(text: str, *, max_len: int = 48) -> str:
    """A readable, file-safe scope name from a title: ``"Payments 5xx!"`` → ``payments-5xx``."""
    normalized = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii").lower()
    slug = re.sub(r"[^a-z0-9]+", "-", normalized).strip("-")
    slug = slug[:max_len].rstrip("-")
    return slug or "incident"
