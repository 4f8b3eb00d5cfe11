"""Durable storage: the ports every backend provides (core/store/ports.py), the code they share (staging, the hash
chain, verify, stored rows), and one package per backend (``sqlite/``, ``postgres/``, ``memory/``), each behind
one factory. core/store/backend.py picks the factory from configuration."""
