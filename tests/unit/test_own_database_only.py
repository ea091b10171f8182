"""No test or bench reads or acts on another database's sessions.

Another tickwork (a second checkout's suite, a `tickwork up` on the machine's server) may share
the Postgres server with this suite. A statement that counts or terminates sessions by
application name across the whole server sees that tickwork's sessions too: it fails for no
fault of the code under test, and it disturbs the other tickwork. So every statement that reads
pg_stat_activity is scoped to the current database, or names one backend by its pid.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCOPES = ("datname = current_database()", "pid = %s", "pid = %(")
# A statement is the text from pg_stat_activity to the end of its string (a closing quote
# followed by a closing bracket or a comma) or to the next blank line: long enough to reach its
# WHERE clause, short enough not to borrow another statement's.
STATEMENT_END = re.compile(r'("\s*[),]|"""|\n\s*\n)')


def statements_reading_sessions(text: str) -> list[str]:
    found = []
    for match in re.finditer(r"\bFROM\s+pg_stat_activity\b", text, re.IGNORECASE):
        rest = text[match.end():]
        end = STATEMENT_END.search(rest)
        found.append(rest[: end.start() if end else 400])
    return found


def unscoped_statements(root: Path = ROOT) -> list[str]:
    problems = []
    for folder in ("tests", "bench"):
        for path in sorted((root / folder).rglob("*.py")):
            if path == Path(__file__).resolve():
                continue
            for statement in statements_reading_sessions(path.read_text()):
                flat = re.sub(r"\s+", " ", re.sub(r'"\s*"', " ", statement))
                if not any(scope in flat for scope in SCOPES):
                    problems.append(f"{path.relative_to(root)}: pg_stat_activity{flat[:120]}")
    return problems


def test_every_statement_on_pg_stat_activity_is_scoped_to_its_own_database():
    assert unscoped_statements() == []


def test_the_check_finds_a_statement_that_counts_sessions_across_the_server(tmp_path):
    (tmp_path / "tests").mkdir()
    (tmp_path / "bench").mkdir()
    (tmp_path / "tests" / "test_x.py").write_text(
        'conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity"\n'
        '             " WHERE application_name = \'tickwork-api-listen\'")\n'
        'conn.execute("SELECT count(*) FROM pg_stat_activity"\n'
        '             " WHERE datname = current_database() AND application_name = %s", (a,))\n')
    assert len(unscoped_statements(tmp_path)) == 1
