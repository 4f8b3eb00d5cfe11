"""The on-call subcommands: ``oncall [schedule]``, ``oncall override <schedule> @user <duration>``,
``page [policy|@user]`` and ``ack`` (``@decklog ack`` in a thread is the same row). Each is one append through
core/oncall/desk.py, persisted before Slack gets its ack; paging a person never waits for an approval."""

from __future__ import annotations

from decklog.adapters.slack import render
from decklog.adapters.slack.grammar import USER_TOKEN, UsageError
from decklog.adapters.slack.subcommands.handlers import Call, Reply
from decklog.core.oncall import desk
from decklog.core.oncall.desk import read_overrides
from decklog.core.oncall.rotation import next_handoff, on_call
from decklog.core.oncall.setup import OncallConfig, parse_duration

NOT_HERE = "On-call is not configured here (`[[oncall.schedules]]` and `[[oncall.policies]]` in decklog.toml)."


def oncall_args(rest: list[str]) -> dict[str, str]:
    if rest and rest[0].lower() == "override":
        if len(rest) != 4:
            raise UsageError(
                "`oncall override` takes a schedule, a person and a duration: `oncall override primary @alice 4h`"
            )
        user = USER_TOKEN.match(rest[2])
        if not user:
            raise UsageError(f"`{rest[2]}` is not a Slack mention; use `@name`")
        try:
            seconds = parse_duration(rest[3])
        except ValueError as exc:
            raise UsageError(str(exc)) from None
        return {"override": "1", "schedule": rest[1], "user_id": user.group(1), "seconds": str(seconds)}
    if len(rest) > 1:
        raise UsageError("`oncall` takes at most a schedule name, e.g. `oncall primary`")
    return {"schedule": rest[0]} if rest else {}


def page_args(rest: list[str]) -> dict[str, str]:
    if len(rest) > 1:
        raise UsageError("`page` takes at most a policy or a person, e.g. `page @alice` or `page default`")
    if not rest:
        return {}
    user = USER_TOKEN.match(rest[0])
    return {"user_id": user.group(1)} if user else {"policy": rest[0]}


def ack_args(rest: list[str]) -> dict[str, str]:
    if rest:
        raise UsageError("`ack` takes no arguments")
    return {}


def _setup(call: Call) -> OncallConfig | None:
    port = call.ports.oncall
    return port.setup if port is not None and port.setup.enabled else None


async def oncall(call: Call) -> Reply:
    setup = _setup(call)
    if setup is None or call.ports.oncall is None:
        return Reply(NOT_HERE)
    clock = call.ports.oncall.clock
    name = call.args.get("schedule", "")
    if call.args.get("override"):
        result = await desk.override(
            call.store,
            setup,
            clock,
            schedule=name,
            user=call.args["user_id"],
            seconds=float(call.args["seconds"]),
            by=call.actor.id,
        )
        p = result.entries[-1].payload
        return Reply(
            f":calendar: <@{call.args['user_id']}> is on call for `{name}` until {getattr(p, 'end', '')[:16]}Z."
        )
    schedules = [s for s in setup.schedules if not name or s.name == name]
    if not schedules:
        return Reply(f"No schedule `{render.esc(name)}` (known: {', '.join(s.name for s in setup.schedules)}).")
    now = clock.now()
    lines = []
    for s in schedules:
        overrides = await read_overrides(call.store, s.name)
        who = on_call(s, now, overrides)
        until = next_handoff(s, now, overrides)
        until_text = f" until {until.strftime('%Y-%m-%d %H:%M')} UTC" if until else ""
        lines.append(f"• `{s.name}`: {'<@' + who + '>' if who else 'nobody'}{until_text}")
    return Reply("On call now:\n" + "\n".join(lines))


async def page(call: Call) -> Reply:
    setup = _setup(call)
    if setup is None:
        return Reply(NOT_HERE)
    user, policy = call.args.get("user_id", ""), call.args.get("policy", "")
    await desk.page(call.store, call.scope, setup, by=call.actor.id, policy=policy, user=user, idempotency_key=call.key)
    who = f"<@{user}>" if user else f"policy `{policy or 'of the route'}`"
    return Reply(f":rotating_light: Paging {who} for `{call.scope}` — no approval needed; `/incident ack` stops it.")


async def ack(call: Call) -> Reply:
    result = await desk.acknowledge(call.store, call.scope, call.actor.id, via="command")
    stopped = getattr(result.entries[-1].payload, "escalations", ())
    tail = " Escalation stopped." if stopped else ""
    return Reply(f":white_check_mark: Acknowledged `{call.scope}`.{tail}")
