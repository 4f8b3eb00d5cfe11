"""The decklog experiment (issue 17): scenarios, a deterministic world, three coordination arms, faults, a judge.

These are decklog's own implementations of the three strategies (a journaled central orchestrator, rule-based
dispatch over the shared log, and M workers over N scopes with leases) — not Temporal, not Kafka.
"""
