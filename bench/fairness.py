"""Fairness of the claim between tenants (RELIABILITY R15) and what it costs, beside the first-in,
first-out claim it replaced, measured in the same run.

Run from the repo root:  .venv/bin/python bench/fairness.py  [--backlog N] [--runs N]
                         [--concurrency C] [--repeats K] [--turn-ms MS]

The database is TICKWORK_DATABASE_URL when set (a scratch database ``tickwork_bench_fairness``
is created on that server and dropped at the end), else an embedded Postgres in /tmp. The
reference is the claim statement as it was before fairness (FIFO below, its text kept here),
swapped in for the claim the worker sends (tickwork.sql.QUERIES), so both run the same code
around them.

- rounds:   tenant A queues --backlog runs (default 5,000), then tenant B one. Two workers claim
            --concurrency runs each, one after the other, round after round (the runs they take
            are left running: no run ends in between): the round in which B's run is started,
            fair and FIFO.
- delay:    the same, end to end: --backlog runs of tenant A whose one model turn takes
            --turn-ms (default 20 ms), then one of B, with an in-process worker (the CLI's own
            wiring, --concurrency C) started once both are queued: B's run_start minus the
            worker's first run_start, fair and FIFO.
- cost:     --runs runs (default 5,000) of one tenant, one scripted turn each, through
            bench/runs.py's path (enqueued by start_agent_run, run by the in-process worker at
            --concurrency C), alternately with the fair claim and the FIFO one, --repeats times
            each (default 2): runs/s from the first run_start to the last run_complete, and the
            ratio fair / FIFO. Also the claim statement alone: milliseconds per claim of 256
            from a backlog of --runs runs, one tenant and 20 tenants.

Readable lines go to stdout as it runs; the very last line is one JSON object with the figures.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from typing import Any
from uuid import UUID

import psycopg
import structlog

from runs import _run_in_process_worker, _span_s, checkpoint, enqueue_runs, setup  # bench/runs.py
from scratch import describe_server, say, scratch_database  # bench/scratch.py
from tickwork.sql import QUERIES
from tickwork.sql.ids import new_id

SCRATCH_DB = "tickwork_bench_fairness"
CLAIM = "claim_queued_executions"
FAIR = QUERIES[CLAIM]
# The claim before fairness (first in, first out across tenants), as it was in sql/queries/
# executions.sql: the 256 oldest ready tasks, then leftovers, then the same claim and start.
FIFO = """\
WITH ready AS (
    SELECT name, execution_id
      FROM (SELECT name, execution_id FROM queue_tasks
             WHERE kind = 'run' AND lease_expires_at IS NULL AND available_at <= now()
             ORDER BY available_at
             LIMIT 256
               FOR UPDATE SKIP LOCKED) oldest
     LIMIT %(limit)s
), leftover AS (
    SELECT name, execution_id
      FROM (SELECT name, execution_id FROM queue_tasks
             WHERE kind = 'run' AND lease_expires_at < now()
             ORDER BY lease_expires_at
             LIMIT 256
               FOR UPDATE SKIP LOCKED) oldest
     LIMIT %(limit)s
), picked AS (
    SELECT name, execution_id FROM ready UNION ALL SELECT name, execution_id FROM leftover
     LIMIT %(limit)s
), claimed AS (
    INSERT INTO execution_claims (execution_id, worker_id, claim_id)
    SELECT execution_id, %(worker_id)s, %(claim_id)s FROM picked
    ON CONFLICT (execution_id) DO NOTHING
    RETURNING execution_id
), started AS (
    UPDATE executions e
       SET status = 'running', started_at = now(), run_token = gen_random_uuid(),
           deadline = now() + make_interval(mins => e.timeout_minutes)
      FROM claimed c
     WHERE e.id = c.execution_id AND e.status = 'queued'
    RETURNING e.id, e.tenant_id, e.agent_id, e.schedule_id, e.attempt, e.timeout_minutes,
              e.input, e.run_token, e.cancel_requested_at, e.trigger_type, e.trigger_source
), journaled AS (
    INSERT INTO run_events (execution_id, seq, parent_seq, type, payload)
    SELECT id, 1, NULL, 'run_start',
           jsonb_build_object('attempt', attempt, 'trigger_type', trigger_type,
                              'trigger_source', trigger_source, 'worker_id', %(worker_id)s::text)
      FROM started
), dropped AS (
    DELETE FROM queue_tasks WHERE name = ANY (ARRAY(SELECT name FROM picked))
)
SELECT s.id, s.tenant_id, s.agent_id, s.schedule_id, s.attempt, s.timeout_minutes, s.input,
       s.run_token, s.cancel_requested_at, NULL::bigint AS last_seq,
       a.id AS agent_found, a.instructions AS agent_instructions,
       a.tools AS agent_tools, a.auto_approve AS agent_auto_approve
  FROM started s
  LEFT JOIN LATERAL (SELECT id, instructions, tools, auto_approve FROM agents
                      WHERE id = s.agent_id
                      LIMIT 1) a ON true"""


def use_claim(text: str) -> None:
    """The worker's claim from now on (claim.py reads QUERIES at every claim)."""
    QUERIES[CLAIM] = text


