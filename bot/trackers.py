"""Which tracker this process files follow-ups in: GitHub when DECKLOG_GITHUB_REPO and DECKLOG_GITHUB_TOKEN are
set, else Jira when DECKLOG_JIRA_URL, DECKLOG_JIRA_EMAIL, DECKLOG_JIRA_TOKEN and DECKLOG_JIRA_PROJECT are; else
none (follow-ups stay in the log, their ``trackers`` rows pending until a tracker is configured). It reads
Settings, so it lives in bot/ (adapters/trackers/ never imports bot/)."""

from __future__ import annotations

import aiohttp

from adapters.trackers.github import GitHubTracker
from adapters.trackers.jira import JiraTracker
from bot.settings import Settings
from core.follow_ups import Tracker


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
