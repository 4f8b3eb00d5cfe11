"""Reading untrusted JSON payloads field by field.

Every helper here either returns a clean Python value or raises :class:`core.signals.PayloadError` whose
``path`` names the offending field the way a user would find it in their payload
(``alerts[2].labels.severity``, ``event.data.id``, ``commits[0].id``). Nothing else escapes: no ``KeyError``,
``TypeError`` or ``AttributeError``.

Conventions shared by all alert and change adapters:

* absent and ``null`` mean the same thing: "not given";
* strings are trimmed, and capped (with a trailing ``…``) rather than rejected when too long;
* wrong JSON types are errors wherever we read the field, extra fields are ignored;
* timestamps are ISO 8601 (``Z`` or an offset, any number of fractional digits); Go's zero time
  ``0001-01-01T00:00:00Z`` means "not set"; results are timezone-aware and in UTC.

Shared by the alert sources (``adapters/alerts``) and the change sources (``adapters/changes``); it has no
vendor-specific code.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta, timezone
from typing import Final, TypeVar
from urllib.parse import urljoin, urlsplit

from pydantic import BaseModel, ValidationError

from decklog.core.signals import Link, PayloadError

# Caps (characters). Titles are capped by the model itself at 500; we cap first so the model never rejects.
TITLE_MAX: Final = 500
SERVICE_MAX: Final = 200
FINGERPRINT_MAX: Final = 512
CHANGE_ID_MAX: Final = 200
SUMMARY_MAX: Final = 4000
SHORT_MAX: Final = 200
LABEL_KEY_MAX: Final = 200
LABEL_VALUE_MAX: Final = 1000
LABELS_MAX: Final = 100
URL_MAX: Final = 2048
LINKS_MAX: Final = 20

M = TypeVar("M", bound=BaseModel)

# ------------------------------------------------------------------------------------------------------ paths
# Where a field is, as a user would find it (``alerts[2].labels.severity``), and how a wrong value is shown.

_IDENT = re.compile(r"[A-Za-z_$][A-Za-z0-9_\-$]*")


def child(path: str, key: object) -> str:
    """``path`` + ``.key`` (or ``["odd key"]`` when the key is not a plain name)."""
    name = str(key)
    if _IDENT.fullmatch(name):
        return f"{path}.{name}" if path else name
    quoted = '"' + utf8_safe(name[:60]).replace("\\", "\\\\").replace('"', '\\"') + '"'
    return f"{path}[{quoted}]"


def item(path: str, index: int) -> str:
    return f"{path}[{index}]"


def json_type(value: object) -> str:
    """The JSON name of a value's type, for error messages."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list | tuple):
        return "array"
    if isinstance(value, Mapping):
        return "object"
    return type(value).__name__


def show(value: str, limit: int = 40) -> str:
    """A short, safe rendering of a bad value for an error message."""
    text = value if len(value) <= limit else value[: limit - 1] + "…"
    return repr(clean(text, limit + 1))


def utf8_safe(text: str) -> str:
    """``text`` with characters UTF-8 cannot encode (lone surrogates, from ``\\udXXX`` escapes) replaced by ``?``."""
    if text.isascii():
        return text
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "replace").decode("utf-8")
    return text


def clean(text: str, limit: int) -> str:
    """Trim, replace unencodable characters (lone surrogates), cap at ``limit`` characters with ``…``."""
    text = utf8_safe(text.strip())
    if len(text) > limit:
        text = text[: limit - 1].rstrip() + "…"
    return text


# ---------------------------------------------------------------------------------------------------- objects


def root(payload: object) -> Mapping[str, object]:
    """The top level of a payload: must be a JSON object."""
    if isinstance(payload, Mapping):
        return payload
    raise PayloadError("", "expected a JSON object")


def as_object(value: object, path: str) -> Mapping[str, object]:
    if isinstance(value, Mapping):
        return value
    raise PayloadError(path, f"expected an object, got {json_type(value)}")


def opt_object(obj: Mapping[str, object], key: str, path: str) -> Mapping[str, object] | None:
    value = obj.get(key)
    if value is None:
        return None
    return as_object(value, child(path, key))


def req_object(obj: Mapping[str, object], key: str, path: str) -> Mapping[str, object]:
    value = obj.get(key)
    if value is None:
        raise PayloadError(child(path, key), "is required")
    return as_object(value, child(path, key))


def opt_list(obj: Mapping[str, object], key: str, path: str) -> Sequence[object]:
    value = obj.get(key)
    if value is None:
        return ()
    if isinstance(value, list | tuple):
        return value
    raise PayloadError(child(path, key), f"expected an array, got {json_type(value)}")


