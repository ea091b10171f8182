"""The API server's limits (TICKWORK_API_*) are read from the environment and a limit that
could not work is refused in one sentence naming the setting."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from tickwork.http_guard import guarded_protocol
from tickwork.scheduler.settings import SchedulerSettings


def test_the_limits_come_from_the_environment_into_the_protocol(monkeypatch):
    monkeypatch.setenv("TICKWORK_API_MAX_CONNECTIONS", "50")
    monkeypatch.setenv("TICKWORK_API_HEADER_TIMEOUT_SECONDS", "2.5")
    monkeypatch.setenv("TICKWORK_API_BODY_TIMEOUT_SECONDS", "7")
    monkeypatch.setenv("TICKWORK_API_MAX_HEADER_BYTES", "4096")
    protocol = guarded_protocol(SchedulerSettings())
    assert (protocol.max_connections, protocol.header_timeout, protocol.body_timeout,
            protocol.max_header_bytes) == (50, 2.5, 7.0, 4096)


@pytest.mark.parametrize("name", ["TICKWORK_API_MAX_CONNECTIONS",
                                  "TICKWORK_API_HEADER_TIMEOUT_SECONDS",
                                  "TICKWORK_API_BODY_TIMEOUT_SECONDS",
                                  "TICKWORK_API_MAX_HEADER_BYTES",
                                  "TICKWORK_API_BODY_BUDGET_BYTES"])
def test_a_limit_of_zero_or_less_is_refused_naming_the_setting(monkeypatch, name):
    monkeypatch.setenv(name, "0")
    with pytest.raises(ValidationError) as refused:
        SchedulerSettings()
    assert refused.value.errors()[0]["loc"] == (name.removeprefix("TICKWORK_").lower(),)
    assert "must be more than 0, not 0" in str(refused.value)


def test_the_api_command_refuses_a_bad_limit_in_one_sentence(monkeypatch):
    from typer.testing import CliRunner

    from tickwork.cli import app

    monkeypatch.setenv("TICKWORK_DATABASE_URL", "postgresql://nobody@127.0.0.1:1/none")
    monkeypatch.setenv("TICKWORK_API_MAX_CONNECTIONS", "0")
    result = CliRunner().invoke(app, ["api"])
    assert result.exit_code == 1
    assert "must be more than 0, not 0 (TICKWORK_API_MAX_CONNECTIONS)" in result.output
