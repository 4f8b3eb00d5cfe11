"""What every part of the report model shares: a frozen, strict pydantic base and the origin of an actor."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

Origin = Literal["human", "agent", "system"]


class Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
