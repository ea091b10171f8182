"""Start tick_driver processes and step them in lockstep (a barrier per tick)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from pathlib import Path

from tickwork.scheduler.serialize import utc_text

ROOT = Path(__file__).resolve().parents[2]


class Driver:
    def __init__(self, url: str, **env: str) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.integration.tick_driver", url], cwd=ROOT,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
            env={**os.environ, "TICKWORK_TEST_MODE": "1", **env})
        assert self.read() == {"ready": True}

    def send(self, at: datetime) -> None:
        self.process.stdin.write(utc_text(at) + "\n")
        self.process.stdin.flush()

    def read(self) -> dict | None:
        line = self.process.stdout.readline()
        return json.loads(line) if line else None

    def close(self) -> int:
        if self.process.poll() is None:
            self.process.stdin.close()
        return self.process.wait(timeout=30)


def tick_all(drivers: list[Driver], at: datetime) -> list[dict | None]:
    """Send one tick to every driver at once, then wait for all answers."""
    for driver in drivers:
        driver.send(at)
    with ThreadPoolExecutor(len(drivers)) as pool:
        return list(pool.map(Driver.read, drivers))
