-- A suspended run's whole state (messages, meters, plan, the pending call), written in the
-- same transaction that suspends it, read back by whichever worker resumes it.
CREATE TABLE run_states (
    execution_id uuid PRIMARY KEY,
    version      integer NOT NULL,
    state        jsonb NOT NULL,
    saved_at     timestamptz NOT NULL DEFAULT now()
);

-- The tool-call idempotency store: completed calls only, never a pause, so an approved call
-- really runs after the resume, and a resume delivered twice does not run it twice.
CREATE TABLE tool_call_results (
    execution_id uuid NOT NULL,
    tool_call_id text NOT NULL,
    result       text NOT NULL,
    ok           boolean NOT NULL,
    recorded_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (execution_id, tool_call_id)
);
