"""Named failpoints for crash tests, inert unless TICKWORK_TEST_MODE=1.

``TICKWORK_FAILPOINTS="tick.after_insert_before_commit=exit,claim.x=sleep:200"`` arms points
in a test process. Actions: ``exit`` (os._exit, a crash: no cleanup, no commit), ``raise``,
``sleep:MS``. Production never sets TICKWORK_TEST_MODE, so ``hit`` is a dictionary miss.
"""

from __future__ import annotations

import asyncio
import os


class FailpointError(RuntimeError):
    """Raised by a failpoint armed with ``raise``."""


def _armed() -> dict[str, str]:
    if os.environ.get("TICKWORK_TEST_MODE") != "1":
        return {}
    spec = os.environ.get("TICKWORK_FAILPOINTS", "")
    pairs = (item.split("=", 1) for item in spec.split(",") if "=" in item)
    return {name.strip(): action.strip() for name, action in pairs}


_ARMED = _armed()


async def hit(name: str) -> None:
    """Run the action armed at ``name``, if any."""
    action = _ARMED.get(name)
    if action is None:
        return
    if action == "exit":
        os._exit(86)
    if action == "raise":
        raise FailpointError(f"failpoint {name} raised")
    if action.startswith("sleep:"):
        await asyncio.sleep(int(action.split(":", 1)[1]) / 1000)
