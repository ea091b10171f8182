"""A scheduler process for race and crash tests: reads one UTC time per line on stdin, runs one
real tick as of that time, and prints the outcome as one JSON line. Failpoints and TZ come from
the environment the test gives it."""

from __future__ import annotations

import asyncio
import json
import os
import sys

import structlog

from tickwork.scheduler.serialize import parse_utc
from tickwork.scheduler.settings import SchedulerSettings
from tickwork.scheduler.tick import run_tick
from tickwork.sql.db import open_pool


async def main(url: str) -> None:
    # stdout carries the protocol; logs go to stderr.
    structlog.configure(logger_factory=structlog.PrintLoggerFactory(file=sys.stderr))
    pool = await open_pool(url, application_name="tickwork-test-driver", max_size=2)
    settings = SchedulerSettings(test_mode=True,
                                 tick_batch_size=int(os.environ.get("DRIVER_BATCH", "50")))
    print(json.dumps({"ready": True}), flush=True)
    while line := sys.stdin.readline():
        outcome = await run_tick(pool, settings, now=parse_utc(line.strip(), "at"))
        print(json.dumps({"ok": outcome.ok, "claimed": outcome.dispatch.claimed,
                          "created": outcome.dispatch.created, "error": outcome.error}),
              flush=True)
    await pool.close()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
