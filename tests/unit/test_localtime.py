"""Local-time schedules -> UTC cron: worked examples, then properties over every zone."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo, available_timezones

import pytest
from croniter import croniter
from hypothesis import given, settings
from hypothesis import strategies as st

from tickwork.scheduler.localtime import (
    Conversion,
    Display,
    LocalTimeError,
    daily,
    describe,
    every_hours,
    weekly,
)

UTC = timezone.utc
WINTER = datetime(2025, 1, 15, 12, tzinfo=UTC)
SUMMER = datetime(2025, 7, 15, 12, tzinfo=UTC)
DAYS = ["mon", "tue", "wed", "thu", "fri", "sat", "sun"]


# --- weekly: each weekday rolls through UTC on its own -----------------------

@pytest.mark.parametrize(("spec", "zone", "at", "cron"), [
    # Monday 23:30 west of UTC is already Tuesday in UTC.
    ("mon@23:30", "America/Los_Angeles", WINTER, "30 7 * * 2"),
    ("mon@23:30", "America/Los_Angeles", SUMMER, "30 6 * * 2"),
    ("mon@23:30", "America/New_York", WINTER, "30 4 * * 2"),
    # Monday 00:30 east of UTC is still Sunday in UTC.
    ("mon@00:30", "Asia/Tokyo", WINTER, "30 15 * * 0"),
    ("mon@00:30", "Pacific/Auckland", WINTER, "30 11 * * 0"),  # NZDT +13
    ("mon@00:30", "Pacific/Auckland", SUMMER, "30 12 * * 0"),  # NZST +12
    # Sunday (0) rolls forward to Monday (1), not to a non-existent 7.
    ("sun@23:30", "America/Chicago", WINTER, "30 5 * * 1"),
    # Saturday rolls back to Friday.
    ("sat@03:00", "Asia/Tokyo", WINTER, "0 18 * * 5"),
    # Several days: rolled independently, then sorted ascending.
    ("mon,fri@23:30", "America/New_York", WINTER, "30 4 * * 2,6"),
    ("fri,sat,sun@23:00", "America/New_York", WINTER, "0 4 * * 0,1,6"),
    ("tue,wed@10:00", "UTC", WINTER, "0 10 * * 2,3"),
])
def test_weekly_examples(spec, zone, at, cron):
    assert weekly(spec, zone, at).cron == cron


def test_weekly_display_keeps_what_the_user_wrote():
    conversion = weekly("Friday, MON, mon@23:30", "America/New_York", WINTER)
    assert conversion.display == Display("weekly", "23:30", ["mon", "fri"], None)
    assert conversion.display.as_dict() == {
        "frequency": "weekly", "time_of_day": "23:30", "days_of_week": ["mon", "fri"]}


def test_weekly_accepts_at_as_separator():
    assert weekly("mon,fri at 23:30", "America/New_York", WINTER).cron == "30 4 * * 2,6"


@pytest.mark.parametrize("spec", ["mon", "@09:00", "funday@09:00", "mon,,fri@09:00",
                                  "mon@9am", "mon@09:00@10:00"])
def test_weekly_refuses_malformed_specs(spec):
    with pytest.raises(LocalTimeError):
        weekly(spec, "UTC", WINTER)


def test_unknown_weekday_is_named_in_the_message():
    with pytest.raises(LocalTimeError, match="'funday'.*mon, tue"):
        weekly("mon,funday@09:00", "UTC", WINTER)


# --- daily -------------------------------------------------------------------

@pytest.mark.parametrize(("time_of_day", "zone", "at", "cron"), [
    ("09:00", "Asia/Kolkata", WINTER, "30 3 * * *"),      # +05:30 moves the minute
    ("09:00", "Asia/Kathmandu", WINTER, "15 3 * * *"),    # +05:45
    ("09:00", "Europe/Berlin", WINTER, "0 8 * * *"),      # CET +1
    ("09:00", "Europe/Berlin", SUMMER, "0 7 * * *"),      # CEST +2: offset taken at `at`
    ("00:15", "Europe/Berlin", WINTER, "15 23 * * *"),    # rolls back over midnight
    ("23:30", "America/New_York", WINTER, "30 4 * * *"),  # rolls forward over midnight
    ("9:05", "UTC", WINTER, "5 9 * * *"),
])
def test_daily_examples(time_of_day, zone, at, cron):
    assert daily(time_of_day, zone, at).cron == cron


def test_daily_display_normalises_the_time():
    display = daily("9:05", "Asia/Kolkata", WINTER).display
    assert display == Display("daily", "09:05")


@pytest.mark.parametrize("bad", ["24:00", "12:60", "9am", "0900", "", "12:5", "-1:00"])
def test_daily_refuses_bad_times_naming_the_value_and_the_form(bad):
    with pytest.raises(LocalTimeError, match=f"{bad!r}.*HH:MM"):
        daily(bad, "UTC", WINTER)


@pytest.mark.parametrize("zone", ["Mars/Olympus", "", "utc", "../etc/passwd", "America"])
def test_unknown_zone_is_refused(zone):
    with pytest.raises(LocalTimeError, match="time zone"):
        daily("09:00", zone, WINTER)


def test_naive_reference_instant_is_read_as_utc():
    assert daily("09:00", "Europe/Berlin", datetime(2025, 7, 15, 12)).cron == "0 7 * * *"


# --- every N hours -----------------------------------------------------------

@pytest.mark.parametrize(("spec", "zone", "at", "cron"), [
    ("6h", "UTC", WINTER, "0 0,6,12,18 * * *"),
    (6, "Europe/Berlin", WINTER, "0 5,11,17,23 * * *"),
    ("6 hours", "Asia/Kolkata", WINTER, "30 0,6,12,18 * * *"),
    (12, "Asia/Kathmandu", WINTER, "15 6,18 * * *"),
    (1, "Asia/Kathmandu", WINTER, "15 * * * *"),
    ("1h", "America/New_York", WINTER, "0 * * * *"),
    ("8H", "America/New_York", WINTER, "0 5,13,21 * * *"),
])
def test_every_hours_examples(spec, zone, at, cron):
    assert every_hours(spec, zone, at).cron == cron


def test_every_hours_display():
    assert every_hours("6h", "UTC", WINTER).display.as_dict() == {
        "frequency": "hourly", "interval_hours": 6}


@pytest.mark.parametrize("n", [5, 7, "5h", 24, 0, 9, 18])
def test_every_hours_refuses_intervals_that_drift_across_midnight(n):
    with pytest.raises(LocalTimeError, match="divide a day evenly.*drift across midnight"):
        every_hours(n, "UTC", WINTER)


@pytest.mark.parametrize("spec", ["six", "-6", "6.5h", True, None, ""])
def test_every_hours_refuses_unreadable_intervals(spec):
    with pytest.raises(LocalTimeError, match="whole number of hours"):
        every_hours(spec, "UTC", WINTER)


# --- DST observance ----------------------------------------------------------

@pytest.mark.parametrize(("zone", "observes"), [
    ("UTC", False), ("Asia/Tokyo", False), ("Asia/Kolkata", False),
    ("Europe/Berlin", True), ("America/New_York", True), ("Pacific/Auckland", True),
])
def test_observes_dst(zone, observes):
    assert daily("09:00", zone, WINTER).observes_dst is observes
    assert every_hours(6, zone, SUMMER).observes_dst is observes


# --- describe: back to words in the viewer's zone ----------------------------

def test_describe_without_display_shows_the_utc_cron():
    assert describe("0 9 * * *", None, "Europe/Berlin", WINTER) == "cron 0 9 * * * (UTC)"


def test_describe_daily_in_the_writers_and_another_zone():
    stored = daily("09:00", "Europe/Berlin", WINTER)
    display = stored.display.as_dict()
    assert describe(stored.cron, display, "Europe/Berlin", WINTER) == "daily at 09:00 (Europe/Berlin)"
    assert describe(stored.cron, display, "America/New_York", WINTER) == \
        "daily at 03:00 (America/New_York)"
    # No DST following: in summer the same UTC cron reads an hour later.
    assert describe(stored.cron, display, "Europe/Berlin", SUMMER) == "daily at 10:00 (Europe/Berlin)"


def test_describe_weekly_rolls_days_back():
    stored = weekly("mon,fri@23:30", "America/New_York", WINTER)
    display = stored.display.as_dict()
    assert describe(stored.cron, display, "America/New_York", WINTER) == \
        "weekly on mon,fri at 23:30 (America/New_York)"
    assert describe(stored.cron, display, "Europe/Berlin", WINTER) == \
        "weekly on tue,sat at 05:30 (Europe/Berlin)"


def test_describe_hourly():
    stored = every_hours(6, "Asia/Kolkata", WINTER)
    display = stored.display.as_dict()
    assert describe(stored.cron, display, "Asia/Kolkata", WINTER) == \
        "every 6 hours from 00:00 (Asia/Kolkata)"
    assert describe(stored.cron, display, "UTC", WINTER) == "every 6 hours from 00:30 (UTC)"
    hourly = every_hours(1, "Asia/Kolkata", WINTER)
    assert describe(hourly.cron, hourly.display.as_dict(), "UTC", WINTER) == \
        "every hour at :30 (UTC)"


@pytest.mark.parametrize(("cron", "display"), [
    ("*/5 * * * *", {"frequency": "daily"}),
    ("0 9 * * 1", {"frequency": "daily"}),
    ("0 1,5 * * *", {"frequency": "hourly"}),
    ("0 9 * * *", {"frequency": "cron"}),
    ("0 9 * * *", {}),
    ("not a cron", {"frequency": "daily"}),
])
def test_describe_falls_back_to_the_cron_when_display_does_not_fit(cron, display):
    assert describe(cron, display, "UTC", WINTER) == f"cron {cron} (UTC)"


def test_describe_refuses_unknown_viewer_zone():
    with pytest.raises(LocalTimeError):
        describe("0 9 * * *", None, "Nowhere/Special", WINTER)


# --- properties --------------------------------------------------------------

ZONES = st.sampled_from(sorted(available_timezones()))
AT = st.datetimes(min_value=datetime(2020, 1, 1), max_value=datetime(2035, 12, 31),
                  timezones=st.just(UTC))
TIMES = st.builds(lambda h, m: f"{h:02d}:{m:02d}", st.integers(0, 23), st.integers(0, 59))
DAY_LISTS = st.lists(st.sampled_from(DAYS), min_size=1, max_size=10)
FAST = settings(max_examples=200, deadline=None)


def fires(cron: str, start: datetime, span: timedelta) -> list[datetime]:
    """Every UTC fire of `cron` in (start, start + span], per croniter."""
    it, out = croniter(cron, start), []
    while (nxt := it.get_next(datetime)) <= start + span:
        out.append(nxt)
    return out


def offset_at(zone: str, at: datetime) -> timedelta:
    return at.astimezone(ZoneInfo(zone)).utcoffset()


def assert_plain_utc_cron(conversion: Conversion) -> None:
    assert croniter.is_valid(conversion.cron)
    assert len(conversion.cron.split()) == 5
    assert set(conversion.cron) <= set("0123456789,* ")  # no TZ=, no zone names, no offsets


def assert_fires_at_local(conversion: Conversion, zone: str, at: datetime,
                          hhmm: str, days: set[str]) -> None:
    """Every fire in the next 8 days reads as `hhmm` on one of `days`, both at the
    fixed offset of `at` and on the zone's own clock wherever its offset is the same."""
    offset = offset_at(zone, at)
    seen = set()
    for fire in fires(conversion.cron, at, timedelta(days=8)):
        fixed = fire.astimezone(timezone(offset))
        assert (fixed.strftime("%H:%M"), DAYS[fixed.weekday()] in days) == (hhmm, True)
        seen.add(DAYS[fixed.weekday()])
        wall = fire.astimezone(ZoneInfo(zone))
        if wall.utcoffset() == offset:
            assert (wall.strftime("%H:%M"), DAYS[wall.weekday()]) == (hhmm, DAYS[fixed.weekday()])
    assert seen == days  # 8 days cover every requested weekday


