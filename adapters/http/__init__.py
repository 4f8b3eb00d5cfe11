"""decklog's own HTTP doors, besides Slack's: the alert and change webhooks (``receivers.py``), the read-only REST
API (``api.py``) and the Prometheus exposition of ``/metrics`` (``metrics.py``); ``hosts.py`` says what a host name
means (loopback, wildcard). The composition root (bot/wiring.py) builds them and mounts their routes on the server
(bot/server.py); nothing here imports bot/."""
