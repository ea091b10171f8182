-- The journal. seq is per run and written under the run's row lock by its only writer, so
-- "seq > last seen" never skips an event that commits late. The table is partitioned by
-- execution id: ids are UUIDv7, time-ordered, so a partition holds the runs of one month and
-- retention is a DROP of old partitions. The default partition catches anything outside the
-- partitions the scheduler creates ahead of time.
CREATE TABLE run_events (
    execution_id uuid NOT NULL,
    seq          integer NOT NULL,
    parent_seq   integer,
    type         text NOT NULL,
    payload      jsonb NOT NULL DEFAULT '{}',
    ts           timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (execution_id, seq),
    CONSTRAINT run_events_seq_positive CHECK (seq >= 1),
    CONSTRAINT run_events_type_check CHECK (type IN (
        'run_start', 'step_start', 'reasoning_delta', 'tool_start', 'tool_complete',
        'content_delta', 'budget_refusal', 'gate_decision', 'approval_required', 'run_complete'))
) PARTITION BY RANGE (execution_id);

CREATE TABLE run_events_default PARTITION OF run_events DEFAULT;
