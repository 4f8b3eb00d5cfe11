"""Browser tests: the sandbox page in headless Chromium (skipped with a reason where Chromium is missing).

Shared fixtures live in tests/conftest.py."""
