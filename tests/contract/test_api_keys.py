"""The ``ApiKeys`` port on every backend: one live token per name (a revoked name may be given again), lookups by
digest, revocation, and idempotent replies where the first one stored wins."""

from __future__ import annotations

from collections.abc import Callable

from decklog.core.store.ports import ApiTokenRow, StorageFactory, StoredReply
from decklog.core.tokens import Tokens, digest


async def _keys(make: Callable[[], StorageFactory]):  # type: ignore[no-untyped-def]
    factory = make()
    store = await factory.log_store()
    return factory, store, await factory.api_keys()


async def test_tokens_live_names_revocation_and_lookup(backend_factory: Callable[[], StorageFactory]) -> None:
    factory, store, keys = await _keys(backend_factory)
    try:
        row = ApiTokenRow(name="ci", scope="write", digest=digest("dl_a"), created_at=1.0)
        assert await keys.token_add(row)
        assert not await keys.token_add(ApiTokenRow(name="ci", scope="read", digest=digest("dl_b"), created_at=2.0))
        assert await keys.token_by_digest(digest("dl_a")) == row
        assert await keys.token_by_digest(digest("dl_b")) is None
        assert await keys.token_revoke("ci", at=3.0)
        assert not await keys.token_revoke("ci", at=4.0)
        revoked = await keys.token_by_digest(digest("dl_a"))
        assert revoked is not None and revoked.revoked_at == 3.0
        again = ApiTokenRow(name="ci", scope="read", digest=digest("dl_c"), created_at=5.0, user="U1")
        assert await keys.token_add(again)  # the name is free once revoked
        assert [(t.name, t.scope, t.user, t.revoked_at) for t in await keys.tokens()] == [
            ("ci", "write", "", 3.0),
            ("ci", "read", "U1", None),
        ]
    finally:
        await keys.close()
        await store.close()
        await factory.close()


async def test_a_second_process_sees_tokens_and_the_first_reply_wins(
    backend_factory: Callable[[], StorageFactory],
) -> None:
    factory, store, keys = await _keys(backend_factory)
    other_factory, other_store, other = await _keys(backend_factory)
    try:
        secret = await Tokens(keys).create("deploys", "admin")
        who = await Tokens(other).identify(secret)
        assert who is not None and (who.name, who.scope) == ("deploys", "admin")
        assert await Tokens(other).identify(secret + "x") is None
        first = StoredReply("api:deploys:k", "h1", 201, '{"a": 1}')
        assert await keys.reply_put(first) == first
        assert await other.reply_put(StoredReply("api:deploys:k", "h2", 200, "{}")) == first
        assert await other.reply_get("api:deploys:k") == first
        assert await other.reply_get("api:deploys:none") is None
        await Tokens(other).revoke("deploys")
        assert await Tokens(keys).identify(secret) is None
    finally:
        for k, s, f in ((keys, store, factory), (other, other_store, other_factory)):
            await k.close()
            await s.close()
            await f.close()
