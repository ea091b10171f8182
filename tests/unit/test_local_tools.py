"""Local tools without Postgres: the plan, task_complete, SQL over a stored value (the
engine query_file's child process runs, called here in-process), slicing."""

import json

import pytest

from tickwork.worker.tools.local import ToolInputError, task_complete, text_slice, update_plan
from tickwork.worker.tools.offload import render_result
from tickwork.worker.tools.sqlbox import Box, QueryError, length_limit_for, query_rows

RECORDS = [{"id": i, "title": f"Record {i}", "category": ["invoice", "ticket"][i % 2]}
           for i in range(1, 301)]


# --- update_plan / task_complete ---------------------------------------------------------

async def test_update_plan_replaces_the_plan_and_lists_open_steps():
    state = {"steps": [{"title": "old", "status": "pending"}], "other": 1}
    reply = await update_plan(state, [{"title": "Fetch records", "status": "completed"},
                                      {"title": " Summarize ", "status": "in_progress"},
                                      {"title": "Send report", "status": "pending", "extra": 1}])
    assert reply == {"ok": True, "open_steps": ["Summarize", "Send report"]}
    assert state == {"other": 1, "steps": [{"title": "Fetch records", "status": "completed"},
                                           {"title": "Summarize", "status": "in_progress"},
                                           {"title": "Send report", "status": "pending"}]}


async def test_a_plan_with_every_step_completed_has_no_open_steps():
    state = {}
    assert await update_plan(state, [{"title": "a", "status": "completed"}]) == \
        {"ok": True, "open_steps": []}
    assert await update_plan(state, []) == {"ok": True, "open_steps": []}
    assert state["steps"] == []


@pytest.mark.parametrize("steps,message", [
    ("do things", "steps must be a list"),
    ([{"title": "a", "status": "done"}], "has status 'done'; use one of pending, in_progress, completed"),
    ([{"title": "a"}], "has status None"),
    ([{"status": "pending"}], "step 1 needs a title"),
    ([{"title": "ok", "status": "pending"}, {"title": "  ", "status": "pending"}], "step 2 needs a title"),
    (["just a title"], "step 1 must be an object"),
    ([{"title": "a", "status": "pending"}] * 51, "at most 50"),
])
async def test_bad_plans_are_refused_with_a_sentence_and_change_nothing(steps, message):
    state = {"steps": [{"title": "kept", "status": "pending"}]}
    with pytest.raises(ToolInputError, match=message.replace("(", r"\(")):
        await update_plan(state, steps)
    assert state == {"steps": [{"title": "kept", "status": "pending"}]}
    assert issubclass(ToolInputError, ValueError)


async def test_task_complete_is_bookkeeping_only():
    assert await task_complete() == {"ok": True}
    assert await task_complete(summary="all done") == {"ok": True}
    with pytest.raises(ToolInputError):
        await task_complete(summary=["not", "text"])


# --- the table built from a stored value ---------------------------------------------------

def test_a_list_of_objects_is_one_row_per_object_with_the_union_of_keys_in_first_seen_order():
    value = [{"b": 1, "a": "x"}, {"a": "y", "c": {"deep": [1, 2]}}, {"d": True, "Id": 7, "id": 8}]
    answer = query_rows(value, "SELECT * FROM result")
    assert answer["columns"] == ["b", "a", "c", "d", "Id", "id_2"]
    assert answer["rows"] == [[1, "x", None, None, None, None],
                              [None, "y", '{"deep":[1,2]}', None, None, None],
                              [None, None, None, 1, 7, 8]]  # True is stored as 1
    nested = query_rows(value, "SELECT json_extract(c, '$.deep[1]') FROM result WHERE c IS NOT NULL")
    assert nested["rows"] == [[2]]


