from datetime import datetime, timezone

import pytest

from tickwork.scheduler import cron
from tickwork.sql.errors import InvalidInput

UTC = timezone.utc


def at(hour: int, minute: int, second: int = 0) -> datetime:
    return datetime(2026, 3, 1, hour, minute, second, tzinfo=UTC)


@pytest.mark.parametrize("expression", [
    "", "* * *", "61 * * * *", "* 24 * * *", "*/0 * * * *", "a b c d e", "@reboot",
    "@every 5m", "@hourly", "* * * * * *", "* * * * * * *", "1" * 10_000, "١ * * * *",
    "0 9 * * *\x00", "* * * * *\n", " * * * * *", "*  * * * *", "0 9 * * 8",
])
def test_malformed_crons_are_refused_as_invalid_cron(expression):
    with pytest.raises(InvalidInput) as refused:
        cron.validate_cron(expression)
    assert refused.value.code == "invalid_cron"
    assert refused.value.fields["field"] == "cron"


@pytest.mark.parametrize("expression", ["CRON_TZ=Europe/Berlin 0 9 * * *", "TZ=UTC * * * * *",
                                        "tz=UTC 0 9 * * *"])
def test_zone_prefixes_are_refused_with_the_reason(expression):
    with pytest.raises(InvalidInput) as refused:
        cron.validate_cron(expression)
    assert refused.value.code == "timezone_not_allowed"
    assert "UTC" in refused.value.message


def test_a_cron_that_never_fires_is_refused():
    with pytest.raises(InvalidInput) as refused:
        cron.validate_cron("0 0 30 2 *")
    assert refused.value.code == "cron_never_fires"


@pytest.mark.parametrize("expression", ["* * * * *", "0 9 * * 1-5", "*/15 8-18 * * mon-fri",
                                        "0 0 29 2 *", "30 4 * * 2,6", "0 0 1 jan *"])
def test_standard_crons_are_accepted_unchanged(expression):
    assert cron.validate_cron(expression) == expression


def test_next_fire_is_strictly_after_the_moment():
    assert cron.next_fire_after("0 9 * * *", at(9, 0)) == datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
    assert cron.next_fire_after("*/5 * * * *", at(9, 0, 30)) == at(9, 5)


def test_latest_fire_includes_a_fire_exactly_at_the_moment():
    assert cron.latest_fire_at_or_before("*/5 * * * *", at(9, 0)) == at(9, 0)
    assert cron.latest_fire_at_or_before("*/5 * * * *", at(9, 4, 59)) == at(9, 0)


def test_fires_between_are_inclusive_and_bounded():
    assert cron.fires_between("* * * * *", at(9, 0), at(9, 3), limit=100) == [
        at(9, 0), at(9, 1), at(9, 2), at(9, 3)]
    assert len(cron.fires_between("* * * * *", at(9, 0), at(10, 0), limit=10)) == 10


KOLKATA = __import__("zoneinfo").ZoneInfo("Asia/Kolkata")


@pytest.mark.parametrize("expression", ["0 9 * * *", "30 3 * * *", "0 0 * * 1", "*/7 * * * *"])
def test_cron_math_is_utc_whatever_the_zone_of_the_moment_it_is_given(expression):
    """A timestamptz read from a session whose TimeZone is Asia/Kolkata comes back at +05:30; the
    fires are still UTC fires, returned in UTC."""
    utc = at(9, 0, 20)
    local = utc.astimezone(KOLKATA)
    assert cron.next_fire_after(expression, local) == cron.next_fire_after(expression, utc)
    assert (cron.latest_fire_at_or_before(expression, local)
            == cron.latest_fire_at_or_before(expression, utc))
    assert cron.next_fire_after(expression, local).utcoffset().total_seconds() == 0
    first = at(6, 0)
    assert (cron.fires_between(expression, first.astimezone(KOLKATA), local, limit=100)
            == cron.fires_between(expression, first, utc, limit=100))
    assert cron.is_fire_time("0 9 * * *", at(9, 0).astimezone(KOLKATA))
    assert not cron.is_fire_time("0 9 * * *", datetime(2026, 3, 1, 9, 0, tzinfo=KOLKATA))
