"""The index's shared parts: its tables and SQL (written once, run by the SQLite and PostgreSQL indexes), the keys
and text it finds scopes by, and the outbox sender that keeps it in step with the logs. Each backend's index class
lives in its backend package (core/store/*/index.py); callers type against ``IndexPort``."""
