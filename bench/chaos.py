"""R12 chaos soak: kill -9 schedulers and workers and restart Postgres under 100+ every-minute
schedules, then check that every minute fired once, every run completed and no journal has a gap.

Run from the repo root:  .venv/bin/python bench/chaos.py [--minutes 3] [--schedules 120]
                         [--concurrency 8] [--seed N] [--keep]

On demand, minutes long (RELIABILITY.md R12). It always starts its OWN embedded Postgres in a
fresh /tmp folder (TICKWORK_DATABASE_URL is ignored: the soak restarts the server, and a shared
one must never be restarted), migrates it with `tickwork migrate`, and starts real processes:
an API (`tickwork api`), two `tickwork scheduler` and two `tickwork worker`.

- Load: N agents (scripted: one demo.get_record call, a 2 s model `sleep`, then a text answer;
  judge "done"), each with one `* * * * *` schedule (overlap allow, timeout 1 minute), created
  through the API.
- Ticks: the schedulers' own APScheduler minute tick on the database clock, unchanged (no
  stepped clock): what is tested is the deployed process, so --minutes 3 means three real fires
  per schedule. A stepped clock (tests/integration/test_tick_processes.py) drives the tick
  function, not the scheduler process, and the worker's deadlines and the sweep would then
  disagree on the time.
- Chaos, for --minutes: every 8-20 s (random) one scheduler or worker, chosen at random, gets
  SIGKILL and is started again at once; once, between 35% and 65% of the way, Postgres is
  stopped (fast shutdown: every connection is cut) and started again 2 s later on its port. A
  process that exits on its own is restarted too, and counted.
- Live tails: every second a few queued or running runs (up to --tails) are followed over the
  API's SSE stream from their first event, reconnecting with Last-Event-ID after a drop
  (bench/chaos_tails.py); what each received is compared with the committed journal (I7).
- Drain: the schedules are paused through the API; the processes keep running and the API's
  `POST /v1/tick` is called every 10 s (the external-cron path) so that runs orphaned by a kill
  are swept and retried without waiting for the minute, until nothing is queued or running (at
  most --drain-minutes). Then every process gets SIGTERM and the checks run (bench/chaos_checks.py).

Readable lines go to stdout as it runs; the very last line is one JSON object with the counts.
Exit status 1 when an invariant failed (I1 one first-attempt execution per schedule and minute,
I2 no minute lost, I3 no run started twice, I4 every chain completed exactly once, I6 journals
without gaps and well formed, I7 each live tail received exactly the committed journal).
"""

from __future__ import annotations

import argparse
import json
import random
import time
from datetime import datetime
from pathlib import Path

import httpx
import psycopg

from chaos_checks import check_all, violations  # bench/chaos_checks.py
from chaos_fleet import (API_RETRIES, Fleet, call, free_port, run_in_scratch,
                         start_scratch_database, tickwork, wait_healthy)
from chaos_tails import Tails
from scratch import say  # bench/scratch.py
from tickwork.embedded import EmbeddedPostgres, start_embedded

DB_NAME = "tickwork_chaos"
RUN_SCRIPT = {"judge": ["done"]}  # the script itself names the schedule's own record id


def create_schedules(client: httpx.Client, count: int) -> dict[str, datetime]:
    """N scripted agents with one every-minute schedule each; returns id -> first next_run."""
    first: dict[str, datetime] = {}
    for i in range(count):
        agent = call(client, "POST", "/v1/agents", json={
            "name": f"chaos-{i}", "instructions": "Fetch your record and report it.",
            "tools": ["demo.get_record"]})
        script = [{"tool_calls": [{"name": "demo.get_record", "arguments": {"id": i + 1}}]},
                  {"sleep": 2}, {"text": f"Record {i + 1} fetched."}]
        schedule = call(client, "POST", "/v1/schedules", json={
            "agent_id": agent.json()["id"], "cron": "* * * * *", "overlap": "allow",
            "timeout_minutes": 1, "input": {**RUN_SCRIPT, "script": script}})
        body = schedule.json()
        first[body["id"]] = datetime.fromisoformat(body["next_run"].replace("Z", "+00:00"))
    return first


def utc_now() -> str:
    return time.strftime("%H:%M:%S", time.gmtime())


def restart_postgres(server: EmbeddedPostgres, root: Path) -> EmbeddedPostgres:
    server.stop()
    time.sleep(2)
    return start_embedded(root, port=server.port)


def unfinished(url: str) -> int | None:
    try:
        with psycopg.connect(url, connect_timeout=3) as conn:
            return conn.execute("SELECT count(*) FROM executions"
                                " WHERE status IN ('queued', 'running')").fetchone()[0]
    except psycopg.Error:
        return None


