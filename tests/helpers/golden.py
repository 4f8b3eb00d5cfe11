"""Golden files: a test compares its output with a reviewed file and never writes one on its own.

``DECKLOG_UPDATE_GOLDEN=1`` (or the older ``UPDATE_GOLDEN=1``) rewrites them; without it, a missing golden file
fails the test, so a golden test cannot pass by writing what it was supposed to check.
"""

from __future__ import annotations

import os
from pathlib import Path

ENV = "DECKLOG_UPDATE_GOLDEN"


def updating() -> bool:
    return os.environ.get(ENV) == "1" or os.environ.get("UPDATE_GOLDEN") == "1"


def golden_text(path: Path, text: str) -> str:
    """The golden file's text (written first from ``text`` only when updating); fails when it is missing."""
    if updating():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    assert path.exists(), f"{path} is missing: run with {ENV}=1 once and review it"
    return path.read_text(encoding="utf-8")
