"""``files.*`` methods for the external upload flow that ``files_upload_v2`` uses, plus ``files.info``.

``files.getUploadURLExternal`` returns an ``upload_url`` on this server (``/upload/v1/<file id>``); the bytes
go there; ``files.completeUploadExternal`` then shares the files into ``channel_id`` (and ``thread_ts``) as
one message from the bot, with ``initial_comment`` as its text.
"""

from __future__ import annotations

from typing import Any

from ..errors import SlackError
from .context import CallContext, Handler

__all__ = ["handlers"]

JSON = dict[str, Any]
MAX_LENGTH = 1_000_000_000


def handlers() -> dict[str, Handler]:
    return {
        "files.getUploadURLExternal": get_upload_url,
        "files.completeUploadExternal": complete_upload,
        "files.info": info,
    }


def get_upload_url(ctx: CallContext) -> JSON:
    filename = ctx.args.required("filename")
    length = ctx.args.number("length", -1)
    if not 0 < length <= MAX_LENGTH:
        raise SlackError("invalid_arguments", "length must be a positive number of bytes")
    file = ctx.workspace.files.reserve(filename=filename, length=length, user=ctx.bot, alt_txt=ctx.args.text("alt_txt"))
    return {"ok": True, "upload_url": f"{ctx.base_url}upload/v1/{file.id}", "file_id": file.id}


def complete_upload(ctx: CallContext) -> JSON:
    items = ctx.args.structured("files")
    if not isinstance(items, list) or not items or not all(isinstance(i, dict) and i.get("id") for i in items):
        raise SlackError("invalid_arguments", "files must be a JSON array of {id, title}")
    store = ctx.workspace.files
    rooms = [ctx.workspace.channel(c) for c in [ctx.args.text("channel_id"), *ctx.args.listed("channels")] if c]
    if any(ctx.bot not in room.members for room in rooms):
        raise SlackError("not_in_channel")
    files = [store.complete(str(i["id"]), title=i.get("title")) for i in items]
    thread_ts = ctx.args.text("thread_ts")
    download_base = ctx.base_url
    for room in rooms:
        message = ctx.workspace.messages.post(
            room.id,
            text=ctx.args.text("initial_comment", "") or "",
            user=ctx.bot,
            as_bot=True,
            thread_ts=thread_ts,
            files=[f.to_api(download_base=download_base) for f in files],
        )
        for file in files:
            store.record_share(file, channel=room.id, ts=message.ts, thread_ts=message.thread_ts)
    return {"ok": True, "files": [f.to_api(download_base=download_base) for f in files]}


def info(ctx: CallContext) -> JSON:
    file = ctx.workspace.files.get(ctx.args.required("file", error="file_not_found"))
    return {
        "ok": True,
        "file": file.to_api(download_base=ctx.base_url),
        "comments": [],
        "response_metadata": {},
    }
