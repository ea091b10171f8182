"""The database layer: the only code that talks SQL.

Named queries live in ``queries/*.sql`` as ``-- name: verb_noun`` blocks and are loaded once
into ``QUERIES``; migrations live in ``migrations/``.
"""

from pathlib import Path
import re

_QUERY_DIR = Path(__file__).parent / "queries"
_NAME_LINE = re.compile(r"^-- name: (\w+)\s*$", re.MULTILINE)


def load_queries(directory: Path = _QUERY_DIR) -> dict[str, str]:
    """Read every ``-- name:`` block of every .sql file; a name defined twice is an error."""
    queries: dict[str, str] = {}
    for path in sorted(directory.glob("*.sql")):
        text = path.read_text()
        marks = list(_NAME_LINE.finditer(text))
        for mark, following in zip(marks, marks[1:] + [None]):
            end = following.start() if following else len(text)
            name = mark.group(1)
            if name in queries:
                raise RuntimeError(f"query {name!r} is defined twice (second time in {path.name})")
            queries[name] = text[mark.end():end].strip()
    return queries


QUERIES: dict[str, str] = load_queries()
