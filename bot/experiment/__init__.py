"""``decklog experiment``: runs arms × faults × scenarios × seeds in parallel processes (see core/experiment)."""
