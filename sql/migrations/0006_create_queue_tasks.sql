-- The work queue. A task is named by what it runs (the execution id for a run, the approval id
-- for a resume), so inserting it twice is a no-op. Rows are narrow and deleted when done.
-- A claimed task carries a lease; when the lease expires the task is delivered again.
CREATE TABLE queue_tasks (
    name             text PRIMARY KEY,
    kind             text NOT NULL,
    execution_id     uuid NOT NULL,
    available_at     timestamptz NOT NULL DEFAULT now(),
    lease_expires_at timestamptz,
    deliveries       integer NOT NULL DEFAULT 0,
    created_at       timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT queue_tasks_kind_check CHECK (kind IN ('run', 'resume'))
);
CREATE INDEX queue_tasks_ready_idx ON queue_tasks (available_at) WHERE lease_expires_at IS NULL;
CREATE INDEX queue_tasks_leased_idx ON queue_tasks (lease_expires_at)
    WHERE lease_expires_at IS NOT NULL;
