"""Which tracker this process files follow-ups in: GitHub when DECKLOG_GITHUB_REPO and DECKLOG_GITHUB_TOKEN are
set, else Jira when DECKLOG_JIRA_URL, DECKLOG_JIRA_EMAIL, DECKLOG_JIRA_TOKEN and DECKLOG_JIRA_PROJECT are; else
none (follow-ups stay in the log; the server gives the ``trackers`` topic no rows: bot/topics.py). It reads
Settings, so it lives in bot/ (adapters/trackers/ never imports bot/).

A filed issue links to the incident's report: under ``[reports] public_url`` when set, else under the address the
server listens on, unless that is a wildcard (``0.0.0.0``, ``::``), which no reader can reach: then the issue
carries the report's path on the server, and start-up says which key to set."""

from __future__ import annotations

import logging
from collections.abc import Callable

import aiohttp

from decklog.adapters.http.hosts import is_wildcard_host
from decklog.adapters.trackers.github import GitHubTracker
from decklog.adapters.trackers.jira import JiraTracker
from decklog.bot.parts import Address
from decklog.bot.settings import Settings
from decklog.core.follow_ups import Tracker

log = logging.getLogger(__name__)


def tracker_name(settings: Settings) -> str | None:
    """The tracker the settings configure ("github" or "jira"), or None: ``build_tracker``'s choice, without a
    session."""
    s = settings
    if s.github_repo and s.github_token is not None:
        return "github"
    if s.jira_url and s.jira_email and s.jira_token is not None and s.jira_project:
        return "jira"
    return None


def build_tracker(settings: Settings, session: aiohttp.ClientSession) -> Tracker | None:
    s = settings
    if s.github_repo and s.github_token is not None:
        return GitHubTracker(
            session, repo=s.github_repo, token=s.github_token.get_secret_value(), api_url=s.github_api_url
        )
    if s.jira_url and s.jira_email and s.jira_token is not None and s.jira_project:
        return JiraTracker(
            session,
            url=s.jira_url,
            email=s.jira_email,
            token=s.jira_token.get_secret_value(),
            project=s.jira_project,
            issue_type=s.jira_issue_type,
        )
    return None


def report_link(public_url: str, settings: Settings, address: Address) -> Callable[[str], str]:
    """The link a filed issue gives for ``scope``'s report (see the module's docstring)."""
    path_only = not public_url and is_wildcard_host(settings.host)
    if path_only:
        log.warning(
            "follow-ups: DECKLOG_HOST=%s names no address a reader can open; filed issues give the report's path "
            "only. Set [reports] public_url in decklog.toml to link it",
            settings.host,
        )

    def link(scope: str) -> str:
        path = f"/api/scopes/{scope}/report.html"
        return path if path_only else (public_url or address.url) + path  # address.url: set once the server listens

    return link
