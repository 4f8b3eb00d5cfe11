"""Twilio: on-call pages by SMS and voice (``sms.py``) through the official ``twilio`` client."""