def req_list(obj: Mapping[str, object], key: str, path: str) -> Sequence[object]:
    if obj.get(key) is None:
        raise PayloadError(child(path, key), "is required")
    return opt_list(obj, key, path)


# ---------------------------------------------------------------------------------------------------- strings


def _int_text(value: int, path: str) -> str:
    try:
        return str(value)
    except ValueError:  # more digits than Python will convert
        raise PayloadError(path, "number is too large") from None


def scalar_text(value: object, path: str, limit: int) -> str:
    """A string, number or boolean as text (label values); anything else is an error."""
    if isinstance(value, str):
        return clean(value, limit)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return clean(_int_text(value, path), limit)
    if isinstance(value, float):
        return clean(repr(value), limit)
    raise PayloadError(path, f"expected a string, got {json_type(value)}")


def text(value: object, path: str, limit: int = SHORT_MAX, *, numbers: bool = False) -> str:
    """A string field (``None`` → ``""``). With ``numbers``, integers are accepted too (ids)."""
    if value is None:
        return ""
    if isinstance(value, str):
        return clean(value, limit)
    if numbers and isinstance(value, int) and not isinstance(value, bool):
        return clean(_int_text(value, path), limit)
    expected = "a string or an integer" if numbers else "a string"
    raise PayloadError(path, f"expected {expected}, got {json_type(value)}")


def opt_str(obj: Mapping[str, object], key: str, path: str, limit: int = SHORT_MAX, *, numbers: bool = False) -> str:
    value = obj.get(key)
    if value is None:
        return ""
    if isinstance(value, str):  # the common case: no path needed (it is only for error messages)
        return clean(value, limit)
    return text(value, child(path, key), limit, numbers=numbers)


def req_str(obj: Mapping[str, object], key: str, path: str, limit: int = SHORT_MAX, *, numbers: bool = False) -> str:
    where = child(path, key)
    if obj.get(key) is None:
        raise PayloadError(where, "is required")
    value = text(obj.get(key), where, limit, numbers=numbers)
    if not value:
        raise PayloadError(where, "must not be empty")
    return value


def str_list(obj: Mapping[str, object], key: str, path: str, limit: int, max_items: int) -> list[str]:
    """An array of strings (``null`` entries skipped, empty strings dropped, at most ``max_items`` kept)."""
    where = child(path, key)
    out: list[str] = []
    for index, value in enumerate(opt_list(obj, key, path)):
        if len(out) >= max_items:
            break
        if value is None:
            continue
        if not isinstance(value, str):
            raise PayloadError(item(where, index), f"expected a string, got {json_type(value)}")
        entry = clean(value, limit)
        if entry:
            out.append(entry)
    return out


def str_map(
    obj: Mapping[str, object],
    key: str,
    path: str,
    *,
    value_limit: int = LABEL_VALUE_MAX,
    max_items: int = LABELS_MAX,
) -> dict[str, str]:
    """An object of string values (labels, annotations). Numbers and booleans are turned into text;
    ``null`` values and empty keys are skipped; at most ``max_items`` entries are kept."""
    value = obj.get(key)
    if value is None:
        return {}
    where = child(path, key)
    mapping = as_object(value, where)
    out: dict[str, str] = {}
    for raw_key, raw_value in mapping.items():
        if len(out) >= max_items:
            break
        name = clean(str(raw_key), LABEL_KEY_MAX)
        if not name or raw_value is None:
            continue
        if isinstance(raw_value, str):  # the common case: no path needed (it is only for error messages)
            out[name] = clean(raw_value, value_limit)
        else:
            out[name] = scalar_text(raw_value, child(where, raw_key), value_limit)
    return out


def first(*values: str) -> str:
    """The first non-empty string, or ``""``."""
    for value in values:
        if value:
            return value
    return ""


# A line that only says the state: Grafana's default message ("**Firing**", "**Resolved**") used as a summary,
# or a "[FIRING:2]" prefix on its own.
_STATUS_BANNER = re.compile(r"^[\W_]*(firing|resolved)[\W_]*(\d+[\W_]*)?$", re.IGNORECASE)


def headline(text: str) -> str:
    """A summary as a title: its first non-empty line, or ``""`` when that line only names the state (Grafana's
    default message template pasted into a rule's summary starts with ``**Firing**`` and goes on with the labels,
    which make no title; the caller falls back to the alert name)."""
    line = next((part.strip() for part in text.splitlines() if part.strip()), "")
    return "" if _STATUS_BANNER.match(line) else line


