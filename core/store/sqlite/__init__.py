"""The SQLite backend (the embedded default): one file per scope, ``index.db`` and ``inbox.db`` under the data
directory, group-committed from asyncio; its one factory is ``factory.py``."""
