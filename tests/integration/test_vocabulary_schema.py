"""The typed seam matches the migrated database: the vocabularies in tickwork.sql.vocabulary
are exactly the words its CHECK constraints allow (read from pg_constraint), so a word added on
one side only fails here, and a typed row names exactly its table's columns."""

from __future__ import annotations

import re
from dataclasses import fields

import psycopg

from tickwork.scheduler.schedules import Schedule
from tickwork.sql import vocabulary as v

# Every CHECK that lists the allowed words of a column, and the vocabulary that names them.
VOCABULARY_OF = {
    "executions_status_check": v.RUN_STATUSES,
    "executions_outcome_check": v.OUTCOMES,
    "executions_trigger_type_check": v.TRIGGER_TYPES,
    "executions_trigger_source_check": v.TRIGGER_SOURCES,
    "run_events_type_check": v.EVENT_TYPES,
    "approvals_status_check": v.APPROVAL_STATUSES,
    "schedules_overlap_check": v.OVERLAPS,
    "schedules_status_check": v.SCHEDULE_STATUSES,
    "agents_status_check": v.AGENT_STATUSES,
    "skipped_fires_reason_check": v.SKIP_REASONS,
    "queue_tasks_kind_check": v.TASK_KINDS,
    "webhooks_events_known": v.WEBHOOK_EVENTS,
    "webhook_deliveries_type_check": v.WEBHOOK_EVENTS,
    "webhook_deliveries_status_check": v.DELIVERY_STATUSES,
    "tool_catalog_class_check": v.TOOL_CLASSES,
}


def word_lists(db_url: str) -> dict[str, set[str]]:
    """Each CHECK constraint that compares a column with a list of text words (an IN list or an
    array it must be contained in), by name, with its words. Partitions repeat their parent's
    constraint under the same name; every copy must say the same."""
    with psycopg.connect(db_url) as conn:
        rows = conn.execute("""
            SELECT DISTINCT c.conname, pg_get_constraintdef(c.oid)
              FROM pg_constraint c JOIN pg_namespace n ON n.oid = c.connamespace
             WHERE c.contype = 'c' AND n.nspname = 'public'""").fetchall()
    found: dict[str, set[str]] = {}
    for name, definition in rows:
        if "ARRAY[" not in definition:
            continue
        words = set(re.findall(r"'([^']*)'::(?:text|character varying)", definition))
        assert found.setdefault(name, words) == words, f"{name} differs between partitions"
    return found


def test_every_word_list_check_in_the_schema_is_exactly_its_vocabulary(db_url):
    in_database = word_lists(db_url)
    assert set(in_database) == set(VOCABULARY_OF), (
        "a CHECK with a word list and no vocabulary, or the reverse: "
        f"{sorted(set(in_database) ^ set(VOCABULARY_OF))}")
    differ = {name: {"database only": sorted(words - VOCABULARY_OF[name]),
                     "vocabulary only": sorted(VOCABULARY_OF[name] - words)}
              for name, words in in_database.items() if words != VOCABULARY_OF[name]}
    assert differ == {}



def test_the_schedule_row_names_every_column_of_schedules(db_url):
    with psycopg.connect(db_url) as conn:
        columns = {name for (name,) in conn.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_name = 'schedules'")}
    assert {field.name for field in fields(Schedule)} == columns
