"""TICKWORK_APPROVAL_TTL_HOURS: a week by default, 1 hour to a year, and a bad value is one
sentence naming the variable (the scheduler, the API and `tickwork tick` start nothing)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError
from typer.testing import CliRunner

from tickwork.cli import app
from tickwork.scheduler.settings import SchedulerSettings


def test_the_ttl_is_a_week_unless_set(monkeypatch):
    assert SchedulerSettings().approval_ttl_hours == 168
    monkeypatch.setenv("TICKWORK_APPROVAL_TTL_HOURS", "1")
    assert SchedulerSettings().approval_ttl_hours == 1


@pytest.mark.parametrize("value", ["0", "-5", "8761"])
def test_a_ttl_out_of_range_is_refused(monkeypatch, value):
    monkeypatch.setenv("TICKWORK_APPROVAL_TTL_HOURS", value)
    with pytest.raises(ValidationError, match="approval TTL must be a whole number of hours"):
        SchedulerSettings()


@pytest.mark.parametrize("command", [["tick"], ["scheduler"], ["api"]])
def test_the_processes_refuse_a_bad_ttl_in_one_sentence(monkeypatch, command):
    monkeypatch.setenv("TICKWORK_APPROVAL_TTL_HOURS", "0")
    monkeypatch.setenv("TICKWORK_DATABASE_URL", "postgresql://nobody@127.0.0.1:9/none")
    result = CliRunner().invoke(app, command)
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output and isinstance(result.exception, SystemExit)
    assert "the approval TTL must be a whole number of hours from 1 to 8760 (a year), not 0" \
           " (TICKWORK_APPROVAL_TTL_HOURS)" in " ".join(result.output.split())
