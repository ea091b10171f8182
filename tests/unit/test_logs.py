import json

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
