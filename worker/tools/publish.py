"""Publish the catalog to Postgres, where the API validates agents' tool keys against it."""

from __future__ import annotations

from psycopg.types.json import Jsonb

from tickwork.sql import QUERIES
from tickwork.sql.db import connect_when_up
from tickwork.worker.tools.registry import ToolSpec, catalog


def publish_catalog(url: str, specs: list[ToolSpec] | None = None) -> int:
    # A worker started before Postgres, or while it restarts, waits for it (sql/start_up.py).
    specs = catalog() if specs is None else specs
    with connect_when_up(url, "publish the tool catalog", prepare_threshold=None) as conn:
        with conn.cursor() as cursor:
            cursor.executemany(QUERIES["upsert_tool"], [
                {"key": s.key, "tool_class": s.tool_class, "is_local": s.is_local,
                 "description": s.description, "parameters": Jsonb(s.parameters)}
                for s in specs])
    return len(specs)