def db_minute(url: str) -> datetime:
    with psycopg.connect(url) as conn:
        return conn.execute("SELECT date_trunc('minute', now())").fetchone()[0]


def chaos(fleet: Fleet, server: EmbeddedPostgres, root: Path, minutes: float,
          rng: random.Random, tails: Tails) -> tuple[EmbeddedPostgres, dict[str, int]]:
    duration = minutes * 60
    started = time.monotonic()
    next_kill = rng.uniform(8, 20)
    pg_restart_at = rng.uniform(0.35, 0.65) * duration
    kills = {"scheduler": 0, "worker": 0}
    next_pick = 0.0
    while (elapsed := time.monotonic() - started) < duration:
        fleet.restart_the_dead(elapsed)
        if elapsed >= next_pick:
            tails.pick()
            next_pick = elapsed + 1
        if pg_restart_at is not None and elapsed >= pg_restart_at:
            say(f"  t+{elapsed:5.1f}s  {utc_now()}  Postgres: fast stop, 2 s down, start")
            server = restart_postgres(server, root)
            say(f"  t+{time.monotonic() - started:5.1f}s  {utc_now()}  Postgres back on port "
                f"{server.port}")
            pg_restart_at = None
        if elapsed >= next_kill:
            victim = rng.choice(["scheduler-1", "scheduler-2", "worker-1", "worker-2"])
            old = fleet.kill(victim)
            kills[victim.split("-")[0]] += 1
            say(f"  t+{elapsed:5.1f}s  {utc_now()}  SIGKILL {victim} (pid {old}); started again "
                f"as pid {fleet.procs[victim].pid}")
            next_kill = elapsed + rng.uniform(8, 20)
        time.sleep(0.25)
    return server, kills


def drain(fleet: Fleet, url: str, operator: httpx.Client, limit_s: float) -> tuple[float, int]:
    started = time.monotonic()
    left = unfinished(url)
    while time.monotonic() - started < limit_s:
        fleet.restart_the_dead(time.monotonic() - started)
        left = unfinished(url)
        if left == 0:
            break
        call(operator, "POST", "/v1/tick", json={})
        time.sleep(10)
    return time.monotonic() - started, (left if left is not None else -1)


def soak(args: argparse.Namespace, root: Path) -> dict:
    rng = random.Random(args.seed)
    server, env = start_scratch_database(root, DB_NAME)
    url = env["TICKWORK_DATABASE_URL"]
    tenant_token = tickwork(env, "token", "create", "--tenant", "chaos")
    operator_token = tickwork(env, "token", "create", "--operator")
    logs = root / "logs"
    logs.mkdir()
    api_port = free_port()
    fleet = Fleet(url, logs, api_port, args.concurrency)
    base = f"http://127.0.0.1:{api_port}"
    try:
        fleet.start("api")
        wait_healthy(base)
        with httpx.Client(base_url=base, timeout=30,
                          headers={"Authorization": f"Bearer {tenant_token}"}) as tenant, \
             httpx.Client(base_url=base, timeout=60,
                          headers={"Authorization": f"Bearer {operator_token}"}) as operator:
            first = create_schedules(tenant, args.schedules)
            say(f"{len(first)} agents with an every-minute schedule each, first fire "
                f"{min(first.values()):%H:%M} UTC")
            for name in ("scheduler-1", "scheduler-2", "worker-1", "worker-2"):
                fleet.start(name)
            say(f"{utc_now()} UTC: chaos for {args.minutes:g} min: 2 schedulers, 2 workers "
                f"(concurrency {args.concurrency}), 1 API; logs in {logs}")
            tails = Tails(base, tenant_token, args.tails)
            server, kills = chaos(fleet, server, root / "pg", args.minutes, rng, tails)
            must_reach = db_minute(url)
            for schedule_id in first:
                call(tenant, "PATCH", f"/v1/schedules/{schedule_id}", json={"status": "paused"})
            say(f"chaos over at {must_reach:%H:%M} UTC; schedules paused; draining")
            drain_s, left = drain(fleet, url, operator, args.drain_minutes * 60)
            say(f"drained in {drain_s:.0f}s; {left} runs still queued or running")
            tails.join(timeout=60)
        fleet.stop_all()  # SIGTERM; the checks read a database nothing writes to any more
        found = check_all(url, first, must_reach)
        found["tails"] = tails.check(url)
    finally:
        fleet.stop_all()
        server.stop()  # by its data folder: a handle from before the restart stops it too
    return {"found": found, "kills": kills, "unexpected_exits": fleet.unexpected_exits,
            "drain_s": round(drain_s), "left": left}


