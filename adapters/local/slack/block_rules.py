"""Block Kit limits the fake enforces, answering ``invalid_blocks`` the way Slack does.

Not the whole Block Kit schema: the limits a bot trips over in practice (empty or too long texts, too many
blocks or elements, duplicate ids, unknown block types), each reported with a JSON pointer like Slack's
``"must be less than 3001 characters [json-pointer:/blocks/0/text/text]"``.
"""

from __future__ import annotations

from typing import Any

from .errors import SlackError

__all__ = ["validate_blocks"]

_BLOCK_TYPES = frozenset(
    {
        "actions", "context", "divider", "file", "header", "image", "input", "markdown", "rich_text",
        "section", "table", "video", "context_actions",
    }
)  # fmt: skip
_TEXT_TYPES = frozenset({"plain_text", "mrkdwn"})


class _Problems:
    def __init__(self) -> None:
        self.items: list[str] = []

    def add(self, message: str, pointer: str) -> None:
        self.items.append(f"{message} [json-pointer:{pointer}]")


def validate_blocks(blocks: Any, *, limit: int = 50, error: str = "invalid_blocks") -> list[dict[str, Any]]:
    """Returns ``blocks`` when valid; raises ``SlackError(error)`` listing every problem otherwise."""
    if not isinstance(blocks, list):
        raise SlackError("invalid_blocks_format", "blocks must be an array")
    problems = _Problems()
    if len(blocks) > limit:
        problems.add(f"no more than {limit} items allowed", "/blocks")
    seen_ids: set[str] = set()
    for i, block in enumerate(blocks):
        _check_block(block, f"/blocks/{i}", seen_ids, problems)
    if problems.items:
        raise SlackError(
            error,
            errors=list(problems.items),
            response_metadata={"messages": [f"[ERROR] {p}" for p in problems.items]},
        )
    return blocks


def _check_block(block: Any, at: str, seen_ids: set[str], problems: _Problems) -> None:
    if not isinstance(block, dict) or not isinstance(block.get("type"), str):
        problems.add("must provide an object with a type", at)
        return
    kind = block["type"]
    if kind not in _BLOCK_TYPES:
        problems.add(f"unsupported type: {kind}", f"{at}/type")
        return
    block_id = block.get("block_id")
    if block_id is not None:
        if not isinstance(block_id, str) or not 0 < len(block_id) <= 255:
            problems.add("must be between 1 and 255 characters", f"{at}/block_id")
        elif block_id in seen_ids:
            problems.add(f"duplicate block_id: {block_id}", f"{at}/block_id")
        else:
            seen_ids.add(block_id)
    if kind == "section":
        if "text" not in block and "fields" not in block:
            problems.add("must provide either text or fields", at)
        if "text" in block:
            _check_text(block["text"], f"{at}/text", 3000, problems)
        fields = block.get("fields", [])
        if not isinstance(fields, list) or len(fields) > 10:
            problems.add("no more than 10 items allowed", f"{at}/fields")
        else:
            for j, item in enumerate(fields):
                _check_text(item, f"{at}/fields/{j}", 2000, problems)
        if "accessory" in block:
            _check_elements([block["accessory"]], f"{at}/accessory", problems, single=True)
    elif kind == "header":
        _check_text(block.get("text"), f"{at}/text", 150, problems, plain_only=True)
    elif kind == "actions":
        _check_elements(block.get("elements"), f"{at}/elements", problems, maximum=25)
    elif kind == "context":
        elements = block.get("elements")
        if not isinstance(elements, list) or not 0 < len(elements) <= 10:
            problems.add("must provide between 1 and 10 elements", f"{at}/elements")
    elif kind == "input":
        _check_text(block.get("label"), f"{at}/label", 2000, problems, plain_only=True)
        if not isinstance(block.get("element"), dict):
            problems.add("must provide an element", f"{at}/element")
        else:
            _check_elements([block["element"]], f"{at}/element", problems, single=True)


def _check_text(obj: Any, at: str, maximum: int, problems: _Problems, *, plain_only: bool = False) -> None:
    if not isinstance(obj, dict) or obj.get("type") not in _TEXT_TYPES:
        problems.add("must provide a text object", at)
        return
    if plain_only and obj["type"] != "plain_text":
        problems.add("must be a plain_text text object", f"{at}/type")
    text = obj.get("text")
    if not isinstance(text, str) or not text:
        problems.add("must be more than 0 characters", f"{at}/text")
    elif len(text) > maximum:
        problems.add(f"must be less than {maximum + 1} characters", f"{at}/text")


def _check_elements(elements: Any, at: str, problems: _Problems, *, maximum: int = 1, single: bool = False) -> None:
    if not isinstance(elements, list) or not 0 < len(elements) <= maximum:
        problems.add(f"must provide between 1 and {maximum} elements", at)
        return
    action_ids: set[str] = set()
    for j, element in enumerate(elements):
        where = at if single else f"{at}/{j}"
        if not isinstance(element, dict) or not isinstance(element.get("type"), str):
            problems.add("must provide an object with a type", where)
            continue
        action_id = element.get("action_id")
        if action_id is not None:
            if not isinstance(action_id, str) or not 0 < len(action_id) <= 255:
                problems.add("must be between 1 and 255 characters", f"{where}/action_id")
            elif action_id in action_ids:
                problems.add(f"duplicate action_id: {action_id}", f"{where}/action_id")
            else:
                action_ids.add(action_id)
        if element["type"] == "button":
            _check_text(element.get("text"), f"{where}/text", 75, problems, plain_only=True)
            value = element.get("value")
            if value is not None and (not isinstance(value, str) or len(value) > 2000):
                problems.add("must be less than 2001 characters", f"{where}/value")
            if element.get("style") not in (None, "primary", "danger"):
                problems.add("must be one of primary, danger", f"{where}/style")
        options = element.get("options")
        if options is not None:
            if not isinstance(options, list) or not 0 < len(options) <= 100:
                problems.add("must provide between 1 and 100 options", f"{where}/options")
            else:
                for k, option in enumerate(options):
                    _check_option(option, f"{where}/options/{k}", problems)


def _check_option(option: Any, at: str, problems: _Problems) -> None:
    if not isinstance(option, dict):
        problems.add("must provide an object", at)
        return
    _check_text(option.get("text"), f"{at}/text", 75, problems)
    value = option.get("value")
    if not isinstance(value, str) or not 0 < len(value) <= 150:
        problems.add("must be between 1 and 150 characters", f"{at}/value")
