"""A scope's derived state: its shapes (``core/state/model.py``) and the pure fold that builds them from the log
(``core/state/folding.py``). The rest of decklog imports these names from ``core.state``."""

from decklog.core.state.folding import NOT_A_RESPONSE, fold, fold_all, fold_many, private_folds
from decklog.core.state.model import (
    OMITTED_WHEN_EMPTY,
    AlertState,
    ObligationState,
    ProposalState,
    RoleHolder,
    RunState,
    ScopeState,
    ThreadRef,
    empty_state,
)
from decklog.core.state.mtta import Mtta, MttaStart, mtta

__all__ = [
    "NOT_A_RESPONSE",
    "OMITTED_WHEN_EMPTY",
    "AlertState",
    "Mtta",
    "MttaStart",
    "ObligationState",
    "ProposalState",
    "RoleHolder",
    "RunState",
    "ScopeState",
    "ThreadRef",
    "empty_state",
    "fold",
    "fold_all",
    "fold_many",
    "mtta",
    "private_folds",
]
