"""Pure cron math. Cron is standard 5-field and always UTC; nothing here reads a clock.

Validation is strict on purpose: the wire refuses anything that is not plainly five ASCII
fields, because every lenient parser differs at the edges (seconds fields, @-macros, zone
prefixes) and a schedule that means something other than what the user read is worse than a
clear 422.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone

from croniter import CroniterBadDateError, croniter

from tickwork.sql.errors import InvalidInput

_FIELD = re.compile(r"[0-9A-Za-z*,/\-]+")
_ZONE_PREFIX = re.compile(r"^\s*(CRON_TZ|TZ)\s*=", re.IGNORECASE)
_FIELD_NAMES = ("minute", "hour", "day of month", "month", "day of week")
# A cron that cannot fire within this many years is refused: it would sit due-never forever.
_NEVER_FIRES_HORIZON_YEARS = 8
_MINUTE = timedelta(minutes=1)
_ZERO = timedelta(0)


def invalid_cron(message: str) -> InvalidInput:
    return InvalidInput(message, code="invalid_cron", field="cron")


def validate_cron(expression: object) -> str:
    """Return the expression unchanged if it is a valid UTC 5-field cron that fires; else raise."""
    if not isinstance(expression, str):
        raise invalid_cron("cron must be a string of five fields, e.g. '0 9 * * *'")
    if _ZONE_PREFIX.match(expression):
        raise InvalidInput(
            "cron is always UTC and may not carry a TZ= or CRON_TZ= prefix; convert the time to "
            "UTC (the tickwork CLI does this for you)", code="timezone_not_allowed", field="cron")
    if len(expression) > 200:
        raise invalid_cron(f"cron is {len(expression)} characters long; a 5-field cron is short")
    if expression.startswith("@"):
        raise invalid_cron(f"'@' forms such as {expression[:20]!r} are not supported; "
                           "write the five fields, e.g. '0 * * * *' for hourly")
    fields = expression.split(" ")
    if len(fields) != 5 or any(not f for f in fields):
        raise invalid_cron(f"expected 5 fields separated by single spaces (minute hour "
                           f"day-of-month month day-of-week), got {expression[:60]!r}")
    for name, field in zip(_FIELD_NAMES, fields):
        if not _FIELD.fullmatch(field):  # fullmatch: "$" would let a trailing newline in
            raise invalid_cron(f"the {name} field {field[:20]!r} has characters a cron field "
                               "cannot have (allowed: digits, names, * , / -)")
    if not croniter.is_valid(expression):
        raise invalid_cron(f"{expression!r} is not a valid cron: a field is out of range or "
                           "malformed (minute 0-59, hour 0-23, day 1-31, month 1-12, weekday 0-6)")
    _refuse_never_firing(expression)
    return expression


def _refuse_never_firing(expression: str) -> None:
    start = datetime(2024, 1, 1, tzinfo=timezone.utc)
    try:
        first = croniter(expression, start).get_next(datetime)
    except CroniterBadDateError:
        first = None
    if first is None or first.year > start.year + _NEVER_FIRES_HORIZON_YEARS:
        raise InvalidInput(f"{expression!r} never fires (no such date exists); check the day "
                           "and month fields", code="cron_never_fires", field="cron")


def utc(moment: datetime) -> datetime:
    """``moment`` in UTC. croniter reads a datetime's own fields (its wall clock), so a
    timestamptz read from a session whose TimeZone is not UTC (09:00 UTC arrives as 14:30+05:30)
    would make '0 9 * * *' fire at 09:00 in that zone. A naive datetime is taken as UTC."""
    if moment.tzinfo is None:
        return moment.replace(tzinfo=timezone.utc)
    if moment.utcoffset() == _ZERO:
        return moment if moment.tzinfo is timezone.utc else moment.replace(tzinfo=timezone.utc)
    return moment.astimezone(timezone.utc)


def floor_minute(moment: datetime) -> datetime:
    """The UTC minute ``moment`` falls in (floored in UTC, never in a zone of odd offset)."""
    return utc(moment).replace(second=0, microsecond=0)


def is_fire_time(cron: str, moment: datetime) -> bool:
    moment = utc(moment)
    return moment == floor_minute(moment) and croniter.match(cron, moment)


def next_fire_after(cron: str, moment: datetime) -> datetime:
    """The first fire strictly after ``moment``, in UTC."""
    return croniter(cron, floor_minute(moment)).get_next(datetime)


def latest_fire_at_or_before(cron: str, moment: datetime) -> datetime:
    """The last fire at or before ``moment``, in UTC."""
    start = floor_minute(moment)
    if croniter.match(cron, start):
        return start
    return croniter(cron, start).get_prev(datetime)


def fires_between(cron: str, first: datetime, last: datetime, *, limit: int) -> list[datetime]:
    """Fires in [first, last], oldest first, at most ``limit`` of them, in UTC."""
    first, last = utc(first), utc(last)
    fires: list[datetime] = []
    moment = first if is_fire_time(cron, first) else next_fire_after(cron, first)
    iterator = croniter(cron, moment - _MINUTE)
    while len(fires) < limit:
        moment = iterator.get_next(datetime)
        if moment > last:
            break
        fires.append(moment)
    return fires
