"""The R12 chaos soak's invariant checks: read-only SQL over what the soak left in its database.

Each check returns plain counts (and a few example ids) so the soak can print them and decide
pass or fail. The SQL is the checker's own, written against the tables, never through
tickwork's queries: an invariant checked by the code it checks proves nothing.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any
from uuid import UUID

import psycopg

# Every minute a schedule's next_run moved past must be accounted for: by exactly one
# first-attempt cron execution, or (coalesced after an outage, or skipped) by a skipped_fires
# row. first_next_run is what the API answered when the schedule was created.
SLOTS = """
WITH schedule_span AS (
    SELECT s.id, x.first_next_run, s.next_run AS final_next_run
      FROM schedules s
      JOIN unnest(%(ids)s::uuid[], %(first)s::timestamptz[]) AS x(id, first_next_run)
        ON x.id = s.id
), slot AS (
    SELECT id AS schedule_id, generate_series(first_next_run,
                                              final_next_run - interval '1 minute',
                                              interval '1 minute') AS minute
      FROM schedule_span
), origin AS (
    SELECT schedule_id, scheduled_for, count(*) AS n
      FROM executions
     WHERE retry_of IS NULL AND trigger_source = 'cron'
     GROUP BY 1, 2
)
SELECT count(*) AS slots,
       count(*) FILTER (WHERE o.n = 1) AS slots_one_execution,
       count(*) FILTER (WHERE o.n > 1) AS slots_duplicated,
       count(*) FILTER (WHERE o.n IS NULL AND f.reason IS NOT NULL) AS slots_skipped_recorded,
       count(*) FILTER (WHERE o.n IS NULL AND f.reason IS NULL) AS slots_missing,
       (SELECT count(*) FROM schedule_span
         WHERE final_next_run < %(must_reach)s) AS schedules_behind
  FROM slot
  LEFT JOIN origin o ON o.schedule_id = slot.schedule_id AND o.scheduled_for = slot.minute
  LEFT JOIN skipped_fires f ON f.schedule_id = slot.schedule_id AND f.scheduled_for = slot.minute
"""

SKIPPED_BY_REASON = "SELECT reason, count(*) FROM skipped_fires GROUP BY 1 ORDER BY 1"
SKIPPED_BY_MINUTE = """
SELECT to_char(scheduled_for AT TIME ZONE 'UTC', 'HH24:MI'), reason, count(*)
  FROM skipped_fires GROUP BY 1, 2 ORDER BY 1
"""

# A chain is a first-attempt execution and its retries (retry_of links each to the previous).
CHAINS = """
WITH RECURSIVE chain AS (
    SELECT id AS origin, id, status, attempt
      FROM executions WHERE retry_of IS NULL
    UNION ALL
    SELECT chain.origin, e.id, e.status, e.attempt
      FROM executions e JOIN chain ON e.retry_of = chain.id
), per_chain AS (
    SELECT origin,
           bool_or(status = 'completed') AS completed,
           bool_or(status IN ('queued', 'running')) AS unfinished,
           count(*) FILTER (WHERE status = 'completed') AS completions,
           max(attempt) AS attempts
      FROM chain GROUP BY origin
)
SELECT count(*) AS chains,
       count(*) FILTER (WHERE completed) AS chains_completed,
       count(*) FILTER (WHERE unfinished) AS chains_unfinished,
       count(*) FILTER (WHERE NOT completed AND NOT unfinished) AS chains_failed,
       count(*) FILTER (WHERE completions > 1) AS chains_completed_twice,
       count(*) FILTER (WHERE attempts > 1) AS chains_retried,
       coalesce(max(attempts), 0) AS max_attempt,
       (array_agg(origin) FILTER (WHERE NOT completed))[1:5] AS examples_not_completed
  FROM per_chain
"""

EXECUTIONS_BY_END = """
SELECT status, coalesce(outcome, '-') AS outcome, coalesce(breadcrumb, '-') AS breadcrumb,
       count(*)
  FROM executions GROUP BY 1, 2, 3 ORDER BY 4 DESC
"""

# Grouped without what names one run (the retry's id, the worker that was gone).
FAILED_REASONS = """
SELECT left(regexp_replace(split_part(coalesce(reason, '-'), ';', 1),
                           ' [(][^)]*:[0-9]+:[0-9a-f]+[)]', ''), 160) AS reason, count(*)
  FROM executions WHERE status = 'failed' GROUP BY 1 ORDER BY 2 DESC LIMIT 8
