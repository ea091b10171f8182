"""A vendor plugin installed as users install one: the example package in examples/ and a broken
one are pip-installed into a folder of their own, a real `tickwork worker` process starts with
that folder on its path, publishes the example's tools beside the built-in ones (skipping the
broken plugin with a log line), and a run calls a plugin tool, which sees the run's tenant and
the call's idempotency key."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.factories import create_agent, queue_run
from tests.integration.workers import WorkerProcess, scalar, until

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "tickwork-plugin-notes"
BROKEN_PROJECT = """
[build-system]
requires = ["setuptools>=68"]
build-backend = "setuptools.build_meta"

[project]
name = "tickwork-plugin-broken"
version = "0.1.0"

[project.entry-points."tickwork.vendors"]
broken = "tickwork_broken"

[tool.setuptools]
py-modules = ["tickwork_broken"]
"""


def pip_install(target: Path, project: Path) -> None:
    # No build isolation: the build backend (setuptools, a test dependency) is already here,
    # and nothing is fetched.
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps",
                    "--no-build-isolation", "--target", str(target), str(project)],
                   check=True, capture_output=True, text=True)


@pytest.fixture(scope="module")
def plugins_folder(tmp_path_factory) -> Path:
    target = tmp_path_factory.mktemp("site")
    broken = tmp_path_factory.mktemp("broken-project")
    (broken / "pyproject.toml").write_text(BROKEN_PROJECT)
    (broken / "tickwork_broken.py").write_text("import a_module_nobody_installed\n")
    pip_install(target, EXAMPLE)
    pip_install(target, broken)
    return target


async def test_an_installed_plugin_s_tools_run_for_the_run_s_tenant(api, db_url, plugins_folder):
    worker = WorkerProcess(db_url, PYTHONPATH=str(plugins_folder))
    try:
        await until(db_url, "SELECT count(*) = 2 FROM tool_catalog WHERE key LIKE 'notes.%%'")
        agent = await create_agent(api, "note-taker", tools=["notes.remember", "notes.recall"],
                                   auto_approve=["notes.remember"])
        run_id = await queue_run(api, agent["id"], {"script": [
            {"tool_calls": [{"name": "notes.remember", "arguments": {"text": "call Ana"}}]},
            {"text": "Noted."}]})
        await until(db_url, "SELECT status = 'completed' FROM executions WHERE id = %s",
                    (run_id,), timeout=30)
    finally:
        assert worker.terminate() == 0, worker.log()
    tenant = scalar(db_url, "SELECT tenant_id::text FROM executions WHERE id = %s", (run_id,))
    kept = scalar(db_url, "SELECT result FROM tool_call_results WHERE execution_id = %s",
                  (run_id,))
    assert f'"tenant_id":"{tenant}"' in kept and f'"key":"{run_id}:call_2_0"' in kept
    log = worker.log()
    assert "vendor_plugin_skipped" in log and "a_module_nobody_installed" in log
    assert "vendor_plugin_loaded" in log
    assert scalar(db_url, "SELECT count(*) FROM tool_catalog WHERE key LIKE 'broken.%%'") == 0
    assert scalar(db_url, "SELECT count(*) FROM tool_catalog WHERE key LIKE 'demo.%%'") > 0
