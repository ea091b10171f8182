-- Each claim statement names itself: the worker passes a fresh claim_id with every claim, and
-- each claim row it inserts keeps it. When the claim's answer never reaches the worker (the
-- connection was lost after the statement was sent: a Postgres restart, a network cut), the
-- worker asks on a fresh connection which runs that claim started and takes them over, instead
-- of leaving them running with nobody at work on them until their deadline (worker/
-- claim_once_more.py). No index: the question is asked only after a lost answer, and the table
-- is kept short by retention; every claim would pay for one.
ALTER TABLE execution_claims ADD COLUMN claim_id uuid;
