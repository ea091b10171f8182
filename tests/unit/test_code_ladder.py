"""The seeds' ladder in the default instructions, and what a call from code counts as failed."""

from tickwork.worker.code_calls import _is_error
from tickwork.worker.state import RunState


def test_an_agent_without_instructions_is_taught_the_ladder_with_run_python():
    system = RunState.start("", {"prompt": "Do it."}, units=3).messages[0].content
    assert "answer directly" in system and "one tool" in system
    assert "run_python" in system and "tools.call(name, **arguments)" in system
    assert RunState.start("Be brief.", {}, units=3).messages[0].content == "Be brief."


def test_a_call_from_code_fails_only_on_the_toolboxs_error_object():
    assert _is_error('{"error": "ValueError: no"}')
    assert _is_error('{"error": "x", "what_to_do": "y"}')
    assert not _is_error('{"error": "x", "id": 3}')  # a tool's own result with an error field
    assert not _is_error('[1, 2]') and not _is_error("plain text") and not _is_error("{oops")
