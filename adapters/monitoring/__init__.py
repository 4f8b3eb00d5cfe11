"""The read tools' sources over HTTP: Prometheus (``prometheus``) and Alertmanager (``alertmanager``), both through
``reader.JsonReader`` (egress allowlist, auth, timeout, size bound)."""
