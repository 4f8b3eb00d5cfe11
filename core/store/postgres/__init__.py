"""The PostgreSQL backend: every scope, the index, the inbox and what replicas coordinate through in one database
(``DECKLOG_DATABASE_URL``); its one factory is ``factory.py``."""
