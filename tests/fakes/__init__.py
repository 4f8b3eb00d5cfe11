"""Loopback fakes that speak real wire formats, for tests only.

Each fake is an aiohttp server on 127.0.0.1 (port 0) driven by the real client library pointed at it by
``base_url``. Executor fakes that the demo and the sandbox also need live in
``adapters.local.services`` instead.
"""
