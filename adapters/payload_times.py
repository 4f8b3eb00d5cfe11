"""Timestamps in untrusted payloads: ISO 8601 (``Z`` or an offset, any number of fractional digits; Go's zero time
means "not set") and Unix epochs, always returned timezone-aware in UTC; errors are ``PayloadError``s."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta, timezone

from adapters.payload_paths import child, json_type, show
from core.signals import PayloadError

_ISO = re.compile(
    r"(?P<y>\d{4})-(?P<mo>\d{2})-(?P<d>\d{2})"
    r"(?:[Tt ](?P<h>\d{2}):(?P<mi>\d{2})(?::(?P<s>\d{2})(?:[.,](?P<f>\d+))?)?)?"
    r"\s*(?P<tz>[Zz]|[+-]\d{2}(?::?\d{2})?)?"
)


def parse_iso(raw: str, path: str) -> datetime | None:
    """ISO 8601 → aware UTC datetime. Empty or Go's zero time (year 1) → ``None``."""
    value = raw.strip()
    if not value:
        return None
    match = _ISO.fullmatch(value)
    if match is None:
        raise PayloadError(path, f"expected an ISO 8601 timestamp, got {show(value)}")
    year = int(match["y"])
    if year <= 1:  # Go's time.Time{} ("0001-01-01T00:00:00Z"): not set
        return None
    tz: timezone = UTC
    zone = match["tz"]
    if zone and zone not in "Zz":
        digits = zone[1:].replace(":", "")
        hours, minutes = int(digits[:2]), int(digits[2:4] or 0)
        if hours > 23 or minutes > 59:
            raise PayloadError(path, f"invalid UTC offset in {show(value)}")
        offset = timedelta(hours=hours, minutes=minutes)
        tz = timezone(-offset if zone[0] == "-" else offset)
    fraction = (match["f"] or "")[:6].ljust(6, "0")
    try:
        stamp = datetime(
            year,
            int(match["mo"]),
            int(match["d"]),
            int(match["h"] or 0),
            int(match["mi"] or 0),
            min(int(match["s"] or 0), 59),  # a leap second is clamped
            int(fraction),
            tzinfo=tz,
        )
        return stamp.astimezone(UTC)
    except (ValueError, OverflowError):
        raise PayloadError(path, f"invalid date or time in {show(value)}") from None


def opt_time(obj: Mapping[str, object], key: str, path: str) -> datetime | None:
    value = obj.get(key)
    if value is None:
        return None
    if not isinstance(value, str):
        raise PayloadError(child(path, key), f"expected an ISO 8601 timestamp string, got {json_type(value)}")
    try:
        return parse_iso(value, path)
    except PayloadError as exc:  # the path is built only when it is needed
        raise PayloadError(child(path, key), exc.message) from None


def epoch_or_iso(value: object, path: str) -> datetime | None:
    """A Unix epoch (seconds, or milliseconds when larger than 10^11; number or digit string) or ISO 8601."""
    if value is None:
        return None
    number: float
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise PayloadError(path, f"expected an epoch or ISO 8601 timestamp, got {json_type(value)}")
    if isinstance(value, str):
        stripped = value.strip()
        if not re.fullmatch(r"-?\d+(\.\d+)?", stripped):
            return parse_iso(stripped, path)
        if len(stripped) > 20:
            raise PayloadError(path, f"epoch timestamp out of range: {show(stripped)}")
        number = float(stripped)
    else:
        if isinstance(value, int) and abs(value) > 10**20:
            raise PayloadError(path, "epoch timestamp out of range")
        number = float(value)
    if not math.isfinite(number):
        raise PayloadError(path, "epoch timestamp must be a finite number")
    if number <= 0:
        return None
    seconds = number / 1000 if number > 1e11 else number
    try:
        return datetime.fromtimestamp(seconds, UTC)
    except (ValueError, OverflowError, OSError):
        raise PayloadError(path, "epoch timestamp out of range") from None