"""

# I6 per execution: seq 1..n with no gap; the first event run_start; at most one run_start;
# a finished execution (completed without a pause, failed, cancelled) has exactly one
# run_complete and nothing after it; a run that never started has no events.
JOURNALS = """
WITH per_run AS (
    SELECT e.id, e.status, e.breadcrumb,
           count(r.seq) AS n, min(r.seq) AS first_seq, max(r.seq) AS last_seq,
           count(*) FILTER (WHERE r.type = 'run_start') AS starts,
           count(*) FILTER (WHERE r.type = 'run_complete') AS completes,
           max(r.seq) FILTER (WHERE r.type = 'run_complete') AS complete_seq,
           (array_agg(r.type ORDER BY r.seq))[1] AS first_type
      FROM executions e LEFT JOIN run_events r ON r.execution_id = e.id
     GROUP BY e.id, e.status, e.breadcrumb
)
SELECT count(*) FILTER (WHERE n > 0) AS journals,
       count(*) FILTER (WHERE n > 0 AND (first_seq <> 1 OR last_seq <> n)) AS journals_with_gaps,
       count(*) FILTER (WHERE starts > 1) AS journals_started_twice,
       count(*) FILTER (WHERE n > 0 AND first_type <> 'run_start')
           AS journals_not_opened_by_run_start,
       count(*) FILTER (WHERE completes <> 1 AND (status IN ('failed', 'cancelled')
                           OR (status = 'completed' AND breadcrumb IS DISTINCT FROM 'suspended')))
           AS finished_without_one_run_complete,
       count(*) FILTER (WHERE completes >= 1 AND complete_seq <> last_seq)
           AS events_after_run_complete,
       count(*) FILTER (WHERE status = 'queued' AND n > 0) AS queued_with_events,
       (array_agg(id) FILTER (WHERE n > 0 AND (first_seq <> 1 OR last_seq <> n)))[1:5]
           AS examples_with_gaps,
       (array_agg(id) FILTER (WHERE n > 0 AND first_type <> 'run_start'))[1:5]
           AS examples_not_opened_by_run_start
  FROM per_run
"""


def _row(conn: psycopg.Connection, sql: str, params: dict | None = None) -> dict[str, Any]:
    cursor = conn.execute(sql, params or {})
    names = [c.name for c in cursor.description]
    values = cursor.fetchone()
    return {name: _plain(value) for name, value in zip(names, values)}


def _plain(value: Any) -> Any:
    if isinstance(value, list):
        return [str(v) if isinstance(v, UUID) else v for v in value]
    return str(value) if isinstance(value, UUID) else value


def check_all(url: str, first_next_run: dict[str, datetime], must_reach: datetime
              ) -> dict[str, Any]:
    """Every count the soak prints, from one read of its database after everything stopped."""
    with psycopg.connect(url) as conn:
        slots = _row(conn, SLOTS, {"ids": list(first_next_run),
                                   "first": list(first_next_run.values()),
                                   "must_reach": must_reach})
        skipped = dict(conn.execute(SKIPPED_BY_REASON).fetchall())
        by_minute = [f"{minute} {reason} × {n}"
                     for minute, reason, n in conn.execute(SKIPPED_BY_MINUTE).fetchall()]
        chains = _row(conn, CHAINS)
        journals = _row(conn, JOURNALS)
        ends = [f"{s}/{o}/{b}: {n}" for s, o, b, n in conn.execute(EXECUTIONS_BY_END).fetchall()]
        failed = [f"{n} × {reason}" for reason, n in conn.execute(FAILED_REASONS).fetchall()]
        executions = conn.execute("SELECT count(*) FROM executions").fetchone()[0]
    return {"slots": slots, "skipped_fires": skipped, "skipped_by_minute": by_minute,
            "chains": chains, "journals": journals,
            "executions": executions, "ends": ends, "failed_reasons": failed}


def violations(found: dict[str, Any]) -> list[str]:
    """The invariants (I1, I2, I3, I4, I6, I7) that failed, as sentences; empty when all held."""
    slots, chains, journals = found["slots"], found["chains"], found["journals"]
    rules = [
        (slots["slots"] > 0, "nothing fired during the soak: it proves nothing (run it longer)"),
        (slots["slots_duplicated"] == 0, "I1: a (schedule, minute) has more than one first-attempt "
                                         "execution"),
        (slots["slots_missing"] == 0, "I2: a minute a schedule passed has neither an execution nor "
                                      "a skipped-fire record"),
        (slots["schedules_behind"] == 0, "I2: a schedule's next_run did not reach the end of "
                                         "the soak"),
        (journals["journals_started_twice"] == 0, "I3: a run started twice"),
        (chains["chains_completed"] == chains["chains"], "I4: a chain did not reach completed"),
        (chains["chains_completed_twice"] == 0, "I4: a chain completed twice"),
        (journals["journals_with_gaps"] == 0, "I6: a journal has a gap in its sequence numbers"),
        (journals["journals_not_opened_by_run_start"] == 0, "I6: a journal does not open with "
                                                            "run_start"),
        (journals["finished_without_one_run_complete"] == 0, "I6: a finished run has not exactly "
                                                             "one run_complete"),
        (journals["events_after_run_complete"] == 0, "I6: an event follows run_complete"),
        (journals["queued_with_events"] == 0, "I6: a run that never started has events"),
    ]
    if (tails := found.get("tails")) is not None:
        rules += [(tails["tails"] > 0, "I7: no run was followed live"),
                  (tails["tails_mismatched"] == 0, "I7: a live tail did not receive exactly the "
                                                   "committed journal"),
                  (tails["tails_unfinished"] == 0, "I7: a live tail never saw run_complete")]
    return [message for held, message in rules if not held]
