"""Evidence from outside the log: the read tools every reasoner uses, and the service graph.

- ``ports``: ``MetricsPort`` (Prometheus) and ``AlertsPort`` (Alertmanager), and ``SourceError``.
- ``catalog``: ``ServiceCatalog``, Backstage components and resources with what they depend on and who owns them.
- ``queries``: the PromQL each check runs for a service (the two common conventions, a catalog annotation
  overrides them).
- ``observer``: ``Evidence``, one turn's bounded reads (count, time, bytes), each kept as an observation to record.
"""
