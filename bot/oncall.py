"""The on-call part: the escalation job (pages as they fall due; handoffs, said in the alerts channel) (every ``[oncall] tick`` seconds; one replica at a time under the jobs'
lease), the ``oncall`` sender with a notifier per contact method that is configured (Slack DM always; SMS and voice
with the Twilio settings; email with the SMTP settings; PagerDuty hand-offs), and the HTTP doors
``GET /api/oncall`` and ``GET /api/oncall/<schedule>.ics`` (adapters/http/oncall.py)."""

from __future__ import annotations

import logging
from dataclasses import dataclass

import aiohttp
from pydantic import SecretStr
from slack_sdk.web.async_client import AsyncWebClient

from decklog.adapters.email.smtp import SmtpNotifier
from decklog.adapters.executors.pagerduty_page import PagerDutyHandoff
from decklog.adapters.http.api import ScopesApi
from decklog.adapters.http.oncall import OncallApi
from decklog.adapters.http.oncall import describe as describe_oncall
from decklog.adapters.http.oncall import routes as oncall_routes
from decklog.adapters.http.openapi import ApiDescription
from decklog.adapters.slack.oncall_dm import SlackDmNotifier
from decklog.adapters.slack.oncall_handoff import SlackHandoffPoster
from decklog.adapters.twilio.inbound import PATH as SMS_PATH
from decklog.adapters.twilio.inbound import SmsReplies
from decklog.adapters.twilio.sms import TwilioNotifier
from decklog.bot.config import DecklogConfig
from decklog.bot.parts import Job, Provides, Route, Stopper
from decklog.bot.settings import Settings, SettingsError
from decklog.core.clock import Clock
from decklog.core.egress import EgressPolicy
from decklog.core.oncall.escalation import OncallJob
from decklog.core.oncall.sender import Notifier, OncallSender
from decklog.core.store.ports import ApiKeys, IndexPort, LogStore

log = logging.getLogger("decklog")


@dataclass
class Oncall:
    job: OncallJob
    sender: OncallSender
    provides: Provides


def oncall_egress(settings: Settings, config: DecklogConfig) -> EgressPolicy:
    """``[security] egress_allow`` when set, else exactly the configured Twilio, SMTP and PagerDuty hosts."""
    urls = [settings.twilio_api_url or "https://api.twilio.com", settings.pagerduty_events_url]
    if settings.smtp_url is not None:
        smtp = settings.smtp_url.get_secret_value()
        urls.append(smtp.replace("smtps://", "https://", 1).replace("smtp://", "http://", 1))
    return EgressPolicy.configured(config.security.egress_allow, urls)


def notifiers(
    settings: Settings, config: DecklogConfig, client: AsyncWebClient, http: aiohttp.ClientSession
) -> dict[str, Notifier]:
    """One notifier per configured method; a person's rule naming a method that is not configured stops start-up."""
    egress = oncall_egress(settings, config)
    out: dict[str, Notifier] = {"slack": SlackDmNotifier(client)}
    out["pagerduty"] = PagerDutyHandoff(http, url=settings.pagerduty_events_url, egress=egress)
    twilio = (settings.twilio_account_sid, settings.twilio_auth_token, settings.twilio_from)
    if all(twilio):
        token = settings.twilio_auth_token
        assert isinstance(token, SecretStr)
        for method in ("sms", "voice"):
            out[method] = TwilioNotifier(
                method=method,
                account_sid=settings.twilio_account_sid or "",
                auth_token=token.get_secret_value(),
                from_number=settings.twilio_from or "",
                api_url=settings.twilio_api_url or "",
                egress=egress,
            )
    if settings.smtp_url is not None and settings.smtp_from:
        try:
            out["email"] = SmtpNotifier(settings.smtp_url.get_secret_value(), settings.smtp_from, egress=egress)
        except ValueError as exc:
            raise SettingsError(str(exc)) from None
    for user, person in config.oncall.people.items():
        for rule in person.rules:
            if rule.method not in out:
                needs = (
                    "DECKLOG_SMTP_URL and DECKLOG_SMTP_FROM"
                    if rule.method == "email"
                    else ("DECKLOG_TWILIO_ACCOUNT_SID, DECKLOG_TWILIO_AUTH_TOKEN and DECKLOG_TWILIO_FROM")
                )
                raise SettingsError(f"DECKLOG_CONFIG: oncall.people.{user}.rules: {rule.method} needs {needs}")
    return out


def build_oncall(
    store: LogStore,
    index: IndexPort,
    clock: Clock,
    *,
    settings: Settings,
    config: DecklogConfig,
    client: AsyncWebClient,
    http: aiohttp.ClientSession,
    alerts_channel: str | None = None,
    keys: ApiKeys | None = None,
    description: ApiDescription | None = None,
) -> Oncall:
    """``alerts_channel``: where handoffs are said (the Slack sender's: none, no handoff posts)."""
    setup = config.oncall
    job = OncallJob(store, index, clock, setup)
    poster = SlackHandoffPoster(client, alerts_channel or "")
    sender = OncallSender(store, setup, notifiers(settings, config, client, http), poster)
    # the same method, token and scope checks as the REST API (its stored tokens too)
    guard = ScopesApi(store, index, settings.api_token, keys=keys).guard
    api = OncallApi(store, clock, setup)
    routes = [Route(m, p, h) for m, p, h in oncall_routes(api, guard)]
    if description is not None:
        describe_oncall(description)
    if settings.twilio_auth_token is not None and setup.enabled:  # a reply by SMS acknowledges
        replies = SmsReplies(store, index, setup, settings.twilio_auth_token.get_secret_value())
        routes.append(Route("POST", SMS_PATH, replies.receive))

    async def tick() -> None:
        await job.tick()

    jobs = [Job("oncall", setup.tick, tick)] if setup.enabled else []
    if setup.enabled:
        log.info(
            "on-call: %d schedule(s), %d policy(ies); pages by %s",
            len(setup.schedules),
            len(setup.policies),
            ", ".join(sorted(sender.notifiers)),
        )
    drains: list[Stopper] = [n.close for n in sender.notifiers.values() if isinstance(n, TwilioNotifier)]
    return Oncall(job, sender, Provides(routes=routes, senders=[sender], jobs=jobs, drains=drains))
