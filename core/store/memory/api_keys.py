"""The REST API's tokens and idempotent replies in memory (``core.store.ports.ApiKeys``), on a ``MemoryStorage``."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from decklog.core.store.ports import ApiTokenRow, StoredReply


@dataclass
class ApiRows:
    """The "tables": tokens in the order they were made, replies by key."""

    tokens: list[ApiTokenRow] = field(default_factory=list)
    replies: dict[str, StoredReply] = field(default_factory=dict)


class MemoryApiKeys:
    def __init__(self, rows: ApiRows) -> None:
        self.rows = rows

    async def token_add(self, row: ApiTokenRow) -> bool:
        if any(t.name == row.name and t.revoked_at is None for t in self.rows.tokens):
            return False
        if any(t.digest == row.digest for t in self.rows.tokens):
            return False
        self.rows.tokens.append(row)
        return True

    async def token_by_digest(self, digest: str) -> ApiTokenRow | None:
        return next((t for t in self.rows.tokens if t.digest == digest), None)

    async def tokens(self) -> list[ApiTokenRow]:
        return list(self.rows.tokens)

    async def token_revoke(self, name: str, *, at: float) -> bool:
        for i, t in enumerate(self.rows.tokens):
            if t.name == name and t.revoked_at is None:
                self.rows.tokens[i] = replace(t, revoked_at=at)
                return True
        return False

    async def reply_get(self, key: str) -> StoredReply | None:
        return self.rows.replies.get(key)

    async def reply_put(self, reply: StoredReply) -> StoredReply:
        return self.rows.replies.setdefault(reply.key, reply)

    async def close(self) -> None:
        return None
