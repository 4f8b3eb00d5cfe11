"""The local world: everything decklog needs to run with no real Slack and no real services.

- ``slack/``: a Slack workspace simulator that speaks the real Web API, Events API and Socket Mode wire formats
  (the real slack_sdk and Bolt talk to it by base URL);
- ``sandbox/``: the local Slack-like page served by ``decklog serve`` when no Slack credentials are set;
- ``services/``: a fake deploy service and a fake status page, for the example actions' executors.

Nothing in ``adapters/slack`` or ``adapters/executors`` imports this wing; tests and the sandbox do.
"""
