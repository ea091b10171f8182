"""The database's own fence: a run that ended never changes state again, whatever the app code
does, except a run suspended for an approval (completed, breadcrumb 'suspended'), which its
resume takes back to running. Checked with plain UPDATEs on a real Postgres, for every ended
state and every breadcrumb an ended run can carry (none, the usual case, included)."""

from __future__ import annotations

import psycopg
import pytest

from tests.factories import make_agent, make_tenant, queue_runs_at_once

ENDED = [("completed", None), ("completed", "released"), ("failed", None),
         ("failed", "released"), ("cancelled", None)]
STATES = ["queued", "running", "completed", "failed", "cancelled"]


@pytest.fixture
def run_id(db_url):
    with psycopg.connect(db_url, autocommit=True) as conn:
        agent_id = make_agent(conn, make_tenant(conn))
    return queue_runs_at_once(db_url, agent_id, 1)[0]


def set_state(db_url, run_id, status, breadcrumb) -> None:
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("UPDATE executions SET status = %s, breadcrumb = %s WHERE id = %s",
                     (status, breadcrumb, run_id))


def state(db_url, run_id) -> tuple[str, str | None]:
    with psycopg.connect(db_url) as conn:
        return conn.execute("SELECT status, breadcrumb FROM executions WHERE id = %s",
                            (run_id,)).fetchone()


@pytest.mark.parametrize("ended, breadcrumb", ENDED)
@pytest.mark.parametrize("to", STATES)
def test_an_ended_run_never_changes_state(db_url, run_id, ended, breadcrumb, to):
    set_state(db_url, run_id, "running", None)
    set_state(db_url, run_id, ended, breadcrumb)
    if to == ended:  # the same state again is not a change
        set_state(db_url, run_id, to, breadcrumb)
        assert state(db_url, run_id) == (ended, breadcrumb)
        return
    with pytest.raises(psycopg.errors.CheckViolation) as refused:
        set_state(db_url, run_id, to, breadcrumb)
    assert refused.value.diag.constraint_name == "executions_terminal_is_final"
    assert f"is already {ended}; its state cannot change" in refused.value.diag.message_primary
    assert state(db_url, run_id) == (ended, breadcrumb)


def test_a_run_suspended_for_an_approval_may_be_resumed(db_url, run_id):
    set_state(db_url, run_id, "running", None)
    set_state(db_url, run_id, "completed", "suspended")
    set_state(db_url, run_id, "running", None)
    assert state(db_url, run_id) == ("running", None)


def test_a_run_that_has_not_ended_may_change_state(db_url, run_id):
    set_state(db_url, run_id, "running", None)
    set_state(db_url, run_id, "queued", None)
    set_state(db_url, run_id, "cancelled", None)
    assert state(db_url, run_id) == ("cancelled", None)
