"""Research on decklog, outside the product: it imports decklog as any user would, and decklog never imports it.
Run from a checkout (``python -m research.experiment``); it is not in the wheel."""
