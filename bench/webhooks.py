"""What the webhook enqueue trigger (migrations 0034, 0035) costs the hot path: finishing runs in
batches, as the journal writer's insert_journal_batch does, with the trigger disabled, enabled for a tenant without webhooks
(the common case), and enabled for a tenant with one webhook (a delivery row per run).

    .venv/bin/python bench/webhooks.py [REPEAT]   # ~25 s; TICKWORK_DATABASE_URL or embedded

Each pass inserts fresh running executions and marks them completed in batches of 500 (the
bare UPDATE: insert_journal_batch also writes events, so its own share of the cost is smaller), best of
REPEAT (5). Last line: one JSON object with microseconds per finished run and the ratios to "off".
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import psycopg  # noqa: E402

from bench.scratch import describe_server, say, scratch_database  # noqa: E402
from tickwork.sql.migrate import migrate  # noqa: E402

RUNS, BATCH = 5000, 500
REPEAT = int(sys.argv[1]) if len(sys.argv) > 1 else 5


def setup(conn: psycopg.Connection) -> dict[str, str]:
    tenants = {}
    for name in ("quiet", "hooked"):
        tenants[name] = conn.execute("INSERT INTO tenants (id, name) VALUES (gen_random_uuid(),"
                                     " %s) RETURNING id", (name,)).fetchone()[0]
    conn.execute("INSERT INTO webhooks (id, tenant_id, url, events, secret) VALUES"
                 " (gen_random_uuid(), %s, 'http://127.0.0.1:9/', '{run.completed}', 'whsec_b')",
                 (tenants["hooked"],))
    return tenants


def finish_pass(conn: psycopg.Connection, tenant_id) -> float:
    """Seconds to finish RUNS running executions of the tenant, BATCH per statement."""
    ids = [row[0] for row in conn.execute(
        "INSERT INTO executions (id, tenant_id, agent_id, trigger_type, trigger_source,"
        " scheduled_for, status, started_at) SELECT gen_random_uuid(), %s, gen_random_uuid(),"
        " 'run', 'api', now(), 'running', now() FROM generate_series(1, %s) RETURNING id",
        (tenant_id, RUNS)).fetchall()]
    started = time.perf_counter()
    for i in range(0, RUNS, BATCH):
        conn.execute("UPDATE executions SET status = 'completed', outcome = 'done',"
                     " finished_at = now() WHERE id = ANY(%s)", (ids[i:i + BATCH],))
    return time.perf_counter() - started


def main() -> None:
    with scratch_database("tickwork_bench_webhooks") as url:
        migrate(url)
        describe_server(url, ("shared_buffers", "synchronous_commit"))
        with psycopg.connect(url, autocommit=True) as conn:
            tenants = setup(conn)
            cases = {"off": ("DISABLE", "quiet"), "no_webhooks": ("ENABLE", "quiet"),
                     "one_webhook": ("ENABLE", "hooked")}
            best = {}
            for _ in range(REPEAT):
                for case, (switch, tenant) in cases.items():
                    conn.execute(f"ALTER TABLE executions {switch} TRIGGER "
                                 "executions_webhook_events")
                    seconds = finish_pass(conn, tenants[tenant])
                    best[case] = min(best.get(case, seconds), seconds)
            conn.execute("ALTER TABLE executions ENABLE TRIGGER executions_webhook_events")
            rows = conn.execute("SELECT count(*) FROM webhook_deliveries").fetchone()[0]
    figures = {f"{case}_us_per_run": round(s / RUNS * 1e6, 2) for case, s in best.items()}
    for case, s in best.items():
        say(f"{case:12s} {s / RUNS * 1e6:8.2f} us per finished run ({RUNS / s:,.0f} runs/s)")
    say(f"delivery rows written for the hooked tenant: {rows}")
    figures["no_webhooks_ratio"] = round(best["no_webhooks"] / best["off"], 2)
    figures["one_webhook_ratio"] = round(best["one_webhook"] / best["off"], 2)
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
