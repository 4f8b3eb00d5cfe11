"""End-to-end tests: the real server on port 0, driven through its doors (signed Slack requests, webhooks, the API, the CLI) against loopback fakes.

Shared fixtures live in tests/conftest.py."""
