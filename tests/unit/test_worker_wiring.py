"""The worker is wired in the composition root (tickwork/worker_process.py, beside
tickwork/processes.py), which the CLI, `up`, tests and benches use; the worker package itself
never imports that root or the scheduler, only tickwork.sql and its own modules, and a worker
process never loads the API's web stack."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

from tickwork import worker_process
from tickwork.worker.runner import Worker
from tickwork.worker.settings import WorkerSettings

ROOT = Path(__file__).resolve().parents[2]


def imported_modules(path: Path) -> list[str]:
    names = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.append(node.module)
    return names


def test_the_worker_package_imports_only_the_database_seam_and_itself():
    outside = sorted(f"{path.relative_to(ROOT)}: {name}"
                     for path in (ROOT / "worker").rglob("*.py")
                     for name in imported_modules(path)
                     if name.startswith("tickwork.")
                     and not name.startswith(("tickwork.worker", "tickwork.sql")))
    assert outside == []


def test_the_worker_package_has_no_wiring_of_its_own():
    assert not (ROOT / "worker" / "__main__.py").exists()
    assert worker_process.build_worker.__module__ == "tickwork.worker_process"


def test_a_worker_process_loads_no_web_or_scheduler_module():
    code = ("import sys, tickwork.cli, tickwork.worker_process\n"
            "print(sorted({m.split('.')[0] for m in sys.modules} & {'fastapi', 'uvicorn', "
            "'starlette', 'apscheduler'}), [m for m in sys.modules "
            "if m.startswith('tickwork.scheduler.api')])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.strip()
    assert out == "[] []"


async def test_the_wiring_gives_every_run_the_catalog_the_settings_and_a_journal_writer():
    settings = WorkerSettings(concurrency=3)
    deps = worker_process.worker_deps(None, settings, worker="w:1")
    assert deps.settings is settings and deps.worker_id == "w:1"
    assert {"update_plan", "query_file", "demo.get_record"} <= set(deps.catalog)
    assert deps.journal_writer is not None and Worker(deps, "postgresql://").deps is deps
    await deps.provider.aclose()