@pytest.mark.parametrize("value,rows", [
    ({"id": 1, "name": "one"}, [[1, "one"]]),
    ([1, "two", None, [3]], [[1], ["two"], [None], ["[3]"]]),
    ("just text", [["just text"]]),
    (42, [[42]]),
    (None, [[None]]),
    ([], []),
    ([{"a": 1}, 2], [['{"a":1}'], [2]]),  # mixed list: one value column
    ([{"big": 2**70}], [[str(2**70)]]),  # beyond SQLite's 64-bit integers: kept as text
])
def test_other_shapes(value, rows):
    assert query_rows(value, "SELECT * FROM result")["rows"] == rows


def test_sql_works_over_the_result():
    answer = query_rows(RECORDS, "SELECT category, count(*) AS n FROM result GROUP BY 1 ORDER BY 1")
    assert answer == {"columns": ["category", "n"], "rows": [["invoice", 150], ["ticket", 150]],
                      "row_count": 2, "truncated": False}
    assert query_rows(RECORDS, "  -- count them\n WITH t AS (SELECT id FROM result WHERE id > 290) "
                               "SELECT count(*) FROM t;")["rows"] == [[10]]


def test_rows_are_capped_and_the_answer_says_so():
    answer = query_rows(RECORDS, "SELECT id FROM result")
    assert answer["row_count"] == 200 and answer["truncated"] is True
    assert answer["rows"][-1] == [200] and "first 200 rows" in answer["note"]
    assert query_rows(RECORDS, "SELECT id FROM result", Box(max_rows=300))["truncated"] is False
    json.dumps(answer)  # JSON-able as it is


@pytest.mark.parametrize("sql", [
    "DELETE FROM result",
    "UPDATE result SET id = 0",
    "INSERT INTO result (id) VALUES (1)",
    "DROP TABLE result",
    "ATTACH DATABASE '/tmp/tickwork-should-not-exist.db' AS x",
    "PRAGMA query_only = OFF",
    "WITH x AS (SELECT 1) DELETE FROM result",
    "SELECT 1; DELETE FROM result",
    "SELECT load_extension('x')",
    "SELECT * FROM pragma_query_only",
])
def test_anything_but_one_read_only_select_is_refused(sql):
    with pytest.raises(QueryError):
        query_rows(RECORDS, sql)


def test_sqlite_errors_come_back_as_sentences_naming_the_columns():
    with pytest.raises(QueryError, match="no such column: nope.*columns are id, title, category"):
        query_rows(RECORDS, "SELECT nope FROM result")
    with pytest.raises(QueryError, match="SQLite error"):
        query_rows(RECORDS, "SELECT FROM WHERE")


def test_a_runaway_query_is_stopped():
    with pytest.raises(QueryError, match="longer than 0.2 s and was stopped") as stopped:
        query_rows(RECORDS, "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) "
                            "SELECT count(*) FROM c", Box(time_limit_s=0.2))
    assert stopped.value.stopped == "time"


# --- what a query may call and read ----------------------------------------------------------

@pytest.mark.parametrize("sql,message", [
    ("SELECT fts3_tokenizer('simple')", r"fts3_tokenizer\(\) is not allowed"),
    ("SELECT load_extension('x')", r"load_extension\(\) is not allowed"),
    ("SELECT sqlite_version()", r"sqlite_version\(\) is not allowed"),
    ("SELECT sqlite_compileoption_get(0)", "not allowed"),
    ("SELECT count(*) FROM result WHERE title = sqlite_source_id()", "not allowed"),
    ("SELECT randomblob(1000000000)", r"randomblob\(\) is limited to 1024 bytes"),
    ("SELECT length(zeroblob(2000))", r"zeroblob\(\) is limited to 1024 bytes"),
    ("SELECT printf('%.*c', 40000000, 'a')", "limited to 1000 here, got 40000000"),
    ("SELECT format('%40000d', 1)", "limited to 1000 here, got 40000"),
    ("SELECT printf('%s %.*c', 'x', 5000, 'a')", "got 5000"),
    ("SELECT * FROM sqlite_master", "only the table result can be read, not sqlite_master"),
    ("SELECT * FROM pragma_table_info('result')", "only reading the table result is allowed"),
    ("SELECT * FROM temp.sqlite_temp_master", "only the table result can be read"),
])
def test_functions_and_tables_a_data_question_does_not_need_are_refused(sql, message):
    with pytest.raises(QueryError, match=message) as refused:
        query_rows(RECORDS, sql)
    assert refused.value.stopped is None