# ------------------------------------------------------------------------------------------------------ times
# ISO 8601 (``Z`` or an offset, any number of fractional digits; Go's zero time means "not set") and Unix epochs,
# always returned timezone-aware in UTC.

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


# ---------------------------------------------------------------------------------------------- links and ids

_HTTP_URL = re.compile(r"https?://[^\s<>|]+", re.IGNORECASE)


def http_url(value: str) -> str:
    """``value`` when it is a plausible http(s) URL of sane length with a host, else ``""`` (lenient vendor
    links: ``http://:9093``, as an Alertmanager without ``--web.external-url`` sends, is dropped)."""
    if len(value) <= URL_MAX and _HTTP_URL.fullmatch(value) and _has_host(value):
        return value
    return ""


def _has_host(url: str) -> bool:
    try:
        return bool(urlsplit(url).hostname)
    except ValueError:
        return False


def resolve_url(value: str, base: str) -> str:
    """``value`` as an absolute http(s) URL: a relative one (``/graph?g0.expr=…``) is resolved against ``base``
    (when ``base`` is a usable URL); ``""`` when neither gives a URL with a host."""
    if not value:
        return ""
    if http_url(value):
        return value
    if base and http_url(base) and not _SCHEME.match(value) and len(value) <= URL_MAX:
        return http_url(urljoin(base if base.endswith("/") or value.startswith("/") else base + "/", value))
    return ""


_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*:")


def opt_url(obj: Mapping[str, object], key: str, path: str) -> str:
    """An optional vendor URL: wrong type is an error; a non-http(s) or over-long URL is dropped (``""``)."""
    return http_url(opt_str(obj, key, path, URL_MAX + 1))


def link(url: str, title: str) -> Link | None:
    good = http_url(url)
    return Link(url=good, title=clean(title, SHORT_MAX)) if good else None


def links(*candidates: tuple[str, str]) -> tuple[Link, ...]:
    """Links from ``(url, title)`` pairs, skipping empty or non-http(s) URLs and duplicates."""
    out: list[Link] = []
    seen: set[str] = set()
    for url, title in candidates:
        built = link(url, title)
        if built is not None and built.url not in seen and len(out) < LINKS_MAX:
            seen.add(built.url)
            out.append(built)
    return tuple(out)


def bounded_id(value: str, limit: int) -> str:
    """An identifier that must keep its identity: returned as is when it fits, else ``sha256:<hex>``
    (truncating could merge two distinct ids)."""
    if len(value) <= limit:
        return value
    return "sha256:" + hashlib.sha256(value.encode("utf-8", "replace")).hexdigest()


_FNV_OFFSET: Final = 14695981039346656037
_FNV_PRIME: Final = 1099511628211
_U64: Final = (1 << 64) - 1


def labels_fingerprint(labels: Mapping[str, str]) -> str:
    """Prometheus' label-set fingerprint (FNV-1a 64 over sorted ``name 0xff value 0xff``), as 16 hex digits.

    This is exactly what Alertmanager puts in ``fingerprint`` (prometheus/common ``labelSetToFingerprint``),
    so an
    old Alertmanager that does not send the field yields the same identity as a new one that does.
    """
    digest = _FNV_OFFSET
    for name in sorted(labels):
        for part in (name, labels[name]):
            for byte in part.encode("utf-8", "replace"):
                digest = ((digest ^ byte) * _FNV_PRIME) & _U64
            digest = ((digest ^ 0xFF) * _FNV_PRIME) & _U64
    return f"{digest:016x}"


# ----------------------------------------------------------------------------------------------------- models


def build(model: type[M], path: str, **fields: object) -> M:
    """Construct a core model. The helpers above already bound every field, so a ``ValidationError`` here is a
    bug in an adapter; it is still reported as a ``PayloadError`` (HTTP 400), never a 500."""
    try:
        return model.model_validate(fields)
    except ValidationError as exc:
        problem = exc.errors()[0]
        where = ".".join(str(part) for part in problem["loc"])
        raise PayloadError(path, f"could not be normalised ({where}: {problem['msg']})") from None


def header_value(headers: Mapping[str, str], name: str) -> str | None:
    """A request header, looked up case-insensitively (works for a plain dict and for aiohttp's headers)."""
    value = headers.get(name)
    if value is not None:
        return value
    wanted = name.lower()
    for key, candidate in headers.items():
        if key.lower() == wanted:
            return candidate
    return None