@FAST
@given(zone=ZONES, at=AT, hhmm=TIMES)
def test_daily_fires_at_the_requested_local_time(zone, at, hhmm):
    conversion = daily(hhmm, zone, at)
    assert_plain_utc_cron(conversion)
    assert_fires_at_local(conversion, zone, at, hhmm, set(DAYS))
    assert describe(conversion.cron, conversion.display.as_dict(), zone, at) == \
        f"daily at {hhmm} ({zone})"


@FAST
@given(zone=ZONES, at=AT, hhmm=TIMES, days=DAY_LISTS)
def test_weekly_fires_at_the_requested_local_time_and_weekdays(zone, at, hhmm, days):
    conversion = weekly(",".join(days) + "@" + hhmm, zone, at)
    assert_plain_utc_cron(conversion)
    assert_fires_at_local(conversion, zone, at, hhmm, set(days))
    assert conversion.display.days_of_week == [d for d in DAYS if d in days]
    ordered = ",".join(conversion.display.days_of_week)
    assert describe(conversion.cron, conversion.display.as_dict(), zone, at) == \
        f"weekly on {ordered} at {hhmm} ({zone})"


@FAST
@given(zone=ZONES, at=AT, hhmm=TIMES, days=DAY_LISTS, data=st.data())
def test_weekly_repeated_days_give_the_same_cron(zone, at, hhmm, days, data):
    unique = sorted(set(days), key=DAYS.index)
    noisy = data.draw(st.permutations(days + data.draw(st.lists(st.sampled_from(unique)))))
    noisy = [data.draw(st.sampled_from([d, d.upper(), d.title()])) for d in noisy]
    assert weekly(",".join(noisy) + "@" + hhmm, zone, at) == \
        weekly(",".join(unique) + "@" + hhmm, zone, at)


@FAST
@given(zone=ZONES, at=AT, n=st.sampled_from([1, 2, 3, 4, 6, 8, 12]))
def test_every_hours_fires_n_hours_apart_anchored_at_local_midnight(zone, at, n):
    conversion = every_hours(f"{n}h", zone, at)
    assert_plain_utc_cron(conversion)
    times = fires(conversion.cron, at, timedelta(days=2))
    assert len(times) >= 48 // n
    assert all(b - a == timedelta(hours=n) for a, b in zip(times, times[1:]))
    local = timezone(offset_at(zone, at))
    assert any(t.astimezone(local).strftime("%H:%M") == "00:00" for t in times)
