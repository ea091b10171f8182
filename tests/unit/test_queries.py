"""The named-query files: one per table, verb-first names with descriptions, every name the code
uses defined, and every query defined used."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from tickwork.sql import QUERIES, VERBS, QueryFileError, load_queries

ROOT = Path(__file__).resolve().parents[2]
QUERY_DIR = ROOT / "sql" / "queries"
PRODUCTION = ("sql", "scheduler", "worker", "tickwork")
ELSEWHERE = ("bench", "tests")

# Queries run only by tests or benches; each must still be used there. Empty today.
USED_ONLY_BY_TESTS_OR_BENCHES: set[str] = set()


def python_files(folders: tuple[str, ...]) -> list[Path]:
    return sorted(path for folder in folders for path in (ROOT / folder).rglob("*.py"))


def _is_queries(node: ast.AST) -> bool:
    return (isinstance(node, ast.Name) and node.id == "QUERIES") or (
        isinstance(node, ast.Attribute) and node.attr == "QUERIES")


def _strings(node: ast.AST) -> set[str]:
    return {n.value for n in ast.walk(node) if isinstance(n, ast.Constant) and isinstance(n.value, str)}


def names_used(source: str) -> set[str]:
    """Every query name a module uses: in ``QUERIES[...]`` (any string in the subscript, so
    ``QUERIES["a" if x else "b"]`` gives both), ``QUERIES.get(...)``, and string arguments to
    the module's own helpers that pass a parameter on as ``QUERIES[parameter]``."""
    tree = ast.parse(source)
    used: set[str] = set()
    helpers: dict[str, tuple[int, str]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Subscript) and _is_queries(node.value):
            used |= _strings(node.slice)
            if isinstance(node.slice, ast.Name):
                _note_helper(tree, node, node.slice.id, helpers)
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
              and node.func.attr == "get" and _is_queries(node.func.value) and node.args):
            used |= _strings(node.args[0])
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in helpers:
            position, keyword = helpers[node.func.id]
            if position < len(node.args):
                used |= _strings(node.args[position])
            used |= {s for k in node.keywords if k.arg == keyword for s in _strings(k.value)}
    return used


def _note_helper(tree: ast.AST, subscript: ast.AST, parameter: str,
                 helpers: dict[str, tuple[int, str]]) -> None:
    for function in ast.walk(tree):
        if isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)) and any(
                n is subscript for n in ast.walk(function)):
            parameters = [a.arg for a in function.args.posonlyargs + function.args.args]
            if parameter in parameters:
                helpers[function.name] = (parameters.index(parameter), parameter)


def uses(folders: tuple[str, ...]) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for path in python_files(folders):
        for name in names_used(path.read_text()):
            found.setdefault(name, []).append(str(path.relative_to(ROOT)))
    return found


def tables() -> set[str]:
    text = "\n".join(p.read_text() for p in (ROOT / "sql" / "migrations").glob("*.sql"))
    return set(re.findall(r"CREATE TABLE (?:IF NOT EXISTS )?(\w+)", text))


def test_every_query_file_loads_into_queries_and_is_named_after_a_table_or_is_database_sql():
    assert load_queries(QUERY_DIR) == QUERIES and QUERIES
    stems = {path.stem for path in QUERY_DIR.glob("*.sql")}
    assert stems - tables() == {"database"}


def test_every_name_starts_with_a_verb_and_every_block_has_a_description():
    for path in QUERY_DIR.glob("*.sql"):
        lines = path.read_text().splitlines()
        for i, line in enumerate(lines):
            if line.startswith("-- name:"):
                name = line.split(":", 1)[1].strip()
                assert name.split("_", 1)[0] in VERBS, (path.name, name)
                assert re.match(r"-- \S", lines[i + 1]), (path.name, name)


def test_every_query_name_used_in_code_exists():
    missing = {name: files for name, files in uses(PRODUCTION + ELSEWHERE).items()
               if name not in QUERIES}
    assert not missing


def test_every_query_defined_is_used():
    in_production = uses(PRODUCTION)
    elsewhere = uses(ELSEWHERE)
    assert set(QUERIES) - set(in_production) == USED_ONLY_BY_TESTS_OR_BENCHES
    assert USED_ONLY_BY_TESTS_OR_BENCHES <= set(elsewhere)


def test_the_scan_finds_names_in_subscripts_get_and_helpers():
    source = '''
from tickwork.sql import QUERIES
async def fetch(pool, query, params):
    return await pool.execute(QUERIES[query], params)
def f(lock):
    QUERIES["get_a" if lock else "lock_a"]
    QUERIES.get("list_b")
    fetch(pool, "count_c", {})
    fetch(pool, query="delete_d", params={})
    other(pool, "not_a_query")
'''
    assert names_used(source) == {"get_a", "lock_a", "list_b", "count_c", "delete_d"}


BLOCK = "-- name: get_thing\n-- One thing.\nSELECT 1;\n"


@pytest.mark.parametrize(("files", "message"), [
    ({"a.sql": "-- name: get_thing\nSELECT 1;\n"},
     "a.sql: query 'get_thing' has no description"),
    ({"a.sql": "-- name: thing_status\n-- The status.\nSELECT 1;\n"},
     "a.sql: query 'thing_status' does not start with a verb"),
    ({"a.sql": BLOCK, "b.sql": BLOCK},
     "b.sql: query 'get_thing' is already defined in a.sql"),
    ({"a.sql": "-- name: get_thing\n-- One thing.\n"},
     "a.sql: query 'get_thing' has a description but no statement"),
    ({"a.sql": "-- name: Get-Thing\n-- One thing.\nSELECT 1;\n"},
     "a.sql: '-- name: Get-Thing' is not"),
    ({"a.sql": "SELECT 2;\n" + BLOCK},
     "a.sql: text before the first '-- name:' line"),
    ({"a.sql": "-- nothing here\n"},
     "a.sql: no '-- name:' block"),
])
def test_the_loader_refuses_a_bad_file_naming_file_and_query(tmp_path, files, message):
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    with pytest.raises(QueryFileError) as refused:
        load_queries(tmp_path)
    assert str(refused.value).startswith(message)


def test_the_loader_reads_a_well_formed_block_without_its_name_line(tmp_path):
    (tmp_path / "a.sql").write_text("-- The file's own comment.\n\n" + BLOCK)
    assert load_queries(tmp_path) == {"get_thing": "-- One thing.\nSELECT 1;"}
