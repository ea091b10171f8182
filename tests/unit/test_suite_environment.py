"""The suite is isolated from the shell: a TICKWORK_* variable the developer exported does not
reach a test, its settings or the processes it starts; the suite's own knobs do.

Each check runs pytest on a tiny test file in a child process whose environment is hostile,
with tests/conftest.py loaded as a plugin (exactly the module the suite loads)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

INNER_TEST = '''
import os
import subprocess
import sys

from tickwork.worker.settings import WorkerSettings


def test_the_shell_does_not_reach_the_test():
    assert "TICKWORK_TOKEN_BUDGET" not in os.environ
    assert "TICKWORK_FAILPOINTS" not in os.environ
    assert "TICKWORK_OPENAI_BASE_URL" not in os.environ
    assert WorkerSettings().token_budget == 0
    assert os.environ["TICKWORK_TEST_MODE"] == "1"
    assert os.environ["TICKWORK_FUZZ_EXAMPLES"] == "7"
    child = subprocess.run([sys.executable, "-c", "import os; print(sorted(os.environ))"],
                           capture_output=True, text=True, check=True).stdout
    assert "TICKWORK_TOKEN_BUDGET" not in child and "TICKWORK_FUZZ_EXAMPLES" in child
'''

HOSTILE = {"TICKWORK_TOKEN_BUDGET": "1", "TICKWORK_FAILPOINTS": "claim.after_lock=raise",
           "TICKWORK_OPENAI_BASE_URL": "http://127.0.0.1:9", "TICKWORK_TEST_MODE": "0",
           "TICKWORK_FUZZ_EXAMPLES": "7"}


def run_inner(tmp_path: Path, *plugin: str) -> subprocess.CompletedProcess:
    test_file = tmp_path / "test_inner.py"
    test_file.write_text(INNER_TEST)
    (tmp_path / "pytest.ini").write_text("[pytest]\n")  # not the project's addopts
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *plugin,
         "--rootdir", str(tmp_path), "-c", str(tmp_path / "pytest.ini"), str(test_file)],
        cwd=ROOT, env={**os.environ, **HOSTILE}, capture_output=True, text=True, timeout=120)


def test_a_hostile_tickwork_variable_in_the_shell_does_not_reach_a_test(tmp_path):
    result = run_inner(tmp_path, "-p", "tests.conftest")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 passed" in result.stdout


def test_without_the_suites_conftest_the_same_test_sees_the_hostile_variable(tmp_path):
    """The control: the inner test can fail, and fails on the variable it names."""
    result = run_inner(tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "TICKWORK_TOKEN_BUDGET" in result.stdout
