"""UTC time, written and read one way: every timestamp forgepatch records or names.

- ``iso(when)``: ISO 8601 with microseconds and ``Z`` (results' ``finished_at``, the ledger,
  release trailers) — ``2026-12-02T04:31:05.123456Z``;
- ``iso_seconds(when)``: the same to the second (image labels, build records);
- ``compact(when)``: ``20261202T043105Z``, for names (refs, log directories);
- ``parse(text)``: any ISO 8601 form those write (and Docker's nanosecond ``Created``) ->
  an aware UTC datetime, or None.
Standard library only."""

from __future__ import annotations

import re
from datetime import datetime, timezone


EPOCH = datetime.fromtimestamp(0, timezone.utc)  # stands in for a time not recorded


def now() -> datetime:
    return datetime.now(timezone.utc)


def _utc(when: datetime | None) -> datetime:
    when = now() if when is None else when
    return when.astimezone(timezone.utc) if when.tzinfo else when.replace(tzinfo=timezone.utc)


def iso(when: datetime | None = None) -> str:
    return _utc(when).isoformat(timespec="microseconds").replace("+00:00", "Z")


def iso_seconds(when: datetime | None = None) -> str:
    return _utc(when).strftime("%Y-%m-%dT%H:%M:%SZ")


def compact(when: datetime | None = None) -> str:
    return _utc(when).strftime("%Y%m%dT%H%M%SZ")


_ISO = re.compile(r"(.*?T\d\d:\d\d:\d\d)(\.\d+)?(Z|[+-]\d\d:?\d\d)?")


def parse(text: str | None) -> datetime | None:
    """ISO 8601 (Docker's nanosecond ``Created`` included) -> aware UTC datetime."""
    if not text or not isinstance(text, str):
        return None
    m = _ISO.fullmatch(text.strip())
    if not m:
        return None
    frac = (m.group(2) or "")[:7]
    tz = m.group(3) or "+00:00"
    try:
        when = datetime.fromisoformat(m.group(1) + frac + ("+00:00" if tz == "Z" else tz))
    except ValueError:
        return None
    return _utc(when)
