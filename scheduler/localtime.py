"""Local-time schedules to UTC cron and back, for display.

The wire only ever carries a standard 5-field UTC cron; the client owns local
time. This module turns "daily at 09:00", "mon,fri@23:30" and "every 6 hours"
in a user's IANA zone into that cron plus a display descriptor, and turns a
stored cron back into words in a viewer's zone.

Schedules do not follow DST: every conversion uses the zone's UTC offset at
one reference instant `at` (the caller passes "now"), and `observes_dst` tells
the caller to warn that the schedule will shift by an hour at the DST change.
Pure: no I/O, no clock reads, no configuration.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

DAY_NAMES = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")  # index = datetime.weekday()
_FULL_NAMES = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
ALLOWED_INTERVALS = (1, 2, 3, 4, 6, 8, 12)
_DAY, _WEEK = 1440, 10080  # minutes
_TIME_RE = re.compile(r"^([01]?\d|2[0-3]):([0-5]\d)$")
_HOURS_RE = re.compile(r"^(\d+)\s*(h|hr|hrs|hour|hours)?$", re.IGNORECASE)
_WEEKLY_SPLIT_RE = re.compile(r"\s*@\s*|\s+at\s+", re.IGNORECASE)


class LocalTimeError(ValueError):
    """A schedule the user wrote cannot be converted; the message says why."""


@dataclass(frozen=True)
class Display:
    """How the user wrote the schedule, stored next to the cron for showing back."""

    frequency: str  # "daily" | "weekly" | "hourly" | "cron"
    time_of_day: str | None = None
    days_of_week: list[str] | None = None
    interval_hours: int | None = None

    def as_dict(self) -> dict:
        """A JSON-ready copy without unused keys. There is deliberately no zone in it: the wire
        refuses zone-bearing fields, and a viewer sees times in their own zone (``describe``)."""
        return {key: value for key, value in asdict(self).items() if value is not None}


@dataclass(frozen=True)
class Conversion:
    cron: str  # UTC, 5 fields
    display: Display
    observes_dst: bool


def daily(time_of_day: str, zone: str, at: datetime) -> Conversion:
    """Fire every day at `time_of_day` local, using the zone's offset at `at`."""
    tz, minute_of_day = _zone(zone), _parse_time(time_of_day)
    utc = (minute_of_day - _offset_minutes(tz, zone, at)) % _DAY
    display = Display("daily", time_of_day=_hhmm(minute_of_day))
    return Conversion(f"{utc % 60} {utc // 60} * * *", display, _observes_dst(tz, at))


