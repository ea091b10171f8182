"""Every failpoint the code hits is armed by some test, and every armed name exists in the code.

A failpoint no test arms is dead weight in a hot path that proves nothing; a test arming a name
the code no longer hits passes while testing nothing (an unknown name is a silent no-op).
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CODE = ("sql", "scheduler", "worker", "tickwork")
HIT = re.compile(r"""failpoints\.hit\(\s*["']([\w.]+)["']""")
# Armed in-process with failpoints.arm("name", ...) or in a child's TICKWORK_FAILPOINTS as
# "name=action" (actions: exit, raise, sleep:MS, block:NAME).
ARM_CALL = re.compile(r"""failpoints\.arm\(\s*["']([\w.]+)["']""")
ARM_ENV = re.compile(r"""([a-z_]+\.[a-z_.]+)=(?:exit|raise|sleep:|block:)""")
# Names a test sets on purpose where nothing may hit them: test_suite_environment.py puts this
# one in a hostile shell to show the conftest keeps TICKWORK_FAILPOINTS from the suite.
NEVER_HIT = {"claim.after_lock"}


def hit_names() -> dict[str, list[str]]:
    names: dict[str, list[str]] = {}
    for folder in CODE:
        for path in sorted((ROOT / folder).rglob("*.py")):
            for name in HIT.findall(path.read_text()):
                names.setdefault(name, []).append(str(path.relative_to(ROOT)))
    return names


def armed_names() -> set[str]:
    armed: set[str] = set()
    for path in sorted((ROOT / "tests").rglob("*.py")):
        if path.resolve() == Path(__file__).resolve():
            continue
        text = path.read_text()
        armed.update(ARM_CALL.findall(text))
        armed.update(ARM_ENV.findall(text))
    return armed


def test_the_scan_finds_the_failpoints_in_the_code_and_their_arming_in_the_tests():
    # Guards the scan itself: a broken pattern would find nothing and pass everything.
    assert "tick.after_insert_before_commit" in hit_names()
    assert "run.before_complete_commit" in armed_names()  # failpoints.arm(...)
    assert "tick.after_commit_before_dispatch" in armed_names()  # TICKWORK_FAILPOINTS=...


def test_every_failpoint_hit_in_the_code_is_armed_by_a_test():
    unarmed = {name: where for name, where in hit_names().items() if name not in armed_names()}
    assert unarmed == {}, ("arm each in a test (TICKWORK_FAILPOINTS or failpoints.arm) or "
                           "remove its hit")


def test_every_failpoint_a_test_arms_is_hit_somewhere_in_the_code():
    assert armed_names() - set(hit_names()) - NEVER_HIT == set()
