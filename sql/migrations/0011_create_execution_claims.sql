-- The idempotency claim: before any work, a worker inserts the execution's id here with
-- ON CONFLICT DO NOTHING. Claimed nothing means a duplicate delivery: no agent code runs.
-- run_token fences a run's writes: journal appends and completion name the token they were
-- given, so a worker that outlived its run (swept, or resumed elsewhere) changes nothing.
CREATE TABLE execution_claims (
    execution_id uuid PRIMARY KEY,
    worker_id    text NOT NULL,
    claimed_at   timestamptz NOT NULL DEFAULT now()
);

ALTER TABLE executions ADD COLUMN run_token uuid;
