-- A tool call that needs a person's decision. The id is deterministic,
-- '{execution_id}:{tool_call_id}', so pausing twice for the same call creates one approval.
-- A decision is one conditional update from 'pending': two racing decisions store exactly one.
CREATE TABLE approvals (
    id           text PRIMARY KEY,
    tenant_id    uuid NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    execution_id uuid NOT NULL,
    tool_call_id text NOT NULL,
    tool         text NOT NULL,
    arguments    jsonb NOT NULL DEFAULT '{}',
    status       text NOT NULL DEFAULT 'pending',
    reason       text,
    created_at   timestamptz NOT NULL DEFAULT now(),
    decided_at   timestamptz,
    CONSTRAINT approvals_status_check CHECK (status IN ('pending', 'approved', 'rejected'))
);
CREATE INDEX approvals_pending_idx ON approvals (tenant_id, created_at) WHERE status = 'pending';
CREATE INDEX approvals_execution_idx ON approvals (execution_id);
