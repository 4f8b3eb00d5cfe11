"""Reliability tests: SIGKILL mid-load and restart, retries, races, power loss. Nothing acknowledged may be lost or repeated.

Shared fixtures live in tests/conftest.py."""
