"""query_file's costs are bounded before they reach the event loop (issue 28, attack 1): SQL
past its length limit is refused before anything parses it, a query's shape is worked out
once per call and in a thread (and linearly when long), an answer holds at most its byte
limit, and a tool result is redacted and rendered off the loop."""

from __future__ import annotations

import json
import threading
from uuid import uuid4

import pytest

from tickwork.worker import walls
from tickwork.worker.model import ToolCall
from tickwork.worker.sql_shape import PARSE_LIMIT, _regex_shape, sql_shape
from tickwork.worker.toolbox import ToolBox, ToolSet
from tickwork.worker.tools.offload import maybe_offload
from tickwork.worker.tools.registry import ToolSpec, catalog
from tickwork.worker.tools.sqlbox import Box, QueryError, check_select, query_rows
from tickwork.worker.tools.sqlguard import MAX_SQL_LENGTH
from tickwork.worker.tools.sqltable import AnswerTooLarge, answer
from tickwork.worker.walls import Allow, Meter, Refuse, WallSettings, metered

QUERY = ToolSpec("query_file", "read", True, "", {})


def in_list(count: int, start: int = 1) -> str:
    return ("SELECT * FROM result WHERE id IN ("
            + ",".join(str(i) for i in range(start, start + count)) + ")")


def shapes_seen(monkeypatch) -> list[int]:
    """The threads the walls worked out a shape on, one entry per time."""
    seen: list[int] = []

    def counted(sql: str) -> str:
        seen.append(threading.get_ident())
        return sql_shape(sql)

    monkeypatch.setattr(walls, "sql_shape", counted)
    return seen


async def test_sql_past_the_length_limit_is_refused_before_anything_parses_it(monkeypatch):
    seen = shapes_seen(monkeypatch)
    meter = Meter()
    sql = in_list(40_000)  # the attack's 200 kB IN (…) list
    decision = await metered(ToolCall("c1", "query_file", {"file_ref": "f_1", "sql": sql}),
                             QUERY, meter, WallSettings())
    assert isinstance(decision, Refuse) and decision.wall == "sql_length"
    assert decision.message == (
        f"This query did NOT execute: its SQL is {len(sql):,} characters long, and query_file "
        f"accepts at most {MAX_SQL_LENGTH:,} characters. Do not list every value: filter with "
        "a range, a LIKE or a subquery over result instead.")
    assert seen == [] and meter.queries == {}
    with pytest.raises(QueryError, match=r"accepts at most 100,000 characters"):
        check_select(sql)  # and query_file itself refuses it too, without starting a process


async def test_a_querys_shape_is_worked_out_once_per_call_and_off_the_event_loop(monkeypatch):
    seen = shapes_seen(monkeypatch)
    meter = Meter()
    call = ToolCall("c1", "query_file", {"file_ref": "f_1", "sql": "SELECT * FROM result"})
    assert isinstance(await metered(call, QUERY, meter, WallSettings()), Allow)
    assert len(seen) == 1 and seen[0] != threading.get_ident()
    assert list(meter.queries.values()) == [1]


def test_long_sql_is_shaped_by_the_linear_fallback_and_still_collapses_its_literals():
    first, second = in_list(1500), in_list(1500, start=7)
    assert len(first) > PARSE_LIMIT
    assert sql_shape(first) == _regex_shape(first) == sql_shape(second)
    assert sql_shape(in_list(10)) != _regex_shape(in_list(10))  # short SQL is still parsed


def test_an_answer_keeps_only_the_rows_that_fit_in_its_byte_limit_and_says_so():
    rows = [("a" * 68_000,)] * 201
    bounded = answer(["padding"], rows, 200, 1_000_000)
    assert bounded["truncated"] is True and bounded["row_count"] == 14
    assert len(json.dumps(bounded)) < 1_000_000 + 1000
    assert bounded["note"].startswith("only the first 14 rows are shown: an answer is limited "
                                      "to 1,000,000 bytes")
    with pytest.raises(AnswerTooLarge, match="the first row alone is larger than the answer "
                                             "limit of 1,000 bytes"):
        answer(["padding"], rows, 200, 1000)
    small = answer(["id"], [(1,), (2,)], 200, 1000)
    assert small == {"columns": ["id"], "rows": [[1], [2]], "row_count": 2, "truncated": False}


def test_a_query_whose_first_row_is_past_the_limit_is_a_query_error():
    with pytest.raises(QueryError, match="larger than the answer limit of 100 bytes"):
        query_rows([{"id": 1}], "SELECT printf('%.500c', 'a') FROM result",
                   Box(max_answer_bytes=100))


class Spy:
    """Renders as text, noting the thread that rendered it."""

    def __init__(self) -> None:
        self.threads: list[int] = []

    def __str__(self) -> str:
        self.threads.append(threading.get_ident())
        return "spy"


async def test_a_tool_result_is_redacted_and_rendered_off_the_event_loop():
    redacted_on: list[int] = []

    def redact(value):
        redacted_on.append(threading.get_ident())
        return value

    box = ToolBox(ToolSet.of({s.key: s for s in catalog()}, []), pool=None,
                  execution_id=uuid4(), plan={}, offload_threshold=4000, preview_chars=800,
                  redact=redact)
    call = ToolCall("c1", "update_plan", {"steps": []})
    outcome = await box.call(call, box.spec("update_plan"), step=1)
    assert outcome.ok and redacted_on and threading.get_ident() not in redacted_on
    spy = Spy()
    assert await maybe_offload(None, execution_id=uuid4(), tool="t", value=[spy]) == '["spy"]'
    assert spy.threads and threading.get_ident() not in spy.threads
