"""Named failpoints for crash tests, inert unless TICKWORK_TEST_MODE=1.

``TICKWORK_FAILPOINTS="tick.after_insert_before_commit=exit,run.before_complete_commit=sleep:200"``
arms points in a test process. Actions: ``exit`` (os._exit, a crash: no cleanup, no commit),
``raise``, ``lose`` (raise what a lost connection raises), ``sleep:MS``, ``block:NAME`` (wait
until ``release(NAME)`` in the same process).
Production never sets TICKWORK_TEST_MODE, so ``hit`` is a dictionary miss. Every ``hit`` in
the code is armed by some test (tests/unit/test_failpoints_armed.py fails on one that is not).
"""

from __future__ import annotations

import asyncio
import os

import psycopg


class FailpointError(RuntimeError):
    """Raised by a failpoint armed with ``raise``."""


def _armed() -> dict[str, str]:
    if os.environ.get("TICKWORK_TEST_MODE") != "1":
        return {}
    spec = os.environ.get("TICKWORK_FAILPOINTS", "")
    pairs = (item.split("=", 1) for item in spec.split(",") if "=" in item)
    return {name.strip(): action.strip() for name, action in pairs}


_ARMED = _armed()


def arm(name: str, action: str) -> None:
    """Arm a failpoint in this process (test mode only; tests in the same process use it)."""
    if os.environ.get("TICKWORK_TEST_MODE") != "1":
        raise RuntimeError("failpoints are only available with TICKWORK_TEST_MODE=1")
    _ARMED[name] = action


def disarm_all() -> None:
    _ARMED.clear()
    _GATES.clear()
    _REACHED.clear()


async def hit(name: str) -> None:
    """Run the action armed at ``name``, if any."""
    action = _ARMED.get(name)
    if action is None:
        return
    if action == "exit":
        os._exit(86)
    if action == "raise":
        raise FailpointError(f"failpoint {name} raised")
    if action == "lose":  # as psycopg says it: an OperationalError with no SQLSTATE
        raise psycopg.OperationalError(f"failpoint {name}: the connection was lost")
    if action.startswith("sleep:"):
        await asyncio.sleep(int(action.split(":", 1)[1]) / 1000)
    if action.startswith("block:"):
        gate = action.split(":", 1)[1]
        _reached(gate).set()
        await _gate(gate).wait()


_GATES: dict[str, asyncio.Event] = {}


def _gate(name: str) -> asyncio.Event:
    return _GATES.setdefault(name, asyncio.Event())


def release(name: str) -> None:
    _gate(name).set()


async def wait_reached(name: str) -> None:
    """Return once some code path waits at (or has passed) a block:NAME failpoint."""
    await _reached(name).wait()


def _reached(name: str) -> asyncio.Event:
    return _REACHED.setdefault(name, asyncio.Event())


_REACHED: dict[str, asyncio.Event] = {}
