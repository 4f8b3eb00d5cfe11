"""The in-memory backend: the log, the index and the inbox in dicts, behind the same ports (core/store/ports.py) and
one factory (``factory.py``). Tests use it; it is the proof that the ports do not leak SQL."""