def report(args: argparse.Namespace, result: dict) -> int:
    found = result["found"]
    slots, chains, journals = found["slots"], found["chains"], found["journals"]
    failed = violations(found)
    say(f"kills: {result['kills']}; Postgres restarts: 1; processes that exited on their own: "
        f"{len(result['unexpected_exits'])} {result['unexpected_exits'] or ''}")
    say(f"API calls retried after a 503 or a cut connection: {len(API_RETRIES)}")
    say(f"executions: {found['executions']}; by end: {'; '.join(found['ends'])}")
    if found["failed_reasons"]:
        say("failed executions: " + " | ".join(found["failed_reasons"]))
    if found["skipped_by_minute"]:
        say("skipped fires by minute: " + "; ".join(found["skipped_by_minute"]))
    say(f"slots (schedule, minute): {slots['slots']}; exactly one first-attempt execution: "
        f"{slots['slots_one_execution']}; duplicated: {slots['slots_duplicated']}; skipped and "
        f"recorded: {slots['slots_skipped_recorded']} {found['skipped_fires']}; missing: "
        f"{slots['slots_missing']}; schedules behind: {slots['schedules_behind']}")
    say(f"chains: {chains['chains']}; completed: {chains['chains_completed']}; failed: "
        f"{chains['chains_failed']}; unfinished: {chains['chains_unfinished']}; retried: "
        f"{chains['chains_retried']} (max attempt {chains['max_attempt']})"
        + (f"; not completed e.g. {chains['examples_not_completed']}"
           if chains["examples_not_completed"] else ""))
    say(f"journals: {journals['journals']}; with gaps: {journals['journals_with_gaps']}; "
        f"started twice: {journals['journals_started_twice']}; not opened by run_start: "
        f"{journals['journals_not_opened_by_run_start']}; finished without one run_complete: "
        f"{journals['finished_without_one_run_complete']}; events after run_complete: "
        f"{journals['events_after_run_complete']}")
    tails = found["tails"]
    say(f"live tails (SSE, Last-Event-ID after drops): {tails['tails']}; received exactly the "
        f"journal: {tails['tails'] - tails['tails_mismatched'] - tails['tails_unfinished']}; "
        f"mismatched: {tails['tails_mismatched']}; never saw run_complete: "
        f"{tails['tails_unfinished']}; reconnects: {tails['tail_reconnects']}")
    say("PASS" if not failed else "FAIL: " + "; ".join(failed))
    say(json.dumps({
        "minutes": args.minutes, "schedules": args.schedules, "seed": args.seed,
        "kills_scheduler": result["kills"]["scheduler"], "kills_worker": result["kills"]["worker"],
        "postgres_restarts": 1, "unexpected_exits": len(result["unexpected_exits"]),
        "api_retries": len(API_RETRIES),
        "executions": found["executions"], "slots": slots["slots"],
        "slots_one_first_attempt": slots["slots_one_execution"],
        "slots_duplicated": slots["slots_duplicated"],
        "slots_skipped_recorded": slots["slots_skipped_recorded"],
        "slots_missing": slots["slots_missing"], "schedules_behind": slots["schedules_behind"],
        "chains": chains["chains"], "chains_completed": chains["chains_completed"],
        "chains_failed": chains["chains_failed"], "chains_unfinished": chains["chains_unfinished"],
        "chains_retried": chains["chains_retried"],
        "journals": journals["journals"], "journals_with_gaps": journals["journals_with_gaps"],
        "journals_malformed": (journals["journals_started_twice"]
                               + journals["journals_not_opened_by_run_start"]
                               + journals["finished_without_one_run_complete"]
                               + journals["events_after_run_complete"]
                               + journals["queued_with_events"]),
        "tails": tails["tails"], "tails_mismatched": tails["tails_mismatched"],
        "tails_unfinished": tails["tails_unfinished"], "tail_reconnects": tails["tail_reconnects"],
        "drain_s": result["drain_s"], "ok": not failed}))
    return 1 if failed else 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=3.0, help="how long the chaos lasts")
    parser.add_argument("--schedules", type=int, default=120, help="every-minute schedules")
    parser.add_argument("--concurrency", type=int, default=8, help="runs at once per worker")
    parser.add_argument("--drain-minutes", type=float, default=4.0,
                        help="at most this long for orphaned runs to be swept and retried")
    parser.add_argument("--tails", type=int, default=24, help="runs followed live over SSE")
    parser.add_argument("--seed", type=int, default=None, help="for the kill schedule")
    parser.add_argument("--keep", action="store_true", help="keep the data and logs folder")
    args = parser.parse_args()
    if args.seed is None:
        args.seed = random.randrange(1_000_000)
    if args.minutes <= 0 or args.schedules < 1 or args.concurrency < 1:
        raise SystemExit("--minutes, --schedules and --concurrency must be positive")
    say(f"R12 chaos soak, seed {args.seed}")
    run_in_scratch("tickwork-chaos-", args, soak, report)


if __name__ == "__main__":
    main()
