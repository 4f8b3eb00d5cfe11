"""Outgoing webhooks: each committed entry posted to the ``[[webhooks]]`` endpoints, signed per Standard Webhooks."""