def weekly(spec: str, zone: str, at: datetime) -> Conversion:
    """Fire on the given local weekdays at one local time ("mon,fri@23:30").

    Each weekday rolls through UTC on its own (Monday 23:30 in New York is
    Tuesday 04:30 UTC); repeated weekdays collapse to one.
    """
    days_text, time_text = _split_weekly(spec)
    tz, days, minute_of_day = _zone(zone), _parse_days(days_text), _parse_time(time_text)
    offset = _offset_minutes(tz, zone, at)
    times, cron_days = set(), set()
    for day in days:
        utc = (day * _DAY + minute_of_day - offset) % _WEEK
        times.add(utc % _DAY)
        cron_days.add((utc // _DAY + 1) % 7)  # weekday() 0=Mon -> cron 0=Sun
    if len(times) != 1:  # cannot happen with one fixed offset; refuse rather than guess
        raise LocalTimeError(f"The weekdays in {spec!r} would need different UTC times, "
                             "which one cron line cannot express.")
    utc_time = times.pop()
    dow = ",".join(str(d) for d in sorted(cron_days))
    display = Display("weekly", time_of_day=_hhmm(minute_of_day),
                      days_of_week=[DAY_NAMES[d] for d in days])
    return Conversion(f"{utc_time % 60} {utc_time // 60} * * {dow}", display,
                      _observes_dst(tz, at))


def every_hours(spec: str | int, zone: str, at: datetime) -> Conversion:
    """Fire every N hours anchored at local midnight, N in ALLOWED_INTERVALS.

    Non-whole-hour offsets (Asia/Kolkata +05:30) move the minute field.
    """
    n, tz = _parse_interval(spec), _zone(zone)
    offset = _offset_minutes(tz, zone, at)
    fires = sorted({(k * n * 60 - offset) % _DAY for k in range(24 // n)})
    minute = fires[0] % 60  # the same for every fire: the offset shifts them all alike
    hours = "*" if n == 1 else ",".join(str(f // 60) for f in fires)
    display = Display("hourly", interval_hours=n)
    return Conversion(f"{minute} {hours} * * *", display, _observes_dst(tz, at))


def describe(cron: str, display: dict | None, zone: str, at: datetime) -> str:
    """Human text for a stored schedule, in the viewer's zone at `at`.

    The cron is the truth: times are recomputed from it with the viewer's
    offset, and the display only says which shape to show. Without a usable
    display (or one that doesn't match the cron) the raw UTC cron is shown.
    """
    offset = _offset_minutes(_zone(zone), zone, at)
    parsed = _parse_cron(cron)
    frequency = (display or {}).get("frequency")
    text = None
    if parsed is not None:
        minute, hours, dows = parsed
        if frequency == "daily" and dows is None and hours and len(hours) == 1:
            text = "daily at " + _hhmm(hours[0] * 60 + minute + offset)
        elif frequency == "weekly" and dows is not None and hours and len(hours) == 1:
            text = _describe_weekly(hours[0] * 60 + minute, dows, offset)
        elif frequency == "hourly" and dows is None:
            text = _describe_hourly(minute, hours, offset)
    return f"{text} ({zone})" if text else f"cron {cron} (UTC)"


def _observes_dst(tz: ZoneInfo, at: datetime) -> bool:
    """True when the zone's UTC offset changes anywhere in the year containing `at`.

    Sampling the 1st and 15th of each month catches every real DST period
    (all last weeks, not days) without trusting `dst()`, which some zones
    report oddly (Europe/Dublin's negative DST).
    """
    year = _aware(at).astimezone(tz).year
    offsets = {datetime(year, month, day, 12, tzinfo=timezone.utc).astimezone(tz).utcoffset()
               for month in range(1, 13) for day in (1, 15)}
    return len(offsets) > 1


def _describe_weekly(utc_minute: int, cron_days: list[int], offset: int) -> str | None:
    local = {((d - 1) % 7 * _DAY + utc_minute + offset) % _WEEK for d in cron_days}
    if len({m % _DAY for m in local}) != 1:
        return None
    days = ",".join(DAY_NAMES[d] for d in sorted({m // _DAY for m in local}))
    return f"weekly on {days} at {_hhmm(next(iter(local)))}"


def _describe_hourly(minute: int, hours: list[int] | None, offset: int) -> str | None:
    if hours is None:  # "*": every hour
        return f"every hour at :{(minute + offset) % 60:02d}"
    n = 24 // len(hours)
    if n not in ALLOWED_INTERVALS or hours != list(range(hours[0], 24, n)):
        return None  # not an even spread across the day: not something we wrote
    first = min((h * 60 + minute + offset) % _DAY for h in hours)
    return f"every {n} hours from {_hhmm(first)}"


def _parse_cron(cron: str) -> tuple[int, list[int] | None, list[int] | None] | None:
    """(minute, hours or None for "*", cron weekdays or None for "*") for crons of
    the shapes this module writes; None for anything else."""
    fields = cron.split() if isinstance(cron, str) else []
    if len(fields) != 5 or fields[2:4] != ["*", "*"] or not fields[0].isdigit():
        return None
    hours, dows = _int_list(fields[1], 23), _int_list(fields[4], 7)
    if int(fields[0]) > 59 or hours == [] or dows == []:
        return None
    return int(fields[0]), hours, sorted({d % 7 for d in dows}) if dows else None


def _int_list(field: str, top: int) -> list[int] | None:
    """None for "*", the sorted numbers for "a,b,c", [] when malformed."""
    if field == "*":
        return None
    parts = field.split(",")
    if not all(p.isdigit() and int(p) <= top for p in parts):
        return []
    return sorted({int(p) for p in parts})


def _zone(name: str) -> ZoneInfo:
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError, TypeError):
        raise LocalTimeError(f"The time zone {name!r} is unknown; use an IANA zone name "
                             "such as 'Europe/Berlin' or 'America/New_York'.") from None


def _aware(at: datetime) -> datetime:
    # A naive reference instant is read as UTC rather than the machine's zone,
    # so the result never depends on where the code runs.
    return at if at.tzinfo is not None else at.replace(tzinfo=timezone.utc)


def _offset_minutes(tz: ZoneInfo, zone: str, at: datetime) -> int:
    """The zone's UTC offset at `at`, in whole minutes (cron has no seconds)."""
    offset = _aware(at).astimezone(tz).utcoffset()
    seconds = int(offset.total_seconds())
    if seconds % 60:
        raise LocalTimeError(f"The time zone {zone} is {offset} from UTC at that moment, "
                             "which is not a whole number of minutes, so a cron cannot express it.")
    return seconds // 60


def _parse_time(text: str) -> int:
    """Minutes after local midnight for "HH:MM" (24-hour clock)."""
    match = _TIME_RE.match(text.strip()) if isinstance(text, str) else None
    if not match:
        raise LocalTimeError(f"The time {text!r} is not valid; write it as HH:MM on a "
                             "24-hour clock, from 00:00 to 23:59.")
    return int(match.group(1)) * 60 + int(match.group(2))


def _parse_days(text: str) -> list[int]:
    """Weekday indexes (0=Mon) in mon..sun order, duplicates collapsed."""
    days = set()
    for token in text.split(","):
        name = token.strip().lower()
        if name in DAY_NAMES:
            days.add(DAY_NAMES.index(name))
        elif name in _FULL_NAMES:
            days.add(_FULL_NAMES.index(name))
        else:
            raise LocalTimeError(f"The weekday {token.strip()!r} is not recognised; use mon, "
                                 "tue, wed, thu, fri, sat or sun (full names work too).")
    return sorted(days)


def _split_weekly(spec: str) -> tuple[str, str]:
    parts = _WEEKLY_SPLIT_RE.split(spec.strip()) if isinstance(spec, str) else []
    if len(parts) != 2 or not parts[0]:
        raise LocalTimeError(f"The weekly schedule {spec!r} is not valid; write it as "
                             "days@HH:MM, for example 'mon,fri@23:30'.")
    return parts[0], parts[1]


def _parse_interval(spec: str | int) -> int:
    """N from 6 or "6h"; only intervals that divide a day evenly are allowed."""
    match = _HOURS_RE.match(spec.strip()) if isinstance(spec, str) else None
    if isinstance(spec, int) and not isinstance(spec, bool):
        n = spec
    elif match:
        n = int(match.group(1))
    else:
        raise LocalTimeError(f"The interval {spec!r} is not valid; write a whole number "
                             "of hours such as '6h' or 6.")
    if n not in ALLOWED_INTERVALS:
        raise LocalTimeError(f"Every {n} hours is not supported: the hours must divide a day "
                             "evenly (1, 2, 3, 4, 6, 8 or 12) so the schedule doesn't drift "
                             "across midnight.")
    return n


def _hhmm(minute_of_day: int) -> str:
    minute_of_day %= _DAY
    return f"{minute_of_day // 60:02d}:{minute_of_day % 60:02d}"
