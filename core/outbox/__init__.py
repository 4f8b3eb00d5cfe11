"""The outbox's dispatcher (``dispatcher.py``), the port a sender implements (``sender.py``) and the delivered
marks written a few at a time (``marks.py``)."""
