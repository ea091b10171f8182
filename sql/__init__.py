"""The database layer: the only code that talks SQL.

Named queries live in ``queries/*.sql``, one file per table (the rule and the verb vocabulary are
in ``queries/README.md``), and are loaded once into ``QUERIES``; migrations live in
``migrations/``. A block is ``-- name: verb_noun``, then a ``-- `` line saying what it does, then
the statement. The loader refuses a file that breaks that shape, so a bad block fails at import,
not at the first call.
"""

from pathlib import Path
import re

_QUERY_DIR = Path(__file__).parent / "queries"

# The verbs a query name starts with, and what each promises (queries/README.md says more).
VERBS = {
    "get": "read one row (or none) by its key",
    "list": "read many rows: a page, or a set",
    "count": "read aggregates",
    "lock": "read rows FOR UPDATE or FOR SHARE, held until commit",
    "claim": "take work others skip (SKIP LOCKED) and mark it taken, in one statement",
    "end": "end a server process of one's own (pg_terminate_backend) and wait for it",
    "insert": "add rows",
    "upsert": "add rows or replace the ones with the same key",
    "update": "change rows (the noun says to what: update_execution_cancelled)",
    "delete": "remove rows (a retention batch included)",
    "listen": "LISTEN on a channel",
    "hold": "take a session advisory lock, held until the session ends",
    "notify": "NOTIFY listeners on a channel, in a transaction of its own",
    "set": "set a setting for this transaction (set_config)",
}

_NAME_LINE = re.compile(r"^-- name:.*$", re.MULTILINE)
_NAME = re.compile(r"^-- name: ([a-z][a-z0-9_]*)$")
_DESCRIPTION = re.compile(r"^-- \S")


class QueryFileError(RuntimeError):
    """A query file that breaks the block rules; the message names the file and the query."""


def load_queries(directory: Path = _QUERY_DIR) -> dict[str, str]:
    """Read every ``-- name:`` block of every .sql file into name -> statement text. Refused: a
    malformed name line, a name that does not start with one of VERBS, a block whose first line
    is not a ``-- `` description, a block with no statement, a name defined twice, and anything
    but comments before a file's first block."""
    queries: dict[str, str] = {}
    defined_in: dict[str, str] = {}
    for path in sorted(directory.glob("*.sql")):
        text = path.read_text()
        marks = list(_NAME_LINE.finditer(text))
        if not marks:
            raise QueryFileError(f"{path.name}: no '-- name:' block")
        _check_preamble(path.name, text[:marks[0].start()])
        for mark, following in zip(marks, marks[1:] + [None]):
            end = following.start() if following else len(text)
            name = _check_name(path.name, mark.group(0))
            body = text[mark.end():end].strip()
            _check_body(path.name, name, body)
            if name in queries:
                raise QueryFileError(f"{path.name}: query {name!r} is already defined in "
                                     f"{defined_in[name]}; names are unique across files")
            queries[name] = body
            defined_in[name] = path.name
    return queries


def _check_preamble(file: str, text: str) -> None:
    """Before the first block only comments may stand: a statement there would belong to no name
    and be dropped without a word."""
    if any(line.strip() and not line.lstrip().startswith("--") for line in text.splitlines()):
        raise QueryFileError(f"{file}: text before the first '-- name:' line that is not a comment")


def _check_name(file: str, line: str) -> str:
    match = _NAME.match(line.rstrip())
    if match is None:
        raise QueryFileError(f"{file}: {line.strip()!r} is not '-- name: lower_snake_name'")
    name = match.group(1)
    verb, _, noun = name.partition("_")
    if verb not in VERBS or not noun:
        raise QueryFileError(f"{file}: query {name!r} does not start with a verb of "
                             f"{sorted(VERBS)} (see sql/queries/README.md)")
    return name


def _check_body(file: str, name: str, body: str) -> None:
    lines = body.splitlines()
    if not lines or not _DESCRIPTION.match(lines[0]):
        raise QueryFileError(f"{file}: query {name!r} has no description: the line after "
                             f"'-- name: {name}' must be a '-- ' comment saying what it does")
    if all(line.lstrip().startswith("--") or not line.strip() for line in lines):
        raise QueryFileError(f"{file}: query {name!r} has a description but no statement")


QUERIES: dict[str, str] = load_queries()
