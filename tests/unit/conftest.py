"""Unit tests: one module or a few at a time, in process, no server.

Shared fixtures live in tests/conftest.py."""
