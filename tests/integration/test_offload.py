"""Large results are stored, not carried: preview + file reference, then read or queried by SQL."""

import json
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any
from uuid import UUID

import pytest
from psycopg.pq import TransactionStatus

from tickwork.sql.ids import new_id
from tickwork.worker.tools.local import ToolInputError, query_file, read_file
from tickwork.worker.tools.offload import HINT, maybe_offload, render_result, storable
from tickwork.worker.vendors.demo import get_record, list_records


@dataclass
class Ctx:
    conn: Any
    execution_id: UUID


async def stored_rows(conn, execution_id: UUID) -> list[dict[str, Any]]:
    cursor = await conn.execute("SELECT file_ref, execution_id, tool, content, chars"
                                " FROM tool_results WHERE execution_id = %s", (execution_id,))
    return await cursor.fetchall()


async def test_a_large_result_is_offloaded_and_queryable_by_its_own_run_only(pool):
    run, other_run = new_id(), new_id()
    async with pool.connection() as conn:
        records = await list_records(Ctx(conn, run), limit=500)
        assert len(records) == 500
        text = await maybe_offload(conn, execution_id=run, tool="demo.list_records", value=records)

        reply = json.loads(text)
        file_ref = reply["file_ref"]
        assert reply["offloaded"] is True and reply["hint"] == HINT
        assert file_ref.startswith("f_") and len(file_ref) == 34
        assert len(reply["preview"]) <= 800 and len(text) < 2000
        assert reply["chars"] == len(render_result(records)) > 4000

        [row] = await stored_rows(conn, run)
        assert (row["file_ref"], row["tool"], row["chars"]) == (file_ref, "demo.list_records",
                                                                reply["chars"])
        assert row["content"] == records  # the whole value, not the preview

        count = await query_file(conn, run, file_ref, "SELECT count(*) FROM result")
        assert count["rows"] == [[500]]
        groups = await query_file(conn, run, file_ref,
                                  "SELECT category, count(*) FROM result GROUP BY 1 ORDER BY 1")
        assert groups["rows"] == [["incident", 100], ["invoice", 100], ["lead", 100],
                                  ["order", 100], ["ticket", 100]]

        for statement in ("DELETE FROM result", "ATTACH DATABASE ':memory:' AS x",
                          "WITH gone AS (SELECT 1) DELETE FROM result"):
            with pytest.raises(ToolInputError):
                await query_file(conn, run, file_ref, statement)
        assert (await query_file(conn, run, file_ref, "SELECT count(*) FROM result"))["rows"] == [[500]]

        with pytest.raises(ToolInputError, match="no such file in this run"):
            await query_file(conn, other_run, file_ref, "SELECT count(*) FROM result")
        with pytest.raises(ToolInputError, match="no such file in this run"):
            await read_file(conn, other_run, file_ref)
        with pytest.raises(ToolInputError, match="no such file in this run"):
            await read_file(conn, run, "f_" + new_id().hex)
        # autocommit reads and writes only: nothing is left open across the tools
        assert conn.info.transaction_status == TransactionStatus.IDLE


async def test_read_file_continues_exactly_where_the_preview_stopped(pool):
    run = new_id()
    async with pool.connection() as conn:
        records = await list_records(Ctx(conn, run), limit=500)
        reply = json.loads(await maybe_offload(conn, execution_id=run, tool="demo.list_records",
                                               value=records))
        first = await read_file(conn, run, reply["file_ref"], offset=0, limit=800)
        assert first["text"] == reply["preview"] and first["total_chars"] == reply["chars"]

        offset, parts = 0, []
        while offset is not None:
            part = await read_file(conn, run, reply["file_ref"], offset=offset)
            assert len(render_result(part)) <= 4000  # a slice is never offloaded again
            parts.append(part["text"])
            offset = part["next_offset"]
        assert json.loads("".join(parts)) == records
        assert len("".join(parts)) == reply["chars"]


async def test_a_short_result_is_returned_inline_and_stores_nothing(pool):
    run = new_id()
    async with pool.connection() as conn:
        record = await get_record(Ctx(conn, run), 1)
        text = await maybe_offload(conn, execution_id=run, tool="demo.get_record", value=record)
        assert text == render_result(record) and json.loads(text) == record
        assert await stored_rows(conn, run) == []


async def test_threshold_and_preview_are_the_callers_settings(pool):
    run = new_id()
    value = [{"at": datetime(2026, 6, 1, tzinfo=timezone.utc), "id": run, "n": i} for i in range(5)]
    async with pool.connection() as conn:
        assert json.loads(await maybe_offload(conn, execution_id=run, tool="t", value=value,
                                              threshold=10_000)) == json.loads(render_result(value))
        reply = json.loads(await maybe_offload(conn, execution_id=run, tool="t", value=value,
                                               threshold=50, preview_chars=20))
        assert reply["offloaded"] is True and len(reply["preview"]) == 20
        answer = await query_file(conn, run, reply["file_ref"], "SELECT id, at FROM result LIMIT 1")
        assert answer["rows"] == [[str(run), "2026-06-01 00:00:00+00:00"]]


async def test_storable_matches_what_jsonb_hands_back(pool):
    value = {"title": "t", "id": 1, "ab": "x\x00y", "nested": {"zz": 1, "a": 2, "ä": 3},
             "nan": float("nan"), "longer_key": [{"b": 1, "a": 2}]}
    shaped = storable(value)
    assert shaped["ab"] == "x\ufffdy" and shaped["nan"] == "NaN"  # jsonb refuses NUL and NaN
    async with pool.connection() as conn:
        cursor = await conn.execute("SELECT %s::jsonb AS v", (render_result(shaped),))
        back = (await cursor.fetchone())["v"]
    assert render_result(back) == render_result(shaped)  # same keys in the same order


async def test_awkward_values_store_and_read_back_identically(pool):
    run = new_id()
    value = [{"ключ": "значение", "b": "x\x00y", "aa": float("inf"), "c": [1.5, None, True]}] * 400
    async with pool.connection() as conn:
        reply = json.loads(await maybe_offload(conn, execution_id=run, tool="t", value=value))
        whole = await read_file(conn, run, reply["file_ref"], limit=10**9, max_chars=10**9)
        assert whole["text"].startswith(reply["preview"])
        assert len(whole["text"]) == reply["chars"] and whole["next_offset"] is None
