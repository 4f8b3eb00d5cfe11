"""Email: on-call pages through SMTP (``smtp.py``)."""