def test_the_functions_a_data_question_needs_work():
    answer = query_rows([{"id": 1, "n": 2.5, "at": "2026-06-01T10:00:00", "tags": ["a", "b"]},
                         {"id": 2, "n": 4.0, "at": "2026-06-02T11:30:00", "tags": ["c"]}], """
        SELECT sum(n), avg(n), group_concat(id, '|'), max(date(at)), round(sqrt(16), 1),
               printf('%5.1f|%-4s|%%', 3.14159, 'ab'), upper(substr('abc', 2)), hex(zeroblob(2)),
               length(randomblob(8)), (SELECT count(*) FROM result, json_each(result.tags)),
               (SELECT tags ->> '$[0]' FROM result WHERE id = 2), json_object('k', 1),
               (SELECT group_concat(r, ',') FROM (SELECT row_number() OVER (ORDER BY n DESC) AS r
                                                  FROM result)),
               strftime('%H', max(at)), iif(count(*) > 1, 'many', 'one')
          FROM result""")
    assert answer["rows"] == [[6.5, 3.25, "1|2", "2026-06-02", 4.0, "  3.1|ab  |%", "BC", "0000",
                               8, 3, "c", '{"k":1}', "1,2", "11", "many"]]
    counted = query_rows(RECORDS, "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c "
                                  "WHERE x < 10) SELECT count(*), sum(x) FROM c")
    assert counted["rows"] == [[10, 55]]


def test_strings_are_capped_near_the_size_of_the_stored_result():
    assert length_limit_for(10) == 1_000_000 and length_limit_for(3_000_000) == 6_000_000
    million = "replace(printf('%.1000c', 'a'), 'a', printf('%.1000c', 'a'))"
    assert query_rows(RECORDS, f"SELECT length({million})")["rows"] == [[1_000_000]]
    with pytest.raises(QueryError, match="would grow past 1000000 bytes"):
        query_rows(RECORDS, f"SELECT length({million} || 'a')")
    bigger = Box(length_limit=length_limit_for(3_000_000))
    assert query_rows(RECORDS, f"SELECT length({million} || 'a')", bigger)["rows"] == [[1_000_001]]


@pytest.mark.parametrize("sql,message", [
    ("SELECT 1" + " UNION ALL SELECT 1" * 150, "too many terms in compound SELECT"),
    ("SELECT " + " + ".join(["id"] * 300) + " FROM result", "Expression tree is too large"),
    ("SELECT 'a' LIKE '" + "%a" * 600 + "'", "LIKE or GLOB pattern too complex"),
])
def test_sqlite_limits_refuse_oversized_statements(sql, message):
    with pytest.raises(QueryError, match=message):
        query_rows(RECORDS, sql)


# --- read_file's slicing -------------------------------------------------------------------

def test_slices_walk_the_whole_text_and_each_reply_fits_the_limit():
    text = render_result(RECORDS)
    offset, parts = 0, []
    while offset is not None:
        reply = text_slice(text, "f_x", offset, 4000, max_chars=4000)
        assert len(render_result(reply)) <= 4000  # never large enough to be offloaded again
        assert reply["total_chars"] == len(text)
        parts.append(reply["text"])
        offset = reply["next_offset"]
    assert "".join(parts) == text
    assert text_slice(text, "f_x", 10, 5)["text"] == text[10:15]
    assert text_slice(text, "f_x", len(text), 5) == {"file_ref": "f_x", "offset": len(text),
                                                     "text": "", "total_chars": len(text),
                                                     "next_offset": None}
    with pytest.raises(ToolInputError, match="past the end"):
        text_slice(text, "f_x", len(text) + 1, 5)
