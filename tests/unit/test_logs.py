import json

import pytest
import structlog

from tickwork.logs import configure_logging


def test_log_lines_are_json_with_secrets_redacted(capsys):
    configure_logging()
    try:
        structlog.get_logger().error("tick_failed", error="connect to postgresql://tw:hunter2@db/x "
                                     "failed; key sk-" + "Z" * 40, execution_id="e1")
        line = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    finally:
        structlog.reset_defaults()
    assert line["event"] == "tick_failed" and line["execution_id"] == "e1"
    assert "hunter2" not in line["error"] and "Z" * 40 not in line["error"]
    assert "[REDACTED:url_password]" in line["error"] and "[REDACTED:openai]" in line["error"]


def test_ids_are_shown_as_they_are_and_everything_else_is_still_redacted(capsys):
    configure_logging()
    run_id = "0b5f2a4e-1c3d-4e5f-8a9b-0c1d2e3f4a5b"
    try:
        structlog.get_logger().bind(execution_id=run_id).info(
            "run_finished", run_token=run_id, reason="password=hunter22", agent_id="sk-" + "Q" * 40,
            attempt=2)
        raw = capsys.readouterr().out.strip().splitlines()[-1]
    finally:
        structlog.reset_defaults()
    line = json.loads(raw)
    assert line["execution_id"] == run_id and line["attempt"] == 2
    assert line["run_token"] == "[REDACTED:token]"  # a uuid under a secret key still is one
    assert "hunter22" not in raw and "Q" * 40 not in raw  # not uuid-shaped: scanned as before


def test_the_level_comes_from_tickwork_log_level(capsys, monkeypatch):
    monkeypatch.setenv("TICKWORK_LOG_LEVEL", "debug")
    configure_logging()
    try:
        structlog.get_logger().debug("run_started")
        assert json.loads(capsys.readouterr().out.strip())["event"] == "run_started"
        monkeypatch.delenv("TICKWORK_LOG_LEVEL")
        configure_logging()
        structlog.get_logger().debug("run_started")
        structlog.get_logger().info("run_finished")
        lines = capsys.readouterr().out.strip().splitlines()
    finally:
        structlog.reset_defaults()
    assert [json.loads(line)["event"] for line in lines] == ["run_finished"]


def test_a_bad_log_level_is_one_sentence_and_changes_nothing(monkeypatch):
    configure_logging("warning")
    try:
        before = structlog.get_config()["wrapper_class"]
        monkeypatch.setenv("TICKWORK_LOG_LEVEL", "loud")
        with pytest.raises(SystemExit) as exc:
            configure_logging()
        assert str(exc.value) == ("TICKWORK_LOG_LEVEL must be one of debug, info, warning, "
                                  "error, critical (got 'loud')")
        assert structlog.get_config()["wrapper_class"] is before
    finally:
        structlog.reset_defaults()


def test_short_values_are_redacted_every_time_they_come_back(capsys):
    configure_logging()
    try:
        for _ in range(2):  # the second line takes the remembered verdicts
            structlog.get_logger().info("login_failed", password="hunter22", status="done",
                                        note="Bearer abcdefghijkl", tries=3, user_id="u-1")
        lines = [json.loads(line) for line in capsys.readouterr().out.strip().splitlines()]
    finally:
        structlog.reset_defaults()
    assert len(lines) == 2
    for line in lines:
        assert line["password"] == "[REDACTED:password]"
        assert line["note"] == "Bearer [REDACTED:bearer]"
        assert (line["status"], line["tries"], line["user_id"]) == ("done", 3, "u-1")


def test_a_runs_line_shows_its_ids_as_text_and_a_token_under_a_secret_key_redacted(capsys):
    from types import SimpleNamespace
    from uuid import UUID

    from tickwork.worker.run_log import RunLog

    run = SimpleNamespace(id=UUID("0b5f2a4e-1c3d-4e5f-8a9b-0c1d2e3f4a5b"),
                          agent_id=UUID("1c6f3b5f-2d4e-4f60-9bac-1d2e3f4a5b6c"),
                          schedule_id=None, attempt=3)
    configure_logging()
    try:
        RunLog(run).info("run_finished", status="completed",
                         run_token=UUID("2d704c60-3e5f-4071-8cbd-2e3f4a5b6c7d"))
        raw = capsys.readouterr().out.strip().splitlines()[-1]
    finally:
        structlog.reset_defaults()
    line = json.loads(raw)
    assert line["execution_id"] == "0b5f2a4e-1c3d-4e5f-8a9b-0c1d2e3f4a5b"
    assert line["agent_id"] == "1c6f3b5f-2d4e-4f60-9bac-1d2e3f4a5b6c"
    assert line["schedule_id"] is None and line["attempt"] == 3  # a run started by hand
    assert line["run_token"] == "[REDACTED:token]" and "2d704c60" not in raw
