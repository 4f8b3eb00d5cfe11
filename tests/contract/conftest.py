"""Contract tests: one suite written once and run on every backend (SQLite, in-memory, PostgreSQL).

Shared fixtures live in tests/conftest.py."""
