"""One import namespace: the folders sql/, scheduler/ and worker/ stay at the top of the tree
(DESIGN's layout) but install as tickwork.sql, tickwork.scheduler and tickwork.worker, so
tickwork shares an environment with any other package named `sql` or `worker`."""

from __future__ import annotations

import ast
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FOLDERS = {"sql": "tickwork.sql", "scheduler": "tickwork.scheduler", "worker": "tickwork.worker",
           "tickwork": "tickwork"}
BARE_NAMES = {"sql", "scheduler", "worker"}


def python_files() -> list[Path]:
    tracked = subprocess.run(["git", "ls-files", "*.py"], cwd=ROOT, capture_output=True,
                             text=True, check=True).stdout.split()
    return [ROOT / name for name in tracked]


def bare_imports(path: Path) -> list[str]:
    """Absolute imports of sql, scheduler or worker without the tickwork prefix."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        else:
            continue
        found += [f"{path.relative_to(ROOT)}:{node.lineno} {name}" for name in names
                  if name.split(".")[0] in BARE_NAMES]
    return found


def test_no_module_imports_a_bare_top_level_name():
    assert [hit for path in python_files() for hit in bare_imports(path)] == []


def test_every_package_folder_is_listed_under_its_tickwork_name():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    folders = {init.parent for folder in FOLDERS for init in (ROOT / folder).rglob("__init__.py")}
    expected = {".".join((FOLDERS[f.relative_to(ROOT).parts[0]], *f.relative_to(ROOT).parts[1:]))
                for f in folders}
    assert set(config["packages"]) == expected
    assert config["package-dir"] == {name: folder for folder, name in FOLDERS.items()}


def test_a_built_wheel_holds_only_tickwork_and_imports_from_itself(tmp_path):
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps",
                    "--no-build-isolation", "--wheel-dir", str(tmp_path), str(ROOT)],
                   check=True, capture_output=True)
    [wheel] = tmp_path.glob("tickwork-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    dist_info = "-".join(wheel.name.split("-")[:2]) + ".dist-info"
    assert {name.split("/")[0] for name in names} == {"tickwork", dist_info}
    assert any(name.startswith("tickwork/sql/migrations/0001") for name in names)
    assert "tickwork/sql/grants.sql" in names
    assert "tickwork/scheduler/api/static/index.html" in names

    target = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(target)
    code = ("import tickwork.sql.db, tickwork.scheduler.api.app, tickwork.worker.runner, "
            "tickwork.processes, tickwork.worker_process, tickwork.cli\n"
            "from pathlib import Path\n"
            "from tickwork.worker.tools import sandbox\n"
            "print(tickwork.sql.db.__file__)\n"
            "print(Path(sandbox.ROOT, 'worker', 'tools', 'sqlbox.py').is_file())")
    # PYTHONPATH comes before site-packages (and the editable install's finder), and the
    # working folder is not the checkout, so every module must come from the unpacked wheel.
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                         text=True, check=True, env={"PYTHONPATH": str(target)}).stdout.split()
    assert out == [str(target / "tickwork" / "sql" / "db.py"), "True"]


def test_every_module_of_the_project_says_what_it_is_for():
    """The first line of every module (its docstring) says what it is for; empty package
    markers of the test tree are the only modules without one."""
    undocumented = [str(path.relative_to(ROOT)) for path in python_files()
                    if path.read_text().strip()
                    and not ast.get_docstring(ast.parse(path.read_text()))
                    and path.parts[len(ROOT.parts)] in {*FOLDERS, "bench", "scripts"}]
    assert undocumented == []
