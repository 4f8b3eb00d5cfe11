"""``freeze_heap`` (bot/server.py): after start-up the heap is frozen and young collections are rarer, as
``decklog serve`` runs (decision 119). The process's collector settings are restored afterwards."""

from __future__ import annotations

import gc

from decklog.bot.server import GC_GEN0, freeze_heap


def test_the_heap_is_frozen_and_the_young_generation_collected_less_often() -> None:
    before = gc.get_threshold()
    try:
        freeze_heap()
        assert gc.get_threshold() == (GC_GEN0, before[1], before[2])
        assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)
