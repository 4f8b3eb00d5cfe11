"""Forks: the state as of any seq, and a new scope that starts as a copy of another's first SEQ entries.

A fork is a NEW chain (new ids and hashes) whose entries 1..SEQ keep the source's kinds, actors, payloads, refs
and times, followed by one ``forked`` entry (``source``, ``seq``) at the time of the last copied entry. All of it
is ONE append, so there is no moment at which the scope exists without being a fork: the dispatcher
(core/outbox/dispatcher.py ``FORK_TOPICS``) delivers a fork to the index only, never to Slack, executors, agents or change
links. Idempotency keys are not copied (the source keeps them). Fork ids are never reused: ``<source>-fork-N``
with the first N not taken, or an explicit new id.
"""

from __future__ import annotations

from dataclasses import dataclass

from decklog.core.entries import Actor, Entry, Forked, NewEntry
from decklog.core.errors import Conflict, InvalidInput, StorageError
from decklog.core.ids import ScopeId
from decklog.core.state import ScopeState, empty_state, fold_many
from decklog.core.store.ports import IndexPort, LogStore

FORK_ACTOR = Actor(type="system", id="decklog:fork", name="decklog fork")


@dataclass(frozen=True)
class ForkResult:
    scope: str
    source: str
    seq: int
    entries: tuple[Entry, ...]


def check_seq(at: int | None, version: int, scope: str) -> int:
    """``at`` (default: the last seq) must name an entry of ``scope``."""
    if at is None:
        return version
    if not 1 <= at <= version:
        raise InvalidInput(f"--at {at} is not a seq of {scope} (it has entries 1..{version})", field="at")
    return at


async def state_at(store: LogStore, scope: str, at: int | None = None) -> ScopeState:
    """The fold of entries 1..``at`` (default: the stored state, which equals the fold of the whole log)."""
    current = await store.get_state(scope)
    seq = check_seq(at, current.version, scope)
    if seq == current.version:
        return current
    return fold_many(empty_state(scope), await store.read(scope, limit=seq))


def copies(entries: list[Entry], source: str, seq: int) -> list[NewEntry]:
    """The entries a fork of ``source`` at ``seq`` starts with: the originals (no keys), then ``forked``."""
    made = [NewEntry(kind=e.kind, actor=e.actor, payload=e.payload, refs=e.refs, at=e.at) for e in entries]
    marker = NewEntry(kind="forked", actor=FORK_ACTOR, payload=Forked(source=source, seq=seq), at=entries[-1].at)
    return [*made, marker]


async def fork_scope(store: LogStore, index: IndexPort, source: str, *, at: int, new: str | None = None) -> ForkResult:
    """Verify ``source``, then write its entries 1..``at`` and a ``forked`` entry into a new scope."""
    source = str(ScopeId.parse(source))
    if new is not None:
        new = str(ScopeId.parse(new))
        if ScopeId.parse(new).kind != ScopeId.parse(source).kind:
            raise InvalidInput(f"a fork of {source} must be a {ScopeId.parse(source).kind} scope, not {new}")
    state = await store.get_state(source)
    seq = check_seq(at, state.version, source)
    report = await store.verify(source)
    if not report.ok:
        raise StorageError(f"{source} does not verify (seq {report.first_bad_seq}: {report.reason}); not forking it")
    entries = await store.read(source, limit=seq)
    sid = await _reserve(store, index, source, new)
    result = await store.append(str(sid), copies(entries, source, seq), create=True)
    return ForkResult(str(sid), source, seq, result.entries)


async def _reserve(store: LogStore, index: IndexPort, source: str, new: str | None) -> ScopeId:
    if new is not None:
        sid = ScopeId.parse(new)
        return await index.reserve_scope(sid.kind, sid.name, exact=True, on_disk=store.holds)
    src = ScopeId.parse(source)
    n = 1
    while True:  # the first <source>-fork-N never used (ids are never reused, DESIGN §1)
        try:
            return await index.reserve_scope(src.kind, f"{src.name}-fork-{n}", exact=True, on_disk=store.holds)
        except Conflict:
            n += 1
