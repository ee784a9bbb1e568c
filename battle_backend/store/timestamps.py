"""Timestamps as a human sees them: ISO 8601, UTC, ``Z`` suffix, whatever form an agent posted.

AgentBeats (1.2.6) accepts an event's ``timestamp`` as ISO text or as a Unix time number (seconds, int or float),
and so does this backend. The stored event and the raw event API keep the value exactly as posted; only what is
shown to a person (the battle page, its live fragments, MCP answers) and the battle's ``result.finish_time`` are
turned into ISO text here.

Hostile numbers: NaN and Infinity never get this far (``body_limits`` refuses them with 400). A finite number whose
moment lies outside what :class:`datetime.datetime` represents (years 1 to 9999) is accepted, as AgentBeats accepts
it, and shown as the posted number's text; a negative number inside that range is a moment before 1970 and shown
as such. ``result.finish_time`` is ISO text for every number: the moment the backend received the result when no
date can hold the posted one (the posted value stays in the result event).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def format_utc(moment: datetime) -> str:
    """An aware ``moment`` as ``2026-11-22T00:00:00.000000Z``: the backend's one ISO format (microseconds, 4-digit
    year)."""
    return moment.astimezone(UTC).replace(tzinfo=None).isoformat(timespec="microseconds") + "Z"


def unix_to_iso(value: int | float) -> str | None:
    """A Unix time (seconds since 1970-01-01 UTC, fractions rounded to microseconds) as ISO text, or None when no
    ``datetime`` can hold it (not finite, or before year 1 / after year 9999)."""
    try:
        return format_utc(EPOCH + timedelta(seconds=value))
    except (OverflowError, ValueError):
        return None


def display_timestamp(value: object) -> str:
    """How a posted ``timestamp`` is shown: a number as ISO 8601 UTC text, text as posted, None as ``""``; a number
    no date can hold (see the module's docstring) as its own text, so a hostile value never breaks a page."""
    if value is None:
        return ""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return unix_to_iso(value) or str(value)
    return str(value)


def result_finish_time(posted: object) -> str:
    """``result.finish_time`` of a result posted with ``timestamp`` = ``posted``: ISO text for any number (the time
    of receipt when no date can hold it), text as posted otherwise."""
    if isinstance(posted, int | float) and not isinstance(posted, bool):
        return unix_to_iso(posted) or format_utc(datetime.now(UTC))
    return display_timestamp(posted)
