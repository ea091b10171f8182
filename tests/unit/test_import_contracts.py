"""The import-layer contracts (.importlinter) hold, checked as .ci/run checks them
(scripts/lint-imports on an installed copy), and each one fails on an import that breaks it."""

from __future__ import annotations

import configparser
import importlib.util
import subprocess
import sys
from importlib.machinery import SourceFileLoader
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "lint-imports"
_spec = importlib.util.spec_from_loader("lint_imports",
                                        SourceFileLoader("lint_imports", str(SCRIPT)))
lint_imports = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(lint_imports)

# One import per contract that breaks it: (file in the installed copy, the import, contract).
BREAKERS = [
    ("tickwork/sql/_probe.py", "import tickwork.processes", "sql-is-the-bottom"),
    ("tickwork/worker/_probe.py", "import tickwork.scheduler.tick",
     "scheduler-and-worker-independent"),
    ("tickwork/scheduler/_probe.py", "import tickwork.scheduler.api.app", "domain-below-the-api"),
]


def contract_names() -> dict[str, str]:
    config = configparser.ConfigParser()
    config.read(ROOT / ".importlinter")
    prefix = "importlinter:contract:"
    return {section[len(prefix):]: config[section]["name"]
            for section in config.sections() if section.startswith(prefix)}


def test_the_import_contracts_hold_as_ci_checks_them():
    done = subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    for name in contract_names().values():
        assert f"{name} KEPT" in done.stdout


def test_every_contract_has_an_import_that_breaks_it_here():
    assert sorted(contract for _, _, contract in BREAKERS) == sorted(contract_names())


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    return lint_imports.install_copy(tmp_path_factory.mktemp("lint"))


@pytest.mark.parametrize(("path", "line", "contract"), BREAKERS,
                         ids=[contract for _, _, contract in BREAKERS])
def test_an_import_across_a_layer_breaks_its_contract_and_fails_the_check(installed, path, line,
                                                                           contract):
    probe = installed / path
    probe.write_text(f'"""Breaks {contract}."""\n\n{line}\n')
    try:
        done = lint_imports.check(installed, capture=True)
    finally:
        probe.unlink()
    assert done.returncode != 0
    broken = [name for name in contract_names().values() if f"{name} BROKEN" in done.stdout]
    assert broken == [contract_names()[contract]]
