"""The coordination experiment: scenarios, a deterministic world, three coordination arms, faults, a judge.

These are decklog's own implementations of the three strategies (a journaled central orchestrator, rule-based
dispatch over the shared log, and M workers over N scopes with leases) — not Temporal, not Kafka.

It runs decklog's own parts (turns, views, the action desk, the Slack intake, the dispatcher) on a virtual clock;
``python -m research.experiment`` is its entry point (``cli.py``). Notes: research/NOTES.md.
"""