def add_tenant(url: str, name: str) -> tuple[UUID, UUID]:
    tenant_id, agent_id = new_id(), new_id()
    with psycopg.connect(url) as conn:
        conn.execute("INSERT INTO tenants (id, name) VALUES (%s, %s)", (tenant_id, name))
        conn.execute("INSERT INTO agents (id, tenant_id, name) VALUES (%s, %s, 'agent')",
                     (agent_id, tenant_id))
    return tenant_id, agent_id


def queue(url: str, agent_id: UUID, count: int, script: list, *, age_s: float = 0) -> list:
    """``count`` runs of the agent queued at one commit, available ``age_s`` ago; their ids."""
    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute(
            "WITH made AS (INSERT INTO executions (id, tenant_id, agent_id, trigger_type,"
            " trigger_source, scheduled_for, input)"
            " SELECT gen_random_uuid(), a.tenant_id, a.id, 'run', 'api', now(), %s"
            " FROM agents a, generate_series(1, %s) WHERE a.id = %s RETURNING id)"
            " INSERT INTO queue_tasks (name, kind, execution_id, available_at)"
            " SELECT id::text, 'run', id, now() - make_interval(secs => %s) FROM made"
            " RETURNING execution_id",
            (psycopg.types.json.Jsonb({"script": script}), count, agent_id, age_s)).fetchall()
    return [row[0] for row in rows]


def clear(url: str) -> None:
    """Forget every run (between phases): the tenants and agents stay."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("TRUNCATE queue_tasks, execution_claims, run_events, executions CASCADE")
    checkpoint(url)


def claim_rounds(url: str, text: str, backlog: int, limit: int) -> int:
    """The round (1 = the first) in which B's one run, queued after A's backlog, starts."""
    _, agent_a = add_tenant(url, f"a-{new_id()}")
    _, agent_b = add_tenant(url, f"b-{new_id()}")
    queue(url, agent_a, backlog, [{"text": "ok"}], age_s=60)
    [late] = queue(url, agent_b, 1, [{"text": "ok"}])
    params = {"limit": limit, "tenant_cap": 0}
    with psycopg.connect(url, autocommit=True) as one, psycopg.connect(url, autocommit=True) as two:
        for round_no in range(1, backlog // limit + 2):
            for worker, conn in (("w1", one), ("w2", two)):
                rows = conn.execute(text, {**params, "worker_id": worker,
                                           "claim_id": new_id()}).fetchall()
                if any(row[0] == late for row in rows):
                    return round_no
    raise SystemExit("B's run was never claimed")


async def end_to_end_delay(url: str, text: str, backlog: int, concurrency: int,
                           turn_ms: float) -> float:
    """Seconds from the worker's first run_start to B's, with A's backlog queued first."""
    _, agent_a = add_tenant(url, f"a-{new_id()}")
    _, agent_b = add_tenant(url, f"b-{new_id()}")
    queue(url, agent_a, backlog, [{"sleep": turn_ms / 1000}, {"text": "ok"}], age_s=60)
    [late] = queue(url, agent_b, 1, [{"text": "ok"}])
    use_claim(text)
    await _run_in_process_worker(url, concurrency, backlog + 1)
    with psycopg.connect(url) as conn:
        first, mine = conn.execute(
            "SELECT min(ts), max(ts) FILTER (WHERE execution_id = %s) FROM run_events"
            " WHERE type = 'run_start'", (late,)).fetchone()
    return (mine - first).total_seconds()


