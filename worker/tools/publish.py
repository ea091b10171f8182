"""Publish the catalog to Postgres, where the API validates agents' tool keys against it."""

from __future__ import annotations

import psycopg
from psycopg.types.json import Jsonb

from tickwork.sql import QUERIES
from tickwork.sql.db import reconnecting
from tickwork.worker.tools.registry import ToolSpec, catalog


# A worker started while Postgres restarts waits for it instead of exiting (an idempotent upsert).
@reconnecting
def publish_catalog(url: str, specs: list[ToolSpec] | None = None) -> int:
    specs = catalog() if specs is None else specs
    with psycopg.connect(url, prepare_threshold=None) as conn:
        with conn.cursor() as cursor:
            cursor.executemany(QUERIES["upsert_tool"], [
                {"key": s.key, "tool_class": s.tool_class, "is_local": s.is_local,
                 "description": s.description, "parameters": Jsonb(s.parameters)}
                for s in specs])
    return len(specs)
