"""Twilio: on-call pages by SMS and voice (``sms.py``), and SMS replies that acknowledge (``inbound.py``)."""
