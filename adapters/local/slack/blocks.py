"""Block Kit lookups a person's client does: ids Slack fills in, finding an element, the values it submits.

Slack gives every stored block a ``block_id`` and every interactive element an ``action_id`` when the app left
them out; a click then reports those ids. This module does the same for the fake, finds the element a test
"clicks", and turns a person's choice (``"sev2"``, ``["U0ALICE"]``, ``"some text"``) into the exact shapes of
``block_actions.actions[]`` and ``view.state.values``.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from types import MappingProxyType
from typing import Any

__all__ = [
    "action_entry",
    "assign_ids",
    "element_state",
    "find_element",
    "interactive_elements",
    "view_state_values",
]

JSON = dict[str, Any]

_OPTION_ONE = frozenset({"static_select", "external_select", "radio_buttons", "overflow"})
_OPTION_MANY = frozenset({"multi_static_select", "multi_external_select", "checkboxes"})
_SIMPLE_KEY = MappingProxyType(
    {
        "users_select": ("selected_user", "initial_user"),
        "multi_users_select": ("selected_users", "initial_users"),
        "conversations_select": ("selected_conversation", "initial_conversation"),
        "multi_conversations_select": ("selected_conversations", "initial_conversations"),
        "channels_select": ("selected_channel", "initial_channel"),
        "multi_channels_select": ("selected_channels", "initial_channels"),
        "datepicker": ("selected_date", "initial_date"),
        "timepicker": ("selected_time", "initial_time"),
        "datetimepicker": ("selected_date_time", "initial_date_time"),
        "plain_text_input": ("value", "initial_value"),
        "number_input": ("value", "initial_value"),
        "email_text_input": ("value", "initial_value"),
        "url_text_input": ("value", "initial_value"),
    }
)


def assign_ids(blocks: list[JSON], new_id: Callable[[], str]) -> list[JSON]:
    """A deep copy of ``blocks`` with a ``block_id`` on every block and an ``action_id`` on every element."""
    result = copy.deepcopy(blocks)
    for block in result:
        block.setdefault("block_id", new_id())
        for element in _elements_of(block):
            element.setdefault("action_id", new_id())
    return result


def interactive_elements(blocks: list[JSON]) -> Iterator[tuple[str, JSON]]:
    """``(block_id, element)`` for each element a person can act on, in display order."""
    for block in blocks:
        for element in _elements_of(block):
            yield str(block.get("block_id", "")), element


def find_element(
    blocks: list[JSON], action_id: str, *, value: str | None = None, types: frozenset[str] | None = None
) -> tuple[str, JSON]:
    """The ``(block_id, element)`` with ``action_id`` (and, for buttons, ``value`` when given)."""
    candidates = []
    for block_id, element in interactive_elements(blocks):
        if element.get("action_id") != action_id or (types is not None and element.get("type") not in types):
            continue
        if value is not None and element.get("type") == "button" and element.get("value") != value:
            continue
        candidates.append((block_id, element))
    if not candidates:
        available = [
            f"{e.get('type')}:{e.get('action_id')}" + (f"={e['value']}" if "value" in e else "")
            for _, e in interactive_elements(blocks)
        ]
        raise LookupError(f"no element with action_id={action_id!r} value={value!r}; available: {available}")
    return candidates[0]


def element_state(element: JSON, choice: Any) -> JSON:
    """The fields a person's ``choice`` gives ``element``: ``{"selected_option": {...}}``, ``{"value": "x"}``.

    ``choice`` is the simple form (an option value, a list of them, a user id, a text, ``None``); a dict is
    taken as already shaped. ``None`` means "left as is": the element's initial value, if any.
    """
    kind = str(element.get("type"))
    if isinstance(choice, dict):
        return dict(choice)
    if kind in _OPTION_ONE:
        if choice is None:
            return {"selected_option": copy.deepcopy(element.get("initial_option"))}
        return {"selected_option": _option(element, str(choice))}
    if kind in _OPTION_MANY:
        if choice is None:
            return {"selected_options": copy.deepcopy(element.get("initial_options", []))}
        values = [choice] if isinstance(choice, str) else list(choice)
        return {"selected_options": [_option(element, str(v)) for v in values]}
    keys = _SIMPLE_KEY.get(kind)
    if keys is None:
        return {"value": choice}
    selected_key, initial_key = keys
    return {selected_key: copy.deepcopy(element.get(initial_key)) if choice is None else choice}


def action_entry(block_id: str, element: JSON, choice: Any, action_ts: str) -> JSON:
    """One ``actions[]`` item of a ``block_actions`` payload, as Slack builds it."""
    kind = str(element.get("type"))
    entry: JSON = {"type": kind, "action_id": element.get("action_id"), "block_id": block_id}
    if kind == "button":
        entry["text"] = copy.deepcopy(element.get("text"))
        if "value" in element:
            entry["value"] = element["value"]
        if "style" in element:
            entry["style"] = element["style"]
    else:
        entry.update(element_state(element, choice))
        if "placeholder" in element:
            entry["placeholder"] = copy.deepcopy(element["placeholder"])
    entry["action_ts"] = action_ts
    return entry


def view_state_values(blocks: list[JSON], choices: dict[str, Any], *, enforce_required: bool = True) -> JSON:
    """``view.state.values`` for a submission: every input block, with ``choices`` applied.

    ``choices`` maps ``block_id`` → either a simple value (for the block's single element) or a dict
    ``{action_id: value}``. Raises ``ValueError`` for a required input left empty (Slack's client would not
    let the person submit; ``enforce_required=False`` skips that, for a message's state) and ``LookupError``
    for an unknown block.
    """
    known = {str(b.get("block_id")): b for b in blocks if b.get("type") == "input"}
    unknown = set(choices) - set(known) - {str(b.get("block_id")) for b in blocks}
    if unknown:
        raise LookupError(f"no input blocks {sorted(unknown)} in this view; inputs: {sorted(known)}")
    values: JSON = {}
    for block_id, block in known.items():
        element = block["element"]
        action_id = str(element.get("action_id"))
        choice = choices.get(block_id)
        if isinstance(choice, dict) and action_id in choice:
            choice = choice[action_id]
        state = {"type": element.get("type"), **element_state(element, choice)}
        if enforce_required and not block.get("optional", False) and _is_empty(state):
            raise ValueError(f"required input {block_id!r} has no value; Slack would not submit the view")
        values[block_id] = {action_id: state}
    for block in blocks:  # stateful elements outside input blocks (selects in section/actions blocks)
        if block.get("type") == "input":
            continue
        for element in _elements_of(block):
            if element.get("type") == "button":
                continue
            block_id, action_id = str(block.get("block_id")), str(element.get("action_id"))
            choice = choices.get(block_id)
            if isinstance(choice, dict):
                choice = choice.get(action_id)
            state = {"type": element.get("type"), **element_state(element, choice)}
            values.setdefault(block_id, {})[action_id] = state
    return values


def _elements_of(block: JSON) -> list[JSON]:
    kind = block.get("type")
    if kind == "actions":
        return [e for e in block.get("elements", []) if isinstance(e, dict)]
    if kind == "section" and isinstance(block.get("accessory"), dict):
        accessory = block["accessory"]
        return [] if accessory.get("type") == "image" else [accessory]
    if kind == "input" and isinstance(block.get("element"), dict):
        return [block["element"]]
    return []


def _option(element: JSON, value: str) -> JSON:
    options = list(element.get("options", []))
    for group in element.get("option_groups", []):
        options.extend(group.get("options", []))
    for option in options:
        if option.get("value") == value:
            return copy.deepcopy(option)
    if element.get("type") in ("external_select", "multi_external_select"):
        return {"text": {"type": "plain_text", "text": value}, "value": value}
    raise LookupError(
        f"{element.get('action_id')!r} has no option {value!r}; options: {[o.get('value') for o in options]}"
    )


def _is_empty(state: JSON) -> bool:
    return all(v in (None, "", []) for k, v in state.items() if k != "type")
