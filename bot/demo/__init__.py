"""``decklog demo``: the 03:12 story end to end, in one process, against the local fake Slack.

A deploy of payments touches its config; at 03:12 an alert on elevated payments 5xx opens ``incident/payments-5xx``;
the deploy ``change/r2026-09-19-4`` is linked; an investigation turn records the suspicion and the obligation
"roll back only if the recorded safety conditions hold", then ends; a fresh action turn proposes the rollback,
which parks; alice approves; the rollback runs under a fenced authority against the fake deploy service and
records "verification needed"; the alert resolves and a fresh verification turn checks the expected outcome;
alice accepts the suggestion to resolve; the report is exported. Everything goes through the product's own
doors — the HTTP receivers and signed Slack requests — and every step is checked in the log.

Time is compressed (agent turns wait a fraction of a second instead of a minute). The data directory is kept
and printed, so the scopes can be inspected and exported afterwards. Exit 0 only if every step happened.

The story's steps are in ``story.py``, what it sends in ``payloads.py``, the printed transcript in
``transcript.py`` and the entry point in ``entry.py``.
"""

from decklog.bot.demo.entry import demo_config, demo_settings, run_demo
from decklog.bot.demo.story import Demo, StepFailed

__all__ = ["Demo", "StepFailed", "demo_config", "demo_settings", "run_demo"]
