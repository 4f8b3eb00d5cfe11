"""Files of the fake workspace, uploaded the way ``files_upload_v2`` does it.

Three steps, as on Slack: ``files.getUploadURLExternal`` reserves an id, the client POSTs the bytes to the
upload URL, ``files.completeUploadExternal`` titles the file and shares it into a channel or thread.
"""

from __future__ import annotations

from typing import Any

from .changes import Change, ChangeFeed
from .errors import SlackError
from .ids import IdMint, TsClock
from .model import SlackFile
from .records import record_from_dict, record_to_dict

__all__ = ["FileStore"]


class FileStore:
    def __init__(self, *, ids: IdMint, clock: TsClock, feed: ChangeFeed) -> None:
        self._ids = ids
        self._clock = clock
        self._feed = feed
        self._files: dict[str, SlackFile] = {}
        self._completed: dict[str, None] = {}  # an ordered set: ids of completed uploads

    def reserve(self, *, filename: str, length: int, user: str, alt_txt: str | None = None) -> SlackFile:
        file = SlackFile(
            id=self._ids.mint("F"),
            name=filename,
            title=filename,
            length=length,
            user=user,
            created=int(self._clock.now()),
            alt_txt=alt_txt,
        )
        self._files[file.id] = file
        return file

    def find(self, file_id: str) -> SlackFile | None:
        return self._files.get(file_id)

    def get(self, file_id: str) -> SlackFile:
        file = self._files.get(file_id)
        if file is None or file_id not in self._completed:
            raise SlackError("file_not_found")
        return file

    def receive(self, file_id: str, content: bytes) -> SlackFile:
        """The upload step. ``KeyError`` for an id that was never reserved."""
        file = self._files[file_id]
        file.content = content
        return file

    def complete(self, file_id: str, *, title: str | None) -> SlackFile:
        file = self._files.get(file_id)
        if file is None:
            raise SlackError("file_not_found")
        if not file.uploaded:
            raise SlackError("file_upload_not_completed", f"nothing was uploaded for {file_id}")
        if title:
            file.title = title
        self._completed[file_id] = None
        self._feed.emit(Change("file_uploaded", user=file.user, data=file.to_api()))
        return file

    def record_share(self, file: SlackFile, *, channel: str, ts: str, thread_ts: str | None) -> None:
        share: dict[str, Any] = {"ts": ts, "channel_name": channel, "reply_users_count": 0}
        if thread_ts:
            share["thread_ts"] = thread_ts
        file.shares.setdefault(channel, []).append(share)

    def all(self) -> list[SlackFile]:
        return [self._files[i] for i in self._completed]

    # -- round trip ------------------------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """Every file (reserved or completed, bytes as base64) and which uploads completed, as plain data."""
        return {"files": [record_to_dict(f) for f in self._files.values()], "completed": list(self._completed)}

    def load_dict(self, data: Any) -> None:
        """Replace everything with :meth:`to_dict`'s data (all or nothing); ``ValueError`` when it is not that."""
        if not isinstance(data, dict) or not isinstance(data.get("files"), list):
            raise ValueError("the files must be an object with a list of files")
        files = {f.id: f for f in (record_from_dict(SlackFile, raw) for raw in data["files"])}
        completed = data.get("completed", [])
        if not isinstance(completed, list) or any(not isinstance(i, str) or i not in files for i in completed):
            raise ValueError("files.completed must list ids of known files")
        self._files, self._completed = files, dict.fromkeys(completed)
