"""The shape of a SQL query: its skeleton with the literals taken out.

The query-loop wall keys on (file_ref, shape). A model that enumerates records through
``query_file`` keeps the query and rotates the value (``WHERE id = 1``, ``= 2`` …); stripping
the literals is what makes that loop's signature stop moving. Pure: no I/O, never raises.

sqlglot's time grows with the square of the SQL's length (stripping the literals of a long
``IN (…)`` list): 4 kB cost 0.1 s, 85 kB cost 16 s. So only SQL up to PARSE_LIMIT characters is
parsed; longer SQL (rare from an honest model, and bounded by query_file's own length limit)
takes the regex normalization, whose time grows linearly. Callers on the event loop still run
this in a thread (worker/walls.py ``metered``).
"""

from __future__ import annotations

import re

import sqlglot
from sqlglot import exp
from sqlglot.optimizer.normalize_identifiers import normalize_identifiers

PLACEHOLDER = "?"
# query_file runs SQLite, so the SQL is read the way SQLite would read it.
DIALECT = "sqlite"
PARSE_LIMIT = 4000  # characters; longer SQL is shaped by the linear regex fallback

# Blob and bit literals are values too: rotating them is the same loop as rotating numbers.
_LITERALS = tuple(getattr(exp, name) for name in ("Literal", "HexString", "BitString",
                                                  "ByteString") if hasattr(exp, name))

# Fallback patterns, for text sqlglot cannot parse.
_QUOTED = re.compile(r"'(?:[^']|'')*'|'[^']*$")  # a closed string, or one left open at the end
_NUMBER = re.compile(r"(?<![\w.])(?:0x[0-9a-f]+|(?:\d+\.?\d*|\.\d+)(?:e[+-]?\d+)?)(?![\w.])")
_PUNCTUATION = re.compile(r"([^\w\s])")
_SPACE = re.compile(r"\s+")


def sql_shape(sql: str) -> str:
    """The query's skeleton: every string and number literal replaced by ``?``, keywords and
    identifiers in one case, whitespace and comments normalized. Queries that differ only in
    their values share a shape; queries that differ in structure do not. SQL that does not
    parse, or is longer than PARSE_LIMIT, falls back to a regex normalization. Never raises."""
    text = sql if isinstance(sql, str) else str(sql)
    if len(text) > PARSE_LIMIT:
        return _regex_shape(text)
    try:
        return _parsed_shape(text)
    except Exception:  # sqlglot raises several error types (and RecursionError on deep SQL)
        return _regex_shape(text)


def _parsed_shape(sql: str) -> str:
    statements = [s for s in sqlglot.parse(sql, read=DIALECT) if s is not None]
    if not statements:
        return _regex_shape(sql)
    # SQLite identifiers are case-insensitive, so `FROM Result` and `from result` are one shape.
    shapes = [normalize_identifiers(s, dialect=DIALECT).transform(_strip_literal)
              .sql(dialect=DIALECT, comments=False) for s in statements]
    return "; ".join(shapes)


def _strip_literal(node: exp.Expression) -> exp.Expression:
    # `id = -3` and `id = 3` rotate the same value, so a negated literal is one placeholder.
    if isinstance(node, exp.Neg) and isinstance(node.this, _LITERALS):
        return exp.Placeholder()
    if isinstance(node, _LITERALS):
        return exp.Placeholder()
    return node


def _regex_shape(sql: str) -> str:
    """Lowercased, whitespace-collapsed text with quoted strings and numbers replaced."""
    text = _QUOTED.sub(PLACEHOLDER, sql).lower()
    text = _NUMBER.sub(PLACEHOLDER, text)
    # One space around every symbol, so `ts='B'` and `ts = 'A'` collapse to one shape.
    text = _PUNCTUATION.sub(r" \1 ", text)
    return _SPACE.sub(" ", text).strip()