async def throughput(url: str, text: str, runs: int, concurrency: int) -> float:
    """Runs per second of one tenant through the full path with this claim."""
    tenant_id, agent_id = add_tenant(url, f"t-{new_id()}")
    await enqueue_runs(url, tenant_id, agent_id, runs)
    use_claim(text)
    await _run_in_process_worker(url, concurrency, runs)
    return runs / _span_s(url, 0)


def claim_ms(url: str, text: str, runs: int, tenants: int) -> float:
    """Median milliseconds of one claim of 256 from a backlog of ``runs`` spread over
    ``tenants`` tenants (each claim's runs are taken, so the backlog shrinks by 256 a claim)."""
    agents = [add_tenant(url, f"m-{new_id()}")[1] for _ in range(tenants)]
    for agent in agents:
        queue(url, agent, runs // tenants, [{"text": "ok"}], age_s=60)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("ANALYZE queue_tasks")
        times = []
        for _ in range(min(20, runs // 256)):
            started = time.perf_counter()
            conn.execute(text, {"limit": 256, "tenant_cap": 0, "worker_id": "w",
                                "claim_id": new_id()}, prepare=True).fetchall()
            times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backlog", type=int, default=5000, help="tenant A's queued runs")
    parser.add_argument("--runs", type=int, default=5000, help="runs per throughput phase")
    parser.add_argument("--concurrency", type=int, default=16, help="worker slots; claim size")
    parser.add_argument("--repeats", type=int, default=2, help="throughput phases per claim")
    parser.add_argument("--turn-ms", type=float, default=20.0,
                        help="the model turn of A's runs in the end-to-end delay")
    args = parser.parse_args()
    if min(args.backlog, args.runs, args.concurrency, args.repeats) < 1:
        parser.error("every figure must be positive")
    return args


def main() -> None:
    args = parse_args()
    structlog.configure(logger_factory=structlog.PrintLoggerFactory(sys.stderr))
    figures: dict[str, Any] = {}
    with scratch_database(SCRATCH_DB) as url:
        describe_server(url, ("shared_buffers", "synchronous_commit", "max_connections"))
        setup(url)
        for name, text in (("fair", FAIR), ("fifo", FIFO)):
            clear(url)
            figures[f"rounds_{name}"] = claim_rounds(url, text, args.backlog, args.concurrency)
            say(f"rounds ({name}): B's run started in claim round {figures[f'rounds_{name}']} "
                f"behind {args.backlog:,} runs of A (two workers claiming {args.concurrency})")
        for name, text in (("fair", FAIR), ("fifo", FIFO)):
            clear(url)
            delay = asyncio.run(end_to_end_delay(url, text, args.backlog, args.concurrency,
                                                 args.turn_ms))
            figures[f"delay_s_{name}"] = round(delay, 3)
            say(f"delay ({name}): B's run started {delay:.3f} s after the worker's first run")
        rates: dict[str, list[float]] = {"fair": [], "fifo": []}
        for _ in range(args.repeats):  # alternated, so drift in the machine hits both alike
            for name, text in (("fifo", FIFO), ("fair", FAIR)):
                clear(url)
                rate = asyncio.run(throughput(url, text, args.runs, args.concurrency))
                rates[name].append(rate)
                say(f"throughput ({name}): {rate:,.0f} runs/s")
        for name in rates:
            figures[f"runs_per_s_{name}"] = round(statistics.median(rates[name]), 1)
            figures[f"runs_per_s_{name}_all"] = [round(r, 1) for r in rates[name]]
        figures["ratio_fair_vs_fifo"] = round(figures["runs_per_s_fair"]
                                              / figures["runs_per_s_fifo"], 3)
        for tenants in (1, 20):
            for name, text in (("fifo", FIFO), ("fair", FAIR)):
                clear(url)
                ms = claim_ms(url, text, args.runs, tenants)
                figures[f"claim_ms_{name}_{tenants}_tenants"] = round(ms, 2)
                say(f"claim of 256 ({name}, {tenants} tenants): {ms:.2f} ms")
        use_claim(FAIR)
    say(f"fair claiming: B waited {figures['rounds_fair']} claim round(s) "
        f"(FIFO: {figures['rounds_fifo']}), {figures['delay_s_fair']} s (FIFO: "
        f"{figures['delay_s_fifo']} s); throughput {figures['ratio_fair_vs_fifo']:.3f}x FIFO's")
    print(json.dumps(figures), flush=True)


if __name__ == "__main__":
    main()
