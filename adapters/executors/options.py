"""What the options of every executor type share: a pydantic model of the keys its ``[actions.executor]`` table may
hold (besides ``type`` and ``timeout_s``, which are the catalog's), each type's model adding its own.

A model refuses a key it does not know. Options that are valid but cannot run here make the action unavailable
(``unavailable``): a needed option that referenced an unset environment variable, or a URL that is not http(s).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

from pydantic import BaseModel, ConfigDict


class ExecutorOptions(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    #: The options whose unset environment variable leaves the action unavailable (its URL, its key).
    NEEDS: ClassVar[tuple[str, ...]] = ("url",)

    url: str = ""

    def urls(self) -> tuple[str, ...]:
        """The URLs the executor calls (the egress allowlist's default hosts)."""
        return (self.url,)

    def unavailable(self, unset: Mapping[str, str]) -> str:
        """Why these options cannot run here ("" when they can). ``unset``: option → the unset variable it named."""
        for key, variable in unset.items():
            if key in self.NEEDS:
                return f"{variable} is not set"
        if not self.url.startswith(("http://", "https://")):
            return f"executor url {self.url!r} is not an http(s) URL"
        return ""
