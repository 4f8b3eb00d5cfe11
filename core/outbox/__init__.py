"""The outbox's dispatcher (``dispatcher.py``), the port a sender implements (``sender.py``), the delivered
marks written a few at a time (``marks.py``) and the sweeps that re-arm pending deliveries (``sweeps.py``)."""
